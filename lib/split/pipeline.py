"""The best K-part pipeline over a chain of devices (configs/system.yaml: devices A, B, C, ... in order, a link
between each neighbour), in 07's topological order: device k runs the k-th slice of the order, and the tensors
crossing the cut between slice k and k + 1 (07's Comm(b) at that boundary, pass-through tensors included: a
tensor skipping a device travels through it) cross link k. Every device gets at least one node.

- latency-optimal: minimise sum of stage times + link times, by dynamic programming over the boundary
  positions with prefix minima: O(K x nodes);
- throughput-optimal: minimise the slowest stage, link stages included (the pipelined period), by bisection
  on the period with a linear feasibility sweep per device (the furthest reachable start of each slice is the
  best: times are non-negative), then the exact period of the partition found.
"""
from __future__ import annotations

import numpy as np

BISECTIONS = 64


def link_times(n_cut: np.ndarray, comm: np.ndarray, link: dict) -> np.ndarray:
    """Per boundary, the link's time in us: one latency per cut tensor + bytes / bandwidth (07's model)."""
    return n_cut * float(link["latency_us"]) + comm / float(link["bandwidth_bytes_per_s"]) * 1e6


def last_real(real: np.ndarray | None, n: int) -> np.ndarray:
    """Per position e, the last real op at or before e (-1: none): slice e' + 1..e holds a real op iff
    last_real[e] > e'. Constant-only ops travel with their consumers: a slice of them alone runs nothing."""
    idx = np.arange(n)
    return idx if real is None else np.maximum.accumulate(np.where(real, idx, -1))


def latency_optimal(times: list[np.ndarray], links: list[np.ndarray], real: np.ndarray | None = None) -> list[int] | None:
    """Boundaries e_1 < ... < e_{K-1} (cut after node e) minimising sum of stage and link times, each slice
    holding a real op."""
    k_dev, n = len(times), len(times[0])
    lr = last_real(real, n)
    if n < k_dev or (real is not None and real.sum() < k_dev):
        return None
    pref = [np.concatenate([[0.0], np.cumsum(t)]) for t in times]
    f = np.where(lr[:n - 1] >= 0, pref[0][1:n] + links[0], np.inf)     # device 1 runs 0..e, link 1 at e
    back = []
    for k in range(1, k_dev - 1):
        best, arg = _prefix_min_before(f - pref[k][1:n], lr[:n - 1])
        f = best + pref[k][1:n] + links[k]
        back.append(arg)
    total = f - pref[-1][1:n] + pref[-1][n]
    total = np.where(np.arange(n - 1) <= lr[n - 1] - 1, total, np.inf)
    e = int(np.argmin(np.where(np.isfinite(total), total, np.inf)))
    if not np.isfinite(total[e]):
        return None
    bounds = [e]
    for arg in reversed(back):
        e = int(arg[e])
        bounds.append(e)
    return bounds[::-1]


