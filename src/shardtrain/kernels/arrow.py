"""Arrow arrays from Python and NumPy values, and back, without importing pandas.

pyarrow imports pandas the first time a value crosses from Python or NumPy into Arrow the
usual ways (``pa.array``, ``pa.scalar``, a compute function given a Python value such as
``pc.fill_null(strings, "")``) or back (``Array.to_numpy``, even zero-copy): it checks
whether the value is a pandas object. That import loads hundreds of modules, and a sharding
run would pay for it in its parent process before the pool starts, while the other cores
wait, and again in each spawned process. The functions here build and read the same arrays
through their buffers, where pyarrow does not look for pandas; sharding code uses them
instead of those calls.

Example::

    from shardtrain.kernels import arrow

    names = arrow.strings(["true", "false"])                # pa.array(["true", "false"])
    mask = arrow.from_numpy(np.array([True, False]))        # pa.array(np.array(...))
    missing = arrow.to_bools(names.is_null())               # ....to_numpy(zero_copy_only=False)
    cleaned = pc.if_else(mask, names, arrow.null(pa.string()))  # ... pa.scalar(None, ...)
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa

#: NumPy dtypes of the Arrow numeric types that kernels read in place (statistics, the
#: sharder's encoder); other types (float16, decimals, bool) are cast first.
NUMPY_TYPES = {
    pa.float32(): np.float32,
    pa.float64(): np.float64,
    pa.int8(): np.int8,
    pa.int16(): np.int16,
    pa.int32(): np.int32,
    pa.int64(): np.int64,
    pa.uint8(): np.uint8,
    pa.uint16(): np.uint16,
    pa.uint32(): np.uint32,
    pa.uint64(): np.uint64,
}


def _bitmap(bits: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(np.packbits(np.asarray(bits, dtype=bool), bitorder="little"))


def strings(values: Iterable[str | bytes], type: pa.DataType | None = None) -> pa.Array:
    """A string (or ``large_string``/``binary``) array of ``values``, none of them null."""
    type = type or pa.string()
    data = [v.encode() if isinstance(v, str) else bytes(v) for v in values]
    wide = type in (pa.large_string(), pa.large_binary())
    offsets = np.zeros(len(data) + 1, dtype=np.int64 if wide else np.int32)
    np.cumsum([len(d) for d in data], out=offsets[1:])
    return pa.Array.from_buffers(
        type, len(data), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))]
    )


def from_numpy(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """A bool or numeric Arrow array of a 1-D NumPy array; ``valid`` False marks nulls.

    Numeric values are not copied: the array holds a reference to ``values``.
    """
    values = np.ascontiguousarray(values)
    if values.ndim != 1:
        raise ValueError(f"a 1-D array is needed, not {values.ndim}-D")
    if not values.dtype.isnative:  # Arrow buffers are little-endian
        values = values.astype(values.dtype.newbyteorder("="))
    if valid is not None and len(valid) != len(values):
        raise ValueError(f"{len(valid)} validity flags for {len(values)} values")
    if values.dtype == np.bool_:
        type, data = pa.bool_(), _bitmap(values)
    else:
        type, data = pa.from_numpy_dtype(values.dtype), pa.py_buffer(values)
    validity, nulls = None, 0
    if valid is not None:
        nulls = len(valid) - int(np.count_nonzero(valid))
        validity = _bitmap(valid) if nulls else None
    return pa.Array.from_buffers(type, len(values), [validity, data], null_count=nulls)


def contiguous(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``array`` as one ``pa.Array``: a ChunkedArray's only chunk as it is (where
    ``combine_chunks`` would copy it), several chunks concatenated."""
    if not isinstance(array, pa.ChunkedArray):
        return array
    if array.num_chunks == 1:
        return array.chunk(0)
    return array.combine_chunks()


def null(type: pa.DataType) -> pa.Scalar:
    """A null scalar of ``type`` (``pa.scalar(None, type)``)."""
    return pa.nulls(1, type)[0]


def scalar(value: str | bool, type: pa.DataType | None = None) -> pa.Scalar:
    """A string (of ``type``, default ``pa.string()``) or bool scalar (``pa.scalar(value)``),
    e.g. for ``pc.fill_null``."""
    if isinstance(value, bool):
        return from_numpy(np.array([value]))[0]
    return strings([value], type)[0]


def to_bools(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A bool array's values as a NumPy bool array (a null reads as False)."""
    array = contiguous(array)
    n, offset = len(array), array.offset
    if n == 0:
        return np.zeros(0, dtype=bool)
    out = _unpack(array.buffers()[1], offset, n)
    if array.null_count:
        out &= valid_mask(array)
    return out


def valid_mask(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Which entries of ``array`` are not null, as a NumPy bool array."""
    array = contiguous(array)
    n, offset = len(array), array.offset
    if array.null_count == n:  # also the null type, which has no validity buffer
        return np.zeros(n, dtype=bool)
    validity = array.buffers()[0]
    if validity is None or array.null_count == 0:
        return np.ones(n, dtype=bool)
    return _unpack(validity, offset, n)


def validity_bits(array: pa.Array) -> np.ndarray:
    """The validity bitmap of ``array`` as read-only uint8, for kernels that read it in place
    (value ``i`` is valid when bit ``array.offset + i`` is set, least significant bit
    first); an empty array when no value is null."""
    validity = array.buffers()[0]
    if not array.null_count or validity is None:
        return _ALL_VALID
    bits = np.frombuffer(validity, dtype=np.uint8)
    bits.flags.writeable = False
    return bits


_ALL_VALID = np.zeros(0, dtype=np.uint8)
_ALL_VALID.flags.writeable = False


def _unpack(bitmap: pa.Buffer, offset: int, n: int) -> np.ndarray:
    """Bits ``offset:offset + n`` of an Arrow bitmap (least significant bit first) as bools."""
    bits = np.frombuffer(bitmap, dtype=np.uint8)
    return np.unpackbits(bits, count=offset + n, bitorder="little")[offset:].view(bool)


def string_buffers(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(data, offsets)`` of a string or binary array (int32 offsets), as NumPy views: value
    ``i`` is ``data[offsets[i]:offsets[i + 1]]`` (``offsets[0]`` is not 0 when sliced)."""
    if array.type not in (pa.string(), pa.binary()):
        raise TypeError(f"string or binary array expected, got {array.type}")
    _, offsets, data = array.buffers()
    offsets = np.frombuffer(offsets, dtype=np.int32)[array.offset : array.offset + len(array) + 1]
    data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.empty(0, np.uint8)
    return data, offsets


def to_numpy(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A numeric array's values as a NumPy view of its buffer, not to be written to (what a
    null's slot holds is unspecified)."""
    array = contiguous(array)
    dtype = NUMPY_TYPES.get(array.type)
    if dtype is None:
        raise TypeError(f"no NumPy view of Arrow {array.type}")
    if len(array) == 0:  # an empty array may have no buffer at all
        return np.empty(0, dtype=dtype)
    return np.frombuffer(array.buffers()[1], dtype=dtype)[array.offset :][: len(array)]
