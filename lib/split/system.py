"""The split system (configs/system.yaml): devices A and B, the link, constraints, ranking; optionally more
devices after B (C, D, ... in order) with `chain_links`, one link between each further pair of neighbours."""
from __future__ import annotations

from pathlib import Path

from lib.artifacts import REPO, load_yaml, number
from lib.errors import StageError


SECTIONS = ("devices", "link", "chain_links", "constraints", "dag", "ranking")
CONSTRAINTS = ("max_latency_us", "max_energy_j", "rate_hz", "max_peak_act_left_bytes", "max_peak_act_right_bytes")


def load_system(path: str | Path) -> dict:
    s = load_yaml(path, "system config")
    known(s, SECTIONS, f"system config {path}")      # a misspelt constraint was dropped, silently
    devices = s.get("devices") if isinstance(s.get("devices"), dict) else {}
    for d in ("A", "B", *devices):
        dev = devices.get(d)
        if not isinstance(dev, dict):
            raise StageError(f"system config {path}: devices.{d} is missing")
        for k in ("peak_flops_per_s", "mem_bw_bytes_per_s", "power_w"):
            dev[k] = number(dev.get(k), f"system config {path}: devices.{d}.{k}")
        source = dev.get("source", "roofline")
        if source not in ("measured", "roofline", "model"):
            raise StageError(f"system config {path}: devices.{d}.source must be one of measured, roofline, model, "
                             f"got {source!r}")
        if source == "measured" and d != "A":
            # stage 01 profiles this host only: another device given its times is a figure of another device
            raise StageError(f"system config {path}: devices.{d}.source is measured, but only device A (this host, "
                             f"which stage 01 profiles) has measured times: use model (with its latency_model) or "
                             f"roofline")
        lm = dev.get("latency_model")
        if lm is not None and not (Path(lm) if Path(lm).is_absolute() else REPO / lm).exists():
            raise StageError(f"system config {path}: devices.{d}.latency_model {lm} not found (make calibrate "
                             f"writes configs/latency_model.yaml)")
    _check_link(s.get("link"), path, "link")
    keys = chain(s)[0]
    extra = s.get("chain_links") or []
    if not isinstance(extra, list) or len(extra) != len(keys) - 2:
        raise StageError(f"system config {path}: chain_links must list one link per pair of neighbours after A, B "
                         f"({len(keys) - 2} for devices {keys}), got {extra!r}")
    for i, lk in enumerate(extra):
        _check_link(lk, path, f"chain_links[{i}]")
        if (lk.get("from"), lk.get("to")) != (keys[i + 1], keys[i + 2]):
            raise StageError(f"system config {path}: chain_links[{i}] must link {keys[i + 1]} to {keys[i + 2]} "
                             f"(from/to), got {lk.get('from')!r} to {lk.get('to')!r}")
    _check_constraints_and_ranking(s, path)
    if isinstance(s.get("dag"), dict):
        known(s["dag"], ("max_nodes",), f"system config {path}: dag")
    limit = (s.get("dag") or {}).get("max_nodes") if isinstance(s.get("dag") or {}, dict) else "?"
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 2):
        raise StageError(f"system config {path}: dag.max_nodes must be an integer >= 2 or null, got {limit!r}")
    return s


def known(d: dict, keys, where: str) -> None:
    """Refuse keys a config section does not have (each one read nowhere: max_latency_uss pruned nothing)."""
    bad = sorted(set(d) - set(keys))
    if bad:
        raise StageError(f"{where}: unknown key{'s' if len(bad) > 1 else ''} {', '.join(bad)} (known: "
                         f"{', '.join(keys)})")


def _check_link(link, path, where: str) -> None:
    if not isinstance(link, dict):
        raise StageError(f"system config {path}: {where} is missing")
    for k in ("bandwidth_bytes_per_s", "latency_us", "energy_per_byte_j"):
        link[k] = number(link.get(k), f"system config {path}: {where}.{k}", zero=k != "bandwidth_bytes_per_s")


RANKING_BY = ("comm", "score", "latency")


def _check_constraints_and_ranking(s: dict, path) -> None:
    """The optional constraints (null or a number) and the ranking keys, as 07 reads them."""
    where = f"system config {path}:"
    c = s.get("constraints") or {}
    if not isinstance(c, dict):
        raise StageError(f"{where} constraints must be a mapping, got {c!r}")
    known(c, CONSTRAINTS, f"{where} constraints")
    for k, v in c.items():
        if v is not None:
            c[k] = number(v, f"{where} constraints.{k}")
    r = s.get("ranking") or {}
    if not isinstance(r, dict):
        raise StageError(f"{where} ranking must be a mapping, got {r!r}")
    known(r, (*RANKING_NUMBERS, "by", "strict", "weights"), f"{where} ranking")
    check_ranking(r, lambda k: f"{where} ranking.{k}")


RANKING_NUMBERS = {"top_k": {"integer": True}, "dedup_window": {"integer": True, "zero": True},
                   "skip_block_min_span": {"integer": True}, "min_compute_share": {"zero": True, "high": 0.5},
                   "skip_block_max_share": {"zero": True, "high": 1.0}}


def check_ranking(r: dict, label) -> None:
    """The ranking keys, in place (system.yaml's, or with 07's flags over them); label(key): how an error names
    the key."""
    for k, kw in RANKING_NUMBERS.items():
        if r.get(k) is not None:
            r[k] = number(r[k], label(k), **kw)
    if r.get("by", "score") not in RANKING_BY:
        raise StageError(f"{label('by')} must be one of {', '.join(RANKING_BY)}, got {r.get('by')!r}")
    if not isinstance(r.get("strict", False), bool):
        raise StageError(f"{label('strict')} must be true or false, got {r.get('strict')!r}")
    w = r.get("weights") or {}
    if not isinstance(w, dict):
        raise StageError(f"{label('weights')} must map metrics to numbers, got {w!r}")
    for k, v in w.items():
        w[k] = number(v, f"{label('weights')}.{k}", zero=True)


def chain(system: dict) -> tuple[list[str], list[dict]]:
    """The devices in chain order (A, B, then the others as listed) and the links between neighbours (`link`
    between A and B first)."""
    keys = ["A", "B", *(k for k in system["devices"] if k not in ("A", "B"))]
    return keys, [system["link"], *(system.get("chain_links") or [])]
