#!/usr/bin/env python3
"""Stage 05: per-node energy, offload kernel candidates and Amdahl speed-ups.

energy.csv: two models per node. Power model: E = P_avg x the node's time (e_power_j: 01's measured latency,
else 03's predicted time; P_avg is an assumption from host.yaml or --avg-power-w, not a power measurement).
Component: E = FLOPs x e_flop(dtype) + bytes x e_byte, split into compute (e_compute_j) and data movement
(e_mem_j). kernel_candidates.csv: one row per op class with the seed's criteria (share of latency or
energy, regular op class, arithmetic intensity, fusable neighbours) and the reason. amdahl.csv:
S_total = 1 / ((1 - f) + f / S_k) for latency and energy, S_k per op class from configs/offload.yaml.
The graph's structure (fusable neighbours) comes from stage 02's graph.npz; energy_meta.json records which
time (measured or predicted) the power model used.
"""
from lib import cli
from lib.artifacts import CONFIGS, read_csv, versions, write_csv, write_json
from lib.analysis.energy import amdahl_table, kernel_table, load_offload, node_energy
from lib.errors import StageError
from lib.host import load_host
from lib.onnx.loading import analysed_arrays
from lib.provenance import stamp


def report(energy, kernels, amd, power: float, t_total: float, source: str) -> None:
    e_total = energy["e_total_j"].sum()
    ec, emem = energy["e_compute_j"].sum(), energy["e_mem_j"].sum()
    if t_total > 0:
        print(f"power model (assumed P_avg {power:g} W x {t_total / 1e3:.2f} ms of {source} kernel time): "
              f"{energy['e_power_j'].sum() * 1e3:.2f} mJ per inference")
    share = (lambda x: f"{100 * x / e_total:.0f}%") if e_total > 0 else (lambda x: "n/a")  # noqa: E731
    print(f"component model: {e_total * 1e3:.2f} mJ = compute {ec * 1e3:.2f} mJ ({share(ec)}) "
          f"+ data movement {emem * 1e3:.2f} mJ ({share(emem)})")
    print("kernels (op classes), by share of latency:")
    for _, r in kernels.head(6).iterrows():
        print(f"  {'*' if r['selected'] else ' '} {r['kernel']:<15} {r['ops']:4d} ops  {r['reason']}")
    print("  (* = selected offload candidate)")
    chosen = list(kernels.loc[kernels["selected"], "kernel"])
    if chosen:
        best = amd[amd["scenario"] == ("all selected" if len(chosen) > 1 else chosen[0])].iloc[0]
        print(f"Amdahl, selected ({best['kernels']}): latency x{best['s_total_latency']:.2f} "
              f"(f = {best['f_latency']:.2f}), energy x{best['s_total_energy']:.2f} (f = {best['f_energy']:.2f})")
    else:
        print("no kernel meets the criteria in configs/offload.yaml")


def main(argv=None):
    p = cli.parser(__doc__)
    cli.add_host(p)
    p.add_argument("--offload", default=str(CONFIGS / "offload.yaml"), metavar="YAML",
                   help="candidate criteria, S_k and energy gain per op class (default: %(default)s)")
    p.add_argument("--avg-power-w", type=float, default=None, help="average platform power in W (default: host.yaml)")
    a = cli.parse(p, argv)
    host, off = load_host(a.host), load_offload(a.offload)
    power = a.avg_power_w if a.avg_power_w is not None else float(host["avg_power_w"])
    if power <= 0:
        raise StageError("--avg-power-w must be positive")
    arrays, res, _ = analysed_arrays(a.rdir, a.model)
    metas = res.require("merge_meta.json")
    prof = read_csv(a.rdir, "ops_profile.csv", ("node", "op_type", "op_class", "flops", "latency_us", "t_pred_us",
                                                "bound", "fused_into"))
    # the node's time: 01's measured latency, else 03's prediction (for the power model, shares and Amdahl)
    source = "measured" if metas["merge_meta.json"]["latency_source"] == "measured" else "predicted"
    if source == "predicted":
        prof["latency_us"] = prof["t_pred_us"]
    cls = list(prof["op_class"])
    energy = node_energy(prof, host, power)
    kernels = kernel_table(energy, prof, [[cls[s] for s in ss] for ss in arrays.succs()], off["criteria"])
    t_total = float(prof["latency_us"].sum())
    amd = amdahl_table(kernels, off["speedup"], off["energy_gain"], t_total, float(energy["e_total_j"].sum()))
    write_csv(energy, a.rdir / "energy.csv")
    write_csv(kernels, a.rdir / "kernel_candidates.csv")
    write_csv(amd, a.rdir / "amdahl.csv")
    write_json(stamp({"avg_power_w": power, "time_source": source, "host_config": a.host, "offload_config": a.offload, "offload": off,
                      "versions": versions()}, metas["merge_meta.json"]["identity"], metas), a.rdir / "energy_meta.json")
    report(energy, kernels, amd, power, t_total, source)
    print(f"wrote {a.rdir / 'energy.csv'}, kernel_candidates.csv, amdahl.csv")


if __name__ == "__main__":
    cli.run(main)
