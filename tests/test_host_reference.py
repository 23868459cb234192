"""Stage 01's sessions and host reference, and stage 03's prediction at the host speed 01 measured
(lib/latency/host_reference.py)."""
import json

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import latency_model_copy, run_stage, small_cnn
from lib.artifacts import CONFIGS
from lib.latency import host_reference
from lib.latency.profiling import merge_sessions


def test_the_reference_is_the_median_model_of_the_conv_and_transformer_families(tmp_path):
    def rec(model, family, ms):
        return {"model": model, "family": family, "session_us": ms and ms * 1e3}
    recs = [rec("r18", "cnn_standard", 12.0), rec("r34", "cnn_standard", 15.0), rec("gnet", "cnn_standard", 11.0),
            rec("mbv2", "cnn_depthwise", 4.0), rec("mnas", "cnn_depthwise", 2.0), rec("bert", "hf_encoder", 7.0),
            rec("gru", "recurrent", 0.4), rec("yolo", "detection", 1.1), rec("micro", "micro", None)]
    sec = host_reference.section(recs, 0, tmp_path)
    # the median of 3 (11, 12, 15 ms), the lower of 2 (2, 4 ms), the only one; no hf_decoder; never the fastest
    assert [m["model"] for m in sec["models"]] == ["r18", "mnas", "bert"]
    assert sec["models"][0] == {"model": "r18", "path": str((tmp_path / "r18.onnx").resolve()), "session_us": 12000.0}
    # records of none of those families: the first 4 families by name
    other = [rec("a1", "A", 1.0), rec("a2", "A", 3.0), rec("a3", "A", 2.0), rec("b1", "B", 5.0), rec("c1", "C", 1.0),
             rec("d1", "D", 1.0), rec("e1", "E", 1.0)]
    assert [m["model"] for m in host_reference.section(other, 0, tmp_path)["models"]] == ["a3", "b1", "c1", "d1"]


def test_sessions_merge_to_each_nodes_median_and_the_widest_spread():
    def table(lat, p10, p90, per_run):
        return (pd.DataFrame({"node": ["a", "b"], "latency_us": lat, "p10_us": p10, "p90_us": p90, "runs": [10, 10]}),
                {"kernel_time_per_run_us": {"median": per_run}, "kernels": 2})
    df, att = merge_sessions([table([10.0, 1.0], [9.0, 0.5], [12.0, 2.0], 11.0),
                              table([30.0, 2.0], [25.0, 1.5], [40.0, 3.0], 32.0),
                              table([12.0, 4.0], [11.0, 3.0], [14.0, 6.0], 16.0)])
    assert df["latency_us"].tolist() == [12.0, 2.0]
    assert df["p10_us"].tolist() == [9.0, 0.5] and df["p90_us"].tolist() == [40.0, 6.0]
    assert df["runs"].tolist() == [30, 30] and att["kernel_time_per_run_us"]["median"] == 16.0
    assert att["kernels"] == 2


@pytest.fixture(scope="module")
def referenced(tmp_path_factory):
    """A latency model whose host reference is one small CNN calibrated at 1 us (so the factor is its time now),
    and small_cnn profiled against it in 2 sessions, then costed and merged."""
    tmp = tmp_path_factory.mktemp("hostref")
    lm = latency_model_copy(tmp)
    doc = yaml.safe_load(lm.read_text())
    ref = tmp / "ref.onnx"
    small_cnn(ref)
    doc["kernel_model"]["host_reference"] = {"threads": 0, "models": [
        {"model": "ref", "path": str(ref), "session_us": 1.0}]}
    lm.write_text(yaml.safe_dump(doc))
    small_cnn(tmp / "m.onnx")
    rdir = tmp / "r"
    for stage, extra in (("01_profile_onnx.py", ["--sessions", 2, "--runs", 4, "--latency-model", lm]),
                         ("02_shapes_flops_bytes.py", []), ("03_merge_profile_metrics.py", ["--latency-model", lm])):
        r = run_stage(stage, "--model", tmp / "m.onnx", "--results", rdir, *extra)
        assert r.returncode == 0, f"{stage}: {r.stderr}"
    return tmp, lm, rdir, r.stdout


