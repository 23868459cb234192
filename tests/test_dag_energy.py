"""Critical path and stages on a hand-made DAG; Amdahl on known numbers."""
import numpy as np
import pytest
from onnx import helper

from conftest import make_model, tensor
from lib.analysis.dag import longest_path, stages, summary
from lib.analysis.energy import amdahl, amdahl_multi
from lib.onnx.graph import build_graph


def diamond():
    """a -> b -> d, a -> c -> d, d -> e ; plus an isolated-by-branch f off a."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="a"),
             helper.make_node("Relu", ["a"], ["b"], name="b"),
             helper.make_node("Relu", ["a"], ["c"], name="c"),
             helper.make_node("Add", ["b", "c"], ["d"], name="d"),
             helper.make_node("Relu", ["d"], ["e"], name="e"),
             helper.make_node("Relu", ["a"], ["f"], name="f")]
    return build_graph(make_model(nodes, [tensor("x", [1])], [tensor("e", [1]), tensor("f", [1])]))


def test_critical_path_by_hand():
    g = diamond()
    w = np.array([2.0, 3.0, 5.0, 1.0, 4.0, 9.0])      # a b c d e f
    preds = [g.preds(i) for i in range(len(g.nodes))]
    start, finish, path = longest_path(len(w), preds, w)
    assert [g.names[i] for i in path] == ["a", "c", "d", "e"]          # 2 + 5 + 1 + 4 = 12 > a + f = 11
    assert finish[path[-1]] == 12.0 and start[g.names.index("d")] == 7.0
    for u, v in zip(path, path[1:]):                                       # a real chain of graph edges
        assert u in g.preds(v)
    s = summary(w, finish, stages(len(w), preds))
    assert s["critical_path_us"] == 12.0 and s["sum_node_us"] == 24.0 and s["parallelism"] == 2.0
    assert s["stages"] == 4 and s["max_ops_per_stage"] == 3                # level 1 holds b, c, f
    w[5] = 20.0                                                            # now the a -> f branch is critical
    _, finish, path = longest_path(len(w), preds, w)
    assert [g.names[i] for i in path] == ["a", "f"] and finish.max() == 22.0


def test_amdahl_known_numbers():
    assert amdahl(0.5, 2.0) == pytest.approx(4 / 3)
    assert amdahl(1.0, 10.0) == pytest.approx(10.0)
    assert amdahl(0.0, 100.0) == pytest.approx(1.0)
    assert amdahl(0.9, 1e12) == pytest.approx(10.0)                        # the serial 10% bounds it
    assert amdahl_multi([0.3, 0.2], [3.0, 2.0]) == pytest.approx(1 / 0.7)
    assert amdahl_multi([0.4], [4.0]) == pytest.approx(amdahl(0.4, 4.0))
