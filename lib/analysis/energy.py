"""Energy, each figure with its method: `counter` (RAPL energy counters under /sys/class/powercap, read over a
window of at least 1 s of repeated runs, idle baseline subtracted: whole inferences only), `power x time` (a power
figure, whose is named: the counter's, --avg-power-w or host.yaml's assumed watts, times a time) and `component
model` (FLOPs x e_flop + bytes x e_byte). Per-node energy is never measured: a counter sees the whole package.
Also offload kernel candidates and Amdahl speed-ups."""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd

from lib.artifacts import REPO, load_yaml, number
from lib.errors import StageError
from lib.host import per_dtype
from lib.analysis.roofline import BYTE_COLUMNS, kernel_node_bytes
from lib.onnx.inputs import InputSpec, make_feeds
from lib.onnx.ops import op_classes


POWERCAP = "/sys/class/powercap"
POWERCAP_ENV = "NN_PERF_POWERCAP"      # another root (a test's fake sysfs tree)
METHODS = ("counter", "power x time", "component model")
ZONE = re.compile(r"^intel-rapl:\d+$")   # a package zone (its sub-zones, intel-rapl:0:0 ..., are inside it)


def rapl_zones(root: str | Path | None = None) -> list[Path]:
    """The readable RAPL package zones (AMD's kernels expose theirs under the same name), [] when none."""
    root = Path(root or os.environ.get(POWERCAP_ENV) or POWERCAP)
    try:
        zones = sorted(z for z in root.iterdir() if ZONE.match(z.name))
    except OSError:
        return []
    ok = []
    for z in zones:
        try:
            int((z / "energy_uj").read_text())
            ok.append(z)
        except (OSError, ValueError):
            pass                                # present but not readable (root only, on most kernels)
    return ok


def _read_uj(zones: list[Path]) -> list[int]:
    return [int((z / "energy_uj").read_text()) for z in zones]


def _delta_j(zones: list[Path], before: list[int], after: list[int]) -> float:
    """Joules between two readings, each zone's wrap-around (at max_energy_range_uj) undone."""
    total = 0
    for z, a, b in zip(zones, before, after):
        if b < a:                               # unreadable range: ValueError/OSError, the reading is dropped
            b += int((z / "max_energy_range_uj").read_text())
        total += b - a
    return total * 1e-6


def counter_energy(run, zones: list[Path], window_s: float = 1.0, sleep=time.sleep,
                   clock=time.perf_counter) -> dict | None:
    """Energy per call of run() from the counters: idle power over window_s, then run() repeated for at least
    window_s; (busy joules - idle W x busy seconds) / runs. None when the counters did not move."""
    run()                                       # warm-up, unmeasured
    e0, t0 = _read_uj(zones), clock()
    sleep(window_s)
    e1, t1 = _read_uj(zones), clock()
    idle_w = _delta_j(zones, e0, e1) / (t1 - t0)
    runs, b0, s0 = 0, _read_uj(zones), clock()
    while runs == 0 or clock() - s0 < window_s:
        run()
        runs += 1
    b1, s1 = _read_uj(zones), clock()
    busy_j, busy_s = _delta_j(zones, b0, b1), s1 - s0
    if busy_j <= 0:
        return None
    per_run = (busy_j - idle_w * busy_s) / runs
    return {"method": "counter", "energy_per_inference_j": per_run, "runs": runs, "window_s": busy_s,
            "idle_w": idle_w, "busy_w": busy_j / busy_s, "above_idle_w": busy_j / busy_s - idle_w,
            "zones": [f"{z.name} ({_zone_name(z)})" for z in zones]}


def measure_counter(model_path, shapes: dict, spec: InputSpec, window_s: float, skip: bool = False,
                    root: str | Path | None = None) -> tuple[dict | None, str]:
    """The model's energy per inference from the RAPL counters (ORT on the CPU, the inputs of the recorded spec),
    and what happened: 'read', '--no-counter', 'no readable RAPL zone', or why the reading failed."""
    zones = [] if skip else rapl_zones(root)
    if skip or not zones:
        return None, "--no-counter" if skip else "no readable RAPL zone"
    try:
        model = onnx.load(str(model_path), load_external_data=False)
        feeds = make_feeds(model, shapes, spec)
        sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
        counter = counter_energy(lambda: sess.run(None, feeds), zones, window_s)
    except Exception as e:  # noqa: BLE001 - ORT's errors, an unreadable counter: 05 goes on without the counter
        return None, f"the counters were not read: {str(e).splitlines()[0][:200] if str(e) else type(e).__name__}"
    return counter, "read" if counter else "the counters did not move"


