"""One device-time formula, t = overhead + max(F / (P e), B / (W m)), used by the roofline, the split model, the FX
hardware mapping and the latency model: hand-computed values, and each user agreeing with it."""
import numpy as np
import pandas as pd

from lib.analysis.device_time import device_terms, device_time
from lib.analysis.roofline import roofline_time_us
from lib.fx.hardware import map_subgraphs
from lib.latency.latency_model import model_time
from lib.split.ranking import modelled_times

F, B, P, W = 2e9, 1e8, 1e12, 1e10        # 2 GFLOP and 100 MB on 1 TFLOP/s and 10 GB/s


def test_hand_computed():
    # compute 2e9 / (1e12 x 0.5) = 4 ms, memory 1e8 / (1e10 x 0.5) = 20 ms: memory bound, plus 3 us
    assert device_terms(F, B, P, W, 0.5, 0.5, scale=1e6) == (4000.0, 20000.0)
    assert device_time(F, B, P, W, 0.5, 0.5, overhead=3.0, scale=1e6) == 20003.0
    assert device_time(F, 0.0, P, W) == 2e-3                                 # compute bound, seconds
    assert np.isnan(device_time(np.nan, B, P, W))                          # unknown stays unknown


def test_the_four_users_are_the_formula():
    flops, nbytes = np.array([F, 1e6, np.nan]), np.array([B, 4e8, 1e3])
    plain = device_time(flops, nbytes, P, W, scale=1e6)
    np.testing.assert_array_equal(roofline_time_us(flops, nbytes, P, W), plain)
    ec, em, ovh = np.array([0.5, 0.25, 1.0]), np.array([0.5, 1.0, 1.0]), np.array([3.0, 1.0, 2.0])
    split = modelled_times(flops, nbytes, P, W, ec, em, ovh)        # an unknown roofline counts 0, plus overhead
    np.testing.assert_array_equal(split, np.nan_to_num(device_time(flops, nbytes, P, W, ec, em, scale=1e6)) + ovh)
    # the latency model at full efficiency (e_max 1, f_half tiny) is the formula with its overhead
    p = {"overhead_us": 5.0, "e_max": 1.0, "f_half": 1e-12, "gamma": 1.0, "m": 0.5}
    np.testing.assert_allclose(model_time(p, flops[:2], nbytes[:2], np.full(2, P), W),
                               device_time(flops[:2], nbytes[:2], P, W, 1.0, 0.5, overhead=5.0, scale=1e6), rtol=1e-12)
    # FX: a subgraph whose threads fill every lane (utilization 1) on a profile with a 2 us kernel overhead
    prof = {"peak_flops_per_s": {"fp32": P}, "mem_bw_bytes_per_s": W, "compute_units": 4, "lanes_per_unit": 8,
            "kernel_overhead_us": 2.0, "static_power_w": 0.0, "energy": {"e_flop_j": {"fp32": 0.0}, "e_byte_j": 0.0}}
    sg = pd.DataFrame({"subgraph": ["s0"], "threads": [32.0], "flops": [F], "bytes_after": [B], "weight_bytes": [0.0]})
    lat = map_subgraphs(sg, prof)["latency_us"].iloc[0]
    assert lat == device_time(F, B, P, W, overhead=2e-6) * 1e6 and abs(lat - 10002.0) < 1e-6
