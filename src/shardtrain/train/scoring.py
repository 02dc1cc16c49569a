"""Scoring exported models on a dataset's eval split, as a serving client would, with slices.

Blessing compares a candidate with the served model on the *same* rows, and the served model
may have been trained on another version of the data (other columns, another export). So both
are scored the same way, through the SavedModel's ``serving_default`` signature: every eval
record of the dataset is parsed into its raw columns (numbers as float32 with NaN for missing,
strings with ``""`` for missing, images as their encoded bytes) and each model gets the
columns its ``shardtrain_model.json`` lists as inputs, by its own input names. One pass over
the split feeds every model, and accumulates the metrics of :mod:`shardtrain.train.evaluation`
overall and per slice (:mod:`shardtrain.train.slices`) in constant memory.

:func:`incompatibility` says, in one line, why a model cannot score a dataset (an input column
the data lacks or holds with another type, another label, task or set of classes).
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardtrain import documents, storage
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.errors import DataError, one_line
from shardtrain.train import dataset
from shardtrain.train.evaluation import MetricsAccumulator, RegressionAccumulator
from shardtrain.train.export import MODEL_INFO
from shardtrain.train.slices import OTHER

log = logging.getLogger(__name__)

#: Rows per scoring batch (images: decoded inside the model, so fewer at a time).
BATCH_ROWS, IMAGE_BATCH_ROWS = 1024, 64
#: Bound on the eval shards staged from ``s3://`` at a time.
CACHE_BYTES = 1 << 30


@dataclass
class ExportedModel:
    """A SavedModel export and what its ``shardtrain_model.json`` says about it.

    Attributes:
        uri: the export's URI (``MODEL_DIR/export/<version>`` or ``SERVING_URI/<version>``).
        inputs: ``serving_default``'s inputs: ``[{"column", "input", "dtype"}]``.
        task: ``binary``, ``multiclass`` or ``regression``.
        label: the label column it predicts.
        classes: a classifier's classes, in the order of its ``probabilities``.
    """

    uri: str
    inputs: list[dict[str, str]]
    task: str
    label: str
    classes: tuple[str, ...]
    _local: str = ""
    _signature: Any = field(default=None, repr=False)

    @classmethod
    def read(cls, uri: str) -> ExportedModel:
        """The export at ``uri`` (its ``shardtrain_model.json``; the SavedModel loads later).

        Raises:
            DataError: ``uri`` holds no shardtrain export.
        """
        info_uri = storage.join(uri, MODEL_INFO)
        if not storage.exists(info_uri):
            raise DataError(f"{uri}: not a shardtrain export (no {MODEL_INFO})")
        info = documents.check(storage.read_json(info_uri), documents.MODEL_INFO, info_uri)
        spec = info.get("feature_spec") or {}
        classes = tuple(str(c) for c in spec.get("classes") or ())
        task = spec.get("task") or ("binary" if len(classes) == 2 else "multiclass")
        return cls(uri, list(info.get("inputs") or []), task, str(spec.get("label")), classes)

    def load(self, scratch: str) -> None:
        """Load the SavedModel's ``serving_default`` (downloaded into ``scratch`` when
        TensorFlow cannot read the URI, as ``s3://``)."""
        import tensorflow as tf

        local = self.uri
        if not storage.tf_can_open(self.uri):
            local = tempfile.mkdtemp(prefix="export-", dir=scratch)
            storage.download_dir(self.uri, local)
        self._local = local
        self._signature = tf.saved_model.load(storage.local_path(local)).signatures[
            "serving_default"
        ]

    def predict(self, columns: Mapping[str, Any], classes: Sequence[str]) -> np.ndarray:
        """Predictions for a batch of raw columns: a regression's values ``[batch]``, a
        binary classifier's probability of ``classes[1]`` ``[batch]``, a multi-class one's
        probabilities ``[batch, len(classes)]`` in the order of ``classes``."""
        kwargs = {i["input"]: columns[i["column"]] for i in self.inputs}
        out = self._signature(**kwargs)
        if self.task == "regression":
            return np.asarray(out["predictions"].numpy(), dtype=np.float64).reshape(-1)
        probs = out["probabilities"].numpy()
        probs = probs[:, [self.classes.index(c) for c in classes]]
        return probs[:, 1] if len(classes) == 2 else probs