def whole_model(energy: pd.DataFrame, power: dict, counter: dict | None, t_total_us: float, time_how: str) -> dict:
    """Energy per inference by each method that applies, each naming how it was obtained. t_total_us: the whole
    inference's time (time_how says which)."""
    out = {"component model": {"energy_j": float(energy["e_total_j"].sum()),
                               "how": "FLOPs x e_flop(dtype) + bytes x e_byte (host config), summed over nodes"}}
    if t_total_us > 0:
        out["power x time"] = {"energy_j": power["power_w"] * t_total_us * 1e-6, "power": power["label"],
                               "how": f"power x {time_how} ({t_total_us / 1e3:.3g} ms)"}
    if counter is not None:
        out["counter"] = {"energy_j": counter["energy_per_inference_j"], "how":
                          f"RAPL {', '.join(counter['zones'])}: {counter['runs']} runs over {counter['window_s']:.2f} s, "
                          f"idle baseline {counter['idle_w']:.3g} W subtracted (whole inference, whole package)"}
    return out


def print_report(energy, kernels, amd, whole: dict) -> None:
    e_total = energy["e_total_j"].sum()
    ec, emem = energy["e_compute_j"].sum(), energy["e_mem_j"].sum()
    for method in ("counter", "power x time"):
        if method in whole:
            w = whole[method]
            print(f"{method}: {w['energy_j'] * 1e3:.3g} mJ per inference ({w.get('power', '')}{'; ' if 'power' in w else ''}"
                  f"{w['how']})")
    share = (lambda x: f"{100 * x / e_total:.0f}%") if e_total > 0 else (lambda x: "n/a")  # noqa: E731
    print(f"component model: {e_total * 1e3:.3g} mJ = compute {ec * 1e3:.3g} mJ ({share(ec)}) "
          f"+ data movement {emem * 1e3:.3g} mJ ({share(emem)})")
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


def _zone_name(z: Path) -> str:
    try:
        return (z / "name").read_text().strip()
    except OSError:
        return "?"


def power_source(avg_power_w: float | None, host_w: float, host_config: str, counter: dict | None) -> dict:
    """Whose power figure the power x time energies use: --avg-power-w, else the counter's measured power above
    idle, else host.yaml's assumed watts."""
    if avg_power_w is not None:
        return {"power_w": avg_power_w, "source": "--avg-power-w", "label": f"{avg_power_w:g} W given by --avg-power-w (assumed)"}
    if counter is not None and counter["above_idle_w"] > 0:
        w = counter["above_idle_w"]
        return {"power_w": w, "source": "counter", "label": f"{w:.3g} W measured by the RAPL counters above idle"}
    path = Path(host_config).resolve()
    name = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    return {"power_w": host_w, "source": "host config", "label": f"{host_w:g} W assumed in {name} (avg_power_w)"}


CRITERIA = ("share", "regular", "ai", "fusable")     # what `require` may list (kernel_table's checks)


def load_offload(path: str | Path) -> dict:
    c = load_yaml(path, "offload config")
    for key in ("criteria", "speedup", "energy_gain"):
        if not isinstance(c.get(key), dict):
            raise StageError(f"offload config {path} lacks the '{key}' mapping")
    where = f"offload config {path}:"
    classes = op_classes()
    for key in ("speedup", "energy_gain"):
        for k, v in c[key].items():
            c[key][k] = number(v, f"{where} {key}.{k}")
        _classes_known(set(c[key]) - {"default"}, classes, f"{where} {key}")
    crit = c["criteria"]
    for k, high in (("min_share_pct", 100.0), ("min_ai_flop_per_byte", None)):
        if k in crit:
            crit[k] = number(crit[k], f"{where} criteria.{k}", zero=True, high=high)
    for k in ("regular_classes", "fusable_classes"):
        if k in crit and not (isinstance(crit[k], list) and all(isinstance(x, str) for x in crit[k])):
            raise StageError(f"{where} criteria.{k} must be a list of op classes, e.g. [conv, matmul], got {crit[k]!r}")
        _classes_known(set(crit.get(k) or []), classes, f"{where} criteria.{k}")
    req = crit.get("require", ["share", "regular", "ai"])
    if not isinstance(req, list) or not set(req) <= set(CRITERIA):
        raise StageError(f"{where} criteria.require must list some of {list(CRITERIA)}, got {req!r}")
    return c


