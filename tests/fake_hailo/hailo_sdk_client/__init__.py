"""A fake of the Hailo Dataflow Compiler's Python package, for tests only (the real one is not installable here).

It records every call in the JSON-lines file $HAILO_FAKE_LOG and rejects the op types listed in
$HAILO_FAKE_REJECT (comma separated) the way the DFC's parser does, with an UnsupportedOperationError
naming the node and the op. $HAILO_FAKE_VERSION sets __version__ (a per-arch venv can set its own).
"""
import json
import os

import onnx

__version__ = os.environ.get("HAILO_FAKE_VERSION", "3.99.0+fake")


class UnsupportedOperationError(Exception):
    def __init__(self, node_name, op_type):
        super().__init__(f"Unsupported layer: node {node_name} of op type {op_type} cannot be translated")
        self.node_name, self.op_type = node_name, op_type


class ClientRunner:
    def __init__(self, hw_arch=None, har=None):
        self.hw_arch = hw_arch
        _log({"call": "ClientRunner", "hw_arch": hw_arch})

    def translate_onnx_model(self, model, net_name, start_node_names=None, end_node_names=None,
                             net_input_shapes=None, **kwargs):
        _log({"call": "translate_onnx_model", "hw_arch": self.hw_arch, "model": model, "net_name": net_name,
              "start_node_names": start_node_names, "end_node_names": end_node_names,
              "net_input_shapes": net_input_shapes, "extra_kwargs": sorted(kwargs),
              "venv": os.environ.get("HAILO_FAKE_VENV", "local"), "version": __version__})
        reject = {op for op in os.environ.get("HAILO_FAKE_REJECT", "").split(",") if op}
        graph = onnx.load(model, load_external_data=False).graph
        for node in graph.node:
            if node.op_type in reject:
                raise UnsupportedOperationError(node.name, node.op_type)
        return "hn", "npz"


def _log(entry):
    path = os.environ.get("HAILO_FAKE_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")