def _prefix_min_before(g: np.ndarray, lr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each e, min(g[0..lr[e] - 1]) and its (latest) position; inf and -1 when that range is empty."""
    best = np.minimum.accumulate(g)
    pos = np.maximum.accumulate(np.where(g == best, np.arange(len(g)), -1))
    j = lr - 1
    ok = j >= 0
    return np.where(ok, best[np.maximum(j, 0)], np.inf), np.where(ok, pos[np.maximum(j, 0)], -1)


def _feasible(pref: list[np.ndarray], links: list[np.ndarray], tau: float, lr: np.ndarray) -> list[int] | None:
    """Boundaries whose every stage and link time is <= tau (each slice holding a real op), or None."""
    k_dev, n = len(pref), len(pref[0]) - 1
    idx = np.arange(n - 1)
    reach = np.zeros(n - 1, bool)      # positions e where slice k may end
    preds = []
    for k in range(k_dev - 1):
        if k == 0:
            last = np.where(lr[:n - 1] >= 0, -1, -2)
        else:
            acc = np.maximum.accumulate(np.where(reach, idx, -2))
            j = lr[:n - 1] - 1
            last = np.where(j >= 0, acc[np.maximum(j, 0)], -2)     # the latest reachable end before e's last real op
        start = pref[k][np.maximum(last, -1) + 1]
        reach = (last >= -1) & (pref[k][idx + 1] - start <= tau) & (links[k] <= tau)
        preds.append(last)
    ends = np.flatnonzero(reach & (idx <= lr[n - 1] - 1))
    if not len(ends) or pref[-1][n] - pref[-1][ends[-1] + 1] > tau:
        return None
    e = int(ends[-1])
    bounds = [e]
    for last in reversed(preds[1:]):
        e = int(last[e])
        bounds.append(e)
    return bounds[::-1]


def throughput_optimal(times: list[np.ndarray], links: list[np.ndarray], start: list[int],
                       real: np.ndarray | None = None) -> list[int] | None:
    """Boundaries minimising the pipelined period max(stage times, link times); `start`: any valid partition
    (its period bounds the search)."""
    lr = last_real(real, len(times[0]))
    pref = [np.concatenate([[0.0], np.cumsum(t)]) for t in times]
    hi = figures(times, links, start)["period_us"]
    best, lo = start, 0.0
    for _ in range(BISECTIONS):
        mid = (lo + hi) / 2
        found = _feasible(pref, links, mid, lr)
        if found is None:
            lo = mid
        else:
            best, hi = found, mid
        if hi - lo <= 1e-12 * max(hi, 1e-30):
            break
    return best


def figures(times: list[np.ndarray], links: list[np.ndarray], bounds: list[int]) -> dict:
    """Per stage time, per link time, the end-to-end latency and the pipelined period of a partition."""
    edges = [-1, *bounds, len(times[0]) - 1]
    stage = [float(np.sum(t[edges[k] + 1:edges[k + 1] + 1])) for k, t in enumerate(times)]
    link = [float(lk[b]) for lk, b in zip(links, bounds)]
    period = max(stage + link)
    return {"stage_us": stage, "link_us": link, "est_latency_us": sum(stage) + sum(link), "period_us": period,
            "throughput_per_s": 1e6 / period if period > 0 else None}


def best_pipelines(times: list[np.ndarray], n_cut: np.ndarray, comm: np.ndarray, chain_links: list[dict],
                   powers: list[float], names: list[str], real: np.ndarray | None = None) -> dict | None:
    """split_summary.json's `pipeline`: the latency-optimal and throughput-optimal K-part pipelines."""
    links = [link_times(n_cut, comm, lk) for lk in chain_links]
    lat = latency_optimal(times, links, real)
    if lat is None:
        return None
    thr = throughput_optimal(times, links, lat, real)
    out = {"devices": names, "links": [lk.get("name", "") for lk in chain_links]}
    for pid, bounds in (("latency", lat), ("throughput", thr)):
        fig = figures(times, links, bounds)
        energy = sum(p * s for p, s in zip(powers, fig["stage_us"])) * 1e-6 + \
            sum(float(comm[b]) * float(lk["energy_per_byte_j"]) for b, lk in zip(bounds, chain_links))
        out[pid] = {"boundaries": bounds, "comm_bytes": [float(comm[b]) for b in bounds],
                    "n_cut_tensors": [int(n_cut[b]) for b in bounds], **fig, "est_energy_j": energy}
    out["single_device_us"] = {nm: float(np.sum(t)) for nm, t in zip(names, times)}
    best_single = min(out["single_device_us"].values())
    for pid in ("latency", "throughput"):       # > 1: the pipeline beats the fastest single device of the chain
        q = out[pid]
        q["latency_ratio_vs_best_single"] = best_single / q["est_latency_us"] if q["est_latency_us"] > 0 else None
        q["throughput_ratio_vs_best_single"] = best_single / q["period_us"] if q["period_us"] > 0 else None
    return out
