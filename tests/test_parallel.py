"""The second core (lib/parallel.py): a forked child computes part of the rows or formats part of a CSV (after
other files to write), or runs onnx's strict inference ahead. Each must give exactly what the single-process
path gives, also when the child fails, and leave nothing behind when the stage fails. The thresholds are
lowered here so that tiny graphs take the forked paths that large ones take."""
import os
import time

import numpy as np
import onnx
import pandas as pd
import pytest

from conftest import make_model, tensor, weight
from lib import artifacts, parallel
from lib.onnx.inputs import InputSpec
from lib.onnx.graph import GraphArrays, constant_tensors
from lib.onnx.loading import prepare, saving_graph
from lib.onnx.metrics import node_metrics
from test_integrity import batch_cnn

needs_fork = pytest.mark.skipif(not parallel.available(), reason="needs fork and two cores")
PARENT = os.getpid()


def fails_in_child(fn):
    """fn, except that it raises in a forked child (the parent must then do the child's part itself)."""
    def wrapped(*args):
        if os.getpid() != PARENT:
            raise RuntimeError("the child fails")
        return fn(*args)
    return wrapped


@needs_fork
@pytest.mark.parametrize("share", [0.5, 1 / 3, 0.9])
def test_split_gives_what_one_process_gives(share):
    rows = lambda lo, hi: [(i, f"n{i}", i * 0.5) for i in range(lo, hi)]  # noqa: E731
    assert parallel.split(rows, 101, share, min_n=0) == rows(0, 101)
    assert parallel.split(fails_in_child(rows), 101, share, min_n=0) == rows(0, 101)
    assert parallel.split(rows, 1, share, min_n=0) == rows(0, 1)


@needs_fork
def test_split_task_is_done_once_by_the_child_or_else_by_finish(tmp_path):
    """The task goes with the child's rows: done by the child (finish() then does nothing), else by finish()
    here: when the child failed at its rows or at the task, or when the work was too small to fork."""
    rows = lambda lo, hi: list(range(lo, hi))  # noqa: E731
    out = tmp_path / "pid"
    write = lambda: out.write_text(str(os.getpid()))  # noqa: E731
    for fn, task_fn, min_n, by_child in [(rows, write, 0, True), (fails_in_child(rows), write, 0, False),
                                         (rows, fails_in_child(write), 0, False), (rows, write, 10**9, False)]:
        out.unlink(missing_ok=True)
        task = parallel.Task(task_fn)
        assert parallel.split(fn, 30, 1 / 3, task=task, min_n=min_n) == list(range(30))
        assert task.done == by_child
        if by_child:
            assert int(out.read_text()) != PARENT
            out.unlink()
        task.finish()
        if by_child:
            assert not out.exists()     # finish() did not do it again
        else:
            assert int(out.read_text()) == PARENT


@needs_fork
def test_future_gives_the_childs_value_or_the_fallback():
    with parallel.Future(lambda: {"pid": os.getpid(), "x": [1.5, "a"]}) as f:
        got = f.result()
    assert got["x"] == [1.5, "a"] and got["pid"] != PARENT           # computed by the child, pickled back
    with parallel.Future(fails_in_child(lambda: 7), fallback=lambda: None) as f:
        assert f.result() is None
    with parallel.Future(fails_in_child(lambda: 7)) as f:
        assert f.result() == 7                                        # the default fallback: fn() here


@needs_fork
def test_future_child_is_stopped_when_the_parent_fails(tmp_path):
    """A Future whose block raises (a refused model) kills its child instead of waiting for its result: the
    child here would write its file after 30 s."""
    done = tmp_path / "done"
    with pytest.raises(ValueError), parallel.Future(lambda: (time.sleep(30), done.write_text("x"))):
        raise ValueError("the model is refused")
    assert not done.exists()


