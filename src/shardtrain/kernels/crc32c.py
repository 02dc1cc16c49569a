"""CRC-32C (Castagnoli) in compiled code, as TFRecord framing, GCS and iSCSI use it.

:func:`crc32c` and :func:`masked_crc32c` are the Python API. Kernels in other modules call
:func:`crc32c_at` (with the address of :func:`crc32c_tables`) and :func:`mask_crc`, which
are only callable from numba-compiled code. Which implementation a kernel gets is decided
when it is compiled: the SSE4.2 ``crc32`` instruction where the target CPU has it (see
:func:`~shardtrain.kernels.native.has_hardware_crc32c`), slicing-by-8
tables elsewhere (e.g. on ARM). Importing the module has no side effects: kernels compile
on first use and are cached on disk (``cache=True``), the tables are built on first use.
"""

from __future__ import annotations

import functools

import numba
import numpy as np
from numba.extending import overload

from shardtrain.kernels.native import (
    as_bytes_array,
    check_uint,
    has_hardware_crc32c,
    load_u8,
    load_u32,
    load_u64,
    sse42_crc32_u8,
    sse42_crc32_u64,
)

__all__ = ["crc32c", "masked_crc32c"]

_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF
_CRC32C_POLY = 0x82F63B78  # Castagnoli polynomial 0x1EDC6F41, bit-reversed

#: Bytes per stream in the three-stream hardware CRC (see :func:`_crc32c_hw`).
_CRC_STREAM = 128


def _shift_tables(byte_table: np.ndarray, zeros: int) -> np.ndarray:
    """``t[b][v]``: the CRC register ``v << 8b`` after ``zeros`` zero bytes.

    The register's update is linear over GF(2), so the register ``s`` after ``zeros`` zero
    bytes is ``t[0][s & 0xFF] ^ t[1][(s >> 8) & 0xFF] ^ t[2][(s >> 16) & 0xFF] ^
    t[3][s >> 24]``: four lookups instead of ``zeros`` steps.
    """
    t = np.arange(256, dtype=np.uint32)[None, :] << (8 * np.arange(4, dtype=np.uint32))[:, None]
    for _ in range(zeros):
        t = byte_table[t & 0xFF] ^ (t >> 8)
    return t.astype(np.uint32)


@functools.cache
def crc32c_tables() -> np.ndarray:
    """The CRC-32C lookup tables, 16 rows of 256 ``uint32``.

    Rows 0-7, slicing-by-8: ``tables[k][b]`` is the CRC of byte ``b`` followed by ``k``
    zeros. With them a kernel folds 8 input bytes per step with 8 independent table lookups
    instead of 8 dependent ones, which is what makes a table-driven CRC run at several bytes
    per cycle (CPUs without SSE4.2).

    Rows 8-11 and 12-15, for the hardware CRC: :func:`_shift_tables` for ``_CRC_STREAM`` and
    ``2 * _CRC_STREAM`` zero bytes, which join three CRCs computed side by side.
    """
    crc = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        crc = np.where(crc & 1, (crc >> 1) ^ np.uint32(_CRC32C_POLY), crc >> 1).astype(np.uint32)
    tables = np.empty((16, 256), dtype=np.uint32)
    tables[0] = crc
    for k in range(1, 8):
        tables[k] = (tables[k - 1] >> 8) ^ tables[0][tables[k - 1] & 0xFF]
    tables[8:12] = _shift_tables(crc, _CRC_STREAM)
    tables[12:16] = _shift_tables(crc, 2 * _CRC_STREAM)
    tables.flags.writeable = False
    return tables


@numba.njit(cache=True, nogil=True, inline="always")
def _crc32c_sw(tables, crc, src, start, end):
    """CRC-32C of the bytes ``[start, end)`` at address ``src``, continuing from ``crc`` (a
    finished CRC, like ``google_crc32c.extend``), with the slicing-by-8 tables at address
    ``tables``. Arithmetic is in uint64 holding 32-bit values."""
    c = np.uint64(np.uint32(crc) ^ np.uint32(_U32))
    p = start
    while p + 8 <= end:
        word = load_u64(src, p)
        lo = c ^ (word & np.uint64(_U32))
        hi = word >> np.uint64(32)
        c = (
            load_u32(tables, 4 * (7 * 256 + (lo & np.uint64(0xFF))))
            ^ load_u32(tables, 4 * (6 * 256 + ((lo >> np.uint64(8)) & np.uint64(0xFF))))
            ^ load_u32(tables, 4 * (5 * 256 + ((lo >> np.uint64(16)) & np.uint64(0xFF))))
            ^ load_u32(tables, 4 * (4 * 256 + (lo >> np.uint64(24))))
            ^ load_u32(tables, 4 * (3 * 256 + (hi & np.uint64(0xFF))))
            ^ load_u32(tables, 4 * (2 * 256 + ((hi >> np.uint64(8)) & np.uint64(0xFF))))
            ^ load_u32(tables, 4 * (1 * 256 + ((hi >> np.uint64(16)) & np.uint64(0xFF))))
            ^ load_u32(tables, 4 * (hi >> np.uint64(24)))
        )
        p += 8
    while p < end:
        c = load_u32(tables, 4 * ((c ^ np.uint64(load_u8(src, p))) & np.uint64(0xFF))) ^ (
            c >> np.uint64(8)
        )
        p += 1
    return np.int64(np.uint32(c) ^ np.uint32(_U32))


