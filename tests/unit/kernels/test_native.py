"""shardtrain.kernels.native: the raw loads and stores, made from one table, against NumPy."""

from __future__ import annotations

import numba
import numpy as np

from shardtrain.kernels import native
from shardtrain.kernels.native import (
    load_f64,
    load_i64,
    load_u8,
    load_u32,
    load_u64,
    store_u8,
    store_u32,
    store_u64,
)


@numba.njit(nogil=True)
def _loads(buf, words, floats, p):
    b, w, f = buf.ctypes.data, words.ctypes.data, floats.ctypes.data
    return load_u8(b, p), load_u32(b, p), load_u64(b, p), load_i64(w, 1), load_f64(f, 1)


@numba.njit(nogil=True)
def _stores(out, p, value):
    d = out.ctypes.data
    store_u8(d, p, value)
    store_u32(d, p + 1, value)
    store_u64(d, p + 5, value)


def test_loads_read_little_endian_at_any_alignment_and_elements_by_index():
    buf = np.arange(1, 17, dtype=np.uint8)
    words = np.array([-1, -(2**40)], dtype=np.int64)
    floats = np.array([0.5, -2.25])
    for p in range(5):
        u8, u32, u64, i64, f64 = _loads(buf, words, floats, p)
        raw = buf.tobytes()
        assert u8 == raw[p]
        assert u32 == int.from_bytes(raw[p : p + 4], "little")
        assert u64 == int.from_bytes(raw[p : p + 8], "little")
        assert (i64, f64) == (-(2**40), -2.25)


def test_stores_write_the_low_bytes_at_any_alignment_and_nothing_else():
    value = 0x1122334455667788
    for p in range(4):
        out = np.zeros(24, dtype=np.uint8)
        _stores(out, p, value)
        expected = bytearray(24)
        expected[p + 5 : p + 13] = value.to_bytes(8, "little")
        expected[p + 1 : p + 5] = (value & 0xFFFFFFFF).to_bytes(4, "little")
        expected[p] = value & 0xFF
        assert out.tobytes() == bytes(expected), p


def test_the_intrinsics_keep_their_names_and_docstrings():
    for name in ("load_u8", "load_i64", "load_f64", "load_u32", "load_u64"):
        assert getattr(native, name).__name__ == name
    for name in ("store_u8", "store_u32", "store_u64"):
        assert getattr(native, name).__name__ == name
    assert "little-endian" in (load_u32.__doc__ or "")
    assert "low byte" in (store_u8.__doc__ or "")
