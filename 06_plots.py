#!/usr/bin/env python3
"""Stage 06: plots into results/<stem>/plots/ (PNG and SVG): roofline scatter, energy breakdown,
critical-path Gantt chart, and measured vs roofline time by op class."""
from lib import cli
from lib.artifacts import read_csv, results_dir
from lib.host import load_host
from lib.plots import energy_plot, gantt_plot, latency_by_class_plot, roofline_plot, save


def main(argv=None):
    p = cli.parser(__doc__, model_required=False)
    cli.add_host(p)
    a = p.parse_args(argv)
    rdir = results_dir(a.model, a.results)
    host = load_host(a.host)
    prof = read_csv(rdir, "ops_profile.csv", ("node", "op_class", "ai_flop_per_byte", "achieved_gflops", "pct_latency"))
    cp = read_csv(rdir, "critical_path.csv", ("node", "op_type", "start_us", "finish_us", "latency_us"))
    energy = read_csv(rdir, "energy.csv", ("op_class", "e_compute_j", "e_mem_j", "e_measured_j"))
    title = rdir.name
    out = rdir / "plots"
    written = []
    written += save(roofline_plot(prof, host, title), out, "roofline")
    written += save(energy_plot(energy, title), out, "energy_breakdown")
    written += save(gantt_plot(cp, title), out, "critical_path_gantt")
    written += save(latency_by_class_plot(prof, title), out, "latency_by_class")
    print(f"wrote {len(written)} files to {out}/: " + ", ".join(sorted({w.stem for w in written})))


if __name__ == "__main__":
    cli.run(main)
