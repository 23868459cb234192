"""Run a model once with ONNX Runtime and report the shapes (and small integer values) of its outputs.

    python shape_worker.py PROBE.onnx FEEDS.npz OUT_DIR
    python shape_worker.py PROBE.onnx -            (does ONNX Runtime load it? exit 0, or 3 and its reason)

A separate process on purpose (lib/onnx/shapes.py's last resort): the run can be killed when it takes too long (a
Loop whose trip count comes from the inputs may run for ever), and a model that blows up memory takes only
this process down. Writes OUT_DIR/shapes.json ({name: [shape, onnx elem type]}) and OUT_DIR/values.npz.
"""
import json
import sys

import numpy as np

MAX_VALUE_ELEMENTS = 4096


def main(probe: str, feeds_path: str, out_dir: str = "") -> int:
    import onnx
    import onnxruntime as ort
    ort.set_default_logger_severity(4)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    if feeds_path == "-":
        try:
            ort.InferenceSession(probe, so, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - reported to the parent as one line
            print(" ".join(str(e).split())[:300], file=sys.stderr)
            return 3
        return 0
    with np.load(feeds_path, allow_pickle=False) as f:
        feeds = {k: f[k] for k in f.files}
    try:
        sess = ort.InferenceSession(probe, so, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        outs = sess.run(names, feeds)
    except Exception as e:  # noqa: BLE001 - reported to the parent as one line
        print(" ".join(str(e).split())[:300], file=sys.stderr)
        return 3
    shapes, values = {}, {}
    for name, v in zip(names, outs):
        if not isinstance(v, np.ndarray):       # a sequence or a map (ZipMap): no tensor shape
            continue
        strings = v.dtype.kind in "OSU"         # string labels of a classifier come back as objects
        elem = onnx.TensorProto.STRING if strings else onnx.helper.np_dtype_to_tensor_dtype(v.dtype)
        shapes[name] = [list(map(int, v.shape)), int(elem)]
        if v.size <= MAX_VALUE_ELEMENTS and v.dtype.kind in "biu":
            values[name] = v
    with open(f"{out_dir}/shapes.json", "w") as f:
        json.dump(shapes, f)
    np.savez(f"{out_dir}/values.npz", **{f"v{k}": v for k, v in enumerate(values.values())},
             __names__=np.array(list(values), dtype=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