def incompatibility(model: ExportedModel, candidate: ExportedModel, meta: DatasetMetadata) -> str:
    """Why ``model`` cannot be scored on ``meta``'s data like ``candidate`` ('' if it can)."""
    if model.label != candidate.label:
        return f"it predicts '{model.label}', not '{candidate.label}'"
    if (model.task == "regression") != (candidate.task == "regression"):
        return f"it is a {model.task} model, the candidate a {candidate.task} one"
    if set(model.classes) != set(candidate.classes):
        return (
            f"its classes ({', '.join(model.classes)}) are not the candidate's "
            f"({', '.join(candidate.classes)})"
        )
    types = {c.name: c.type for c in meta.schema.written}
    for item in model.inputs:
        column, dtype = item["column"], item["dtype"]
        if column not in types:
            return f"it needs column '{column}', which the data does not have"
        if (types[column] in ("string", "image")) != (dtype == "string"):
            return f"column '{column}' is {types[column]} here but {dtype} in its inputs"
    return ""


class _RawColumns:
    """Parses records into raw columns as serving takes them, and the label's values.

    Has the ``parse_examples``/``parse_blocks``/``image`` of a feature spec, so that
    :func:`shardtrain.train.dataset.eval_dataset` reads the split with it.
    """

    def __init__(self, meta: DatasetMetadata, columns: Sequence[str]):
        self.meta = meta
        written = {c.name: c for c in meta.schema.written}
        self.columns = {name: written[name] for name in columns}
        self.label = written[meta.label]
        self.image = next((c for c in self.columns.values() if c.type == "image"), None)

    def _features(self) -> dict[str, Any]:
        import tensorflow as tf

        from shardtrain.train.features import INT_MISSING

        def feature(kind: str) -> Any:
            if kind == "float":
                return tf.io.FixedLenFeature([], tf.float32, default_value=float("nan"))
            if kind in ("int", "bool"):
                return tf.io.FixedLenFeature([], tf.int64, default_value=INT_MISSING)
            return tf.io.FixedLenFeature([], tf.string, default_value="")

        out = {name: feature(c.type) for name, c in self.columns.items()}
        out[self.label.name] = feature(self.label.type)
        return out

    def _finish(self, parsed: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
        import tensorflow as tf

        from shardtrain.train.features import INT_MISSING

        out = {}
        for name, c in self.columns.items():
            value = parsed[name]
            if c.type in ("int", "bool"):
                missing = tf.equal(value, INT_MISSING)
                value = tf.where(missing, float("nan"), tf.cast(value, tf.float32))
            out[name] = value
        return out, parsed[self.label.name]

    def parse_examples(self, serialized: Any) -> tuple[dict[str, Any], Any]:
        import tensorflow as tf

        serialized = tf.reshape(serialized, [-1])
        return self._finish(tf.io.parse_example(serialized, self._features()))

    def parse_blocks(self, serialized: Any) -> tuple[dict[str, Any], Any]:
        import tensorflow as tf

        raw = {
            name: tf.io.RaggedFeature(f.dtype, row_splits_dtype=tf.int64)
            for name, f in self._features().items()
        }
        parsed = tf.io.parse_example(tf.reshape(serialized, [-1]), raw)
        return self._finish({k: v.flat_values for k, v in parsed.items()})


def _label_indices(values: np.ndarray, classes: Sequence[str]) -> np.ndarray:
    """Class indices of parsed label values (strings, integers or floats matched by value).

    Raises:
        DataError: a value that is none of ``classes``.
    """
    index: dict[Any, int]
    keys: list[Any]
    if values.dtype.kind in "SO":
        keys = [v.decode() if isinstance(v, bytes) else str(v) for v in values]
        index = {c: i for i, c in enumerate(classes)}
    elif values.dtype.kind == "f":
        index = {}
        for i, c in enumerate(classes):
            try:
                index[float(c)] = i
            except ValueError:
                continue
        keys = [float(v) for v in values]
    else:
        keys = [str(int(v)) for v in values]
        index = {c: i for i, c in enumerate(classes)}
    try:
        return np.array([index[k] for k in keys], dtype=np.int64)
    except KeyError as exc:
        raise DataError(f"label value {exc.args[0]!r} is not one of the classes") from None


@contextmanager
def labelled_batches(
    data_uri: str,
    meta: DatasetMetadata,
    split: str,
    columns: Sequence[str],
    *,
    task: str,
    classes: Sequence[str],
    scratch: str,
    batch_size: int = 0,
) -> Iterator[Iterator[tuple[dict[str, Any], np.ndarray]]]:
    """The batches of ``split`` as a model is scored on them: ``(raw columns, labels)``.

    The raw columns are ``columns`` as serving takes them (:class:`_RawColumns`); the labels
    are a regression's values as float64, a classifier's indices into ``classes``. The
    split's shards are staged under ``scratch`` while the context is open.

    Args:
        batch_size: rows per batch (0: :data:`BATCH_ROWS`, or :data:`IMAGE_BATCH_ROWS` when
            a column is an image).

    Raises:
        DataError: a label value that is none of ``classes`` (while iterating).
    """
    parser = _RawColumns(meta, columns)
    if not batch_size:
        batch_size = IMAGE_BATCH_ROWS if parser.image is not None else BATCH_ROWS
    with dataset.reading_split(
        data_uri, meta, split, os.path.join(scratch, "shards"), max_bytes=CACHE_BYTES
    ) as cache:
        ds = dataset.eval_dataset(
            data_uri, meta, parser, split=split, batch_size=batch_size, cache=cache
        )
        yield ((batch, _label_values(labels.numpy(), task, classes)) for batch, labels in ds)


def _label_values(values: np.ndarray, task: str, classes: Sequence[str]) -> np.ndarray:
    """A regression's label values as float64, a classifier's as indices into ``classes``."""
    return values.astype(np.float64) if task == "regression" else _label_indices(values, classes)


def _accumulator(task: str, classes: Sequence[str]) -> Any:
    return RegressionAccumulator() if task == "regression" else MetricsAccumulator(list(classes))


@dataclass
class _Scores:
    """One model's accumulators: overall and per slice (column → value → accumulator)."""

    overall: Any
    slices: dict[str, dict[str, Any]]


def score_split(
    data_uri: str,
    meta: DatasetMetadata,
    split: str,
    models: Mapping[str, ExportedModel],
    *,
    candidate: ExportedModel,
    slices: Mapping[str, Sequence[str]],
    sliced: Sequence[str] = (),
    optional: Sequence[str] = (),
    scratch: str,
) -> dict[str, dict[str, Any]]:
    """Score every model on every record of ``split`` in one pass.

    Args:
        data_uri: the dataset.
        meta: its metadata.
        split: the split to score (``eval``).
        models: the models by name (each loaded: :meth:`ExportedModel.load`).
        candidate: the model whose label classes index the labels (every model's classes
            are the same set: :func:`incompatibility`).
        slices: column → the values that get a slice of their own (the rest is
            :data:`~shardtrain.train.slices.OTHER`).
        sliced: the models (names) whose metrics are also computed per slice.
        optional: the models (names) whose failure to predict does not stop the others: the
            pass goes on without them (the baseline, whose failure blessing records).
        scratch: a local directory for staged shards.

    Returns:
        Per model: the metrics of :mod:`shardtrain.train.evaluation` plus ``task``, ``split``
        and, for the models in ``sliced``, ``slices``: ``{column: [{"value", **metrics}]}``
        (the column's values in order, then :data:`OTHER`; a value without eval rows is
        left out). A model of ``optional`` that failed: ``{"error": what failed, one line}``.
    """
    wanted = {i["column"] for m in models.values() for i in m.inputs} | set(slices)
    task, classes = candidate.task, candidate.classes
    scores = {
        name: _Scores(
            _accumulator(task, classes),
            {
                column: {v: _accumulator(task, classes) for v in (*values, OTHER)}
                for column, values in slices.items()
            }
            if name in sliced
            else {},
        )
        for name in models
    }
    failed: dict[str, str] = {}
    with labelled_batches(
        data_uri, meta, split, sorted(wanted), task=task, classes=classes, scratch=scratch
    ) as batches:
        for columns, labels in batches:
            masks = {
                column: _slice_masks(columns[column].numpy(), values)
                for column, values in slices.items()
            }
            for name, model in models.items():
                if name in failed:
                    continue
                try:
                    predictions = model.predict(columns, classes)
                    scores[name].overall.update(predictions, labels)
                except Exception as exc:  # a broken SavedModel: TensorFlow raises anything
                    if name not in optional:
                        raise
                    failed[name] = one_line(exc)
                    continue
                for column, by_value in scores[name].slices.items():
                    for value, mask in masks[column].items():
                        if mask.any():
                            by_value[value].update(predictions[mask], labels[mask])
    out: dict[str, dict[str, Any]] = {name: {"error": why} for name, why in failed.items()}
    for name, s in scores.items():
        if name in failed:
            continue
        result = {**s.overall.result(), "task": task, "split": split}
        if s.slices:
            result["slices"] = {
                column: [
                    {"value": v, **acc.result()}
                    for v, acc in by_value.items()
                    if acc.num_examples  # a value the eval split does not hold: no slice
                ]
                for column, by_value in s.slices.items()
            }
        out[name] = result
    return out


def _slice_masks(values: np.ndarray, top: Sequence[str]) -> dict[str, np.ndarray]:
    """Row masks of each of ``top``'s values and of :data:`OTHER` (the rest, missing too)."""
    masks = {v: values == v.encode() for v in top}
    rest = np.ones(len(values), dtype=bool)
    for mask in masks.values():
        rest &= ~mask
    masks[OTHER] = rest
    return masks
