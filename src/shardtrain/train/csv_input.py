"""Raw CSV lines to column values, in TensorFlow ops: what the exported model's ``predict_csv``
signature reads (:meth:`shardtrain.train.features.FeatureSpec.parse_csv` puts them together).

The sharder reads the CSV in compiled code; a served model reads it in its own graph. The
rules here are the sharder's, so a line scores as the row it became in the shards:

* a line is read in the source's dialect (delimiter, decimal mark, ``--skip-initial-space``)
  and loses one line end, as the sharder ends a line before its line feed and one carriage
  return;
* a line with another number of fields, or a number column holding something that is not a
  number, fails with one message naming the columns or the column and the value (not
  ``decode_csv``'s bare "Expect N fields" or ``to_number``'s "could not correctly convert");
* a field equal to one of the dataset's null values is missing: NaN for a number column,
  ``""`` for a string column; ``true``/``false`` spellings become 1/0.

Example::

    fields = read_fields(lines, ["x", "city", "label"], delimiter=",", skip_initial_space=False)
    nulls = null_table(("", "NA"))
    x = number(fields["x"], "x", "float", nulls, decimal=".")  # float32 [batch], NaN if missing
    city = text(fields["city"], nulls)  # string [batch], "" if missing
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = ["null_table", "number", "read_fields", "text"]

#: What ``predict_csv`` reads as a number (``tf.strings.to_number``'s decimal forms): digits
#: with a point and an exponent, signed, or inf/infinity/nan in any case.
_NUMERAL = r"[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|(?i:inf|infinity|nan))"


def read_fields(
    lines, names: Sequence[str], *, delimiter: str, skip_initial_space: bool
) -> dict[str, Any]:
    """Split a batch of raw CSV lines into ``{column: string [batch]}``, in ``names``' order.

    One line end is taken off each line (``\\n``, ``\\r\\n`` or ``\\r``). With
    ``skip_initial_space`` the spaces after each delimiter (before a quoted field, and at the
    start of an unquoted one) are skipped; a quoted field's own leading spaces are then lost
    too. Quoted fields may hold the delimiter and doubled quotes.

    Args:
        lines: string tensor ``[batch]``, without a header.
        names: every column of the source, in order.
        delimiter: the source's field delimiter.
        skip_initial_space: the source pads fields with spaces after each delimiter.

    Raises:
        tf.errors.InvalidArgumentError: a line has another number of fields than ``names``
            (the message names the expected columns).
    """
    import tensorflow as tf

    lines = tf.strings.regex_replace(lines, "\r?\n$|\r$", "", replace_global=False)
    # A line with another number of fields: one message naming the expected columns
    # instead of decode_csv's bare "Expect N fields". Separators inside quotes (a quoted
    # field, doubled quotes included) are not counted.
    escaped = re.escape(delimiter)
    if skip_initial_space:
        lines = tf.strings.regex_replace(lines, f'(^|{escaped}) +"', '\\1"')
    unquoted = tf.strings.regex_replace(lines, '"[^"]*"', "")
    separators = tf.strings.length(unquoted) - tf.strings.length(
        tf.strings.regex_replace(unquoted, escaped, "")
    )
    shown = ", ".join(names[:20]) + (f", ... ({len(names)} in all)" if len(names) > 20 else "")
    separated = "comma-separated" if delimiter == "," else f"{delimiter!r}-separated"
    check = tf.debugging.assert_equal(
        separators + 1,
        tf.fill(tf.shape(separators), len(names)),
        message=(
            f"predict_csv: every line must have {len(names)} {separated} fields, the "
            f"dataset's columns in their source order, without a header: {shown}; a line "
            "has another number of fields"
        ),
        summarize=1,
    )
    with tf.control_dependencies([check]):
        lines = tf.identity(lines)
    fields = tf.io.decode_csv(
        lines, record_defaults=[[""]] * len(names), field_delim=delimiter, na_value="\x00"
    )
    if skip_initial_space:
        fields = [tf.strings.regex_replace(f, "^ +", "") for f in fields]
    return dict(zip(names, fields, strict=True))


def null_table(null_values: Sequence[str]):
    """The dataset's null values as the string tensor :func:`number` and :func:`text` take
    (``[""]`` when there are none: an empty field is then missing, as in the sharder)."""
    import tensorflow as tf

    return tf.constant(list(null_values) or [""])


def _missing(fields, nulls):
    """True where a field equals one of ``nulls``."""
    import tensorflow as tf

    return tf.reduce_any(tf.equal(tf.expand_dims(fields, -1), nulls), axis=-1)


def number(fields, column: str, kind: str, nulls, *, decimal: str):
    """A number column's fields (string ``[batch]``) as float32, NaN where missing.

    Args:
        fields: the column's fields, as :func:`read_fields` gives them.
        column: its name, for the message of a value that is not a number.
        kind: its schema type: ``bool`` (a ``true`` spelling is 1, anything else 0),
            ``int`` or ``float``.
        nulls: :func:`null_table`.
        decimal: the source's decimal mark (``.``, or ``,`` for ``--decimal ,``).

    Raises:
        tf.errors.InvalidArgumentError: a field is neither a number nor a null value (e.g.
            spreadsheet junk such as ``#REF!``, which the sharder rejects as bad_value).
    """
    import tensorflow as tf

    missing = _missing(fields, nulls)
    if kind == "bool":
        lowered = tf.strings.lower(tf.strings.strip(fields))
        value = tf.cast(tf.equal(lowered, "true"), tf.float32)
    else:
        numeral = tf.strings.strip(fields)
        if decimal != ".":
            numeral = tf.strings.regex_replace(numeral, re.escape(decimal), ".")
        safe = tf.where(missing, tf.fill(tf.shape(fields), "0"), numeral)
        is_numeral = tf.strings.regex_full_match(safe, _NUMERAL)
        check = tf.debugging.Assert(
            tf.reduce_all(is_numeral),
            [
                f"predict_csv: column {column!r} takes numbers (or a null value); a line holds:",
                tf.boolean_mask(fields, tf.logical_not(is_numeral)),
            ],
            summarize=1,
        )
        with tf.control_dependencies([check]):
            value = tf.strings.to_number(safe, tf.float32)
    return tf.where(missing, float("nan"), value)


def text(fields, nulls):
    """A string column's fields (string ``[batch]``), ``""`` where missing."""
    import tensorflow as tf

    return tf.where(_missing(fields, nulls), tf.fill(tf.shape(fields), ""), fields)
