"""Small ONNX models built "the way the world builds them": one builder per class the pipeline meets in
the wild (TorchScript exports with shape arithmetic and Paddle-style unknown dims, recurrent ops,
value-dependent If, Loop, IR-3 Model Zoo style, weights computed from constants, KV-cache decoders
with dim *expressions*, ...).

Every ``build_<class>(path) -> dict`` writes a model (a few kB to a few MB, seconds) and returns facts:
    name, path, class, exporter, inputs [{name, elem_type, dims}], feeds (input -> shape), npz (path of
    an input file written next to the model: valid values where values matter, seeded random
    otherwise), values_matter, shape_override (the stage-02 string for inputs with non-static dims, or
    None), preset, expected_macs (hand arithmetic, None where not hand-computable), notes.
The MAC reference for a built model is ``tests.executed_macs.executed_macs(path, dict(np.load(npz)))``.

No lib/ import: these are inputs to the product, not part of it. Run as a module from the repo root.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64
SEED = 0


# ----------------------------------------------------------------------------------------- helpers
def _dims(vi):
    out = []
    for d in vi.type.tensor_type.shape.dim:
        out.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or None))
    return out


def graph_inputs(model_or_path):
    m = model_or_path if isinstance(model_or_path, onnx.ModelProto) else onnx.load(str(model_or_path),
                                                                                    load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    return [{"name": i.name, "elem_type": onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type).name,
             "dims": _dims(i)} for i in m.graph.input if i.name not in inits]


def shape_override_string(inputs, feeds):
    """'name=1x3x64x64 other=...' for every input whose declared dims are not all static positives."""
    parts = []
    for i in inputs:
        if any(not isinstance(d, int) or d <= 0 for d in i["dims"]) and i["name"] in feeds:
            shp = feeds[i["name"]].shape
            if len(shp):
                parts.append(f"{i['name']}=" + "x".join(map(str, shp)))
    return " ".join(parts) or None


def _facts(path, cls, exporter, feeds, expected=None, notes="", values_matter=False, preset=None):
    path = Path(path)
    npz = path.with_suffix(".npz")
    np.savez(npz, **feeds)
    inputs = graph_inputs(path)
    return {"name": path.stem, "path": str(path), "class": cls, "exporter": exporter, "inputs": inputs,
            "feeds": {k: list(v.shape) for k, v in feeds.items()}, "npz": str(npz), "values_matter": values_matter,
            "shape_override": shape_override_string(inputs, feeds), "preset": preset,
            "expected_macs": None if expected is None else int(expected), "notes": notes}


def _rand(*shape, seed=SEED):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def _save(model, path, ir_version=8, check=True):
    model.ir_version = ir_version
    if check:
        onnx.checker.check_model(model)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def _torch_export(module, args, path, opset, **kw):
    import torch
    warnings.filterwarnings("ignore")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(module.eval(), args, str(path), dynamo=False, opset_version=opset, **kw)
    return f"torch.onnx.export(dynamo=False, opset_version={opset}) torch=={torch.__version__}"


def _set_input_dims(path, dims_by_input):
    """Rewrite declared input dims: int -> dim_value, str -> dim_param, None -> unknown ('?')."""
    m = onnx.load(str(path))
    for vi in m.graph.input:
        if vi.name in dims_by_input:
            for d, new in zip(vi.type.tensor_type.shape.dim, dims_by_input[vi.name]):
                d.Clear()
                if isinstance(new, int):
                    d.dim_value = new
                elif isinstance(new, str):
                    d.dim_param = new
    onnx.save(m, str(path))


# ------------------------------------------------------------------------- TorchScript-exported CNN
def _cnn_module():
    import torch
    from torch import nn
    import torch.nn.functional as Fn

    def cbr(i, o, s=1, g=1, k=3):
        return nn.Sequential(nn.Conv2d(i, o, k, s, k // 2, groups=g, bias=False), nn.BatchNorm2d(o), nn.ReLU())

    class Cnn(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = cbr(3, 16, 2)
            self.b1 = cbr(16, 16)
            self.b2 = nn.Sequential(nn.Conv2d(16, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16))
            self.down = cbr(16, 32, 2)
            self.dw = cbr(32, 32, 1, 32)
            self.pw = nn.Conv2d(32, 32, 1)
            self.seg = nn.Conv2d(32, 1, 1)
            self.fc = nn.Linear(32, 10)
            self.fc_b = nn.Linear(32, 10)

        def forward(self, x):
            n, _, h, w = x.shape
            y = self.stem(x)
            y = torch.relu(self.b2(self.b1(y)) + y)
            y = self.pw(self.dw(self.down(y)))
            t = y.reshape(n, 32, (h // 4) * (w // 4))          # reshape computed from x.shape
            a = torch.softmax(t.transpose(1, 2) @ t, dim=-1)    # [n, L, L]
            y = (t @ a).reshape(n, 32, h // 4, w // 4)
            seg = Fn.interpolate(torch.sigmoid(self.seg(y)), size=(h, w), mode="bilinear", align_corners=False)
            p = Fn.adaptive_avg_pool2d(y, 1)
            logits = self.fc(p.view(p.size(0), -1)) + self.fc_b(torch.flatten(p, 1))
            return seg, logits

    torch.manual_seed(SEED)
    return Cnn()


def cnn_macs(n, h, w):
    h2, w2, h4, w4 = h // 2, w // 2, h // 4, w // 4
    L = h4 * w4
    return n * (16 * h2 * w2 * 27 + 2 * 16 * h2 * w2 * 144 + 32 * L * 144 + 32 * L * 9 + 32 * L * 32
                + L * L * 32 + 32 * L * L + L * 32 + 2 * 32 * 10)


def build_torchscript_cnn(path, h=64, w=64):
    import torch
    exporter = _torch_export(_cnn_module(), (torch.randn(1, 3, h, w),), path, 13, input_names=["x"],
                             output_names=["seg", "logits"],
                             dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"},
                                           "seg": {0: "batch", 2: "height", 3: "width"}, "logits": {0: "batch"}})
    _set_input_dims(path, {"x": [-1, 3, None, None]})     # PaddleOCR style: -1 x 3 x ? x ?
    return _facts(path, "torchscript_cnn", exporter, {"x": _rand(1, 3, h, w)}, cnn_macs(1, h, w),
                  "input declared -1x3x?x? (batch dim_value -1, spatial dims unnamed): needs --shape-override; "
                  "view(x.size(0), -1), flatten(1), a reshape and a Resize whose sizes come from x.shape")


# ------------------------------------------------------------------- TorchScript-exported swin block
def _swin_module(dim=32, heads=2, ws=4):
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, shift):
            super().__init__()
            self.shift = shift
            self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
            self.rel = nn.Parameter(torch.randn(heads, ws * ws, ws * ws) * 0.02)

        def forward(self, x):                                  # x: B, H, W, C
            B, H, W, C = x.shape
            s = self.norm1(x)
            if self.shift:
                s = torch.roll(s, (-self.shift, -self.shift), (1, 2))
            s = s.view(B, H // ws, ws, W // ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, C)
            qkv = self.qkv(s).reshape(s.shape[0], ws * ws, 3, heads, C // heads).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            a = torch.softmax((q * (C // heads) ** -0.5) @ k.transpose(-2, -1) + self.rel, dim=-1)
            o = self.proj((a @ v).transpose(1, 2).reshape(-1, ws * ws, C))
            o = o.view(B, H // ws, W // ws, ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(B, H, W, C)
            if self.shift:
                o = torch.roll(o, (self.shift, self.shift), (1, 2))
            x = x + o
            return x + self.fc2(nn.functional.gelu(self.fc1(self.norm2(x))))

    class Swin(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch = nn.Conv2d(3, dim, 4, 4)
            self.blocks = nn.Sequential(Block(0), Block(ws // 2))
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, 10)

        def forward(self, x):
            y = self.blocks(self.patch(x).permute(0, 2, 3, 1))
            return self.head(self.norm(y).mean(dim=(1, 2)))

    torch.manual_seed(SEED)
    return Swin()


def swin_macs(n, h, w, dim=32, ws=4, blocks=2):
    L = (h // 4) * (w // 4)
    per_block = L * dim * 3 * dim + 2 * L * ws * ws * dim + L * dim * dim + 8 * L * dim * dim
    return n * (L * dim * 48 + blocks * per_block + dim * 10)


def build_torchscript_swin(path, h=64, w=64):
    import torch
    exporter = _torch_export(_swin_module(), (torch.randn(1, 3, h, w),), path, 17, input_names=["x"],
                             output_names=["logits"], dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"},
                                                                    "logits": {0: "batch"}})
    return _facts(path, "torchscript_swin", exporter, {"x": _rand(1, 3, h, w)}, swin_macs(1, h, w),
                  "2 swin blocks (shift 0 and 2, no attention mask), window partition/reverse reshapes computed "
                  "from x.shape, torch.roll -> Slice/Concat; 'height'/'width' need --shape-override "
                  "(multiples of 16)")


# ----------------------------------------------------------------------------------- recurrent nets
def _rnn_export(path, kind, cls_name, batch=2, seq=5, inp=16, hidden=32):
    import torch
    from torch import nn
    torch.manual_seed(SEED)
    if kind == "lstm":
        core = nn.LSTM(inp, hidden, num_layers=2, bidirectional=True, batch_first=True)
        out_f = 2 * hidden
        macs = 2 * seq * batch * 4 * hidden * (inp + hidden) + 2 * seq * batch * 4 * hidden * (2 * hidden + hidden)
    elif kind == "gru":
        core = nn.GRU(inp, hidden, batch_first=True)
        out_f = hidden
        macs = seq * batch * 3 * hidden * (inp + hidden)
    else:
        core = nn.RNN(inp, hidden, nonlinearity="tanh", batch_first=True)
        out_f = hidden
        macs = seq * batch * 1 * hidden * (inp + hidden)
    macs += batch * seq * out_f * 5

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.core, self.head = core, nn.Linear(out_f, 5)

        def forward(self, x):
            return self.head(self.core(x)[0])

    exporter = _torch_export(Net(), (torch.randn(batch, seq, inp),), path, 13, input_names=["x"],
                             output_names=["y"],
                             dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}})
    return _facts(path, cls_name, exporter, {"x": _rand(batch, seq, inp)}, macs,
                  f"torch.nn.{core.__class__.__name__} batch_first -> ONNX {kind.upper()} (layout 0) between "
                  f"Transposes; initial state from ConstantOfShape(Shape(x)); dims 'batch','seq' symbolic "
                  "('seq' is not in configs/workload.yaml)")


def build_lstm(path):
    return _rnn_export(path, "lstm", "lstm")


def build_gru(path):
    return _rnn_export(path, "gru", "gru")


def build_rnn(path):
    return _rnn_export(path, "rnn", "rnn")


def build_lstm_layout1(path, batch=3, seq=4, inp=8, hidden=16):
    W = _rand(1, 4 * hidden, inp, seed=1) * 0.1
    R = _rand(1, 4 * hidden, hidden, seed=2) * 0.1
    node = helper.make_node("LSTM", ["x", "W", "R"], ["y", "y_h"], name="lstm_bw", hidden_size=hidden, layout=1)
    g = helper.make_graph([node], "lstm_layout1", [helper.make_tensor_value_info("x", F, [batch, seq, inp])],
                          [helper.make_tensor_value_info("y", F, [batch, seq, 1, hidden]),
                           helper.make_tensor_value_info("y_h", F, [batch, 1, hidden])],
                          initializer=[_init("W", W), _init("R", R)])
    _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), path)
    return _facts(path, "lstm_layout1", "onnx.helper (opset 14)", {"x": _rand(batch, seq, inp)},
                  seq * batch * 4 * hidden * (inp + hidden),
                  "LSTM layout=1 (batch-major). ONNX Runtime's CPU LSTM refuses layout=1 at session creation "
                  "('Batchwise recurrent operations (layout == 1) are not supported'): no executed reference, "
                  "and stages that run ORT (01, 08) cannot run it")


# ------------------------------------------------------------------------- If on an input's VALUE
def build_if_value(path):
    """silero-VAD style: sr (int64 scalar) must be 16000 or 8000; anything else fails at run time."""
    w16, w8 = _rand(8, 1, 16, seed=1), _rand(8, 1, 8, seed=2)
    ws, wh = _rand(16, 16, seed=3) * 0.1, _rand(8, 2, seed=4)

    def vi(n, t=F, s=None):
        return helper.make_tensor_value_info(n, t, s)

    then16 = helper.make_graph(
        [helper.make_node("Conv", ["x3", "w16"], ["c16"], name="conv16k", strides=[8])],
        "sr16000", [], [vi("c16", F, [1, 8, None])])
    then8 = helper.make_graph(
        [helper.make_node("Conv", ["x3", "w8"], ["c8"], name="conv8k", strides=[4])],
        "sr8000", [], [vi("c8", F, [1, 8, None])])
    bad = helper.make_graph(
        [helper.make_node("Reshape", ["x3", "bad_shape"], ["bad"], name="unsupported_sr")],
        "sr_other", [], [vi("bad", F, None)])
    else16 = helper.make_graph(
        [helper.make_node("Equal", ["sr", "k8000"], ["is8k"], name="eq8k"),
         helper.make_node("If", ["is8k"], ["c_else"], name="if_8k", then_branch=then8, else_branch=bad)],
        "not16000", [], [vi("c_else", F, None)])
    nodes = [
        helper.make_node("Unsqueeze", ["x", "ax1"], ["x3"], name="to_ncl"),
        helper.make_node("Equal", ["sr", "k16000"], ["is16k"], name="eq16k"),
        helper.make_node("If", ["is16k"], ["c"], name="if_16k", then_branch=then16, else_branch=else16),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("ReduceMean", ["r"], ["m"], name="pool", axes=[2], keepdims=0),
        helper.make_node("MatMul", ["m", "wh"], ["prob_logits"], name="head"),
        helper.make_node("Sigmoid", ["prob_logits"], ["prob"], name="sigmoid"),
        helper.make_node("MatMul", ["state", "ws"], ["s1"], name="state_mm"),
        helper.make_node("Tanh", ["s1"], ["state_out"], name="state_tanh"),
    ]
    inits = [_init("ax1", np.array([1], np.int64)), _init("k16000", np.array(16000, np.int64)),
             _init("k8000", np.array(8000, np.int64)), _init("bad_shape", np.array([-1, 7, 0], np.int64)),
             _init("w16", w16), _init("w8", w8), _init("wh", wh), _init("ws", ws)]
    g = helper.make_graph(nodes, "if_value",
                          [vi("x", F, ["batch", "samples"]), vi("state", F, [2, "batch", 16]), vi("sr", I64, [])],
                          [vi("prob", F, ["batch", 2]), vi("state_out", F, [2, "batch", 16])], initializer=inits)
    _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    feeds = {"x": _rand(1, 512), "state": np.zeros((2, 1, 16), np.float32), "sr": np.array(16000, np.int64)}
    # sr=16000, 512 samples: conv k16 s8 -> 63 steps: 8*63*16 = 8064; head 8*2; state 2*16*16
    expected = 8 * 63 * 16 + 8 * 2 + 2 * 16 * 16
    f = _facts(path, "if_value", "onnx.helper (opset 17)", feeds, expected,
               "If(Equal(sr,16000)) -> Conv k16/s8; else If(Equal(sr,8000)) -> Conv k8/s4 (feed 256 samples); "
               "else a Reshape to [-1,7,0] (0 = copy) that fails at run time for any length. "
               "Values matter: sr=16000 in the npz; "
               "8000 with x=1x256 also valid (same 63 steps: 8*63*8 MACs)", values_matter=True)
    f["valid_values"] = {"sr": [16000, 8000]}
    return f


def build_if_torch_cond(path):
    """torch.cond exported by the dynamo exporter (an If whose condition is data-dependent: x.sum() > 0)."""
    import torch
    from torch import nn
    warnings.filterwarnings("ignore")
    torch.manual_seed(SEED)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16, bias=False)

        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda x: self.a(x).relu(), lambda x: self.b(self.b(x)), (x,))

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(M().eval(), (torch.randn(2, 16),), str(path), dynamo=True)
    x = np.abs(_rand(2, 16))                     # sum > 0: the then-branch (one 16x16 Linear) runs
    name = graph_inputs(path)[0]["name"]
    return _facts(path, "if_torch_cond", f"torch.onnx.export(dynamo=True) torch=={torch.__version__}", {name: x},
                  2 * 16 * 16, "torch.cond -> If(Greater(ReduceSum(x), 0)); the npz has x > 0 (then-branch: "
                  "1 Linear = 512 MACs); x < 0 runs the else-branch (2 Linears = 1024 MACs)", values_matter=True)


# ------------------------------------------------------------------------------------------- Loop
def _loop_model(trip_from_input, n_const=5, d=64):
    def vi(n, t=F, s=None):
        return helper.make_tensor_value_info(n, t, s)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "W"], ["mm"], name="loop_matmul"),
         helper.make_node("Add", ["mm", "b"], ["pre"], name="loop_bias"),
         helper.make_node("Tanh", ["pre"], ["h_out"], name="loop_tanh"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="loop_cond"),
         helper.make_node("Identity", ["h_out"], ["scan_h"], name="loop_scan")],
        "body", [vi("i", I64, []), vi("cond_in", TensorProto.BOOL, []), vi("h_in", F, [1, d])],
        [vi("cond_out", TensorProto.BOOL, []), vi("h_out", F, [1, d]), vi("scan_h", F, [1, d])])
    inits = [_init("W", _rand(d, d, seed=1) * 0.1), _init("b", _rand(d, seed=2)), _init("cond", np.array(True))]
    inputs = [vi("x", F, [1, d])]
    if trip_from_input:
        inputs.append(vi("n", I64, []))
    else:
        inits.append(_init("n", np.array(n_const, np.int64)))
    g = helper.make_graph([helper.make_node("Loop", ["n", "cond", "x"], ["h", "hs"], name="loop", body=body)],
                          "loop", inputs, [vi("h", F, [1, d]), vi("hs", F, [None, 1, d])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def build_loop(path, d=64, n=5):
    _save(_loop_model(False, n, d), path)
    return _facts(path, "loop", "onnx.helper (opset 17)", {"x": _rand(1, d)}, n * d * d,
                  f"Loop with constant trip count {n} (initializer) running a 1x{d} @ {d}x{d} MatMul, a scan output")


def build_loop_input(path, d=64, n=4):
    _save(_loop_model(True, d=d), path)
    return _facts(path, "loop_input", "onnx.helper (opset 17)", {"x": _rand(1, d), "n": np.array(n, np.int64)},
                  n * d * d, f"Loop whose trip count is the VALUE of input 'n' (npz: n={n}); MACs = n*{d}*{d}",
                  values_matter=True)


# ------------------------------------------------------------------------------- IR 3 (Model Zoo)
def build_ir3(path):
    def vi(n, s):
        return helper.make_tensor_value_info(n, F, s)
    w = {"conv1_w": _rand(8, 3, 3, 3, seed=1), "conv1_b": _rand(8, seed=2), "conv2_w": _rand(16, 8, 3, 3, seed=3),
         "conv2_b": _rand(16, seed=4), "fc_w": _rand(784, 10, seed=5) * 0.05, "fc_b": _rand(10, seed=6)}
    nodes = [helper.make_node("Conv", ["data_0", "conv1_w", "conv1_b"], ["c1"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "conv2_w", "conv2_b"], ["c2"], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p2"], ["f"]),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["g"]),
             helper.make_node("Softmax", ["g"], ["prob_1"])]
    inits = [_init(k, v) for k, v in w.items()]
    inputs = [vi("data_0", [1, 3, 32, 32])] + [vi(k, list(v.shape)) for k, v in w.items()]   # initializers as inputs
    g = helper.make_graph(nodes, "ir3", inputs, [vi("prob_1", [1, 10])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 8)], producer_name="onnx-caffe2")
    _save(m, path, ir_version=3)
    # conv1 8*32*32*27; conv2 (no pad) 16*14*14*72; gemm 784*10
    return _facts(path, "ir3", "onnx.helper (ir_version 3, opset 8)", {"data_0": _rand(1, 3, 32, 32)},
                  8 * 32 * 32 * 27 + 16 * 14 * 14 * 72 + 784 * 10,
                  "IR version 3, opset 8, every initializer also a graph input (Model Zoo / caffe2 style), "
                  "all node names empty")


# -------------------------------------------------------------------- weights computed from constants
def build_constant_weights(path):
    def vi(n, s):
        return helper.make_tensor_value_info(n, F, s)
    nodes = [
        # conv1 weight = ConstantOfShape([8,3,3,3], 1) * scale1[8,1,1,1] + noise1[1,3,3,3]
        helper.make_node("ConstantOfShape", ["w1_shape"], ["w1_ones"], name="w1_ones",
                         value=numpy_helper.from_array(np.array([1.0], np.float32))),
        helper.make_node("Mul", ["w1_ones", "w1_scale"], ["w1_scaled"], name="w1_mul"),
        helper.make_node("Add", ["w1_scaled", "w1_noise"], ["w1"], name="w1_add"),
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        # conv2 weight = Tile(base2[8,8,3,3], [2,1,1,1])
        helper.make_node("Tile", ["w2_base", "w2_reps"], ["w2"], name="w2_tile"),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
        # conv3 weight = Expand(base3[1,16,3,3], [16,16,3,3]) * scale3[16,1,1,1]
        helper.make_node("Expand", ["w3_base", "w3_shape"], ["w3_exp"], name="w3_expand"),
        helper.make_node("Mul", ["w3_exp", "w3_scale"], ["w3"], name="w3_mul"),
        helper.make_node("Conv", ["p2", "w3"], ["c3"], name="conv3", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c3"], ["r3"], name="relu3"),
        helper.make_node("GlobalAveragePool", ["r3"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["feat"], name="flatten"),
        # fc weight = Reshape(Cast(Range(0,160,1)), [10,16]) * 0.01
        helper.make_node("Range", ["r_start", "r_limit", "r_delta"], ["r"], name="fc_range"),
        helper.make_node("Cast", ["r"], ["rf"], name="fc_cast", to=F),
        helper.make_node("Reshape", ["rf", "fc_shape"], ["fc_w0"], name="fc_reshape"),
        helper.make_node("Mul", ["fc_w0", "fc_scale"], ["fc_w"], name="fc_mul"),
        helper.make_node("Gemm", ["feat", "fc_w"], ["y"], name="fc", transB=1),
    ]
    inits = [_init("w1_shape", np.array([8, 3, 3, 3], np.int64)), _init("w1_scale", _rand(8, 1, 1, 1, seed=1) * 0.2),
             _init("w1_noise", _rand(1, 3, 3, 3, seed=2) * 0.1),
             _init("w2_base", _rand(8, 8, 3, 3, seed=3) * 0.1), _init("w2_reps", np.array([2, 1, 1, 1], np.int64)),
             _init("w3_base", _rand(1, 16, 3, 3, seed=4) * 0.1), _init("w3_shape", np.array([16, 16, 3, 3], np.int64)),
             _init("w3_scale", _rand(16, 1, 1, 1, seed=5)),
             _init("r_start", np.array(0, np.int64)), _init("r_limit", np.array(160, np.int64)),
             _init("r_delta", np.array(1, np.int64)), _init("fc_shape", np.array([10, 16], np.int64)),
             _init("fc_scale", np.array(0.01, np.float32))]
    g = helper.make_graph(nodes, "constant_weights", [vi("x", [1, 3, 32, 32])], [vi("y", [1, 10])], initializer=inits)
    _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return _facts(path, "constant_weights", "onnx.helper (opset 13)", {"x": _rand(1, 3, 32, 32)},
                  8 * 32 * 32 * 27 + 16 * 16 * 16 * 72 + 16 * 8 * 8 * 144 + 160,
                  "VGG-like; every Conv/Gemm weight is computed at load time from initializers "
                  "(ConstantOfShape*Mul+Add, Tile, Expand*Mul, Range->Cast->Reshape*Mul): constant-foldable")


# ------------------------------------------------------------------------------------------ tiny4
def build_tiny4(path):
    def vi(n, s):
        return helper.make_tensor_value_info(n, F, s)
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Add", ["a", "c1"], ["b"], name="add"),
             helper.make_node("Mul", ["b", "c2"], ["c"], name="mul"),
             helper.make_node("Sigmoid", ["c"], ["y"], name="sigmoid")]
    g = helper.make_graph(nodes, "tiny4", [vi("x", [1, 8])], [vi("y", [1, 8])],
                          initializer=[_init("c1", _rand(8, seed=1)), _init("c2", _rand(8, seed=2))])
    _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return _facts(path, "tiny4", "onnx.helper (opset 17)", {"x": _rand(1, 8)}, 0,
                  "4 element-wise nodes on 1x8: no MACs; every boundary cuts a 32-byte tensor, nothing to balance "
                  "(a split tool should prune them all and say so)")


# ---------------------------------------------------------------------------- GPT-2 style KV decoder
def _decoder_module(layers=2, heads=2, embd=64, vocab=256, max_pos=128):
    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(embd), nn.LayerNorm(embd)
            self.qkv, self.proj = nn.Linear(embd, 3 * embd), nn.Linear(embd, embd)
            self.fc, self.out = nn.Linear(embd, 4 * embd), nn.Linear(4 * embd, embd)

        def forward(self, x, mask_bias, past_k, past_v):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(embd, dim=2)
            q, k, v = (t.view(b, s, heads, embd // heads).transpose(1, 2) for t in (q, k, v))
            k = torch.cat([past_k, k], dim=2)
            v = torch.cat([past_v, v], dim=2)
            a = torch.softmax(q @ k.transpose(-1, -2) * (embd // heads) ** -0.5 + mask_bias, dim=-1)
            o = (a @ v).transpose(1, 2).reshape(b, s, embd)
            x = x + self.proj(o)
            x = x + self.out(nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))
            return x, k, v

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, embd), nn.Embedding(max_pos, embd)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.ln_f = nn.LayerNorm(embd)
            self.lm_head = nn.Linear(embd, vocab, bias=False)

        def forward(self, input_ids, attention_mask, position_ids, *past):
            s = input_ids.shape[1]
            total = attention_mask.shape[1]
            causal = torch.ones(s, total, dtype=torch.bool).tril(total - s)
            keep = causal[None, None] & attention_mask[:, None, None, :].bool()
            mask_bias = (~keep).float() * -1e4
            x = self.wte(input_ids) + self.wpe(position_ids)
            presents = []
            for i, layer in enumerate(self.layers):
                x, k, v = layer(x, mask_bias, past[2 * i], past[2 * i + 1])
                presents += [k, v]
            return (self.lm_head(self.ln_f(x)), *presents)

    torch.manual_seed(SEED)
    return Decoder()


def decoder_macs(b, s, past, layers=2, embd=64, vocab=256):
    t = past + s
    return layers * b * s * (12 * embd * embd + 2 * t * embd) + b * s * embd * vocab


def decoder_feeds(b=1, s=8, past=16, layers=2, heads=2, embd=64, vocab=256):
    rng = np.random.default_rng(SEED)
    feeds = {"input_ids": rng.integers(0, vocab, (b, s)).astype(np.int64),
             "attention_mask": np.ones((b, past + s), np.int64),
             "position_ids": np.tile(np.arange(past, past + s, dtype=np.int64), (b, 1))}
    for i in range(layers):
        for kv in ("key", "value"):
            feeds[f"past_key_values.{i}.{kv}"] = rng.standard_normal((b, heads, past, embd // heads)).astype(np.float32)
    return feeds


def build_kv_decoder(path, layers=2, heads=2, embd=64, vocab=256, s=8, past=16):
    """GPT-2-style decoder with KV cache, I/O named and dimensioned as Hugging Face optimum writes them
    (text-generation-with-past): dims batch_size, sequence_length, past_sequence_length and the expression
    'past_sequence_length + sequence_length'. Built with the TorchScript exporter, then the dim_params are
    rewritten to optimum's strings (optimum itself needs transformers<4.58; see bench/corpus.py)."""
    import torch
    feeds = decoder_feeds(1, s, past, layers, heads, embd, vocab)
    names = list(feeds)
    past_names = names[3:]
    out_names = ["logits"] + [n.replace("past_key_values", "present") for n in past_names]
    dyn = {"input_ids": {0: "batch_size", 1: "sequence_length"},
           "attention_mask": {0: "batch_size", 1: "past_sequence_length + sequence_length"},
           "position_ids": {0: "batch_size", 1: "sequence_length"},
           "logits": {0: "batch_size", 1: "sequence_length"}}
    for n in past_names:
        dyn[n] = {0: "batch_size", 2: "past_sequence_length"}
    for n in out_names[1:]:
        dyn[n] = {0: "batch_size", 2: "past_sequence_length + sequence_length"}
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    exporter = _torch_export(_decoder_module(layers, heads, embd, vocab), args, path, 14, input_names=names,
                             output_names=out_names, dynamic_axes=dyn)
    # make sure the expression strings survived as dim_params (older exporters sanitize names)
    m = onnx.load(str(path))
    want = {**{n: d for n, d in dyn.items()}}
    for vi in list(m.graph.input) + list(m.graph.output):
        for ax, name in want.get(vi.name, {}).items():
            dim = vi.type.tensor_type.shape.dim[ax]
            if dim.dim_param != name:
                dim.Clear()
                dim.dim_param = name
    onnx.save(m, str(path))
    return _facts(path, "kv_decoder", exporter + " + dim_params as optimum writes them", feeds,
                  decoder_macs(1, s, past, layers, embd, vocab),
                  f"{layers} layers, {heads} heads, embd {embd}, vocab {vocab}; npz: sequence_length={s}, "
                  f"past_sequence_length={past}; attention_mask and present.* dims are the EXPRESSION "
                  "'past_sequence_length + sequence_length'. --preset llm-128 sets past_sequence_length=0 "
                  "(zero-size past tensors)", preset="llm-128")


BUILDERS = {
    "torchscript_cnn": build_torchscript_cnn,
    "torchscript_swin": build_torchscript_swin,
    "lstm": build_lstm,
    "gru": build_gru,
    "rnn": build_rnn,
    "lstm_layout1": build_lstm_layout1,
    "if_value": build_if_value,
    "if_torch_cond": build_if_torch_cond,
    "loop": build_loop,
    "loop_input": build_loop_input,
    "ir3": build_ir3,
    "constant_weights": build_constant_weights,
    "tiny4": build_tiny4,
    "kv_decoder": build_kv_decoder,
}


def build_all(outdir, only=None):
    outdir = Path(outdir)
    return {n: b(outdir / f"{n}.onnx") for n, b in BUILDERS.items() if not only or n in only}


if __name__ == "__main__":
    import sys
    import time
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "models/wild")
    for n, b in BUILDERS.items():
        t = time.time()
        f = b(out / f"{n}.onnx")
        print(f"{n:18s} {time.time() - t:5.1f}s expected_macs={f['expected_macs']} override={f['shape_override']}")