def test_01_measures_the_reference_after_each_session_and_03_scales_the_prediction(referenced):
    tmp, lm, rdir, out = referenced
    prof = json.loads((rdir / "profile_meta.json").read_text())
    assert prof["sessions"] == 2 and len(prof["session_medians_us"]) == 2 and prof["session_latency"]["runs"] == 8
    ref = prof["host_reference"]
    now = ref["models"]["ref"]["measured_us"]
    assert len(now) == 2 and ref["factor"] == pytest.approx(np.median(now) / 1.0)
    lat = pd.read_csv(rdir / "ops_latency.csv")
    assert (lat.loc[lat["attribution"] == "kernel", "runs"] == 8).all()
    pred = json.loads((rdir / "merge_meta.json").read_text())["prediction"]
    assert pred["predicted_by"] == "kernel model" and pred["host_speed_factor"] == pytest.approx(ref["factor"])
    assert pred["predicted_latency_us"] == pytest.approx(pred["calibration_host_latency_us"] * ref["factor"])
    assert pred["error"] == pytest.approx(pred["predicted_latency_us"] / prof["session_latency"]["median_us"] - 1)
    assert "at the host's speed 01 measured" in out


def test_the_sweep_keeps_the_factor_and_the_prediction_at_the_calibration_speed(referenced):
    """make sweep's row (lib/latency/sweep.py) carries the host speed factor 01 measured and the kernel model's
    prediction before it: the bench can tell the kernel model's error from the factor's."""
    from lib.host import load_host
    from lib.latency.kernel_model import load_kernel_model
    from lib.latency.sweep import kernel_model_columns
    tmp, lm, rdir, _ = referenced
    c = {"predicted_us": 1.0, "predicted_kernel_us": 0.9}
    km, host = load_kernel_model(lm), load_host(CONFIGS / "host.yaml")
    kernel_model_columns(c, km, host, rdir, tmp / "m.onnx", [], None, None, lm)
    factor = json.loads((rdir / "profile_meta.json").read_text())["host_reference"]["factor"]
    assert c["predicted_by"] == "kernel model" and c["host_speed_factor"] == pytest.approx(factor)
    # the kernel sum is the kernel model's too (it was the baseline's 0.9 beside the kernel model's session)
    from lib.latency.predict import kernel_prediction, optimized_graph
    from lib.onnx.loading import analysed
    kp = kernel_prediction(km, analysed(rdir, tmp / "m.onnx")[0].graph, pd.read_csv(rdir / "ops_metrics.csv"),
                           optimized_graph(tmp / "m.onnx", rdir), host)
    assert c["predicted_kernel_us"] == pytest.approx(kp["per_kernel"]["pred_us"].sum() * factor)
    assert c["predicted_us"] == pytest.approx(c["calibration_host_us"] * factor) and c["baseline_us"] == 1.0
    c = {"predicted_us": 1.0}      # no kernel model: the baseline, and neither figure
    kernel_model_columns(c, None, {}, rdir, tmp / "m.onnx", [], None, None, lm)
    assert c["predicted_by"] == "baseline" and np.isnan(c["calibration_host_us"]) and np.isnan(c["host_speed_factor"])


def test_03_does_not_scale_by_a_reference_of_another_calibration(referenced):
    """03 run with a latency model whose reference is not the one 01 measured: the calibration host's speed."""
    tmp, lm, rdir, _ = referenced
    (tmp / "other").mkdir()
    other = latency_model_copy(tmp / "other")
    r = run_stage("03_merge_profile_metrics.py", "--model", tmp / "m.onnx", "--results", rdir,
                  "--latency-model", other)
    assert r.returncode == 0, r.stderr
    pred = json.loads((rdir / "merge_meta.json").read_text())["prediction"]
    assert pred["host_speed_factor"] is None and "another calibration" in pred["host_speed_note"]
    assert "calibration_host_latency_us" not in pred
    assert "predicted at the calibration host's speed" in r.stdout


