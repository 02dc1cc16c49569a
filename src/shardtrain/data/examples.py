"""Arrow tables → ``tf.train.Example`` records: the bridge from typed batches to the encoder.

Sources deliver rows as Arrow columns typed by the schema; the compiled encoder
(:mod:`shardtrain.kernels.example_encode`) takes flat NumPy buffers. :func:`encoder_input` hands it
each written column's buffers as they are (no copy, no filling of missing values: the encoder
skips them), and :func:`encode` encodes a whole table.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardtrain.data.schema import Schema
from shardtrain.kernels import arrow, example_encode


def feature_columns(schema: Schema) -> list[example_encode.FeatureColumn]:
    """The features every Example of a dataset has, in schema order."""
    return [example_encode.FeatureColumn(c.name, c.example_kind) for c in schema.written]  # type: ignore[arg-type]


def _column_data(values: pa.Array, kind: str) -> tuple:
    values = arrow.contiguous(values)
    valid = None
    if values.null_count:
        valid = arrow.valid_mask(values)
    if kind == "bytes":
        if values.type not in (pa.string(), pa.binary()):  # binary: encoded images
            values = pc.cast(values, pa.string())
        return (*arrow.string_buffers(values), valid)
    if values.type not in arrow.NUMPY_TYPES:  # bool (bit-packed in Arrow), or a type the
        # parsers do not produce
        values = pc.cast(values, pa.float64() if kind == "float" else pa.int64())
    # The values buffer as it is (the encoder skips missing values, so what a null's slot
    # holds does not matter): no copy, no filling.
    return arrow.to_numpy(values), valid


def encoder_input(table: pa.Table, schema: Schema) -> tuple[list, list]:
    """The features and their column data, as :func:`example_encode.encode_examples` takes them."""
    columns = feature_columns(schema)
    return columns, [_column_data(table.column(c.name), c.kind) for c in columns]


def encode(
    table: pa.Table, schema: Schema, *, order: np.ndarray | None = None, framed: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Encode every row of ``table`` as an Example (TFRecord-framed with ``framed``).

    Returns:
        The records back to back and their ``num_rows + 1`` offsets.
    """
    columns, arrays = encoder_input(table, schema)
    return example_encode.encode_examples(
        columns, arrays, table.num_rows, order=order, framed=framed
    )
