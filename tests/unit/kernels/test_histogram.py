"""The compiled histogram counts against a Python reference (exact decimal bins).

It reads Arrow buffers in place, so the inputs include nulls, slices whose offset is not a
multiple of 8, NaN/±inf, values far outside the bins and all-null arrays.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest

from shardtrain.kernels.histogram import add_counts


def _reference(values: list, first: int, step: Fraction, bins: int) -> list[int]:
    counts = [0] * (bins + 2)
    for v in values:
        if v is None or not math.isfinite(v):
            continue
        q = math.floor(Fraction(v) / step) - first
        counts[0 if q < 0 else bins + 1 if q >= bins else q + 1] += 1
    return counts


@pytest.mark.parametrize("type", [pa.float32(), pa.float64(), pa.int64(), pa.int32()])
def test_counts_match_the_reference(type):
    rng = np.random.default_rng(3)
    raw = rng.normal(10, 6, 2001)
    if pa.types.is_integer(type):
        raw = np.round(raw)
    raw = raw.astype(type.to_pandas_dtype())
    if pa.types.is_floating(type):
        raw[rng.random(raw.size) < 0.02] = np.nan
        raw[:3] = [np.inf, -np.inf, 1e30]
    array = pa.array(raw, type=type, mask=rng.random(raw.size) < 0.1)
    # Bins [0, 2), [2, 4) ... [18, 20): step 2, first 0, 10 bins.
    for values in (array, array.slice(13, 1900), pa.array(raw, type=type)):
        counts = np.zeros(12, dtype=np.int64)
        add_counts(values, counts, first=0, inverse_step=0.5)
        pylist = [None if v is None else float(v) for v in values.to_pylist()]
        assert counts.tolist() == _reference(pylist, 0, Fraction(2), 10)


def test_decimal_steps_and_negative_bins():
    """Step 0.1 (inverse 10) from -0.3: values on decimal edges fall in the bin
    they start, as exact arithmetic puts them; counts add up across calls."""
    values = pa.array([-0.3, -0.25, -0.1, 0.0, 0.05, 0.1, 0.3, 0.2999, 0.35, -0.31, None])
    counts = np.zeros(6 + 2, dtype=np.int64)
    add_counts(values, counts, first=-3, inverse_step=10.0)
    assert counts.tolist() == [1, 2, 0, 1, 2, 1, 1, 2]
    add_counts(values.slice(0, 1), counts, first=-3, inverse_step=10.0)
    assert counts[1] == 3


def test_huge_values_overflow_and_infinities_are_skipped():
    counts = np.zeros(4, dtype=np.int64)
    values = pa.array([1e308, -1e308, float("inf"), -float("inf"), float("nan"), 0.5])
    add_counts(values, counts, first=0, inverse_step=1e10)  # 1e308 * 1e10 overflows
    assert counts.tolist() == [1, 0, 0, 2]


def test_all_null_and_unsupported_arrays():
    counts = np.zeros(3, dtype=np.int64)
    add_counts(pa.array([None, None], type=pa.float64()), counts, first=0, inverse_step=1.0)
    assert counts.tolist() == [0, 0, 0]
    with pytest.raises(TypeError, match="no compiled histogram"):
        add_counts(pa.array(["a"]), counts, first=0, inverse_step=1.0)