def test_a_calibration_holds_for_its_cpu_and_says_so_on_another():
    """The CPU make calibrate measured against the one that ran the model: model name, cores and cache sizes."""
    cal = {"model": "AMD EPYC", "cores": 2, "caches_bytes": {"L1": 32768, "L2": 524288, "L3": 33554432}}
    assert host_reference.other_cpu(cal, "lm.yaml", dict(cal)) == ""
    assert host_reference.other_cpu(None, "lm.yaml", cal) == ""         # a file that does not say: nothing to tell
    xeon = {"model": "Intel(R) Xeon(R) Processor", "cores": 2, "caches_bytes": {"L1": 49152, "L2": 2097152,
                                                                               "L3": 272629760}}
    assert host_reference.other_cpu(xeon, "lm.yaml", cal) == (
        "lm.yaml was calibrated on a 2-core Intel(R) Xeon(R) Processor, the model ran on a 2-core AMD EPYC (differing: "
        "model, caches_bytes): its figures are the calibration CPU's (run make calibrate on this one)")
    assert "(differing: cores)" in host_reference.other_cpu(cal, "lm.yaml", {**cal, "cores": 8})
    assert "(differing: caches_bytes)" in host_reference.other_cpu(
        cal, "lm.yaml", {**cal, "caches_bytes": {**cal["caches_bytes"], "L3": 16777216}})
    here = host_reference.cpu_here()
    assert here["cores"] >= 1 and here["model"] and host_reference.other_cpu(here, "lm.yaml") == ""


def test_03_07_and_the_report_say_a_latency_model_or_host_file_is_another_cpus(referenced, tmp_path):
    """01 writes the CPU it ran on; 03 against a latency model calibrated on another CPU says so (a warning and
    merge_meta's prediction.other_cpu_note) and with one of this CPU says nothing."""
    tmp, lm, rdir, _ = referenced
    here = json.loads((rdir / "profile_meta.json").read_text())["cpu"]
    assert here == host_reference.cpu_here()
    for name, cpu in (("same", here), ("other", {**here, "model": "Other CPU 9000", "cores": 64})):
        (tmp_path / name).mkdir()
        other = latency_model_copy(tmp_path / name)
        doc = yaml.safe_load(other.read_text())
        doc["host"].update(cpu=cpu["model"], cores=cpu["cores"])
        doc["kernel_model"]["host"]["caches_bytes"] = cpu["caches_bytes"]
        doc["kernel_model"]["host_reference"] = yaml.safe_load(lm.read_text())["kernel_model"]["host_reference"]
        other.write_text(yaml.safe_dump(doc))
        r = run_stage("03_merge_profile_metrics.py", "--model", tmp / "m.onnx", "--results", rdir,
                      "--latency-model", other)
        assert r.returncode == 0, r.stderr
        pred = json.loads((rdir / "merge_meta.json").read_text())["prediction"]
        if name == "same":
            assert pred["other_cpu_note"] == "" and "calibrated on" not in r.stdout
        else:
            assert pred["other_cpu_note"] == (
                f"{other} was calibrated on a 64-core Other CPU 9000, the model ran on a {here['cores']}-core "
                f"{here['model']} (differing: model, cores): its figures are the calibration CPU's (run make calibrate "
                f"on this one)")
            assert f"warning: {pred['other_cpu_note']}" in r.stdout
            # the host speed factor still applies (it was measured against this calibration's reference)
            assert pred["host_speed_factor"] is not None
    # host.yaml of another CPU: said even when no node contradicts its bounds (they may still not bound this CPU)
    host = yaml.safe_load((CONFIGS / "host.yaml").read_text())
    faster = {k: {lv: v * 1000 for lv, v in host[k].items()} for k in ("peak_flops_per_s", "bandwidth_bytes_per_s")}
    host.update(cpu_model="Other CPU 9000", mem_bw_bytes_per_s=host["mem_bw_bytes_per_s"] * 1000, **faster)
    (tmp_path / "host.yaml").write_text(yaml.safe_dump(host))
    r = run_stage("03_merge_profile_metrics.py", "--model", tmp / "m.onnx", "--results", rdir, "--latency-model", lm,
                  "--host", tmp_path / "host.yaml")
    assert r.returncode == 0, r.stderr
    meta = json.loads((rdir / "merge_meta.json").read_text())
    assert meta["host_other_cpu_note"].startswith(f"{tmp_path / 'host.yaml'} was calibrated on a ")
    assert "(differing: model" in meta["host_other_cpu_note"]
    assert meta["roofline_contradictions"]["nodes"] == 0 and f"warning: {meta['host_other_cpu_note']}" in r.stdout
    # the committed host.yaml: silent on its own CPU (the test holds on another, where it must speak)
    r = run_stage("03_merge_profile_metrics.py", "--model", tmp / "m.onnx", "--results", rdir, "--latency-model", lm)
    note = json.loads((rdir / "merge_meta.json").read_text())["host_other_cpu_note"]
    committed = host_reference.host_file_cpu(yaml.safe_load((CONFIGS / "host.yaml").read_text()))
    assert note == host_reference.other_cpu(committed, str(CONFIGS / "host.yaml"), here)
    assert (note in r.stdout) and (("host.yaml was calibrated on" in r.stdout) == bool(note))
    from lib.report.page import prediction_text
    from lib.split.ranking import host_prediction
    assert pred["other_cpu_note"] in prediction_text({"prediction": pred}, "")
    assert host_prediction({"prediction": pred})["other_cpu_note"] == pred["other_cpu_note"]


