"""Models: the built-in ``tabular`` DNN, and user models plugged in as ``MODULE:FUNCTION``.

Every model is a Keras 3 model that takes the feature dict of :mod:`shardtrain.train.features`
(``{name: float32 [batch] with NaN for missing, or string [batch] with "" for missing}``) and
returns **logits**: ``[batch, 1]`` for a binary label, ``[batch, num_classes]`` for a
multi-class one; for a regression ``[batch, 1]``, the *standardised* label value (the trainer
standardises the target with the label's mean and standard deviation, and the export turns
the output back into the label's units).
Preprocessing lives *inside* the model, so the exported SavedModel takes raw feature values
and training and serving cannot disagree.

A user model is any importable function with this signature::

    # my_models.py
    import keras

    def wide_model(spec, hparams):
        inputs = {**{f.name: keras.Input((), name=f.input_name) for f in spec.numeric},
                  **{f.name: keras.Input((), dtype="string", name=f.input_name)
                     for f in spec.categorical}}
        ...
        return keras.Model(inputs, logits)

and is chosen with ``shardtrain train --model my_models:wide_model``. ``spec`` is the
:class:`~shardtrain.train.features.FeatureSpec`; ``hparams`` is the ``model`` section of the
training configuration as a dict (``hidden_units``, ``dropout``, ``embedding_dim`` and any
``extra`` entries the user set).

The features dict is keyed by the columns' own names, whatever they are (``Delta 15 N
(o/oo)``, ``クエスト種別``); Keras refuses many of them as layer names, so a layer is named
after a feature's ``input_name`` (:mod:`shardtrain.train.names`): the column's name when
Keras and TensorFlow take it, else a name derived from it.
"""

from __future__ import annotations

import importlib
import logging
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from shardtrain.errors import ConfigError
from shardtrain.train.features import FeatureSpec
from shardtrain.train.names import unique_layer_name

if TYPE_CHECKING:
    import keras

log = logging.getLogger(__name__)

#: z-scores are clipped to this range: heavy-tailed columns (gold, latency) would otherwise
#: feed values in the hundreds into the first layer and destabilise training.
_CLIP = 8.0


def _numeric_block(spec: FeatureSpec, inputs: dict[str, Any], taken: set[str]):
    """Normalised numeric features plus a missing-value indicator per column with gaps."""
    import keras
    from keras import ops

    class NumericPreprocessing(keras.layers.Layer):
        """Standardise with the dataset's mean/std; NaN (missing) becomes 0 and a flag."""

        def __init__(self, means, stds, flags, **kwargs):
            super().__init__(**kwargs)
            self.means, self.stds, self.flags = list(means), list(stds), list(flags)

        def call(self, columns):
            x = ops.stack(columns, axis=-1)
            missing = ops.isnan(x)
            z = (ops.where(missing, ops.convert_to_tensor(self.means), x) - self.means) / (
                ops.convert_to_tensor(self.stds)
            )
            z = ops.clip(z, -_CLIP, _CLIP)
            if not any(self.flags):
                return z
            indicator = ops.cast(missing, "float32")
            keep = [i for i, flag in enumerate(self.flags) if flag]
            return ops.concatenate([z, ops.take(indicator, keep, axis=-1)], axis=-1)

    layer = NumericPreprocessing(
        [f.mean for f in spec.numeric],
        [f.std for f in spec.numeric],
        [f.has_missing for f in spec.numeric],
        name=unique_layer_name("numeric_preprocessing", taken),
    )
    return layer([inputs[f.name] for f in spec.numeric])


def feature_inputs(spec: FeatureSpec) -> dict[str, keras.KerasTensor]:
    """``keras.Input`` per feature: float32 for numeric, string for categorical.

    Keyed by the column's name, named after its ``input_name``.
    """
    import keras

    inputs = {f.name: keras.Input((), dtype="float32", name=f.input_name) for f in spec.numeric}
    inputs.update(
        {f.name: keras.Input((), dtype="string", name=f.input_name) for f in spec.categorical}
    )
    return inputs