@needs_fork
@pytest.mark.parametrize("head", [False, True])
@pytest.mark.parametrize("child_fails", [False, True])
@pytest.mark.parametrize("child_share, min_items", [(0.5, 1), (0.1, 1), (0.1, 100)])
def test_csv_parts_give_the_bytes_of_one_process(tmp_path, monkeypatch, child_fails, child_share, min_items, head):
    """A frame past the fork threshold (500 x MIN_ITEMS cells; MIN_ITEMS rows when the child has other files
    to write first, 07's JSON files): the two parts joined are pandas' bytes, also when the child dies; the
    other file is there either way. Also with the first two columns formatted ahead (07's sweep columns)."""
    rng = np.random.default_rng(0)
    n = 1_001
    df = pd.DataFrame({"node": [f"n,{i}" if i % 97 == 0 else f"n{i}" for i in range(n)],
                       "flops": rng.random(n) * 1e9, "bytes": rng.integers(0, 2**40, n),
                       "ok": rng.random(n) > 0.5, "note": [None if i % 3 else "x" for i in range(n)]})
    df.loc[5, "flops"] = np.nan
    monkeypatch.setattr(parallel, "MIN_ITEMS", min_items)      # this frame: 5,005 cells, 1,001 rows
    monkeypatch.setattr(artifacts, "CSV_SLICE", 97)      # several slices in each part
    if child_fails:
        monkeypatch.setattr(artifacts, "_write_rows", fails_in_child(artifacts._write_rows))
    along = parallel.Task(lambda: (tmp_path / "along.txt").write_text(str(os.getpid())))
    first = ["node", "flops"]
    artifacts.write_csv(df, tmp_path / "ours.csv", along=along, child_share=child_share,
                        head=(first, artifacts.csv_row_texts(df[first])) if head else None)
    df.to_csv(tmp_path / "pandas.csv", index=False)
    assert (tmp_path / "ours.csv").read_bytes() == (tmp_path / "pandas.csv").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["along.txt", "ours.csv", "pandas.csv"]    # no part left
    assert (int((tmp_path / "along.txt").read_text()) == PARENT) == child_fails


def test_csv_rows_formatted_ahead(tmp_path):
    """02 formats its first rows' CSV lines while the child computes the others (write_csv's `done`): pandas'
    bytes; unused when the table's column types differ from the part's (ints in the first rows, a NaN in the
    others: the column is float, 3 is written 3.0)."""
    df = pd.DataFrame({"node": ["a", "b,c", "d"], "act_in_bytes": [1.0, 2.0, np.nan], "ok": [True, False, True]})
    ints = pd.DataFrame({"node": ["a", "b,c"], "act_in_bytes": [1, 2], "ok": [True, False]})
    df.to_csv(tmp_path / "pandas.csv", index=False)
    for name, first in [("same", df.iloc[:2]), ("ints", ints)]:
        artifacts.write_csv(df, tmp_path / f"{name}.csv", done=(list(first.dtypes), artifacts.csv_row_texts(first)))
        assert (tmp_path / f"{name}.csv").read_bytes() == (tmp_path / "pandas.csv").read_bytes(), name
    assert artifacts.csv_row_texts(ints) == ["a,1,True", '"b,c",2,False']


def _analysis(tmp_path, monkeypatch, min_items):
    monkeypatch.setattr(parallel, "MIN_ITEMS", min_items)
    batch_cnn(tmp_path / "cnn.onnx")
    return prepare(tmp_path / "cnn.onnx", InputSpec({"x": [4, 3, 16, 16]}))


def _metrics(tmp_path, monkeypatch, min_items):
    return node_metrics(_analysis(tmp_path, monkeypatch, min_items).graph)


