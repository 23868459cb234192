"""Models as the world builds them (tests/wild_models.py): stage 02's MACs equal the MACs counted from the shapes
ONNX Runtime really executed (tests/executed_macs.py, no code shared with lib/), with no op of unknown cost,
shapes resolved whatever the exporter left (shape_source), and the decode step of a KV-cache decoder."""
import json
import shlex

import numpy as np
import pandas as pd
import pytest

import wild_models
from conftest import run_stage
from executed_macs import executed_macs

CLASSES = ["torchscript_cnn", "torchscript_swin", "lstm", "gru", "rnn", "if_value", "if_torch_cond", "loop",
           "loop_input", "ir3", "constant_weights", "kv_decoder"]


def stage02(facts, rdir, *extra):
    args = ["--inputs-npz", facts["npz"]] + (shlex.split(f"--shape-override '{facts['shape_override']}'")
                                             if facts.get("shape_override") else [])
    r = run_stage("02_shapes_flops_bytes.py", "--model", facts["path"], "--results", rdir, *args, *extra)
    assert r.returncode == 0, r.stderr
    return pd.read_csv(rdir / "ops_metrics.csv", keep_default_na=False, na_values=[""]), r.stdout


@pytest.mark.parametrize("cls", CLASSES)
def test_macs_equal_the_executed_count(tmp_path, cls):
    facts = getattr(wild_models, f"build_{cls}")(tmp_path / f"{cls}.onnx")
    df, out = stage02(facts, tmp_path / "r")
    ref = executed_macs(facts["path"], dict(np.load(facts["npz"])))["total"]
    assert df["cost_known"].all(), df.loc[~df["cost_known"], "op_type"].tolist()
    assert df["macs"].sum() == pytest.approx(ref, rel=1e-3)
    assert "unknown" not in set(df["shape_source"])
    if facts.get("expected_macs"):
        assert ref == facts["expected_macs"]                   # the reference agrees with the hand arithmetic


def test_recurrent_formula_by_hand(tmp_path):
    facts = wild_models.build_lstm_layout1(tmp_path / "l1.onnx")   # ORT refuses layout=1: hand arithmetic only
    df, _ = stage02(facts, tmp_path / "r")
    lstm = df[df["op_type"] == "LSTM"].iloc[0]
    assert lstm["macs"] == facts["expected_macs"] and lstm["op_class"] == "recurrent"


def test_shape_arithmetic_resolved_by_value_propagation(tmp_path):
    facts = wild_models.build_torchscript_cnn(tmp_path / "ts.onnx")   # input -1x3x?x?, sizes from x.shape
    df, out = stage02(facts, tmp_path / "r")
    assert (df["shape_source"] == "values").any() and "values" in out


def test_value_inputs_pick_the_branch(tmp_path):
    """sr = 16000 and sr = 8000 take different branches: each is costed as the branch these inputs run."""
    facts = wild_models.build_if_value(tmp_path / "vad.onnx")
    feeds = dict(np.load(facts["npz"]))
    costs = {}
    for sr in (16000, 8000):
        npz = tmp_path / f"sr{sr}.npz"
        np.savez(npz, **{**feeds, "sr": np.array(sr, dtype=feeds["sr"].dtype)})
        df, _ = stage02({**facts, "npz": str(npz)}, tmp_path / f"r{sr}")
        costs[sr] = df["macs"].sum()
        assert costs[sr] == executed_macs(facts["path"], dict(np.load(npz)))["total"]
        assert df.loc[df["op_type"] == "If", "cost_note"].str.endswith("taken").all()
    assert costs[16000] != costs[8000]


