#!/usr/bin/env python3
"""Stage 05: energy with its method, offload kernel candidates and Amdahl speed-ups.

Each energy figure names its method. counter: the RAPL energy counters under /sys/class/powercap, when readable,
over >= 1 s of repeated runs with the idle power subtracted (whole inferences only: energy_meta.json).
power x time: a power figure times a time; whose power is named (--avg-power-w, else the counter's measured
power above idle, else host.yaml's assumed avg_power_w); the time of a whole inference is 01's median session
latency, else 03's predicted latency, a node's its measured time, else the baseline's prediction. component
model: FLOPs x e_flop(dtype) + bytes x e_byte. energy.csv, per node: e_power_j (power x time), e_compute_j +
e_mem_j = e_total_j (component model), with the method columns energy_method (of e_total_j) and
e_power_method: per-node energy is never measured. kernel_candidates.csv: one row per op class
with the seed's criteria (share of latency or energy, regular op class, arithmetic intensity, fusable
neighbours) and the reason. amdahl.csv: S_total = 1 / ((1 - f) + f / S_k), S_k per op class from
configs/offload.yaml. The graph's structure (fusable neighbours) comes from stage 02's graph.npz.
"""
from lib import cli
from lib.artifacts import CONFIGS, read_csv, versions, write_csv, write_json
from lib.analysis.energy import (METHODS, amdahl_table, inference_time, kernel_table, load_offload, measure_counter,
                                 node_energy, power_source, print_report, whole_model)
from lib.analysis.roofline import BYTE_COLUMNS
from lib.errors import StageError
from lib.host import load_host, same_host
from lib.onnx.loading import analysed_arrays
from lib.provenance import stamp, with_tables


def main(argv=None):
    p = cli.parser(__doc__)
    cli.add_host(p)
    p.add_argument("--offload", default=str(CONFIGS / "offload.yaml"), metavar="YAML",
                   help="candidate criteria, S_k and energy gain per op class (default: %(default)s)")
    p.add_argument("--avg-power-w", type=float, default=None, help="average platform power in W (default: the "
                   "RAPL counters' measured power above idle when readable, else host.yaml's assumed avg_power_w)")
    p.add_argument("--no-counter", action="store_true", help="do not read the RAPL energy counters")
    p.add_argument("--counter-window-s", type=float, default=1.0, help="seconds of repeated runs (and of idle) "
                   "per counter reading, >= 1 (default: %(default)s)")
    a = cli.parse(p, argv)
    host, off = load_host(a.host), load_offload(a.offload)
    if a.avg_power_w is not None and not 0 < a.avg_power_w < float("inf"):
        raise StageError(f"--avg-power-w must be a positive number of watts, not {a.avg_power_w:g}")
    if not a.counter_window_s >= 1:
        raise StageError(f"--counter-window-s must be at least 1 (seconds), not {a.counter_window_s:g}")
    arrays, res, spec = analysed_arrays(a.rdir, a.model)
    metas = res.require("merge_meta.json")
    same_host(host, a.host, metas["merge_meta.json"])
    prof = read_csv(a.rdir, "ops_profile.csv", ("node", "op_type", "op_class", "flops", "latency_us", "t_pred_us",
                                                "bound", "fused_into"))
    # the node's time: 01's measured latency, else 03's baseline prediction (per-node power x time, shares, Amdahl's f)
    source = "measured" if metas["merge_meta.json"]["latency_source"] == "measured" else "predicted"
    if source == "predicted":
        prof["latency_us"] = prof["t_pred_us"]
    shapes = metas["merge_meta.json"]["identity"]["inputs"]["input_shapes"]
    counter, why = measure_counter(a.model, shapes, spec, a.counter_window_s, skip=a.no_counter)
    power = power_source(a.avg_power_w, float(host["avg_power_w"]), a.host, counter)
    energy = node_energy(prof, host, power["power_w"])
    kernels = kernel_table(energy, prof, arrays.succs(), off["criteria"], off["speedup"])
    t_total, time_how = inference_time(prof, metas["merge_meta.json"].get("prediction"), source)
    amd = amdahl_table(kernels, off["speedup"], off["energy_gain"], t_total, float(energy["e_total_j"].sum()))
    whole = whole_model(energy, power, counter, t_total, time_how)
    write_csv(energy, a.rdir / "energy.csv")
    write_csv(kernels, a.rdir / "kernel_candidates.csv")
    write_csv(amd, a.rdir / "amdahl.csv")
    write_json(stamp(with_tables({"avg_power_w": power["power_w"], "power": power, "time_source": source, "inference_us": t_total,
                      "partly_unknown_bytes": int(prof[BYTE_COLUMNS].isna().any(axis=1).sum()), "methods": list(METHODS),
                      "counter": counter, "counter_status": why, "energy_per_inference": whole, "host_config": a.host,
                      "offload_config": a.offload, "offload": off, "versions": versions()}, a.rdir, "energy.csv",
                                 "kernel_candidates.csv", "amdahl.csv"), metas["merge_meta.json"]["identity"], metas),
               a.rdir / "energy_meta.json")
    print_report(energy, kernels, amd, whole)
    print(f"wrote {a.rdir / 'energy.csv'}, kernel_candidates.csv, amdahl.csv")


if __name__ == "__main__":
    cli.run(main)
