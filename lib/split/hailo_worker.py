#!/usr/bin/env python3
"""Runs inside the Python that has the Hailo Dataflow Compiler (this one, a per-arch venv, or WSL's).

    python hailo_worker.py --version                 -> {"version": "..."}
    python hailo_worker.py --request request.json    -> {"status": "ok|unsupported|error", "node", "op", "reason"}

request.json: {"model", "name", "arch", "start_node_names", "end_node_names", "net_input_shapes"}.
A parse-only translation: ClientRunner(hw_arch=arch).translate_onnx_model(...); nothing is compiled.
Prints one JSON line on stdout, whatever happens.
"""
import argparse
import json
import re
import sys


def classify(exc: Exception) -> dict:
    """ok / unsupported (with the failing node and op when the message or the exception names them) / error."""
    msg = " ".join(str(exc).split())[:500]
    name = type(exc).__name__
    node = getattr(exc, "node_name", None) or _find(r"node[\s:'\"]+([\w./:\-]+)", msg)
    op = getattr(exc, "op_type", None) or getattr(exc, "layer_type", None) or \
        _find(r"(?:op|operation|layer)(?:\s+type)?[\s:'\"]+([A-Za-z]\w*)", msg)
    if "Unsupported" in name or "unsupported" in msg.lower():
        return {"status": "unsupported", "node": node, "op": op, "reason": f"{name}: {msg}"}
    return {"status": "error", "node": node, "op": op, "reason": f"{name}: {msg}"}


def _find(pattern, text):
    m = re.search(pattern, text, re.I)
    return m.group(1) if m else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--version", action="store_true")
    g.add_argument("--request")
    a = p.parse_args()
    try:
        import hailo_sdk_client
    except ImportError as e:
        print(json.dumps({"status": "error", "reason": f"hailo_sdk_client not importable: {e}"}))
        return
    if a.version:
        print(json.dumps({"version": str(getattr(hailo_sdk_client, "__version__", "unknown"))}))
        return
    req = json.loads(open(a.request).read())
    try:
        runner = hailo_sdk_client.ClientRunner(hw_arch=req["arch"])
        runner.translate_onnx_model(req["model"], req["name"], start_node_names=req["start_node_names"],
                                    end_node_names=req["end_node_names"], net_input_shapes=req["net_input_shapes"])
        out = {"status": "ok", "node": None, "op": None, "reason": ""}
    except Exception as e:  # noqa: BLE001 - every compiler failure is a result, not a crash
        out = classify(e)
    sys.stdout.flush()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
