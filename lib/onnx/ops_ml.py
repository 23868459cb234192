"""Costs of the classical-ML ops (ai.onnx.ml: scikit-learn, LightGBM, XGBoost exports) and of the random ops.

lib/onnx/ops.py registers every entry of OPS at its end (one registry). Conventions (docs/classical-ml.md):
- MACs stay 0: the MAC column is the Conv/Gemm/MatMul/RNN-class count checked against what ONNX Runtime
  executed; a linear model's or an SVM's dot products are FLOPs here (multiply + add = 2).
- N = the samples of input X ([N, F], or [F] for one sample).
- Tree ensembles: per sample and tree, one comparison per branch node on the visited path (its length is not
  known before the data: the tree's depth, read from the tree tables, bounds it) plus one add per weight its
  leaf adds to the scores; then the post transform per score.
- The parameters of an ai.onnx.ml op are attributes, not initializers: attribute_bytes() gives them as the
  node's weight bytes (int64 ids 8 bytes, floats 4, strings their length, tensors their size).
- Random ops: one FLOP per element generated (Multinomial also builds its cumulative distribution).
"""
from __future__ import annotations

import math

import numpy as np
import onnx

from lib.onnx.reader import attr, elem_size

ML_DOMAIN = "ai.onnx.ml"
POST = {"NONE": 0, "LOGISTIC": 4, "SOFTMAX": 5, "SOFTMAX_ZERO": 5, "PROBIT": 8}    # FLOPs per score
KERNEL = {"LINEAR": (2, 0), "POLY": (2, 3), "RBF": (3, 4), "SIGMOID": (2, 7)}      # per feature, per vector
NORM = {"MAX": 2, "L1": 3, "L2": 3}                                                 # FLOPs per element


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _shape(g, name: str):
    t = g.tensors.get(name) if name else None
    return None if t is None else t.shape


def _samples_features(node, g):
    """(N, F) of input X, None when its shape is unknown."""
    x = _shape(g, node.input[0] if node.input else "")
    if x is None or not x:
        return None
    return (1, x[0]) if len(x) == 1 else (math.prod(x[:-1]), x[-1])


def _numel(g, name: str):
    s = _shape(g, name)
    return None if s is None else math.prod(s)


def _post(node, n_scores: int) -> int:
    return POST.get(_text(attr(node, "post_transform", "NONE")), 0) * n_scores


# ---------------------------------------------------------------- linear models and SVMs

def linear(node, g):
    """2 x N x len(coefficients) (one multiply-add per coefficient and sample); a classifier also picks the
    best of its C scores (C compares)."""
    nf = _samples_features(node, g)
    coef = len(attr(node, "coefficients", []) or [])
    if nf is None or not nf[1]:
        return None
    n, f = nf
    scores = coef // f if coef else int(attr(node, "targets", 1))
    label = scores if node.op_type == "LinearClassifier" else 0
    return float(n * (2 * coef + label + _post(node, 1) * scores)), 0.0


def svm(node, g):
    """Per sample: a kernel evaluation per support vector (FLOPs per feature and per vector: KERNEL), 2 per
    decision coefficient, a sigmoid (5) per Platt pair; a linear SVM without support vectors: 2 per
    coefficient. A classifier adds its C(C-1)/2 pairwise votes."""
    nf = _samples_features(node, g)
    if nf is None:
        return None
    n, f = nf
    vectors = len(attr(node, "support_vectors", []) or []) // f if f else 0
    per_feature, per_vector = KERNEL.get(_text(attr(node, "kernel_type", "LINEAR")), (2, 0))
    coef = len(attr(node, "coefficients", []) or [])
    per_sample = vectors * (per_feature * f + per_vector) + 2 * coef + 5 * len(attr(node, "prob_a", []) or [])
    if node.op_type == "SVMClassifier":
        c = len(attr(node, "classlabels_ints", []) or attr(node, "classlabels_strings", []) or [])
        per_sample += c * (c - 1) // 2 + _post(node, c)
    else:
        per_sample += _post(node, 1)
    return float(n * per_sample), 0.0


# ---------------------------------------------------------------- tree ensembles

