"""The tabular model's layer names: columns' input names, never a clash, unchanged for
plain names (so checkpoints written before input names existed still restore)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from shardtrain.train.features import CategoricalFeature, FeatureSpec, NumericFeature
from shardtrain.train.models import build_model

#: A Keras 3 layer name is a TF name scope: no '/', ASCII of TensorFlow's scope rule.
LAYER_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
HPARAMS = {"hidden_units": [8], "dropout": 0.0, "embedding_dim": 4}


def _spec(numeric, categorical) -> FeatureSpec:
    from shardtrain.train.names import input_names

    names = input_names([*numeric, *categorical])
    return FeatureSpec(
        numeric=tuple(
            NumericFeature(n, "float", has_missing=True, input_name=names[n]) for n in numeric
        ),
        categorical=tuple(
            CategoricalFeature(n, ("a", "b"), input_name=names[n]) for n in categorical
        ),
        label="y",
        label_type="string",
        classes=("no", "yes"),
    )


def test_plain_names_keep_the_layer_names_they_always_had(tmp_path):
    import tensorflow as tf

    model = build_model("tabular", _spec(["level", "gold"], ["region"]), HPARAMS)
    names = [layer.name for layer in model.layers]
    assert {"level", "gold", "region", "lookup_region", "embed_region"} <= set(names)
    assert {"numeric_preprocessing", "features", "hidden_0", "logits"} <= set(names)
    # Checkpoint keys are the layers' positions and attributes, not their names.
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    keys = sorted(k for k, _ in tf.train.list_variables(path) if k.startswith("model/"))
    assert keys and all(k.startswith("model/_operations/") for k in keys)


def test_awkward_names_and_names_of_the_models_own_layers(tmp_path):
    import tensorflow as tf

    numeric = ["Delta 15 N (o/oo)", "a b", "a_b", "A b", "1st", "logits", "hidden_0", "p.q"]
    categorical = ["クエスト種別", "x", "lookup_x", "features", "class"]
    spec = _spec(numeric, categorical)
    model = build_model("tabular", spec, HPARAMS)
    names = [layer.name for layer in model.layers]
    assert len(set(names)) == len(names)
    assert all(LAYER_NAME.fullmatch(n) for n in names), names
    assert sorted(model.input) == sorted(numeric + categorical)  # keyed by the columns' names
    batch = {n: tf.constant([0.5, float("nan")]) for n in numeric}
    batch.update({n: tf.constant(["a", "zzz"]) for n in categorical})
    logits = model(batch, training=False).numpy()
    assert logits.shape == (2, 1) and np.isfinite(logits).all()
    # A checkpoint of it restores into a model built again from the same spec.
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    again = build_model("tabular", spec, HPARAMS)
    tf.train.Checkpoint(model=again).read(path).assert_existing_objects_matched()
    np.testing.assert_allclose(again(batch, training=False).numpy(), logits, rtol=1e-6)


@pytest.mark.parametrize("name", ["self", "lambda", "Ab"])
def test_input_layers_take_the_input_name(name):
    spec = _spec([name, "ab"], [])
    model = build_model("tabular", spec, HPARAMS)
    by_column = {f.name: f.input_name for f in spec.numeric}
    names = {layer.name for layer in model.layers}
    assert by_column[name] in names and by_column["ab"] in names
