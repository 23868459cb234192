"""Classical-ML models built the way users build them (random seeded data, trained in a second, a few kB):
scikit-learn through skl2onnx, LightGBM through onnxmltools, and an IR-3 logistic regression that imports only
the ai.onnx.ml opset (as onnxmltools 1.2 era exports do); and a torch sampler with random ops (randn_like, rand,
bernoulli) through both exporters.

Every ``build_<class>(path) -> dict`` writes the model and an npz of inputs beside it and returns the facts of
tests/wild_models.py (name, path, class, exporter, inputs, feeds, npz, shape_override, expected_macs, ...).
No lib/ import: these are inputs to the product. bench/corpus.py lists them in its corpus.
"""
from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.wild_models import _facts, _torch_export

FEATURES, CLASSES, ROWS = 4, 3, 3        # X is ROWS x FEATURES in the npz; the models declare a dynamic batch


def data(seed: int = 0):
    from sklearn.datasets import make_classification
    x, y = make_classification(200, FEATURES, n_informative=3, n_redundant=0, n_classes=CLASSES, random_state=seed)
    return x.astype(np.float32), y


def _skl(model, path, cls, notes):
    import skl2onnx
    from skl2onnx import to_onnx
    x, y = data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(x, y)
        onx = to_onnx(model, x[:1])
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    onnx.save(onx, str(path))
    return _facts(path, cls, f"skl2onnx=={skl2onnx.__version__}", {"X": x[:ROWS]}, 0, notes)


def build_sk_logreg(path):
    from sklearn.linear_model import LogisticRegression
    return _skl(LogisticRegression(max_iter=500), path, "sklearn_linear",
                "LogisticRegression, 3 classes: LinearClassifier, Normalizer, ZipMap (sequence-of-maps output)")


def build_sk_forest(path):
    from sklearn.ensemble import RandomForestClassifier
    return _skl(RandomForestClassifier(5, max_depth=3, random_state=0), path, "sklearn_tree",
                "RandomForestClassifier 5 trees of depth <= 3: TreeEnsembleClassifier + ZipMap")


def build_sk_forest_strings(path):
    """String class labels: the label output is tensor(string), ZipMap's keys are strings."""
    from sklearn.ensemble import RandomForestClassifier
    import skl2onnx
    from skl2onnx import to_onnx
    x, y = data()
    clf = RandomForestClassifier(3, max_depth=2, random_state=0).fit(x, np.array(["cat", "cow", "dog"])[y])
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    onnx.save(to_onnx(clf, x[:1]), str(path))
    return _facts(path, "sklearn_tree", f"skl2onnx=={skl2onnx.__version__}", {"X": x[:ROWS]}, 0,
                  "RandomForestClassifier with string labels: tensor(string) label, ZipMap with string keys")


def build_sk_gboost(path):
    from sklearn.ensemble import GradientBoostingClassifier
    return _skl(GradientBoostingClassifier(n_estimators=4, max_depth=2, random_state=0), path, "sklearn_tree",
                "GradientBoostingClassifier 4 rounds x 3 classes of depth <= 2: TreeEnsembleClassifier + ZipMap")


def build_sk_svm(path):
    from sklearn.svm import SVC
    return _skl(SVC(probability=True, random_state=0), path, "sklearn_svm",
                "SVC (RBF kernel, Platt probabilities): SVMClassifier + ZipMap")


def build_sk_knn(path):
    """KNeighborsRegressor on float targets: Scan (distances), TopK, ai.onnx.ml ArrayFeatureExtractor over the
    1-D training targets."""
    import skl2onnx
    from skl2onnx import to_onnx
    from sklearn.neighbors import KNeighborsRegressor
    x, _ = data()
    y = x.sum(axis=1)
    onx = to_onnx(KNeighborsRegressor(5).fit(x, y), x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    onnx.save(onx, str(path))
    return _facts(path, "sklearn_neighbors", f"skl2onnx=={skl2onnx.__version__}", {"X": x[:ROWS]}, 0,
                  "KNeighborsRegressor k=5: Scan, TopK, ArrayFeatureExtractor ([1, n] out of 1-D data)")


def build_sk_pipeline(path):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    return _skl(make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)), path, "sklearn_pipeline",
                "StandardScaler + LogisticRegression: Scaler, LinearClassifier, Normalizer, ZipMap")


def build_sk_columns(path):
    """A pipeline over a table: 3 numeric columns (imputer, scaler) and 2 string columns (one-hot) into a random
    forest; one graph input per column, the string ones tensor(string). 11 nodes: worth splitting."""
    import pandas as pd
    import skl2onnx
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler
    rng = np.random.default_rng(0)
    n = 300
    df = pd.DataFrame({**{k: rng.standard_normal(n).astype(np.float32) for k in "abc"},
                       "cat1": np.array(["u", "v", "w"])[rng.integers(0, 3, n)],
                       "cat2": np.array(["x", "y"])[rng.integers(0, 2, n)]})
    numeric = Pipeline([("impute", SimpleImputer()), ("scale", StandardScaler())])
    pipe = Pipeline([("columns", ColumnTransformer([("num", numeric, ["a", "b", "c"]),
                                                    ("cat", OneHotEncoder(), ["cat1", "cat2"])])),
                     ("forest", RandomForestClassifier(20, max_depth=5, random_state=0))])
    pipe.fit(df, (df.a + df.b > 0).astype(int))
    types = [(k, FloatTensorType([None, 1])) for k in "abc"] + [(k, StringTensorType([None, 1])) for k in ("cat1", "cat2")]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    onnx.save(to_onnx(pipe, initial_types=types), str(path))
    feeds = {k: df[[k]].to_numpy()[:ROWS].astype(np.float32 if k in "abc" else str) for k in df.columns}
    return _facts(path, "sklearn_pipeline", f"skl2onnx=={skl2onnx.__version__}", feeds, 0,
                  "ColumnTransformer (SimpleImputer + StandardScaler on 3 columns, OneHotEncoder on 2 string columns) "
                  "+ RandomForestClassifier: Imputer, Scaler, OneHotEncoder, Concat, TreeEnsembleClassifier, ZipMap; "
                  "npz string columns as numpy str arrays")


