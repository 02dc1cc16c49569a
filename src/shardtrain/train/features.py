"""From ``metadata.json`` to model inputs: which features, how to parse them, what the label is.

The sharder stores each CSV row as a ``tf.train.Example`` with one value per feature and a
missing value as an *absent* feature (see :mod:`shardtrain.data.schema`). :class:`FeatureSpec`
reads the dataset's schema, statistics and label classes and gives the trainer, the
evaluator and the exported model one shared view of the inputs:

* **numeric** features (``int``, ``float``, ``bool`` columns) arrive as ``float32`` with
  ``NaN`` where the value is missing, together with the column's mean and standard
  deviation from the statistics (the model normalises with them);
* **categorical** features (``string`` columns) arrive as ``string`` with ``""`` where the
  value is missing, together with the top-K vocabulary from the statistics;
* the **label** arrives as a class index ``0..num_classes-1`` (``classes`` lists the label
  values in that order) for a *binary* or *multiclass* task, or as its value (float64) for a
  *regression*, with the label's mean and standard deviation (the model learns the
  standardised value). Which task: :mod:`shardtrain.data.task` (``--task``).

Two parsers produce exactly these tensors, so training and serving cannot drift apart:
:meth:`FeatureSpec.parse_examples` for a batch of serialized Examples (training, evaluation)
and :meth:`FeatureSpec.parse_csv` for a batch of raw CSV lines (the exported model's
``predict_csv`` signature).

Example::

    spec = FeatureSpec.from_metadata(DatasetMetadata.load("s3://bucket/quest"))
    ds = tf.data.TFRecordDataset(files).batch(512).map(spec.parse_examples)
    # -> ({"player_level": <float32 [512]>, "region": <string [512]>, ...}, <int64 [512]>)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shardtrain.data import column_blocks
from shardtrain.data.task import choose_task
from shardtrain.errors import ConfigError, DataError
from shardtrain.train import csv_input, dates
from shardtrain.train.image_size import image_size_from_stats
from shardtrain.train.names import input_names
from shardtrain.train.screening import LeftOut, no_signal

if TYPE_CHECKING:
    from shardtrain.data.metadata import DatasetMetadata
    from shardtrain.data.report import SummaryTable

log = logging.getLogger(__name__)

#: Column types stored as numbers in the Examples; parsed as float32 for the model.
NUMERIC_TYPES = ("int", "float", "bool")
#: What a missing int/bool parses as before it becomes NaN (the one int64 never seen in data
#: a model could use: it would also be read as missing). Columnar blocks store it explicitly.
INT_MISSING = column_blocks.INT_MISSING


class _DefaultInputName:
    """A feature whose ``input_name`` defaults to the one derived from its ``name`` alone
    (:func:`FeatureSpec.from_metadata` gives names unique over the whole dataset)."""

    name: str
    input_name: str

    def __post_init__(self) -> None:
        if not self.input_name:
            object.__setattr__(self, "input_name", input_names([self.name])[self.name])


@dataclass(frozen=True)
class NumericFeature(_DefaultInputName):
    """A numeric input: parsed as float32, NaN when missing.

    Attributes:
        name: column name.
        type: the schema type (``int``, ``float`` or ``bool``), which fixes the Example kind.
        mean: mean of the present values (0 when unknown).
        std: standard deviation of the present values (1 when unknown or zero).
        has_missing: the statistics saw missing values (or NaNs) in this column.
        input_name: the name TensorFlow and Keras know the input by (Keras ``Input`` layers,
            serving signature inputs): ``name`` when valid, else derived from it
            (:mod:`shardtrain.train.names`) [default: derived from ``name`` alone].
        source: for a part of a date column (``Date Egg (seconds)``), that column's name: the
            value is computed from it (:class:`DateFeature`), not read from the data.
    """

    name: str
    type: str
    mean: float = 0.0
    std: float = 1.0
    has_missing: bool = False
    input_name: str = ""
    source: str = ""


@dataclass(frozen=True)
class CategoricalFeature(_DefaultInputName):
    """A string input: parsed as string, ``""`` when missing.

    Attributes:
        name: column name.
        vocabulary: the most frequent values (from the statistics), most frequent first;
            anything else — including missing — is out of vocabulary.
        input_name: as in :class:`NumericFeature`.
    """

    name: str
    vocabulary: tuple[str, ...] = ()
    input_name: str = ""


@dataclass(frozen=True)
class DateFeature(_DefaultInputName):
    """A string column of ISO-8601 dates or timestamps, read as time
    (:mod:`shardtrain.train.dates`): its model features are the numeric :attr:`parts`.

    Attributes:
        name: column name.
        input_name: as in :class:`NumericFeature` (the serving input of the date strings).
        mean: mean of the dates' seconds since 1970 (from the statistics' top values).
        std: their standard deviation.
        with_time: the values have a time of day (adds the hour parts).
    """

    name: str
    input_name: str = ""
    mean: float = 0.0
    std: float = 1.0
    with_time: bool = False

    @property
    def parts(self) -> tuple[str, ...]:
        """The names of its numeric model features: ``"<name> (seconds)"``, ..."""
        return tuple(
            f"{self.name} ({suffix})"
            for suffix, timed in dates.PARTS
            if self.with_time or not timed
        )

    def describe(self) -> str:
        """``'date feature: seconds, day of week'`` (and ``hour`` for timestamps)."""
        what = "timestamp" if self.with_time else "date"
        return f"{what} feature: seconds, day of week{', hour' if self.with_time else ''}"


@dataclass(frozen=True)
class ImageFeature:
    """An encoded image input (JPEG/PNG bytes), decoded and resized in the input pipeline.

    Attributes:
        name: the feature holding the encoded bytes (``image``).
        height: height the images are resized to for the model.
        width: width the images are resized to for the model.
    """

    name: str = "image"
    height: int = 224
    width: int = 224


def _label_head(
    metadata: DatasetMetadata, label_type: str, task: str, where: str
) -> dict[str, Any]:
    """The :class:`FeatureSpec` fields of the label's task: ``task``, ``classes`` and, for a
    regression, ``label_mean``/``label_std`` from the label's statistics (older datasets
    have only the counts of its values: the figures come from those)."""
    label = metadata.label
    stats = metadata.stats.label
    counts = None if stats.get("many_values") else dict(stats.get("counts") or {})
    choice = choose_task(label, label_type, counts, task, where=where)
    log.info("label '%s': %s (%s)", label, choice.task, choice.reason)
    if choice.task != "regression":
        classes = metadata.label_info.classes or tuple(counts or ())
        return {"task": choice.task, "classes": tuple(classes)}
    numeric = stats.get("numeric") or {}
    if numeric.get("nan"):
        raise DataError(
            f"{where}: label '{label}' holds {numeric['nan']:,} NaN or infinite value(s); a "
            "regression needs finite labels (reject or drop those rows)"
        )
    mean, std = numeric.get("mean"), numeric.get("std")
    if mean is None and counts:
        n = sum(counts.values())
        mean = sum(float(v) * k for v, k in counts.items()) / n
        std = math.sqrt(sum(k * (float(v) - mean) ** 2 for v, k in counts.items()) / n)
    mean = float(mean) if mean is not None and math.isfinite(mean) else 0.0
    std = float(std) if std is not None and math.isfinite(std) and std > 0 else 1.0
    return {"task": "regression", "classes": (), "label_mean": mean, "label_std": std}


def _csv_dialect(metadata: DatasetMetadata) -> dict[str, Any]:
    """How the source CSV writes its fields (``metadata.json``'s ``options.csv_dialect``; a
    dataset from Parquet, JSON lines or an older sharder: plain comma-separated)."""
    dialect = metadata.options.get("csv_dialect") or {}
    return {
        "csv_delimiter": str(dialect.get("delimiter") or ","),
        "csv_decimal": str(dialect.get("decimal") or "."),
        "csv_skip_initial_space": bool(dialect.get("skip_initial_space")),
    }


@dataclass(frozen=True)
class FeatureSpec:
    """The model's inputs and label, derived from a dataset's ``metadata.json``.

    Attributes:
        numeric: numeric features, in CSV column order.
        categorical: categorical features, in CSV column order.
        label: the label column's name.
        label_type: the label column's schema type (``int``, ``float``, ``bool`` or
            ``string``).
        classes: label values as strings, index = class id (``["0", "1"]`` for 0/1 labels);
            empty for a regression.
        csv_columns: every column of the source CSV, in order, as ``(name, type)``: what the
            ``predict_csv`` serving signature parses.
        null_values: CSV field values that mean "missing".
        csv_delimiter: the source CSV's field delimiter (``predict_csv`` reads lines in the
            dialect the data was sharded in).
        csv_decimal: its decimal mark (``.``, or ``,`` for ``--decimal ,``).
        csv_skip_initial_space: the source pads fields with spaces after each delimiter
            (``--skip-initial-space``).
        excluded: columns written by the sharder but not used by the model.
        key: the split key column (a row identifier, used to name sample predictions).
        key_type: its schema type.
        image: for image datasets, the image input; numeric and categorical are then empty.
        left_out: why each of ``excluded`` is left out (:class:`LeftOut`), in CSV order.
        dates: string columns read as time (:class:`DateFeature`); their parts are in
            ``numeric`` (with ``source`` set), the columns themselves are serving inputs.
        task: ``binary``, ``multiclass`` or ``regression`` ('': binary for two classes,
            else multiclass).
        label_mean: a regression label's mean in the dataset statistics (the model predicts
            ``(label - label_mean) / label_std``, the exported model the label itself).
        label_std: its standard deviation (1 when unknown or zero).
    """

    numeric: tuple[NumericFeature, ...]
    categorical: tuple[CategoricalFeature, ...]
    label: str
    label_type: str
    classes: tuple[str, ...]
    csv_columns: tuple[tuple[str, str], ...] = ()
    null_values: tuple[str, ...] = ("",)
    csv_delimiter: str = ","
    csv_decimal: str = "."
    csv_skip_initial_space: bool = False
    excluded: tuple[str, ...] = field(default=())
    key: str | None = None
    key_type: str = "string"
    image: ImageFeature | None = None
    left_out: tuple[LeftOut, ...] = ()
    dates: tuple[DateFeature, ...] = ()
    task: str = ""
    label_mean: float = 0.0
    label_std: float = 1.0

    def __post_init__(self) -> None:
        if not self.task:
            object.__setattr__(self, "task", "binary" if len(self.classes) == 2 else "multiclass")

    @property
    def num_classes(self) -> int:
        """Number of label classes (2 for a binary task, 0 for a regression)."""
        return len(self.classes)

    @property
    def is_binary(self) -> bool:
        """True for a two-class label: the model has one logit and a sigmoid."""
        return self.task == "binary"

    @property
    def is_regression(self) -> bool:
        """True when the model predicts the label's (standardised) value."""
        return self.task == "regression"

    @property
    def output_width(self) -> int:
        """The model's outputs per example: 1 (binary logit, regression value) or one logit
        per class."""
        return 1 if self.is_binary or self.is_regression else self.num_classes

    @property
    def feature_names(self) -> tuple[str, ...]:
        """Every input feature's name: numeric first, then categorical (or the image)."""
        if self.image is not None:
            return (self.image.name,)
        return tuple(f.name for f in self.numeric) + tuple(f.name for f in self.categorical)

    @property
    def renamed_inputs(self) -> dict[str, str]:
        """``{column: input name}`` of the features TensorFlow knows by another name."""
        pairs = [(f.name, f.input_name) for f in self.numeric]
        pairs += [(f.name, f.input_name) for f in self.categorical]
        pairs += [(f.name, f.input_name) for f in self.dates]
        return {name: input_name for name, input_name in pairs if input_name != name}

    @classmethod
    def from_metadata(
        cls,
        metadata: DatasetMetadata,
        *,
        exclude: Sequence[str] = (),
        include: Sequence[str] = (),
        where: str = "dataset",
        image_size: int | None = None,
        task: str = "auto",
    ) -> FeatureSpec:
        """Build the spec from a committed dataset's metadata.

        Every column the sharder wrote becomes a feature except the label, the split key
        (a row identifier carries no signal and would only be memorised), ``exclude``, and
        the columns the statistics show to carry no signal — all missing, constant or
        ID-like (:mod:`shardtrain.train.screening`) — unless ``include`` names them.
        :attr:`left_out` says why each column is left out. A string column of ISO-8601
        dates or timestamps becomes a :class:`DateFeature` (its numeric parts join
        ``numeric``; it is never ID-like). Each feature's ``input_name`` comes from
        :func:`shardtrain.train.names.input_names` over every column of the dataset.

        Args:
            metadata: the dataset's ``metadata.json`` (:class:`DatasetMetadata`).
            exclude: further column names to leave out of the model.
            include: columns to keep as features although they look like they carry no
                signal.
            where: the dataset URI, for error messages.
            image_size: image datasets: the square size images are resized to; None: the
                size the statistics suggest (:func:`image_size_from_stats`).
            task: ``auto``, ``binary``, ``multiclass`` or ``regression``
                (:func:`~shardtrain.data.task.choose_task`).

        An image dataset (``data_kind`` ``image``, a column of type ``image``) gives a spec
        with just the image input: its height/width/format/path columns describe the files
        and are not features.

        Raises:
            DataError: the label cannot be trained for ``task`` or has a single value.
            ConfigError: ``exclude`` or ``include`` names a column the dataset does not
                have, ``include`` names the label or the split key, or a column is in both.
        """
        schema = metadata.schema
        columns = schema.columns
        stats = metadata.stats.columns
        label, key = metadata.label, metadata.key
        for flag, names in (("exclude", exclude), ("include", include)):
            unknown = [n for n in dict.fromkeys(names) if n not in schema.names]
            if unknown:
                raise ConfigError(
                    f"{where}: cannot {flag} unknown column(s) {', '.join(map(repr, unknown))}"
                )
        clash = [n for n in include if n in (label, key) or n in exclude]
        if clash:
            raise ConfigError(
                f"{where}: --include {clash[0]!r}: it is the label, the split key or excluded"
            )
        label_type = schema.column(label).type
        head = _label_head(metadata, label_type, task, where)
        image_cols = [c.name for c in columns if c.type == "image"]
        if image_cols:
            if image_size is None:
                image_size, _ = image_size_from_stats(stats.get(image_cols[0]))
            others = [c.name for c in columns if c.name not in (label, image_cols[0])]
            return cls(
                numeric=(),
                categorical=(),
                label=label,
                label_type=label_type,
                excluded=tuple(others),
                key=key,
                image=ImageFeature(name=image_cols[0], height=image_size, width=image_size),
                left_out=tuple(LeftOut(n, "not an image input") for n in others),
                **head,
            )
        as_time = {
            c.name: found
            for c in columns
            if c.type == "string" and (found := dates.date_stats(stats.get(c.name))) is not None
        }
        parts = {name: DateFeature(name, with_time=t[2]).parts for name, t in as_time.items()}
        tf_names = input_names(
            [*(c.name for c in columns), *(p for names in parts.values() for p in names)]
        )
        numeric: list[NumericFeature] = []
        categorical: list[CategoricalFeature] = []
        date_features: list[DateFeature] = []
        left_out: list[LeftOut] = []
        for col in columns:
            name, kind = col.name, col.type
            if col.drop or name == label:
                continue
            st = stats.get(name, {})
            why = None
            if name == key:
                why = LeftOut(name, "split key")
            elif name in exclude:
                why = LeftOut(name, "--exclude")
            elif name not in include:
                why = no_signal(name, kind, st)
                if why is not None and why.reason == "ID-like" and name in as_time:
                    why = None  # a timestamp per row is a time, not an identifier
            if why is not None:
                left_out.append(why)
                continue
            if kind in NUMERIC_TYPES:
                std = st.get("std") or 1.0
                numeric.append(
                    NumericFeature(
                        name=name,
                        type=kind,
                        mean=float(st.get("mean") or 0.0),
                        std=float(std) if math.isfinite(std) and std > 0 else 1.0,
                        has_missing=bool(st.get("missing") or st.get("nan")),
                        input_name=tf_names[name],
                    )
                )
            elif name in as_time:
                mean, std, with_time = as_time[name]
                date_features.append(DateFeature(name, tf_names[name], mean, std, with_time))
                numeric.extend(
                    NumericFeature(
                        part, "float", has_missing=True, input_name=tf_names[part], source=name
                    )
                    for part in parts[name]
                )
            else:
                vocab = tuple(str(t["value"]) for t in st.get("top", ()) if t["value"] != "")
                categorical.append(
                    CategoricalFeature(name=name, vocabulary=vocab, input_name=tf_names[name])
                )
        if not numeric and not categorical:
            reasons = "; ".join(f"{o.column}: {o.describe()}" for o in left_out)
            raise DataError(
                f"{where}: no feature columns left besides the label"
                + (f" (left out: {reasons}; --include COLUMN keeps one)" if reasons else "")
            )
        return cls(
            numeric=tuple(numeric),
            categorical=tuple(categorical),
            label=label,
            label_type=label_type,
            csv_columns=tuple((c.name, c.type) for c in columns),
            null_values=tuple(schema.null_values),
            **_csv_dialect(metadata),
            excluded=tuple(o.column for o in left_out),
            key=key,
            key_type=schema.column(key).type if key else "string",
            left_out=tuple(left_out),
            dates=tuple(date_features),
            **head,
        )

    # ----------------------------------------------------------------------------------------
    # Parsing (TensorFlow is imported lazily: building a spec must stay cheap)
    # ----------------------------------------------------------------------------------------

    def _raw_features(self) -> dict[str, Any]:
        """``parse_example`` features: fixed-length with a default that marks "missing".

        Fixed-length parsing is several times faster than ragged/var-len parsing. A missing
        float parses as NaN, a missing string as ``""`` (the sharder stores ``""`` as
        missing too), a missing int/bool as :data:`INT_MISSING`, turned into NaN below.
        """
        import tensorflow as tf

        spec: dict[str, Any] = {}
        if self.image is not None:
            spec[self.image.name] = tf.io.FixedLenFeature([], tf.string)
        for f in self.numeric:
            if f.source:
                continue  # a part of a date column: computed, not stored
            if f.type == "float":
                spec[f.name] = tf.io.FixedLenFeature([], tf.float32, default_value=float("nan"))
            else:
                spec[f.name] = tf.io.FixedLenFeature([], tf.int64, default_value=INT_MISSING)
        for name in [c.name for c in self.categorical] + [d.name for d in self.dates]:
            spec[name] = tf.io.FixedLenFeature([], tf.string, default_value="")
        kind = {"string": tf.string, "float": tf.float32}.get(self.label_type, tf.int64)
        spec[self.label] = tf.io.FixedLenFeature([], kind)
        return spec

    def parse_examples(self, serialized, *, with_key: bool = False):
        """Parse a *batch* of serialized Examples into ``(features, label_index)``.

        Batch first, then parse: ``tf.io.parse_example`` on a whole batch is vectorised and
        about ten times faster than parsing record by record.

        Args:
            serialized: string tensor ``[batch]`` of serialized ``tf.train.Example``.
            with_key: also return the split key column as strings (``""`` when missing), for
                naming sample predictions.

        Returns:
            ``features``: ``{name: float32 [batch] (NaN = missing) or string [batch] ("" =
            missing)}``; ``label_index``: int64 ``[batch]``, the index into :attr:`classes`
            (a regression: the label's value, float64 ``[batch]``); with ``with_key``, a
            third element: the key strings.
        """
        import tensorflow as tf

        raw = self._raw_features()
        if with_key and self.key:
            dtype = self._key_dtype()
            raw[self.key] = tf.io.FixedLenFeature([], dtype, default_value=tf.zeros([], dtype))
        serialized = tf.reshape(serialized, [-1])  # a batch: rank 1, even if unknown upstream
        return self._model_inputs(tf.io.parse_example(serialized, raw), with_key)

    def parse_blocks(self, serialized, *, with_key: bool = False):
        """Parse a batch of *columnar* records (:mod:`shardtrain.data.column_blocks`): every
        row of every block, in order, as :meth:`parse_examples` returns them.

        One ``tf.io.parse_example`` call over the blocks (each feature a ragged list per
        block, flattened): the per-record cost is paid once per block of up to 256 rows.

        Args:
            serialized: string tensor ``[blocks]`` of serialized block Examples.
            with_key: as in :meth:`parse_examples`.
        """
        import tensorflow as tf

        if self.image is not None:
            raise DataError("columnar records hold tabular data, not images")
        raw = {
            name: tf.io.RaggedFeature(feature.dtype, row_splits_dtype=tf.int64)
            for name, feature in self._raw_features().items()
        }
        if with_key and self.key:
            raw[self.key] = tf.io.RaggedFeature(self._key_dtype(), row_splits_dtype=tf.int64)
        serialized = tf.reshape(serialized, [-1])
        parsed = tf.io.parse_example(serialized, raw)
        return self._model_inputs({k: v.flat_values for k, v in parsed.items()}, with_key)

    def _key_dtype(self):
        import tensorflow as tf

        return {"string": tf.string, "float": tf.float32}.get(self.key_type, tf.int64)

    def _model_inputs(self, parsed, with_key: bool):
        """Parsed raw columns (``{name: [rows]}``, missing values as defaults) → the model's
        ``(features, label_index[, keys])``."""
        import tensorflow as tf

        features = {}
        for f in self.numeric:
            if f.source:
                continue
            value = parsed[f.name]
            if f.type != "float":
                missing = tf.equal(value, INT_MISSING)
                value = tf.where(missing, float("nan"), tf.cast(value, tf.float32))
            features[f.name] = value
        for c in self.categorical:
            features[c.name] = parsed[c.name]
        features.update(self.date_parts(parsed))
        if self.image is not None:
            features[self.image.name] = self.decode_images(parsed[self.image.name])
        labels = self.label_targets(parsed[self.label])
        if not with_key:
            return features, labels
        if self.key:
            key = parsed[self.key]
            keys = key if key.dtype == tf.string else tf.strings.as_string(key)
        else:
            keys = tf.fill(tf.shape(labels), "")
        return features, labels, keys

    def decode_images(self, encoded):
        """Decode a batch of JPEG/PNG bytes into float32 ``[batch, height, width, 3]`` in [0, 1].

        Each image is turned as its EXIF orientation says it is shown (a phone's portrait
        photo is stored sideways; :mod:`.orientation`), then resized (bilinear) to the spec's
        size whatever its own size, so a batch of mixed sizes and formats becomes one tensor.
        """
        import tensorflow as tf

        from shardtrain.train.orientation import exif_orientation, orient

        assert self.image is not None, "decode_images is for image datasets"
        h, w = self.image.height, self.image.width

        def one(data):
            img = tf.io.decode_image(data, channels=3, expand_animations=False)
            img = orient(img, exif_orientation(data))
            img = tf.image.convert_image_dtype(img, tf.float32)
            return tf.image.resize(img, [h, w])

        return tf.map_fn(one, encoded, fn_output_signature=tf.TensorSpec([h, w, 3], tf.float32))

    def augment(self, features, labels):
        """Training-time augmentation of image batches (random flips, brightness, contrast)."""
        import tensorflow as tf

        if self.image is None:
            return features, labels
        img = features[self.image.name]
        img = tf.image.random_flip_left_right(img)
        img = tf.image.random_brightness(img, 0.1)
        img = tf.clip_by_value(tf.image.random_contrast(img, 0.9, 1.1), 0.0, 1.0)
        return {**features, self.image.name: img}, labels

    def label_targets(self, values):
        """What the model learns from parsed label values: class indices (:meth:`label_index`),
        or for a regression the values as float64."""
        import tensorflow as tf

        if self.is_regression:
            return tf.cast(values, tf.float64)
        return self.label_index(values)

    def standardize(self, labels):
        """A regression's label values (float64) → the float32 target the model learns."""
        import tensorflow as tf

        return tf.cast((labels - self.label_mean) / self.label_std, tf.float32)

    def destandardize(self, outputs, dtype=None):
        """The model's regression outputs (``[batch, 1]`` or ``[batch]``) → values in the
        label's units, ``[batch]`` of ``dtype`` (default float32), computed in float64 (a
        label far from zero, e.g. a timestamp, keeps its digits)."""
        import tensorflow as tf

        z = tf.cast(tf.reshape(outputs, [-1]), tf.float64)
        return tf.cast(z * self.label_std + self.label_mean, dtype or tf.float32)

    def label_index(self, values):
        """Map label values (as parsed: int64, float32 or string) to class indices (int64)."""
        import tensorflow as tf

        if values.dtype.is_floating:
            index = self._float_label_index(values)
        else:
            keys = values if values.dtype == tf.string else tf.strings.as_string(values)
            table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(
                    tf.constant(self.classes), tf.range(self.num_classes, dtype=tf.int64)
                ),
                default_value=-1,
            )
            index = table.lookup(keys)
        check = tf.debugging.assert_non_negative(
            index, message=f"label '{self.label}' holds a value that is not one of its classes"
        )
        with tf.control_dependencies([check]):
            return tf.identity(index)

    def _float_label_index(self, values):
        """Class indices of float label values (a float column trained as classes): found
        by value among the sorted classes ("1.0" and the parsed 1.0 are not equal as text);
        -1 for a value that is no class."""
        import tensorflow as tf

        numbers = sorted((float(c), i) for i, c in enumerate(self.classes))
        keys = tf.constant([v for v, _ in numbers], tf.float32)
        ids = tf.constant([i for _, i in numbers], tf.int64)
        pos = tf.minimum(tf.searchsorted(keys, values), len(numbers) - 1)
        found = tf.equal(tf.gather(keys, pos), values)
        return tf.where(found, tf.gather(ids, pos), tf.constant(-1, tf.int64))

    def parse_csv(self, lines):
        """Parse a batch of raw CSV lines (no header, the source's column order) into features.

        The lines are read as the sharder read the source (:mod:`shardtrain.train.csv_input`):
        in its dialect (delimiter, decimal mark, ``--skip-initial-space``), with its null
        values, ``true``/``false`` spellings as 1/0, and one line end taken off each line as
        ``readlines()`` leaves it (``\\n``, or ``\\r\\n`` read with ``newline=""``). The label
        and any other columns are read and ignored.

        Args:
            lines: string tensor ``[batch]``.

        Returns:
            The same ``features`` dict as :meth:`parse_examples`.
        """
        fields = csv_input.read_fields(
            lines,
            [n for n, _ in self.csv_columns],
            delimiter=self.csv_delimiter,
            skip_initial_space=self.csv_skip_initial_space,
        )
        nulls = csv_input.null_table(self.null_values)
        features = {
            f.name: csv_input.number(
                fields[f.name], f.name, f.type, nulls, decimal=self.csv_decimal
            )
            for f in self.numeric
            if not f.source
        }
        features.update({c.name: csv_input.text(fields[c.name], nulls) for c in self.categorical})
        features.update(self.date_parts({d.name: fields[d.name] for d in self.dates}))
        return features

    def date_parts(self, texts: Mapping[str, Any]) -> dict[str, Any]:
        """The numeric parts of every date column, from ``{column: string [batch]}``."""
        out: dict[str, Any] = {}
        for d in self.dates:
            values = dates.time_parts(texts[d.name], mean=d.mean, std=d.std, with_time=d.with_time)
            out.update(zip(d.parts, values, strict=True))
        return out

    def model_features(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Serving inputs (:meth:`input_signature`, by column name) → the model's features:
        the same, with each date column replaced by its parts."""
        date_columns = {d.name for d in self.dates}
        features = {k: v for k, v in raw.items() if k not in date_columns}
        features.update(self.date_parts(raw))
        return features

    def input_signature(self) -> dict[str, Any]:
        """``{name: tf.TensorSpec}`` of the raw features as serving takes them.

        Tabular: one ``[batch]`` tensor per column, keyed by the column's name; the spec is
        named by its ``input_name``, which is what a SavedModel signature calls the input.
        Images: the encoded bytes ``[batch]``.
        """
        import tensorflow as tf

        if self.image is not None:
            return {self.image.name: tf.TensorSpec([None], tf.string, name=self.image.name)}
        sig = {
            f.name: tf.TensorSpec([None], tf.float32, name=f.input_name)
            for f in self.numeric
            if not f.source
        }
        strings = [(f.name, f.input_name) for f in self.categorical]
        strings += [(f.name, f.input_name) for f in self.dates]
        sig.update({n: tf.TensorSpec([None], tf.string, name=i) for n, i in strings})
        return sig


def inputs_table(spec: FeatureSpec) -> SummaryTable:
    """How training uses each column of a tabular dataset, for ``shardtrain inspect``.

    One row per column, in CSV order: its use (numeric or categorical feature, label, or
    left out and why) and, for features, the name of its input in TensorFlow and in the
    export's ``serving_default`` (the column's own name unless TensorFlow refuses it).
    """
    from shardtrain.data.report import SummaryTable

    kinds = {f.name: ("numeric feature", f.input_name) for f in spec.numeric if not f.source}
    kinds.update({f.name: ("categorical feature", f.input_name) for f in spec.categorical})
    kinds.update({f.name: (f.describe(), f.input_name) for f in spec.dates})
    why = {o.column: o for o in spec.left_out}
    rows = []
    for name, _ in spec.csv_columns:
        if name in kinds:
            use, input_name = kinds[name]
        elif name == spec.label:
            use, input_name = "label", "-"
        elif name in why:
            out = why[name]
            keep = " (--include keeps it)" if out.automatic else ""
            use, input_name = f"left out: {out.describe()}{keep}", "-"
        else:
            continue  # dropped by the sharder: not in the Examples
        rows.append((name, use, input_name))
    return SummaryTable(
        "model inputs", ("column", "use in training", "TensorFlow input"), tuple(rows)
    )
