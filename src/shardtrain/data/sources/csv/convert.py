"""Converting the text columns of a block to their types, value by value, with the rows that
do not convert."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardtrain.data.schema import FALSE_VALUES, FLOAT_PATTERN, INT_PATTERN, TRUE_VALUES
from shardtrain.kernels import arrow

#: Said of a rejected float with a point when the decimal mark is a comma: the point is neither
#: a decimal mark nor a thousands separator (Excel's 1.234,5), so the value is not a number.
POINT_IN_DECIMAL_COMMA = (
    " (a '.' with --decimal ,: neither 1.5 nor thousands separators as in 1.234,5 are read)"
)


def with_decimal_point(strings: pa.Array, decimal: str) -> pa.Array:
    """Float text written with the decimal mark ``decimal`` as text with a decimal point:
    ``1,5`` becomes ``1.5``, and ``1.5`` becomes ``1;5``, which is no number (as in pandas)."""
    if decimal == ".":
        return strings
    return pc.replace_substring(pc.replace_substring(strings, ".", ";"), decimal, ".")


def safe_convert(
    strings: pa.Array, column_type: str, decimal: str = "."
) -> tuple[pa.Array, np.ndarray]:
    """Convert strings to ``column_type`` (floats written with the decimal mark ``decimal``);
    return the values and a mask of unparsable rows."""
    if column_type == "float":
        strings = with_decimal_point(strings, decimal)
    target = {"int": pa.int64(), "float": pa.float32(), "bool": pa.bool_()}[column_type]
    try:
        if column_type == "bool":
            raise pa.ArrowInvalid("booleans are matched explicitly")
        return pc.cast(strings, target), np.zeros(len(strings), dtype=bool)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    if column_type == "bool":
        ok = pc.is_in(strings, value_set=arrow.strings(TRUE_VALUES + FALSE_VALUES))
    else:
        ok = pc.match_substring_regex(
            strings, INT_PATTERN if column_type == "int" else FLOAT_PATTERN
        )
    ok = pc.fill_null(ok, arrow.scalar(True))
    bad = ~arrow.to_bools(ok)
    cleaned = pc.if_else(ok, strings, arrow.null(pa.string()))
    if column_type == "bool":
        values = pc.is_in(cleaned, value_set=arrow.strings(TRUE_VALUES))
        values = pc.if_else(pc.is_null(cleaned), arrow.null(pa.bool_()), values)
    else:
        try:
            values = pc.cast(cleaned, target)
        except pa.ArrowInvalid:  # e.g. an int too large for int64: reject value by value
            out, more_bad = [], bad.copy()
            for i, s in enumerate(cleaned.to_pylist()):
                try:
                    out.append(
                        None if s is None else (int(s) if column_type == "int" else float(s))
                    )
                except (ValueError, OverflowError):
                    out.append(None)
                    more_bad[i] = True
                if column_type == "int" and out[-1] is not None and not -(2**63) <= out[-1] < 2**63:
                    out[-1] = None
                    more_bad[i] = True
            present = np.array([v is not None for v in out], dtype=bool)
            dtype = np.int64 if column_type == "int" else np.float32
            with np.errstate(over="ignore"):  # beyond float32: ±inf, as Arrow's cast
                filled = np.array([0 if v is None else v for v in out], dtype=dtype)
            return arrow.from_numpy(filled, present), more_bad
    return values, bad