def build_lgbm(path):
    import lightgbm
    import onnxmltools
    from onnxmltools.convert.common.data_types import FloatTensorType
    x, y = data()
    clf = lightgbm.LGBMClassifier(n_estimators=4, num_leaves=4, verbose=-1, random_state=0).fit(x, y)
    onx = onnxmltools.convert_lightgbm(clf, initial_types=[("X", FloatTensorType([None, FEATURES]))], zipmap=True)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    onnx.save(onx, str(path))
    return _facts(path, "lightgbm", f"onnxmltools=={onnxmltools.__version__} lightgbm=={lightgbm.__version__}",
                  {"X": x[:ROWS]}, 0, "LGBMClassifier 4 rounds x 3 classes, 4 leaves: TreeEnsembleClassifier + ZipMap")


def build_ir3_logreg(path):
    """A fitted LogisticRegression assembled by hand as early onnxmltools wrote it: IR 3, only ai.onnx.ml 1."""
    from sklearn.linear_model import LogisticRegression
    x, y = data()
    m = LogisticRegression(max_iter=500).fit(x, y)
    labels = list(range(CLASSES))
    lc = helper.make_node("LinearClassifier", ["X"], ["label", "scores"], name="lc", domain="ai.onnx.ml",
                          coefficients=m.coef_.astype(np.float32).ravel().tolist(),
                          intercepts=m.intercept_.astype(np.float32).tolist(), classlabels_ints=labels,
                          multi_class=1, post_transform="SOFTMAX")
    zm = helper.make_node("ZipMap", ["scores"], ["probabilities"], name="zm", domain="ai.onnx.ml",
                          classlabels_int64s=labels)
    seq = helper.make_sequence_type_proto(helper.make_map_type_proto(TensorProto.INT64,
                                                                     helper.make_tensor_type_proto(TensorProto.FLOAT, [])))
    g = helper.make_graph([lc, zm], "logreg", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, FEATURES])],
                          [helper.make_tensor_value_info("label", TensorProto.INT64, [1]),
                           helper.make_value_info("probabilities", seq)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("ai.onnx.ml", 1)], ir_version=3,
                              producer_name="OnnxMLTools", producer_version="1.2.0")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return _facts(path, "ir3_ml", "hand-assembled (onnxmltools 1.2 style), IR 3, ai.onnx.ml 1 only", {"X": x[:1]}, 0,
                  "LogisticRegression coefficients in a LinearClassifier (softmax) + ZipMap; no default-domain opset")


def _random_module():
    import torch

    class Noisy(torch.nn.Module):
        """A VAE/TTS-style sampler: Linear, then noise drawn like its output (randn_like), a uniform draw and
        a Bernoulli mask."""
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 16)

        def forward(self, x):
            h = self.fc(x)
            return h + 0.1 * torch.randn_like(h) + torch.rand(2, 16) * torch.bernoulli(torch.sigmoid(h))
    torch.manual_seed(0)
    return Noisy().eval(), torch.randn(2, 16)


def build_random_ts(path):
    m, x = _random_module()
    exporter = _torch_export(m, (x,), path, 17, input_names=["x"], output_names=["y"])
    return _facts(path, "random_ops", exporter, {"x": x.numpy()}, 2 * 16 * 16,
                  "Linear + randn_like + rand + bernoulli (TorchScript exporter): RandomNormalLike, RandomUniform, "
                  "Bernoulli")


def build_random_dynamo(path):
    import torch
    m, x = _random_module()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(m, (x,), dynamo=True, opset_version=18, input_names=["x"], output_names=["y"])
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    prog.save(str(path))
    return _facts(path, "random_ops", f"torch.onnx.export(dynamo=True, opset_version=18) torch=={torch.__version__}",
                  {"x": x.numpy()}, 2 * 16 * 16, "the same sampler through the dynamo exporter: RandomNormalLike, "
                  "RandomUniformLike, Bernoulli")


BUILDERS = {"sk_logreg": build_sk_logreg, "sk_forest": build_sk_forest, "sk_forest_strings": build_sk_forest_strings,
            "sk_gboost": build_sk_gboost, "sk_knn": build_sk_knn,
            "sk_svm": build_sk_svm, "sk_pipeline": build_sk_pipeline, "sk_columns": build_sk_columns, "lgbm": build_lgbm, "ir3_logreg": build_ir3_logreg,
            "random_ts": build_random_ts, "random_dynamo": build_random_dynamo}