def test_make_calibrate_says_when_it_ran_in_a_spell_of_the_host(tmp_path):
    """The training models against the previous calibration's host reference of this CPU: +20% is a slow spell
    (said), +5% is the host's noise (not said), -20% means the previous one was slow; another CPU's file: nothing."""
    lm = latency_model_copy(tmp_path)
    doc = yaml.safe_load(lm.read_text())
    here = host_reference.cpu_here()
    doc["host"].update(cpu=here["model"], cores=here["cores"])
    doc["kernel_model"]["host"]["caches_bytes"] = here["caches_bytes"]
    lm.write_text(yaml.safe_dump(doc))
    before = {m["model"]: m["session_us"] for m in doc["kernel_model"]["host_reference"]["models"]}

    def records(x):
        return [{"model": m, "session_us": t * x} for m, t in before.items()] + [{"model": "micro", "session_us": None}]
    note = host_reference.against_previous(records(1.2), lm)
    assert note.startswith(f"the training models ran +20% against the previous calibration of this CPU (median of its "
                           f"{len(before)} host reference models): a slow spell")
    assert host_reference.against_previous(records(1.05), lm) == ""
    assert "the previous calibration was taken in a slow spell" in host_reference.against_previous(records(0.8), lm)
    doc["host"]["cpu"] = "Other CPU 9000"
    lm.write_text(yaml.safe_dump(doc))
    assert host_reference.against_previous(records(1.2), lm) == ""


def test_01_without_the_reference_says_so(tmp_path):
    small_cnn(tmp_path / "m.onnx")
    lm = latency_model_copy(tmp_path)
    doc = yaml.safe_load(lm.read_text())
    doc["kernel_model"]["host_reference"] = {"threads": 0, "models": [
        {"model": "gone", "path": str(tmp_path / "gone.onnx"), "session_us": 1.0}]}
    lm.write_text(yaml.safe_dump(doc))
    r = run_stage("01_profile_onnx.py", "--model", tmp_path / "m.onnx", "--results", tmp_path / "r", "--sessions", 1,
                  "--runs", 2, "--latency-model", lm)
    assert r.returncode == 0, r.stderr
    prof = json.loads((tmp_path / "r" / "profile_meta.json").read_text())
    assert prof["host_reference"] == {"note": f"host reference models missing ({tmp_path / 'gone.onnx'}): make "
                                              f"calibrate builds them"}
    assert "host reference models missing" in r.stdout