def _longest_paths(trees: np.ndarray, ids: np.ndarray, leaf: np.ndarray, true_ids: np.ndarray,
                   false_ids: np.ndarray) -> dict[int, int] | None:
    """tree id -> branch nodes on its longest root-to-leaf path (tree_ids/node ids per table row); None when the
    tables are inconsistent (a child that is no row, a cycle). Level by level, in numpy: forests hold 1e5 rows."""
    span = int(ids.max()) + 1
    key = trees * span + ids
    order = np.argsort(key, kind="stable")
    branch = ~leaf
    kids = np.concatenate([trees[branch] * span + true_ids[branch], trees[branch] * span + false_ids[branch]])
    pos = np.searchsorted(key, kids, sorter=order)
    if (pos >= len(key)).any() or (key[order[np.minimum(pos, len(key) - 1)]] != kids).any():
        return None
    child = order[pos]
    level = np.full(len(key), -1)
    is_child = np.zeros(len(key), bool)
    is_child[child] = True
    frontier = np.flatnonzero(~is_child)
    level[frontier] = 0
    nb = int(branch.sum())
    parent_of = np.concatenate([np.flatnonzero(branch)] * 2)
    for depth in range(1, len(key) + 1):
        rows = np.isin(parent_of, frontier)
        frontier = np.unique(child[rows])
        if not frontier.size:
            break
        if depth > nb:
            return None                      # deeper than there are branch nodes: a cycle
        level[frontier] = depth
    out: dict[int, int] = {}
    for t, d in zip(trees[leaf].tolist(), level[leaf].tolist()):
        out[t] = max(out.get(t, 0), d)
    return out


def _leaf_weights(trees, nodes) -> dict[int, int]:
    """tree id -> the most score weights one of its leaves adds."""
    out: dict[int, int] = {}
    if len(trees):
        pairs, counts = np.unique(np.stack([trees, nodes]), axis=1, return_counts=True)
        for t, c in zip(pairs[0].tolist(), counts.tolist()):
            out[t] = max(out.get(t, 0), c)
    return out


def _tree_tables(node):
    """(longest paths per tree, leaf weights per tree, scores per sample) of TreeEnsembleClassifier/Regressor."""
    a = {k: np.asarray(attr(node, k, []) or [], dtype=np.int64) for k in
         ("nodes_treeids", "nodes_nodeids", "nodes_truenodeids", "nodes_falsenodeids")}
    if not len(a["nodes_treeids"]):
        return None
    modes = np.array([_text(m) for m in attr(node, "nodes_modes", [])], dtype=object)
    if len(modes) != len(a["nodes_treeids"]):
        return None
    paths = _longest_paths(a["nodes_treeids"], a["nodes_nodeids"], modes == "LEAF", a["nodes_truenodeids"],
                           a["nodes_falsenodeids"])
    side = "class" if node.op_type == "TreeEnsembleClassifier" else "target"
    weights = _leaf_weights(np.asarray(attr(node, f"{side}_treeids", []) or [], dtype=np.int64),
                            np.asarray(attr(node, f"{side}_nodeids", []) or [], dtype=np.int64))
    if side == "class":
        scores = len(attr(node, "classlabels_int64s", []) or attr(node, "classlabels_strings", []) or [])
    else:
        scores = int(attr(node, "n_targets", 1))
    return paths, weights, scores


def _tree_tables_v5(node):
    """The same for ai.onnx.ml 5's TreeEnsemble: rows are branch nodes, leaves are their own arrays."""
    true_ids = np.asarray(attr(node, "nodes_truenodeids", []) or [], dtype=np.int64)
    false_ids = np.asarray(attr(node, "nodes_falsenodeids", []) or [], dtype=np.int64)
    true_leaf = np.asarray(attr(node, "nodes_trueleafs", []) or [], dtype=bool)
    false_leaf = np.asarray(attr(node, "nodes_falseleafs", []) or [], dtype=bool)
    roots = [int(r) for r in attr(node, "tree_roots", []) or []]
    if not roots or not (len(true_ids) == len(false_ids) == len(true_leaf) == len(false_leaf)):
        return None
    paths = {}
    for t, root in enumerate(roots):         # branch nodes on the longest path: one level per loop
        frontier, depth = {root}, 0
        while frontier and depth <= len(true_ids):
            depth += 1
            nxt = {int(true_ids[i]) for i in frontier if not true_leaf[i]} | \
                  {int(false_ids[i]) for i in frontier if not false_leaf[i]}
            if any(i >= len(true_ids) for i in nxt):
                return None
            frontier = nxt
        if frontier:
            return None
        paths[t] = depth
    return paths, {t: 1 for t in paths}, int(attr(node, "n_targets", 1))