def _classes_known(names: set[str], classes: set[str], where: str) -> None:
    """A misspelt class (cnov: 8) was read nowhere: conv fell back to S_k 1 and no kernel was selected."""
    bad = sorted(names - classes)
    if bad:
        raise StageError(f"{where}: unknown op class{'es' if len(bad) > 1 else ''} {', '.join(bad)} (classes: "
                         f"{', '.join(sorted(classes))})")


def amdahl(f: float, s: float) -> float:
    """S_total = 1 / ((1 - f) + f / S_k)."""
    return 1.0 / ((1.0 - f) + f / s)


def amdahl_multi(fs: list[float], ss: list[float]) -> float:
    """Several kernels accelerated at once: 1 / ((1 - sum f_i) + sum f_i / S_i)."""
    return 1.0 / ((1.0 - sum(fs)) + sum(f / s for f, s in zip(fs, ss)))


def inference_time(prof: pd.DataFrame, prediction: dict | None, source: str) -> tuple[float, str]:
    """(us, what it is) of one whole inference: 01's median session latency, else 03's prediction (merge_meta.json),
    never the sum of node times (profiled kernels: 2954 us against a 786 us session on an int8 model; without 01,
    the baseline's node times: 1.63 ms beside the kernel model's 0.663 ms on the same page)."""
    p = prediction or {}
    if source == "measured" and p.get("measured_latency_us"):
        return float(p["measured_latency_us"]), "01's median session latency"
    if source == "predicted" and p.get("predicted_latency_us"):
        return float(p["predicted_latency_us"]), f"03's predicted latency ({p.get('predicted_by', 'prediction')})"
    return float(prof["latency_us"].fillna(0.0).sum()), f"the sum of node times ({source})"


def node_energy(prof: pd.DataFrame, host: dict, avg_power_w: float) -> pd.DataFrame:
    e_byte = float(host["energy"]["e_byte_j"])
    e_flop = np.array([per_dtype(host["energy"]["e_flop_j"], d) for d in prof["dtype"]])
    # the bytes its kernel moves: a view (Shape, Reshape) none, a pick (Slice, Gather) what it picks (a Shape of a
    # 16 MiB tensor took 16.5% of a model's energy), the others all they read and write; where a part is of unknown
    # size (a tree ensemble's string label) the known parts (the whole node at 0 bytes made its data movement 17x
    # too low); partly_unknown_bytes counts them
    kernel = kernel_node_bytes(prof)
    nbytes = np.where(np.isnan(kernel), prof[BYTE_COLUMNS].sum(axis=1).to_numpy(float), kernel)
    df = prof[["node", "op_type", "op_class", "layer", "dtype", "flops", "latency_us", "attribution", "fused_into"]].copy()
    df["bytes"] = nbytes
    df["e_power_j"] = avg_power_w * prof["latency_us"] * 1e-6     # P_avg x the node's time
    df["e_compute_j"] = prof["flops"].fillna(0.0) * e_flop
    df["e_mem_j"] = nbytes * e_byte
    df["e_total_j"] = df["e_compute_j"] + df["e_mem_j"]
    df["energy_method"] = "component model"                      # of e_total_j (= e_compute_j + e_mem_j)
    df["e_power_method"] = "power x time"                         # of e_power_j; whose power: energy_meta.json
    tot = df["e_total_j"].sum()
    df["pct_energy"] = 100.0 * df["e_total_j"] / tot if tot > 0 else np.nan
    return df


def s_k(table: dict, cls: str) -> float:
    """An op class's factor in the offload config's speedup or energy_gain table (its default, else 1)."""
    return float(table.get(cls, table.get("default", 1.0)))


