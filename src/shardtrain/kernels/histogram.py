"""Counts of a numeric Arrow array's values in fixed bins, compiled.

The numeric column statistics (:class:`shardtrain.data.histogram.Histogram`) count every
block of every numeric column into bins of equal width ``step`` on a fixed lattice: bin
``j`` is ``[(first + j) * step, (first + j + 1) * step)`` for ``0 <= j < bins``, with an
underflow bin before them and an overflow bin after. The values and the validity bitmap are
read in place, in one compiled pass; nulls, NaN and ±inf are skipped (the statistics count
them elsewhere)::

    counts = np.zeros(5 + 2, dtype=np.int64)  # underflow, 5 bins, overflow
    add_counts(pa.array([0.5, 1.5, None, 9.0]), counts, first=0, inverse_step=1.0)
    # counts == [0, 1, 1, 0, 0, 0, 1]

A value's bin is ``floor(x * inverse_step) - first``: a multiplication, not a division by
the step (which costs as much as the rest of the statistics' work per value). For a decimal
step ``m * 10**e`` with ``e < 0``, ``inverse_step = 10**-e / m`` is exact (``m`` is 1, 2 or
5); for ``e >= 0`` it is the float64 nearest ``1 / step``. A value on a bin edge may so land
one bin lower or higher than exact decimal arithmetic would put it, the same way every time.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import pyarrow as pa

from shardtrain.kernels import arrow
from shardtrain.kernels.native import kernel_input

__all__ = ["add_counts"]


def add_counts(values: pa.Array, counts: np.ndarray, *, first: int, inverse_step: float) -> None:
    """Add the valid, finite values of ``values`` to ``counts`` (int64, bins + 2).

    Raises:
        TypeError: ``values`` is not of a type in :data:`shardtrain.kernels.arrow.NUMPY_TYPES`
            (cast others to float64 first).
    """
    dtype = arrow.NUMPY_TYPES.get(values.type)
    if dtype is None:
        raise TypeError(f"no compiled histogram of Arrow {values.type}")
    n = len(values)
    if n == values.null_count:
        return
    data = np.frombuffer(values.buffers()[1], dtype=dtype, count=values.offset + n)
    _add_counts(
        kernel_input(data, dtype),
        arrow.validity_bits(values),
        values.offset,
        n,
        counts,
        float(first),
        float(inverse_step),
    )


@numba.njit(cache=True, nogil=True)
def _add_counts(values, validity, offset, n, counts, first, inverse_step):
    """Count ``values[offset:offset + n]`` (valid and finite ones) into ``counts``.

    ``t = x * inverse_step - first`` is the value's position in bins from the first bin's
    lower edge: in ``[0, bins)`` it is bin ``int(t)`` (truncation is the floor there), below
    it underflow (``counts[0]``), at or past ``bins`` overflow (``counts[bins + 1]``). The
    comparisons come before the conversion, so a huge value never overflows an int; NaN
    fails every comparison, and ±inf (or a product that overflowed, from a finite value:
    counted) is told apart only on the rare outer paths.
    """
    has_nulls = validity.size > 0
    bins = counts.size - 2
    top = np.float64(bins)
    for i in range(offset, offset + n):
        if has_nulls and not (validity[i >> 3] >> (i & 7)) & 1:
            continue
        x = np.float64(values[i])
        t = x * inverse_step - first
        if t >= 0.0 and t < top:
            counts[np.int64(t) + 1] += 1
        elif t < 0.0:
            if math.isfinite(x):
                counts[0] += 1
        elif t >= top and math.isfinite(x):
            counts[bins + 1] += 1