def tabular_model(spec: FeatureSpec, hparams: dict[str, Any]) -> keras.Model:
    """The built-in model: preprocessing from the dataset statistics, then a DNN.

    * numeric columns: standardised with the statistics' mean and std (clipped to ±8), a
      missing value becomes 0 plus a 0/1 "was missing" input for columns that have gaps;
    * categorical columns: ``StringLookup`` over the top-K vocabulary (anything else, and
      missing, is one out-of-vocabulary bucket), then an ``Embedding``;
    * ``hidden_units`` ReLU layers with optional dropout, then one logit (binary) or one per
      class, or one linear output (regression).

    Args:
        spec: the dataset's features and label.
        hparams: ``hidden_units`` (list of ints), ``dropout`` (0-1), ``embedding_dim`` (max
            embedding width).
    """
    import keras

    inputs = feature_inputs(spec)
    # The model's own layers are named apart from its inputs: a column may be called logits.
    taken = {f.input_name for f in spec.numeric} | {f.input_name for f in spec.categorical}
    parts = []
    if spec.numeric:
        parts.append(_numeric_block(spec, inputs, taken))
    max_dim = int(hparams.get("embedding_dim", 8))
    for f in spec.categorical:
        if not f.vocabulary:
            log.warning("categorical column %s has no vocabulary in the statistics: unused", f.name)
            continue
        ids = keras.layers.StringLookup(
            vocabulary=list(f.vocabulary),
            num_oov_indices=1,
            mask_token=None,
            name=unique_layer_name(f"lookup_{f.input_name}", taken),
        )(inputs[f.name])
        dim = max(2, min(max_dim, len(f.vocabulary) + 1))
        embed = unique_layer_name(f"embed_{f.input_name}", taken)
        parts.append(keras.layers.Embedding(len(f.vocabulary) + 1, dim, name=embed)(ids))
    if not parts:
        raise ConfigError("the tabular model has no usable input feature")
    if len(parts) > 1:
        x = keras.layers.Concatenate(name=unique_layer_name("features", taken))(parts)
    else:
        x = parts[0]
    dropout = float(hparams.get("dropout", 0.0))
    for i, units in enumerate(hparams.get("hidden_units", (128, 64))):
        hidden = unique_layer_name(f"hidden_{i}", taken)
        x = keras.layers.Dense(int(units), activation="relu", name=hidden)(x)
        if dropout > 0:
            x = keras.layers.Dropout(dropout, name=unique_layer_name(f"dropout_{i}", taken))(x)
    logits = keras.layers.Dense(spec.output_width, name=unique_layer_name("logits", taken))(x)
    with warnings.catch_warnings():
        # Keras warns when a dict key differs from its Input's name; here that is by design
        # (keys are the columns' own names), and calls map the dict by key.
        warnings.filterwarnings("ignore", message="When providing `inputs` as a dict")
        return keras.Model(inputs, logits, name="tabular")


#: Image backbones of ``keras.applications`` the ``image`` model can use (always
#: ``weights=None``: trained from scratch, nothing is downloaded).
BACKBONES = ("small_cnn", "mobilenet_v3_small", "mobilenet_v3_large", "resnet50")


def image_model(spec: FeatureSpec, hparams: dict[str, Any]) -> keras.Model:
    """The built-in image classifier: decoded ``[batch, h, w, 3]`` images in [0, 1] → logits.

    ``hparams["backbone"]`` picks the network: ``small_cnn`` (default; four conv blocks,
    quick on a CPU) or a ``keras.applications`` network (``mobilenet_v3_small``,
    ``mobilenet_v3_large``, ``resnet50``) built with ``weights=None``. Then global average
    pooling, optional dropout, and one logit (binary) or one per class. The logits layer
    computes in float32 so the model also trains under a ``mixed_float16`` policy.

    Args:
        spec: an image dataset's spec (``spec.image`` set).
        hparams: ``backbone``, ``dropout``; ``hidden_units[0]`` is the small CNN's width.
    """
    import keras

    if spec.image is None:
        raise ConfigError("the image model needs an image dataset (sharded from image files)")
    h, w = spec.image.height, spec.image.width
    inputs = keras.Input((h, w, 3), name=spec.image.name)
    backbone = hparams.get("backbone", "small_cnn")
    if backbone == "small_cnn":
        width = int((hparams.get("hidden_units") or [32])[0])
        width = max(8, min(width, 64))
        x = inputs
        for i, filters in enumerate((width, width * 2, width * 4, width * 4)):
            x = keras.layers.Conv2D(filters, 3, padding="same", name=f"conv_{i}")(x)
            # A short moving-average memory: inference statistics keep up with the weights
            # even in runs of a few hundred steps.
            x = keras.layers.BatchNormalization(momentum=0.9, name=f"bn_{i}")(x)
            x = keras.layers.Activation("relu", name=f"relu_{i}")(x)
            x = keras.layers.MaxPooling2D(2, name=f"pool_{i}")(x)
    elif backbone in BACKBONES:
        apps = keras.applications
        build = {
            "mobilenet_v3_small": apps.MobileNetV3Small,
            "mobilenet_v3_large": apps.MobileNetV3Large,
            "resnet50": apps.ResNet50,
        }[backbone]
        kwargs: dict[str, Any] = {"include_top": False, "weights": None, "input_shape": (h, w, 3)}
        if backbone.startswith("mobilenet"):
            kwargs["include_preprocessing"] = False  # inputs are already scaled
        scaled = keras.layers.Rescaling(2.0, offset=-1.0, name="to_unit_range")(inputs)
        x = build(**kwargs)(scaled)
    else:
        raise ConfigError(
            f"image model: unknown backbone '{backbone}' (use {', '.join(BACKBONES)})"
        )
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    dropout = float(hparams.get("dropout", 0.0))
    if dropout > 0:
        x = keras.layers.Dropout(dropout, name="dropout")(x)
    logits = keras.layers.Dense(spec.output_width, name="logits", dtype="float32")(x)
    return keras.Model(inputs, logits, name=f"image_{backbone}")