def kernel_table(energy: pd.DataFrame, prof: pd.DataFrame, succs: list[list[int]], crit: dict,
                 speedup: dict | None = None) -> pd.DataFrame:
    """One row per op class with the seed's four criteria evaluated and the reason spelled out. succs: each node's
    successors (positions): a fusable neighbour is a successor of a fusable class or a node ORT fused into the
    class's nodes, each counted once (one fused into its producer and reading it was counted twice). A class the
    target runs no faster (speedup S_k <= 1) is never selected: one at S_k 0.5 was, and slowed the model 2x."""
    lat = prof["latency_us"].fillna(0.0)
    lat_total = lat.sum()
    e_total = energy["e_total_j"].sum()
    fusable = set(crit.get("fusable_classes", []))
    regular = set(crit.get("regular_classes", []))
    require = set(crit.get("require", ["share", "regular", "ai"]))
    min_share, min_ai = float(crit.get("min_share_pct", 10)), float(crit.get("min_ai_flop_per_byte", 0))
    classes = prof["op_class"].to_numpy(object)
    fused_into = prof["fused_into"].fillna("").to_numpy(object)
    fused_by: dict[str, list[int]] = {}
    for j in np.flatnonzero(fused_into != ""):
        fused_by.setdefault(fused_into[j], []).append(int(j))
    rows = []
    for cls, idx in prof.groupby("op_class").groups.items():
        idx = list(idx)
        flops, nbytes = prof.loc[idx, "flops"].sum(), energy.loc[idx, "bytes"].sum()
        ai = flops / nbytes if nbytes > 0 else 0.0
        share_lat = 100.0 * lat[idx].sum() / lat_total if lat_total > 0 else np.nan
        share_e = 100.0 * energy.loc[idx, "e_total_j"].sum() / e_total if e_total > 0 else np.nan
        fused_set = {j for n in prof.loc[idx, "node"] for j in fused_by.get(n, ())}
        neigh = {s for i in idx for s in succs[i] if classes[s] in fusable}
        fused, n_fusable = len(fused_set), len(fused_set | neigh)
        by_lat = prof.loc[idx].groupby("bound")["latency_us"].sum()
        bound = by_lat.idxmax() if len(by_lat) and by_lat.max() > 0 else prof.loc[idx, "bound"].mode().iat[0]
        ok = {"share": (share_lat >= min_share) or (share_e >= min_share), "regular": cls in regular,
              "ai": ai >= min_ai, "fusable": n_fusable > 0}
        reason = [f"latency {share_lat:.1f}% / energy {share_e:.1f}% {'>=' if ok['share'] else '<'} {min_share:g}%",
                  f"{'regular' if ok['regular'] else 'irregular'} ({cls})",
                  f"AI {ai:.1f} FLOP/B {'>=' if ok['ai'] else '<'} {min_ai:g}",
                  f"{n_fusable} fusable neighbours" + (f" ({fused} already fused by ORT)" if fused else "")]
        slower = speedup is not None and s_k(speedup, cls) <= 1
        if slower:
            reason.append(f"the target is not faster (S_k {s_k(speedup, cls):g})")
        rows.append({"kernel": cls, "ops": len(idx), "pct_latency": share_lat, "pct_energy": share_e,
                     "latency_us": lat[idx].sum(), "e_total_j": energy.loc[idx, "e_total_j"].sum(),
                     "flops": flops, "bytes": nbytes, "ai_flop_per_byte": ai, "bound": bound,
                     "regular": ok["regular"], "fusable_neighbours": n_fusable,
                     "selected": all(ok[r] for r in require) and not slower, "reason": "; ".join(reason),
                     "energy_method": "component model"})
    df = pd.DataFrame(rows).sort_values("pct_latency" if lat_total > 0 else "pct_energy", ascending=False)
    return df.reset_index(drop=True)


def amdahl_table(kernels: pd.DataFrame, speedup: dict, gain: dict, t_total_us: float, e_total_j: float) -> pd.DataFrame:
    scenarios = [(k, [k]) for k in kernels["kernel"]]
    chosen = list(kernels.loc[kernels["selected"], "kernel"])
    if len(chosen) > 1:
        scenarios.append(("all selected", chosen))
    rows = []
    for name, ks in scenarios:
        sub = kernels.set_index("kernel").loc[ks]
        fl = list(sub["pct_latency"].fillna(0.0) / 100.0)
        fe = list(sub["pct_energy"].fillna(0.0) / 100.0)
        sl = [s_k(speedup, k) for k in ks]
        se = [s_k(gain, k) for k in ks]
        s_lat, s_e = amdahl_multi(fl, sl), amdahl_multi(fe, se)
        rows.append({"scenario": name, "kernels": "+".join(ks), "f_latency": sum(fl),
                     "s_k_latency": sl[0] if len(ks) == 1 else np.nan, "s_total_latency": s_lat,
                     "latency_before_us": t_total_us, "latency_after_us": t_total_us / s_lat if t_total_us else np.nan,
                     "f_energy": sum(fe), "s_k_energy": se[0] if len(ks) == 1 else np.nan, "s_total_energy": s_e,
                     "energy_before_j": e_total_j, "energy_after_j": e_total_j / s_e,
                     "energy_method": "component model"})
    return pd.DataFrame(rows)