@pytest.mark.parametrize("args", [["--sessions", "0"], ["--runs", "0"]])
def test_01_refuses_no_sessions_or_runs_and_writes_nothing(tmp_path, args):
    small_cnn(tmp_path / "m.onnx")
    r = run_stage("01_profile_onnx.py", "--model", tmp_path / "m.onnx", "--results", tmp_path / "r", *args)
    assert r.returncode == 2 and "--runs and --sessions must be >= 1" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "r" / "profile_meta.json").exists()


def test_03_does_not_score_a_prediction_for_another_thread_count(tmp_path):
    """The kernel model predicts for make calibrate's intra-op threads (0: all cores). 01 --threads 1 on 2 cores
    ran resnet18 in 35.8 ms against 19.1 ms predicted, and 03 said -47%: now it says why and scores nothing;
    --threads equal to the core count is ORT's default, the same."""
    from lib.latency.predict import threads_note
    from lib.report.page import prediction_text
    meta = {"threads": 1, "cpu": {"cores": 2}}
    assert threads_note({"threads": 0}, meta) == (
        "01 ran with 1 intra-op thread(s) and make calibrate with 2: the prediction is for 2 and is not compared "
        "with the session (profile with --threads 0, or calibrate with --threads 1)")
    assert threads_note({"threads": 0}, {**meta, "threads": 2}) == ""
    assert threads_note({"threads": 2}, {**meta, "threads": 0}) == ""
    assert threads_note({"threads": None}, meta) == "" == threads_note({"threads": 0}, None)
    small_cnn(tmp_path / "m.onnx")
    rdir = tmp_path / "r"
    for stage, extra in (("02_shapes_flops_bytes.py", []), ("01_profile_onnx.py", ["--runs", 2, "--threads", 1]),
                         ("03_merge_profile_metrics.py", [])):
        r = run_stage(stage, "--model", tmp_path / "m.onnx", "--results", rdir, *extra)
        assert r.returncode == 0, f"{stage}: {r.stderr}"
    pred = json.loads((rdir / "merge_meta.json").read_text())["prediction"]
    cores = json.loads((rdir / "profile_meta.json").read_text())["cpu"]["cores"]
    assert pred["predicted_by"] == "kernel model" and pred["threads"] == 0
    if cores > 1:
        assert pred["threads_note"].startswith(f"01 ran with 1 intra-op thread(s) and make calibrate with {cores}")
        assert pred["error"] is None and pred["baseline_error"] is None and pred["measured_latency_us"] > 0
        assert f"warning: {pred['threads_note']}" in r.stdout and "vs the measured session" not in r.stdout
        assert pred["threads_note"] in prediction_text({"prediction": pred}, "")


def test_make_all_builds_the_missing_host_reference_models(tmp_path):
    """A fresh clone has no models/train: its make all measured no host reference and predicted for the calibration
    host's speed (ResNet-50 +20% against the session, +1% with the reference). make builds the latency model's
    reference models first, unless 01 is told not to measure them."""
    from test_integrity import make
    path = tmp_path / "t" / "gru2.onnx"
    doc = {"kernel_model": {"host_reference": {"threads": 0, "models": [
        {"model": "gru2", "path": str(path), "session_us": 100.0}]}}}
    lm = tmp_path / "lm.yaml"
    lm.write_text(yaml.safe_dump(doc))
    model = tmp_path / "m.onnx"
    small_cnn(model)
    base = [f"MODEL={model}", f"R={tmp_path / 'r'}", f"LATENCY_MODEL={lm}"]
    build = f"-m lib.latency.host_reference {lm}"
    assert build in make("-n", "all", *base, "PROFILE_ARGS=").stdout
    assert build not in make("-n", "all", *base, "PROFILE_ARGS=--no-host-reference").stdout
    assert host_reference.build_missing(lm) == ["gru2"] and path.exists()
    assert host_reference.build_missing(lm) == []
    ref, why = host_reference.load(lm)
    assert why == "" and ref["files"]["gru2"] == path
