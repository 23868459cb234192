"""The host's speed now against its speed during `make calibrate`, from a few training models measured again.

On a shared VM the same models run 10-20% faster or slower from one minute to the next (the 37 training models'
median moved from 0.80x to 1.10x of make calibrate's figures within 5 minutes on an Intel Xeon VM), more than the
kernel model's own error. A prediction is for the host as make calibrate measured it; stage 01 measures a few
training models (the reference) between the sessions of the user's model, and stage 03 scales the kernel model's
prediction by the median of their now / calibration ratios: the prediction for the host of that minute. Only
other models are measured, never the user's (its own profile never enters its prediction).

The reference: the median training model of each of REFERENCE_FAMILIES (resnet18, mobilenet_v2, bert_small and
gpt2_small or gpt2_s64, whichever ran faster in that calibration: 32-38 ms of runs together on the Intel Xeon VM),
written by make calibrate into the latency model file (kernel_model.host_reference) with the session latency it
measured.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from lib.artifacts import CONFIGS, REPO, load_yaml
from lib.errors import StageError
from lib.latency import host_probe
from lib.latency.profiling import profile_model
from lib.latency.training import training_inputs
from lib.latency.training_models import build

# The float32 conv and transformer families, each by a model of its median size: the host's speed moves
# differently for small and large models, and the fastest model of the 4 fastest families (gru2, keras_mbv2,
# yolo_tiny, mnasnet0_5: 0.4-2.4 ms) told 14 other training models' speed within 10% no more often than no
# reference at all, 12-16% fast (bench/host_reference.py).
REFERENCE_FAMILIES = ("cnn_standard", "cnn_depthwise", "hf_encoder", "hf_decoder")


def section(records: list[dict], threads: int, train_dir: Path) -> dict:
    """The latency model file's kernel_model.host_reference from make calibrate's training records: the median
    model (the lower of two) of each of REFERENCE_FAMILIES (without any of them: of the first 4 families by
    name), with the session latency calibration measured."""
    sessions = [r for r in records if r.get("session_us")]
    present = {r["family"] for r in sessions}
    picked = []
    for fam in [f for f in REFERENCE_FAMILIES if f in present] or sorted(present)[:len(REFERENCE_FAMILIES)]:
        ranked = sorted((r for r in sessions if r["family"] == fam), key=lambda r: r["session_us"])
        r = ranked[(len(ranked) - 1) // 2]
        path = (Path(train_dir) / f"{r['model']}.onnx").resolve()
        picked.append({"model": r["model"], "path": str(path.relative_to(REPO) if path.is_relative_to(REPO) else path),
                       "session_us": round(float(r["session_us"]), 1)})
    return {"threads": threads, "models": picked}


SPELL = 0.10    # the training models' median run this much off the previous calibration's: a spell of the host


def against_previous(records: list[dict], latency_model_file) -> str:
    """'' or a one-line note when make calibrate's training models ran more than SPELL slower (or faster) than the
    previous calibration of this CPU measured its host reference models: a calibration taken in a slow spell of a
    shared host predicts high. One was measured 17-36% slow (its torch matmul at 0.4x): the 19 unseen models were
    then predicted +13.5% (median |error|) against 9.1% with the one before, small-kernel models up to +51%."""
    path = Path(latency_model_file)
    before = {m["model"]: float(m["session_us"]) for m in _section(path).get("models", [])}
    if not before or latency_model_note(path):       # no previous calibration, or another CPU's
        return ""
    now = {r["model"]: float(r["session_us"]) for r in records if r.get("session_us")}
    ratios = [now[m] / before[m] for m in before if m in now]
    f = float(np.median(ratios)) if ratios else 1.0
    if abs(f - 1) <= SPELL:
        return ""
    how = ("a slow spell of this shared host: its predictions will run high (01's host speed factor takes out the "
           "level, not the small kernels' share); re-run make calibrate when the host is quiet" if f > 1 else
           "the previous calibration was taken in a slow spell")
    return (f"the training models ran {100 * (f - 1):+.0f}% against the previous calibration of this CPU (median of "
            f"its {len(ratios)} host reference models): {how}")


def _section(path: Path) -> dict:
    doc = (load_yaml(path, "latency model").get("kernel_model") or {}) if path.exists() else {}
    return doc.get("host_reference") or {}


def load(latency_model_file) -> tuple[dict | None, str]:
    """(the latency model's host reference with paths resolved, '') or (None, why there is none)."""
    path = Path(latency_model_file)
    ref = _section(path)
    if not ref.get("models"):
        return None, f"no host reference in {path} (make calibrate writes one)"
    files = _files(ref)
    missing = [str(p) for p in files.values() if not p.exists()]
    if missing:
        return None, f"host reference models missing ({', '.join(missing[:2])}): make calibrate builds them"
    return {**ref, "files": files, "latency_model": str(path)}, ""


def build_missing(latency_model_file) -> list[str]:
    """Build the latency model's host reference models that are not there (locally, random weights, as make
    calibrate built them): a fresh clone's `make all` measured no host reference and predicted for the calibration
    host's speed (ResNet-50 +20% on a host running fast). Returns the models built."""
    built = []
    for model, path in _files(_section(Path(latency_model_file))).items():
        if path.exists():
            continue
        print(f"building the host reference model {model} (once: 01 measures it beside your model) -> {path}",
              flush=True)
        try:
            build(model, path.parent)
            built.append(model)
        except Exception as e:  # noqa: BLE001 - the analysis goes on: 01 then says the reference is missing
            print(f"note: could not build {model} ({type(e).__name__}: {str(e)[:200]}): 01 measures no host "
                  f"reference", flush=True)
    return built


def _files(ref: dict) -> dict[str, Path]:
    """{model: its file} of a host reference section (paths relative to the repository, or absolute)."""
    return {m["model"]: REPO / m["path"] for m in ref.get("models", [])}


def add_arguments(p) -> None:
    """Stage 01's options for the host reference."""
    p.add_argument("--latency-model", default=str(CONFIGS / "latency_model.yaml"), metavar="YAML",
                   help="latency model whose host reference (a few training models) is measured after each session, "
                        "for stage 03 (default: %(default)s)")
    p.add_argument("--no-host-reference", action="store_true",
                   help="do not measure the host reference (stage 03 then predicts for the calibration host's speed)")


def wanted(provider: str, off: bool, latency_model_file) -> tuple[dict | None, str]:
    """Stage 01's reference: (load()'s, '') on the cpu provider unless turned off, else (None, why not)."""
    if off:
        return None, "host reference not measured (--no-host-reference)"
    if provider != "cpu":
        return None, f"host reference not measured on the {provider} provider (it is this host's CPU)"
    return load(latency_model_file)


def prepare(ref: dict) -> dict:
    """{model: (path, feeds)}: each reference model fed as make calibrate fed it."""
    return {m: (p, training_inputs(p)[1]) for m, p in ref["files"].items()}


def measure(ref: dict, ready: dict) -> dict[str, float]:
    """One session of each reference model, as make calibrate profiled it (3 warm-up runs, 10 measured, the
    median): {model: session latency, us}."""
    out = {}
    for m, (p, feeds) in ready.items():
        try:
            wall = profile_model(str(p), feeds, runs=10, warmup=3, threads=int(ref.get("threads") or 0),
                                 progress=False)["wall_us"]
        except StageError:
            raise StageError(f"host reference model {p} did not run: delete it and re-run make calibrate, or pass "
                             f"--no-host-reference") from None
        out[m] = float(np.median(wall))
    return out


def summary(ref: dict | None, rounds: list[dict[str, float]], why: str = "") -> dict:
    """profile_meta.json's `host_reference`: per model the calibration's and today's latencies, and the factor
    (the median over the models of their median now / calibration); without a reference, {"note": why}."""
    if ref is None:
        return {"note": why}
    models = {m["model"]: {"calibration_us": float(m["session_us"]), "measured_us": [r[m["model"]] for r in rounds]}
              for m in ref["models"]}
    ratios = [np.median(v["measured_us"]) / v["calibration_us"] for v in models.values()]
    return {"latency_model": ref["latency_model"], "models": models, "factor": float(np.median(ratios))}


def factor(profile_meta: dict | None, latency_model_file) -> tuple[float | None, str]:
    """(the host speed factor 01 measured, '') when it was measured against this latency model's calibration,
    else (None, why not)."""
    got = (profile_meta or {}).get("host_reference") or {}
    if "factor" not in got:
        return None, f"01 measured no host reference: {got.get('note', 'a profile from before it did')}"
    calibrated = {m["model"]: float(m["session_us"]) for m in _section(Path(latency_model_file)).get("models", [])}
    if calibrated != {m: v["calibration_us"] for m, v in got["models"].items()}:
        return None, (f"01's host reference was measured against another calibration than {latency_model_file}'s "
                      f"(re-run 01)")
    return float(got["factor"]), ""


def cpu_here() -> dict:
    """This CPU as make calibrate records it (model name, cores, cache sizes): stage 01 writes it beside a profile."""
    c = host_probe.cpu_description()
    return {"model": c["model"], "cores": c["cores"], "caches_bytes": host_probe.cache_sizes()}


def calibrated_cpu(latency_model_file) -> dict | None:
    """The CPU make calibrate measured for latency_model_file (as cpu_here() says it), None if it does not say."""
    path = Path(latency_model_file)
    doc = load_yaml(path, "latency model") if path.exists() else {}
    h = doc.get("host") or {}
    if not h.get("cpu"):
        return None
    return {"model": str(h["cpu"]), "cores": h.get("cores"),
            "caches_bytes": ((doc.get("kernel_model") or {}).get("host") or {}).get("caches_bytes")}


def host_file_cpu(host: dict) -> dict:
    """The CPU a host file (configs/host.yaml, loaded) was calibrated on, as cpu_here() says it."""
    return {"model": host.get("cpu_model"), "cores": host.get("cpu_cores"), "caches_bytes": host.get("caches_bytes")}


def other_cpu(calibrated: dict | None, what: str, ran: dict | None = None) -> str:
    """'' when the CPU that ran the model (01's `cpu`, else this one) is the one `what` was calibrated on (model
    name, cores, cache sizes), else a one-line note. A calibration holds for its CPU: an Intel Xeon's latency
    model put ResNet-50 at +80% on an AMD EPYC, and its host file's bounds were not bounds there (12 nodes ran
    below them); the host speed factor scales a prediction, it does not learn another CPU's kernels."""
    where = "the model ran on" if ran else "this host is"
    ran = ran or cpu_here()
    differ = [k for k in ("model", "cores", "caches_bytes") if (calibrated or {}).get(k) is not None
              and ran.get(k) is not None and calibrated[k] != ran[k]]
    if not differ:
        return ""
    def name(c):
        return f"{c.get('cores')}-core {c.get('model')}"
    return (f"{what} was calibrated on a {name(calibrated)}, {where} a {name(ran)} (differing: "
            f"{', '.join(differ)}): its figures are the calibration CPU's (run make calibrate on this one)")


def latency_model_note(latency_model_file, ran: dict | None = None) -> str:
    """other_cpu() for a latency model file: '' on the CPU it was calibrated on, else the one-line note."""
    return other_cpu(calibrated_cpu(latency_model_file), str(latency_model_file), ran)


if __name__ == "__main__":      # make all, before stage 01: python -m lib.latency.host_reference LATENCY_MODEL
    import sys
    build_missing(sys.argv[1])
