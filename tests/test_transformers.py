"""Issue 3's models: Hugging Face BERT/GPT-2 from a config (MACs against the config formula), torchvision
transformers, fp16, ORT static (QDQ) and dynamic quantization; stage 01's attribution on them."""
import json

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import numpy_helper

from conftest import run_stage
from lib.onnx.export_models import export_hf, export_torchvision

H, L, S = 256, 4, 128


def formula_macs(kind):
    """Per token and layer: 4h^2 (Q, K, V, output projections) + 2sh (QK^T and .V) + 2h*ffn (MLP, ffn = 4h)."""
    per_token_layer = 4 * H * H + 2 * S * H + 2 * H * 4 * H
    total = per_token_layer * L * S
    return total + (S * H * 50257 if kind == "gpt2" else 0)      # GPT-2's LM head (BERT: no pooler exported)


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    return {k: export_hf(k, d / f"{k}.onnx", hidden=H, layers=L, heads=4, seq=S) for k in ("bert", "gpt2")}


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_hf_macs_match_the_config_formula_and_attribution(hf, tmp_path, kind):
    model = hf[kind]
    m = onnx.load(str(model), load_external_data=False)
    dims = [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in m.graph.input]
    assert dims == [["batch", "sequence"], ["batch", "sequence"]]          # exported with dynamic axes
    r = run_stage("02_shapes_flops_bytes.py", "--model", model, "--results", tmp_path, "--preset", "llm-128")
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "ops_metrics.csv")
    assert df["cost_known"].all(), df.loc[~df["cost_known"], "op_type"].unique()
    assert df["macs"].sum() == pytest.approx(formula_macs(kind), rel=0.01)
    assert df["shape_op"].any()                                            # the mask/shape arithmetic is marked
    r = run_stage("01_profile_onnx.py", "--model", model, "--results", tmp_path, "--runs", "2", "--warmup", "1",
                  "--preset", "llm-128")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "profile_meta.json").read_text())["kernel_time_coverage"] >= 0.99


def test_unresolved_sequence_dim_is_a_clear_error(hf, tmp_path):
    r = run_stage("02_shapes_flops_bytes.py", "--model", hf["bert"], "--results", tmp_path,
                  "--workload", "/dev/null")
    assert r.returncode == 2 and "unresolved dynamic dims" in r.stderr and "input_ids[1]=sequence" in r.stderr


def test_dynamic_quantized_bert(hf, tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic
    src = onnx.load(str(hf["bert"]))
    src.graph.ClearField("value_info")
    onnx.save(src, str(tmp_path / "f.onnx"))
    quantize_dynamic(str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"), weight_type=QuantType.QInt8)
    for stage, extra in (("02_shapes_flops_bytes.py", []), ("01_profile_onnx.py", ["--runs", "2", "--warmup", "1"])):
        r = run_stage(stage, "--model", tmp_path / "q.onnx", "--results", tmp_path, *extra)
        assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "ops_metrics.csv", keep_default_na=False)
    assert df["cost_known"].all() and (df["op_type"] == "MatMulInteger").sum() > 0
    assert set(df.loc[df["op_type"] == "MatMulInteger", "mac_dtype"]) == {"int8"}
    assert json.loads((tmp_path / "profile_meta.json").read_text())["kernel_time_coverage"] >= 0.99


def test_fp16_halves_activation_bytes(tmp_path):
    for tag, fp16 in (("f32", False), ("f16", True)):
        export_torchvision("resnet18", tmp_path / f"{tag}.onnx", fp16=fp16)
        assert run_stage("02_shapes_flops_bytes.py", "--model", tmp_path / f"{tag}.onnx", "--results",
                         tmp_path / tag).returncode == 0
    a, b = (pd.read_csv(tmp_path / t / "ops_metrics.csv") for t in ("f32", "f16"))
    assert b["act_out_bytes"].sum() * 2 == a["act_out_bytes"].sum()
    assert b["macs"].sum() == a["macs"].sum() and set(b["dtype"]) == {"float16"}


def test_static_qdq_quantized_resnet18(tv_models, tmp_path):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Random(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.batches = iter([{"input": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)} for _ in range(2)])

        def get_next(self):
            return next(self.batches, None)

    src = onnx.load(str(tv_models("resnet18")))
    src.graph.ClearField("value_info")
    onnx.save(src, str(tmp_path / "f.onnx"))
    quantize_static(str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"), Random(), quant_format=QuantFormat.QDQ,
                    weight_type=QuantType.QInt8, activation_type=QuantType.QUInt8)
    for stage, extra in (("02_shapes_flops_bytes.py", []), ("01_profile_onnx.py", ["--runs", "2", "--warmup", "1"])):
        r = run_stage(stage, "--model", tmp_path / "q.onnx", "--results", tmp_path, *extra)
        assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "ops_metrics.csv")
    assert df["cost_known"].all() and {"QuantizeLinear", "DequantizeLinear"} <= set(df["op_type"])
    init = sum(numpy_helper.to_array(t).nbytes for t in onnx.load(str(tmp_path / "q.onnx")).graph.initializer)
    assert df["weight_bytes"].sum() == pytest.approx(init, rel=0.02)
    assert json.loads((tmp_path / "profile_meta.json").read_text())["kernel_time_coverage"] >= 0.99