@numba.njit(cache=True, nogil=True, inline="always")
def _shift(tables, row, s):
    """Register ``s`` after the zero bytes of shift-table rows ``row..row + 3``."""
    base = 4 * 256 * row
    return (
        load_u32(tables, base + 4 * (s & np.uint64(0xFF)))
        ^ load_u32(tables, base + 4 * (256 + ((s >> np.uint64(8)) & np.uint64(0xFF))))
        ^ load_u32(tables, base + 4 * (512 + ((s >> np.uint64(16)) & np.uint64(0xFF))))
        ^ load_u32(tables, base + 4 * (768 + ((s >> np.uint64(24)) & np.uint64(0xFF))))
    )


@numba.njit(cache=True, nogil=True, inline="always")
def _crc32c_hw(tables, crc, src, start, end):
    """As :func:`_crc32c_sw`, with the SSE4.2 instruction, three streams at a time.

    One ``crc32`` waits 3 cycles for the previous one, but the CPU can start one every
    cycle: so each run of ``3 * _CRC_STREAM`` bytes is folded as three independent streams
    (the second and third from a zero register), joined with the shift tables
    (``crc(A B C) = shift2(crc(A)) ^ shift1(crc(B)) ^ crc(C)``), keeping three
    instructions in flight instead of one.
    """
    c = np.uint64(np.uint32(crc) ^ np.uint32(_U32))
    p = start
    while p + 3 * _CRC_STREAM <= end:
        b = np.uint64(0)
        d = np.uint64(0)
        for k in range(0, _CRC_STREAM, 8):
            c = sse42_crc32_u64(c, load_u64(src, p + k))
            b = sse42_crc32_u64(b, load_u64(src, p + _CRC_STREAM + k))
            d = sse42_crc32_u64(d, load_u64(src, p + 2 * _CRC_STREAM + k))
        c = _shift(tables, 12, c) ^ _shift(tables, 8, b) ^ d
        p += 3 * _CRC_STREAM
    while p + 8 <= end:
        c = sse42_crc32_u64(c, load_u64(src, p))
        p += 8
    c32 = np.uint32(c)
    while p < end:
        c32 = sse42_crc32_u8(c32, np.uint8(load_u8(src, p)))
        p += 1
    return np.int64(c32 ^ np.uint32(_U32))


def crc32c_at(tables, crc, src, start, end):
    """CRC-32C of the bytes ``[start, end)`` at address ``src`` continuing from ``crc``;
    ``tables`` is the address of :func:`crc32c_tables`. Only callable from kernels.

    Which implementation a kernel gets is decided when it is compiled, for the CPU it is
    compiled on (numba's on-disk cache is keyed by CPU, too): the SSE4.2 instruction where it
    exists, slicing-by-8 tables elsewhere (e.g. on ARM).
    """
    raise NotImplementedError("call from numba-compiled code only")


# numba's type stubs omit "cache", which overload's jit_options accept at run time.
@overload(crc32c_at, jit_options={"cache": True, "nogil": True})  # type: ignore[typeddict-unknown-key]
def _crc32c_at_impl(tables, crc, src, start, end):
    if has_hardware_crc32c():
        return lambda tables, crc, src, start, end: _crc32c_hw(tables, crc, src, start, end)
    return lambda tables, crc, src, start, end: _crc32c_sw(tables, crc, src, start, end)


@numba.njit(cache=True, nogil=True)
def _crc32c_buffer(tables, crc, buf, start, end):
    return crc32c_at(tables.ctypes.data, crc, buf.ctypes.data, start, end)


@numba.njit(cache=True, nogil=True)
def _crc32c_buffer_sw(tables, crc, buf, start, end):
    """The table-driven CRC on any CPU (for tests: the one a CPU without SSE4.2 runs)."""
    return _crc32c_sw(tables.ctypes.data, crc, buf.ctypes.data, start, end)


@numba.njit(cache=True, nogil=True, inline="always")
def mask_crc(crc):
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & _U32


def crc32c(data: np.ndarray | bytes, value: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data``, as used by TFRecord framing, GCS and iSCSI.

    Compiled code: the SSE4.2 ``crc32`` instruction where the CPU has it, slicing-by-8
    tables elsewhere; equal to ``google_crc32c.value``.

    Args:
        data: bytes-like object, or a NumPy array whose raw (C-order) bytes are checksummed.
        value: a previous result to continue from, so that
            ``crc32c(b, crc32c(a)) == crc32c(a + b)`` (like ``google_crc32c.extend``).

    Returns:
        The CRC as an unsigned 32-bit integer.
    """
    value = check_uint(value, 32, "value")
    buf = as_bytes_array(data)
    return int(_crc32c_buffer(crc32c_tables(), value, buf, 0, len(buf)))


def masked_crc32c(crc: int) -> int:
    """The TFRecord mask of a CRC-32C: ``rotate_right(crc, 15) + 0xA282EAD8`` mod 2**32.

    TFRecord stores masked CRCs because the CRC of data that itself contains CRCs is
    degenerate; every CRC field of a TFRecord frame holds ``masked_crc32c(crc32c(bytes))``.
    """
    crc = check_uint(crc, 32, "crc")
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & _U32
