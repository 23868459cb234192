"""Measured and predicted latency: ORT profiling, micro-benchmarks, the latency model, calibration, batch sweeps."""