@needs_fork
def test_inference_ahead_and_forked_metrics_match_one_process(tmp_path, monkeypatch):
    """onnx's strict inference run by the child on its own copy (inputs fixed there too) and the metrics rows
    computed in halves give the table the single-process path gives: batch 4 from the spec, not the file's N."""
    a, b = _metrics(tmp_path, monkeypatch, 1), _metrics(tmp_path, monkeypatch, 10**9)
    pd.testing.assert_frame_equal(a, b)
    assert a.loc[a["node"] == "conv1", "out_shapes"].item() == "4x8x16x16"
    assert a.loc[a["node"] == "conv1", "macs"].item() == 4 * 8 * 16 * 16 * 3 * 9


@pytest.mark.parametrize("min_items", [1, 10**9])
def test_constants_computed_before_inference_are_the_graphs(tmp_path, monkeypatch, min_items):
    """prepare() finds the constant tensors on the skeleton while the child infers: those of the final graph."""
    an = _analysis(tmp_path, monkeypatch, min_items)
    assert an.consts == {"w1", "w2"} == constant_tensors(an.graph)


@needs_fork
def test_inference_ahead_refused_model_gives_the_one_line_error(tmp_path, monkeypatch):
    """A model onnx's strict inference rejects: the child fails, the parent's own inference gives the error."""
    from onnx import helper
    from lib.errors import StageError
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]      # 3 x 5 @ 7 x 2: cannot multiply
    path = tmp_path / "bad.onnx"
    make_model(nodes, [tensor("x", [3, 5])], [tensor("y", None)], [weight("w", (7, 2))], path=path)
    monkeypatch.setattr(parallel, "MIN_ITEMS", 1)
    with pytest.raises(StageError) as e:
        prepare(path, InputSpec())
    assert str(e.value).startswith("the model is invalid") and "Incompatible dimensions" in str(e.value)


@needs_fork
@pytest.mark.parametrize("min_items", [1, 10**9])
def test_saving_graph_leaves_nothing_when_the_stage_fails(tmp_path, monkeypatch, min_items):
    an = _analysis(tmp_path, monkeypatch, min_items)
    rdir = tmp_path / "results"
    with pytest.raises(RuntimeError):
        with saving_graph(an, rdir, "run1", set()) as saving:
            node_metrics(an.graph, along=saving)
            raise RuntimeError("the metrics failed")
    assert not rdir.exists()
    with saving_graph(an, rdir, "run2", set()) as saving:
        node_metrics(an.graph, along=saving)
    assert sorted(p.name for p in rdir.iterdir()) == ["graph.npz", "graph.onnx"]
    with saving_graph(an, rdir, "run3", set()):     # no child took the task: written at the block's end
        pass
    assert GraphArrays.load(rdir / "graph.npz").run_id == "run3"


@pytest.mark.parametrize("min_items", [1, 10**9])
def test_graph_onnx_is_tagged_as_parsing_would_tag_it(tmp_path, monkeypatch, min_items):
    """graph.onnx is the inference's bytes with metadata_props replaced at the wire level (no parse of the
    graph): the very bytes that parsing, replacing them and serializing give. Checked on the model 02 saves
    (serialized by the child, or a ModelProto in one process), and on one that has metadata of its own and
    fields numbered past 14 (functions), where the tag must go between them."""
    from lib.onnx.reader import with_metadata
    an = _analysis(tmp_path, monkeypatch, min_items)
    with saving_graph(an, tmp_path / "r", "run7", set()):
        pass
    m = onnx.ModelProto()
    m.CopyFrom(an.inferred.model)
    del m.metadata_props[:]
    m.metadata_props.add(key="nn-perf:run_id", value="run7")
    assert (tmp_path / "r" / "graph.onnx").read_bytes() == m.SerializeToString()
    m.metadata_props.add(key="author", value="x" * 300)
    m.functions.add(name="f", domain="local")
    m.doc_string = "d"
    tagged = with_metadata(m.SerializeToString(), "k", "v")
    del m.metadata_props[:]
    m.metadata_props.add(key="k", value="v")
    assert tagged == m.SerializeToString()
    assert [(p.key, p.value) for p in onnx.ModelProto.FromString(tagged).metadata_props] == [("k", "v")]
