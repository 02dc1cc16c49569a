"""xxHash64 (XXH64) in compiled code: of one buffer, and of many slices of one buffer.

Rows are assigned to train/eval splits by these hashes on many machines and across
releases, so the output must never change: it is exactly the reference algorithm
(https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md), compared with the
``xxhash`` package in the tests. Importing the module has no side effects: kernels compile on
first use and are cached on disk (``cache=True``).
"""

from __future__ import annotations

import numba
import numpy as np

from shardtrain.kernels.native import (
    as_bytes_array,
    check_offsets,
    check_ranges,
    check_uint,
    kernel_input,
    load_u8,
    load_u32,
    load_u64,
)

__all__ = ["hash_slices", "hash_strings", "xxh64"]

# xxHash64 primes (https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md).
_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)


@numba.njit(cache=True, nogil=True, inline="always")
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@numba.njit(cache=True, nogil=True, inline="always")
def _xxh_round(acc, lane):
    return _rotl(acc + lane * _P2, 31) * _P1


@numba.njit(cache=True, nogil=True, inline="always")
def _xxh_merge(h, v):
    return (h ^ _xxh_round(np.uint64(0), v)) * _P1 + _P4


@numba.njit(cache=True, nogil=True, inline="always")
def _xxh64_at(src, start, end, seed):
    """XXH64 of the bytes ``[start, end)`` at address ``src``; all arithmetic is uint64 and
    wraps, as the spec requires."""
    p = start
    if end - start >= 32:
        v1 = seed + _P1 + _P2
        v2 = seed + _P2
        v3 = seed
        v4 = seed - _P1
        while p + 32 <= end:
            v1 = _xxh_round(v1, load_u64(src, p))
            v2 = _xxh_round(v2, load_u64(src, p + 8))
            v3 = _xxh_round(v3, load_u64(src, p + 16))
            v4 = _xxh_round(v4, load_u64(src, p + 24))
            p += 32
        h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        h = _xxh_merge(h, v1)
        h = _xxh_merge(h, v2)
        h = _xxh_merge(h, v3)
        h = _xxh_merge(h, v4)
    else:
        h = seed + _P5
    h += np.uint64(end - start)
    while p + 8 <= end:
        h ^= _xxh_round(np.uint64(0), load_u64(src, p))
        h = _rotl(h, 27) * _P1 + _P4
        p += 8
    if p + 4 <= end:
        h ^= load_u32(src, p) * _P1
        h = _rotl(h, 23) * _P2 + _P3
        p += 4
    while p < end:
        h ^= np.uint64(load_u8(src, p)) * _P5
        h = _rotl(h, 11) * _P1
        p += 1
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h


@numba.njit(cache=True, nogil=True)
def _xxh64(buf, start, end, seed):
    return _xxh64_at(buf.ctypes.data, start, end, seed)


@numba.njit(cache=True, nogil=True)
def _xxh64_slices(buf, starts, ends, seed, out):
    src = buf.ctypes.data
    for i in range(out.shape[0]):
        out[i] = _xxh64_at(src, starts[i], ends[i], seed)


def xxh64(data: bytes | np.ndarray, seed: int = 0) -> int:
    """The standard 64-bit xxHash (XXH64) of ``data``.

    Bit-for-bit the algorithm of the reference implementation (equal to
    ``xxhash.xxh64_intdigest(data, seed)``). Train/eval splits are derived from these hashes
    on many machines and across releases, so this function must never change its output:
    treat it as a stable file format, not an implementation detail.

    Args:
        data: bytes-like object, or a NumPy array whose raw (C-order) bytes are hashed.
        seed: unsigned 64-bit seed.

    Returns:
        The hash as an unsigned 64-bit integer.
    """
    seed = check_uint(seed, 64, "seed")
    buf = as_bytes_array(data)
    return int(_xxh64(buf, 0, len(buf), np.uint64(seed)))


def hash_slices(
    data: np.ndarray, starts: np.ndarray, ends: np.ndarray, seed: int = 0
) -> np.ndarray:
    """XXH64 of every slice ``data[starts[i]:ends[i]]``, in compiled code.

    The general form of :func:`hash_strings`, for slices that are not back to back (e.g.
    the lines of a CSV block, found by their start and end positions).

    Args:
        data: uint8 buffer.
        starts: integer array of slice starts.
        ends: integer array of slice ends, same length, ``starts <= ends <= len(data)``.
        seed: unsigned 64-bit seed.

    Returns:
        uint64 array of hashes, one per slice; stable forever like :func:`xxh64`.

    Raises:
        ValueError: shapes differ or a slice lies outside ``data``.
    """
    buf = as_bytes_array(data)
    starts, ends = check_ranges(starts, ends, len(buf), "slice", "data")
    return _hash(buf, starts, ends, seed)


def _hash(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, seed: int) -> np.ndarray:
    seed = check_uint(seed, 64, "seed")
    out = np.empty(len(starts), dtype=np.uint64)
    _xxh64_slices(buf, starts, ends, np.uint64(seed), out)
    return out


def hash_strings(data: np.ndarray, offsets: np.ndarray, seed: int = 0) -> np.ndarray:
    """XXH64 of each string of an Arrow-layout string array, in compiled code.

    String ``i`` is ``data[offsets[i]:offsets[i + 1]]`` (the layout of Arrow ``string``,
    ``binary`` and their ``large_`` variants; ``offsets[0]`` may be non-zero, as in a sliced
    array). Used to assign rows to train/eval splits deterministically on every machine, so
    the result is exactly XXH64 and stable forever like :func:`xxh64`.

    Args:
        data: uint8 buffer of the concatenated strings.
        offsets: int32 or int64 array of ``n + 1`` non-decreasing offsets into ``data``.
        seed: unsigned 64-bit seed.

    Returns:
        uint64 array of ``n`` hashes.

    Raises:
        ValueError: offsets are malformed or point outside ``data``.
    """
    buf = as_bytes_array(data)
    offsets = kernel_input(offsets, np.int64)
    check_offsets(offsets, len(buf), "hash_strings")
    return _hash(buf, offsets[:-1], offsets[1:], seed)
