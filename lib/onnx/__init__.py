"""ONNX graphs: reading, validation, input shapes, shape inference, the op registry and per-node costs."""
