"""Count, extremes, mean and sum of squared deviations of a numeric Arrow array, compiled.

The numeric column statistics (:class:`shardtrain.data.statistics.NumericStats`) summarise
every numeric column of every block this way and fold the summaries together. Both
functions read the array's Arrow buffers in place -- the values and the validity bitmap --
in one compiled call that allocates nothing: no ``drop_null``, ``to_numpy`` or ``isfinite``
temporaries::

    m = moments(pa.array([1.0, None, 3.0, float("nan")]))
    # Moments(nonfinite=1, finite=2, min=1.0, max=3.0, mean=2.0, m2=2.0)
    count_true(pa.array([True, None, False, True]))  # 2
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np
import pyarrow as pa

from shardtrain.kernels import arrow
from shardtrain.kernels.native import kernel_input

__all__ = ["Moments", "count_true", "moments"]

_EIGHT_VALID = 0xFF  # a validity bitmap byte whose eight values are all valid
_NO_COUNTS = np.zeros(0, dtype=np.int64)  # no histogram to count into


class Moments(NamedTuple):
    """The summary of the valid values of an array, in float64."""

    nonfinite: int
    """NaN and ±inf values (left out of the others)."""
    finite: int
    """Valid, finite values."""
    min: float
    """Their minimum (``inf`` when ``finite`` is 0)."""
    max: float
    """Their maximum (``-inf`` when ``finite`` is 0)."""
    mean: float
    """Their mean (0 when ``finite`` is 0)."""
    m2: float
    """Their sum of squared deviations from the mean."""


def moments(
    values: pa.Array,
    counts: np.ndarray | None = None,
    *,
    first: int = 0,
    inverse_step: float = 1.0,
) -> Moments:
    """The :class:`Moments` of a numeric array (nulls are skipped).

    With ``counts`` (int64, bins + 2), also adds the valid, finite values to the histogram
    counts, in the same pass and exactly as
    :func:`shardtrain.kernels.histogram.add_counts` (``first``, ``inverse_step``) does:
    one call and one read of the values instead of two.

    Raises:
        TypeError: ``values`` is not of a type in :data:`shardtrain.kernels.arrow.NUMPY_TYPES`
            (cast others, e.g. float16 or decimals, to float64 first).
    """
    dtype = arrow.NUMPY_TYPES.get(values.type)
    if dtype is None:
        raise TypeError(f"no compiled moments of Arrow {values.type}")
    n = len(values)
    if n == values.null_count:
        return Moments(0, 0, math.inf, -math.inf, 0.0, 0.0)
    data = np.frombuffer(values.buffers()[1], dtype=dtype, count=values.offset + n)
    nonfinite, count, lo, hi, mean, m2 = _moments(
        kernel_input(data, dtype),
        arrow.validity_bits(values),
        values.offset,
        n,
        _NO_COUNTS if counts is None else counts,
        float(first),
        float(inverse_step),
    )
    return Moments(int(nonfinite), int(count), float(lo), float(hi), float(mean), float(m2))


def count_true(values: pa.Array) -> int:
    """The number of valid true values of a bool array.

    ``pyarrow.compute.sum`` gives the same, with a dispatch cost per call that is large
    against one block's work.
    """
    if not pa.types.is_boolean(values.type):
        raise TypeError(f"a bool array is needed, not {values.type}")
    if len(values) == values.null_count:
        return 0
    bits = kernel_input(np.frombuffer(values.buffers()[1], dtype=np.uint8), np.uint8)
    return int(_count_true(bits, arrow.validity_bits(values), values.offset, len(values)))


@numba.njit(cache=True, nogil=True, inline="always")
def _bin(x, first, inverse_step, top):
    """The histogram slot of a finite ``x`` (``counts`` index): 0 below the first bin,
    ``bins + 1`` at or past the last, as ``histogram._add_counts`` puts it."""
    t = x * inverse_step - first
    if t >= 0.0 and t < top:
        return np.int64(t) + 1
    if t < 0.0:
        return 0
    return np.int64(top) + 1


@numba.njit(cache=True, nogil=True)
def _moments(values, validity, offset, n, counts, first, inverse_step):
    """Statistics of the valid, finite ``values[offset:offset + n]``, in float64; with
    ``counts`` not empty, each of those values also counted into its histogram bin.

    ``validity`` is the Arrow validity bitmap (bit ``offset + i``, least significant bit
    first), or empty when every value is valid. Returns ``(nonfinite, count, min, max, mean,
    m2)``: the number of NaN/±inf values (skipped) and the count, extremes, mean and sum of
    squared deviations of the others.

    Two passes: the first sums, the second sums squared deviations from that mean. The
    one-pass ``sum(x*x) - sum(x)**2 / n`` loses every significant digit when the mean is
    large against the spread (1e9 + noise), and Welford's update divides per value. The
    second pass also sums the deviations themselves, which would be exactly 0 if the mean
    were exact: ``mean + dev/n`` and ``m2 - dev**2/n`` correct for its rounding error (the
    "corrected two-pass algorithm", Chan, Golub & LeVeque 1983). A block's values fit in the
    L2 cache, so the second pass reads from there.

    Speed: a loop that adds each value to one float64 accumulator runs at the latency of a
    floating-point add, not at the CPU's throughput. So both passes take eight values at a
    time -- whenever the eight share one all-valid byte of the bitmap, i.e. almost always --
    add them as a tree (independent adds, in parallel) and fold only the tree's result into
    two accumulators. Whether all eight are finite is one test: a sum is finite only if
    every term is (a NaN or ±inf term makes it NaN or ±inf; a finite sum that overflows
    merely sends the group to the one-value-at-a-time path, which counts each value on its
    own). That path handles nulls, non-finite values and the ragged ends.
    """
    has_nulls = validity.size > 0
    counting = counts.size > 0
    top = np.float64(counts.size - 2)
    end = offset + n
    nonfinite = 0
    count = 0
    s0 = 0.0
    s1 = 0.0
    lo0 = np.inf
    lo1 = np.inf
    hi0 = -np.inf
    hi1 = -np.inf
    i = offset
    while i < end:
        if i & 7 == 0 and i + 8 <= end and (not has_nulls or validity[i >> 3] == _EIGHT_VALID):
            x0 = np.float64(values[i])
            x1 = np.float64(values[i + 1])
            x2 = np.float64(values[i + 2])
            x3 = np.float64(values[i + 3])
            x4 = np.float64(values[i + 4])
            x5 = np.float64(values[i + 5])
            x6 = np.float64(values[i + 6])
            x7 = np.float64(values[i + 7])
            a = (x0 + x1) + (x2 + x3)
            b = (x4 + x5) + (x6 + x7)
            if (a + b) - (a + b) == 0.0:  # all eight finite
                if counting:
                    for x in (x0, x1, x2, x3, x4, x5, x6, x7):
                        counts[_bin(x, first, inverse_step, top)] += 1
                s0 += a
                s1 += b
                lo0 = min(lo0, min(min(x0, x1), min(x2, x3)))
                lo1 = min(lo1, min(min(x4, x5), min(x6, x7)))
                hi0 = max(hi0, max(max(x0, x1), max(x2, x3)))
                hi1 = max(hi1, max(max(x4, x5), max(x6, x7)))
                count += 8
                i += 8
                continue
        stop = min((i | 7) + 1, end)  # one at a time, to the next group boundary
        while i < stop:
            if not has_nulls or (validity[i >> 3] >> (i & 7)) & 1:
                x = np.float64(values[i])
                if math.isfinite(x):
                    if counting:
                        counts[_bin(x, first, inverse_step, top)] += 1
                    count += 1
                    s0 += x
                    lo0 = min(lo0, x)
                    hi0 = max(hi0, x)
                else:
                    nonfinite += 1
            i += 1
    lo = min(lo0, lo1)
    hi = max(hi0, hi1)
    if count == 0:
        return nonfinite, 0, lo, hi, 0.0, 0.0
    mean = (s0 + s1) / count
    dev = 0.0
    q0 = 0.0
    q1 = 0.0
    i = offset
    while i < end:
        if i & 7 == 0 and i + 8 <= end and (not has_nulls or validity[i >> 3] == _EIGHT_VALID):
            d0 = np.float64(values[i]) - mean
            d1 = np.float64(values[i + 1]) - mean
            d2 = np.float64(values[i + 2]) - mean
            d3 = np.float64(values[i + 3]) - mean
            d4 = np.float64(values[i + 4]) - mean
            d5 = np.float64(values[i + 5]) - mean
            d6 = np.float64(values[i + 6]) - mean
            d7 = np.float64(values[i + 7]) - mean
            g = ((d0 + d1) + (d2 + d3)) + ((d4 + d5) + (d6 + d7))
            if g - g == 0.0:  # all eight finite, as in the first pass
                dev += g
                q0 += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3)
                q1 += (d4 * d4 + d5 * d5) + (d6 * d6 + d7 * d7)
                i += 8
                continue
        stop = min((i | 7) + 1, end)
        while i < stop:
            if not has_nulls or (validity[i >> 3] >> (i & 7)) & 1:
                x = np.float64(values[i])
                if math.isfinite(x):
                    d = x - mean
                    dev += d
                    q0 += d * d
            i += 1
    mean = min(max(mean + dev / count, lo), hi)
    m2 = max((q0 + q1) - dev * dev / count, 0.0)
    return nonfinite, count, lo, hi, mean, m2


@numba.njit(cache=True, nogil=True)
def _count_true(bits, validity, offset, n):
    """The number of valid true values of a bit-packed Arrow bool array (bits ``offset`` to
    ``offset + n``), a byte (8 values) at a time where it can: ``bits & validity`` and a
    bitwise popcount."""
    has_nulls = validity.size > 0
    trues = 0
    i = offset
    end = offset + n
    while i < end:
        if i & 7 == 0 and i + 8 <= end:
            v = np.int64(bits[i >> 3])
            if has_nulls:
                v &= validity[i >> 3]
            v = v - ((v >> 1) & 0x55)
            v = (v & 0x33) + ((v >> 2) & 0x33)
            trues += (v + (v >> 4)) & 0x0F
            i += 8
        else:
            if (bits[i >> 3] >> (i & 7)) & 1 and (
                not has_nulls or (validity[i >> 3] >> (i & 7)) & 1
            ):
                trues += 1
            i += 1
    return trues