#: Built-in models by name.
BUILTIN_MODELS: dict[str, Callable[[FeatureSpec, dict[str, Any]], Any]] = {
    "tabular": tabular_model,
    "image": image_model,
}


def default_model_name(spec: FeatureSpec) -> str:
    """``image`` for image datasets, ``tabular`` otherwise (what ``--model auto`` means)."""
    return "image" if spec.image is not None else "tabular"


def resolve_model_fn(name: str) -> Callable[[FeatureSpec, dict[str, Any]], Any]:
    """The model-building function for ``name``: a built-in name or ``MODULE:FUNCTION``.

    Raises:
        ConfigError: unknown built-in, module not importable, or no such callable.
    """
    if name in BUILTIN_MODELS:
        return BUILTIN_MODELS[name]
    if name == "auto":
        raise ConfigError("model 'auto' is resolved per dataset: call build_model")
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(
            f"model '{name}': use a built-in ({', '.join(BUILTIN_MODELS)}) or MODULE:FUNCTION"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"model '{name}': cannot import module '{module_name}': {exc}") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"model '{name}': module '{module_name}' has no function '{attr}'")
    return fn


def build_model(name: str, spec: FeatureSpec, hparams: dict[str, Any]) -> keras.Model:
    """Build the model ``name`` for ``spec`` and check it returns logits of the right width.

    Raises:
        ConfigError: the function does not return a Keras model, or its output has the wrong
            shape for the label (1 logit for binary, one per class for multiclass, 1 value
            for regression).
    """
    import keras

    if name == "auto":
        name = default_model_name(spec)
    if name == "tabular" and spec.image is not None:
        raise ConfigError("the tabular model cannot train on an image dataset: use --model image")
    model = resolve_model_fn(name)(spec, dict(hparams))
    if not isinstance(model, keras.Model):
        raise ConfigError(f"model '{name}' returned {type(model).__name__}, not a keras.Model")
    expected = spec.output_width
    width = model.outputs[0].shape[-1] if getattr(model, "outputs", None) else None
    if width is not None and width != expected:
        task = "is a regression" if spec.is_regression else f"has {spec.num_classes} classes"
        raise ConfigError(
            f"model '{name}' outputs {width} value(s) per example; the label '{spec.label}' "
            f"{task}, so it must output {expected}"
        )
    return model


def model_inputs(model: keras.Model, features: dict[str, Any]) -> dict[str, Any]:
    """The subset of ``features`` a functional model declares as inputs (all for others).

    A user model may use only some of the dataset's columns; Keras 3 functional models refuse
    a dict with extra keys, so each call site feeds exactly what the model asks for.
    """
    try:
        declared = model.input
    except (AttributeError, ValueError):  # a subclassed model has no symbolic inputs
        return features
    names = list(declared) if isinstance(declared, dict) else None
    if not names:
        return features
    missing = [n for n in names if n not in features]
    if missing:
        raise ConfigError(
            f"model '{model.name}' expects input(s) {', '.join(missing)} that are not features "
            "of this dataset"
        )
    return {n: features[n] for n in names}
