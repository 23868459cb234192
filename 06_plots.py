#!/usr/bin/env python3
"""Stage 06: plots into results/<stem>/plots/ (PNG and SVG; the split plots also PDF): roofline scatter, energy
breakdown, critical-path Gantt chart, measured vs roofline time by op class, and, when stage 07 ran, the split plots
(Comm(b) with the top-k marked, FLOPs and device-time balance, Pareto fronts, estimated two-device latency
against the all-on-A / all-on-B baselines), and when stage
09 ran, latency and utilization per hardware profile (fx_hardware)."""
from lib import cli
from lib.artifacts import read_csv, read_json, versions, write_json
from lib.host import load_host, same_host
from lib.provenance import Results, stamp
from lib.report.plots import (energy_plot, gantt_plot, hardware_plot, latency_by_class_plot, roofline_plot, save,
                       split_plots)


def main(argv=None):
    p = cli.parser(__doc__, model="or-results")
    cli.add_host(p)
    a = cli.parse(p, argv)
    rdir = a.rdir
    host = load_host(a.host)
    title = rdir.name
    out = rdir / "plots"
    written = []
    fx_only = (rdir / "fx_hardware.csv").exists() and not (rdir / "ops_profile.csv").exists()
    splits = (rdir / "boundaries.csv").exists() and not fx_only
    metas = {}
    if not fx_only:     # the artifacts plotted together must be of one model, input spec and chain of runs
        metas = Results(rdir).require("merge_meta.json", "critical_path_meta.json", "energy_meta.json",
                                      *(["workload_profile.json"] if splits else []), light=a.model)
        same_host(host, a.host, metas["merge_meta.json"])
        prof = read_csv(rdir, "ops_profile.csv", ("node", "op_class", "ai_flop_per_byte", "achieved_gflops", "pct_latency"))
        cp = read_csv(rdir, "critical_path.csv", ("node", "op_type", "start_us", "finish_us", "latency_us"))
        energy = read_csv(rdir, "energy.csv", ("op_class", "e_compute_j", "e_mem_j", "e_power_j"))
        written += save(roofline_plot(prof, host, title), out, "roofline")
        power = metas["energy_meta.json"].get("power", {}).get("label") or metas["energy_meta.json"].get("avg_power_w")
        written += save(energy_plot(energy, title, power), out, "energy_breakdown")
        written += save(gantt_plot(cp, title), out, "critical_path_gantt")
        written += save(latency_by_class_plot(prof, title), out, "latency_by_class")
    if (rdir / "fx_hardware.csv").exists():
        hw = read_csv(rdir, "fx_hardware.csv", ("hardware", "point", "batch", "latency_us", "utilization"))
        fx = read_json(rdir, "fx_summary.json")     # 09's own model and input, not necessarily the ONNX chain's
        fx_title = f"{fx.get('model', title)}, input {'x'.join(map(str, fx.get('input_shape', [])))} (stage 09)"
        written += save(hardware_plot(hw, fx_title), out, "fx_hardware")
    if splits:
        bd = read_csv(rdir, "boundaries.csv", ("boundary", "comm_bytes", "flops_left", "flops_right", "pruned", "rank"))
        pareto = read_csv(rdir, "pareto_export.csv", ("front", "boundary"))
        top_k = int(read_json(rdir, "system_config.json").get("ranking", {}).get("top_k", 10))
        summary = read_json(rdir, "split_summary.json") if (rdir / "split_summary.json").exists() else None
        for name, fig in (split_plots(bd, pareto, title, top_k, summary) if len(bd) else {}).items():
            written += save(fig, out, name, ("png", "svg", "pdf"))   # PDF/SVG: paper assets (08)
    else:
        print("note: no boundaries.csv (run 07_split_candidates.py for the split plots)")
    if metas:
        write_json(stamp({"files": sorted(w.name for w in written), "versions": versions()},
                         metas["merge_meta.json"]["identity"], metas), rdir / "plots_meta.json")
    print(f"wrote {len(written)} files to {out}/: " + ", ".join(sorted({w.stem for w in written})))


if __name__ == "__main__":
    cli.run(main)
