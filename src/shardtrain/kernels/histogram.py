"""Counts of a numeric Arrow array's values in fixed bins, compiled.

The numeric column statistics (:class:`shardtrain.data.histogram.Histogram`) count every
block of every numeric column into bins of equal width ``step`` on a fixed lattice: bin
``j`` is ``[(first + j) * step, (first + j + 1) * step)`` for ``0 <= j < bins``, with an
underflow bin before them and an overflow bin after. The values and the validity bitmap are
read in place, in one compiled pass that allocates nothing; nulls, NaN and ±inf are skipped
(the statistics count them elsewhere)::

    counts = np.zeros(5 + 2, dtype=np.int64)  # underflow, 5 bins, overflow
    add_counts(pa.array([0.5, 1.5, None, 9.0]), counts, first=0, scale=1.0, divisor=1.0)
    # counts == [0, 1, 1, 0, 0, 0, 1]

The step is ``divisor / scale``: a decimal step ``m * 10**e`` is passed as ``scale=10**-e,
divisor=m`` when ``e < 0`` and ``scale=1, divisor=m * 10**e`` otherwise, so that both are
exact in float64 and ``x * scale / divisor`` is the value in steps with two roundings (one
rounding from the exact quotient in the common case). A value on a bin edge may so land one
bin lower or higher than exact decimal arithmetic would put it, the same way every time.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import pyarrow as pa

from shardtrain.kernels import arrow
from shardtrain.kernels.native import kernel_input

__all__ = ["add_counts"]


def add_counts(
    values: pa.Array, counts: np.ndarray, *, first: int, scale: float, divisor: float
) -> None:
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
        float(scale),
        float(divisor),
    )


@numba.njit(cache=True, nogil=True)
def _add_counts(values, validity, offset, n, counts, first, scale, divisor):
    """Count ``values[offset:offset + n]`` (valid and finite ones) into ``counts``.

    ``t = x * scale / divisor - first`` is the value's position in bins from the first
    bin's lower edge: below 0 it is underflow (``counts[0]``), at or past ``bins`` overflow
    (``counts[bins + 1]``), else bin ``int(t)`` (truncation is the floor for ``t >= 0``).
    The comparisons come before the conversion, so a huge value never overflows an int.
    NaN fails both comparisons and ``t - t == 0``, and is skipped like ±inf.
    """
    has_nulls = validity.size > 0
    bins = counts.size - 2
    top = np.float64(bins)
    for i in range(offset, offset + n):
        if has_nulls and not (validity[i >> 3] >> (i & 7)) & 1:
            continue
        x = np.float64(values[i])
        if not math.isfinite(x):
            continue
        t = x * scale / divisor - first
        if t < 0.0:
            counts[0] += 1
        elif t >= top:
            counts[bins + 1] += 1
        else:
            counts[min(np.int64(t), bins - 1) + 1] += 1