def tree_ensemble(node, g):
    """N x (sum over trees of (branch nodes on the longest path + weights a leaf adds)) + the post transform;
    None when X's shape is unknown or the tables are inconsistent."""
    nf = _samples_features(node, g)
    tables = _tree_tables_v5(node) if node.op_type == "TreeEnsemble" else _tree_tables(node)
    if nf is None or tables is None or tables[0] is None:
        return None
    paths, weights, scores = tables
    per_sample = sum(paths.values()) + sum(weights.get(t, 0) for t in paths)
    return float(nf[0] * (per_sample + _post(node, scores))), 0.0


# ---------------------------------------------------------------- per-element ops

def _per_input_element(k_of):
    def cost(node, g):
        n = _numel(g, node.input[0] if node.input else "")
        return None if n is None else (float(k_of(node) * n), 0.0)
    return cost


def _free(node, g):
    return 0.0, 0.0


# ---------------------------------------------------------------- random ops

def random_generated(node, g):
    """One FLOP per element generated (the output's elements)."""
    n = _numel(g, node.output[0] if node.output else "")
    return None if n is None else (float(n), 0.0)


def multinomial(node, g):
    """batch x classes (the cumulative distribution) + batch x sample_size (one draw each)."""
    x = _shape(g, node.input[0] if node.input else "")
    if x is None or len(x) != 2:
        return None
    return float(x[0] * (x[1] + int(attr(node, "sample_size", 1)))), 0.0


# ---------------------------------------------------------------- weight bytes

def attribute_bytes(node) -> int:
    """Bytes of an ai.onnx.ml node's parameter arrays, held in attributes (tree tables, coefficients, support
    vectors, label maps). Read from the field lengths and tensor dims, never the values (a stripped tensor
    keeps its dims)."""
    total = 0
    A = onnx.AttributeProto
    for a in node.attribute:
        if a.type == A.INTS:
            total += 8 * len(a.ints)
        elif a.type == A.FLOATS:
            total += 4 * len(a.floats)
        elif a.type == A.STRINGS:
            total += sum(len(s) for s in a.strings)
        elif a.type in (A.TENSOR, A.TENSORS):
            for t in ([a.t] if a.type == A.TENSOR else a.tensors):
                total += math.prod(t.dims) * (elem_size(t.data_type) or 0)
    return total


def sequence_bytes(node, g) -> int | None:
    """Bytes ZipMap writes (a sequence of N maps of C entries: an int64 or string key, a float value each),
    which no tensor shape gives; None for other nodes or an unknown input shape."""
    x = _shape(g, node.input[0] if node.input else "") if node.op_type == "ZipMap" else None
    if not x:
        return None
    n, c = (1, x[0]) if len(x) == 1 else (math.prod(x[:-1]), x[-1])
    return n * c * (8 + 4)


# key -> (op class, cost): lib/onnx/ops.py registers them
ML = {"LinearClassifier": ("gemm", linear), "LinearRegressor": ("gemm", linear),
      "SVMClassifier": ("gemm", svm), "SVMRegressor": ("gemm", svm),
      "TreeEnsemble": ("reduce", tree_ensemble), "TreeEnsembleClassifier": ("reduce", tree_ensemble),
      "TreeEnsembleRegressor": ("reduce", tree_ensemble),
      "Scaler": ("elementwise", _per_input_element(lambda n: 2)),              # (x - offset) * scale
      "Binarizer": ("elementwise", _per_input_element(lambda n: 1)),
      "Imputer": ("elementwise", _per_input_element(lambda n: 1)),             # compare, select
      "Normalizer": ("norm", _per_input_element(lambda n: NORM.get(_text(attr(n, "norm", "MAX")), 3))),
      **{op: ("data_movement", _free) for op in ("ZipMap", "ArrayFeatureExtractor", "OneHotEncoder", "LabelEncoder",
                                                 "CategoryMapper", "FeatureVectorizer", "DictVectorizer", "CastMap")}}
OPS = {**{f"{ML_DOMAIN}:{k}": v for k, v in ML.items()},
       **{op: ("elementwise", random_generated) for op in ("RandomNormal", "RandomNormalLike", "RandomUniform",
                                                           "RandomUniformLike", "Bernoulli")},
       "Multinomial": ("elementwise", multinomial)}