def test_kv_decoder_prefill_and_decode(tmp_path):
    """Dims written as expressions ('past_sequence_length + sequence_length') evaluate from the presets; the
    decode step's bytes are dominated by the KV cache and the weights."""
    facts = wild_models.build_kv_decoder(tmp_path / "dec.onnx")
    metas = {}
    for preset in ("llm-128", "llm-decode-2048"):
        rdir = tmp_path / preset
        r = run_stage("02_shapes_flops_bytes.py", "--model", facts["path"], "--results", rdir, "--preset", preset)
        assert r.returncode == 0, r.stderr
        metas[preset] = json.loads((rdir / "metrics_meta.json").read_text())
    shapes = metas["llm-decode-2048"]["identity"]["inputs"]["input_shapes"]
    assert shapes["attention_mask"] == [1, 2049] and shapes["input_ids"] == [1, 1]
    assert metas["llm-128"]["identity"]["inputs"]["input_shapes"]["attention_mask"] == [1, 128]
    decode = metas["llm-decode-2048"]
    kv = decode["kv_cache"]["inputs"]
    assert kv["tensors"] == 4 and metas["llm-128"]["kv_cache"]["inputs"]["bytes"] == 0
    assert kv["bytes"] == 4 * 2 * 2048 * 32 * 4                      # 2 layers x K,V of [1, 2, 2048, 32] fp32
    assert kv["bytes"] + decode["weight_bytes"] > decode["act_out_bytes"] - decode["kv_cache"]["outputs"]["bytes"]
    assert decode["total_macs"] < metas["llm-128"]["total_macs"]
    # a given mask that contradicts the expression: said where it is read, and named when the run fails (01 blamed
    # the inputs drawn at random)
    npz = tmp_path / "mask7.npz"
    np.savez(npz, attention_mask=np.ones((1, 7), np.int64))
    args = ("--model", facts["path"], "--results", tmp_path / "bad", "--preset", "llm-decode-2048", "--inputs-npz", npz)
    clash = "attention_mask dim 1 is 7, the model writes it 'past_sequence_length + sequence_length' = 2049"
    assert clash in run_stage("02_shapes_flops_bytes.py", *args).stderr
    r = run_stage("01_profile_onnx.py", *args, "--runs", "1", "--sessions", "1", "--no-host-reference")
    assert r.returncode == 2 and f"The given shapes disagree with the model's: {clash}" in r.stderr


def test_presets_shape_seq2seq_decoders(tmp_path):
    """optimum's T5 / Whisper decoders name their dims encoder_sequence_length, decoder_sequence_length and
    past_decoder_sequence_length: the LLM presets set them too (PRESET left them unresolved, an error)."""
    from onnx import TensorProto, helper
    from conftest import make_model, tensor, weight
    ids = tensor("input_ids", ["batch_size", "decoder_sequence_length"], TensorProto.INT64)
    enc = tensor("encoder_hidden_states", ["batch_size", "encoder_sequence_length", 16])
    past = tensor("past_key", ["batch_size", 2, "past_decoder_sequence_length", 8])
    nodes = [helper.make_node("Identity", ["input_ids"], ["i"], name="i"),
             helper.make_node("MatMul", ["encoder_hidden_states", "w"], ["e"], name="e"),
             helper.make_node("Identity", ["past_key"], ["p"], name="p")]
    path = tmp_path / "dec.onnx"
    make_model(nodes, [ids, enc, past], [tensor("i", None, TensorProto.INT64), tensor("e", None), tensor("p", None)],
               [weight("w", (16, 4))], path=path)
    for preset, want in (("llm-decode-128", ([1, 1], [1, 128, 16], [1, 2, 128, 8])),
                         ("llm-512", ([1, 512], [1, 512, 16], [1, 2, 0, 8]))):
        r = run_stage("02_shapes_flops_bytes.py", "--model", path, "--results", tmp_path / preset, "--preset", preset)
        assert r.returncode == 0, r.stderr
        got = json.loads((tmp_path / preset / "metrics_meta.json").read_text())["identity"]["inputs"]["input_shapes"]
        assert (got["input_ids"], got["encoder_hidden_states"], got["past_key"]) == want


def test_tiny_graph_has_nothing_to_split(tmp_path):
    facts = wild_models.build_tiny4(tmp_path / "tiny.onnx")
    df, _ = stage02(facts, tmp_path / "r")
    assert len(df) == 4 and df["cost_known"].all()
