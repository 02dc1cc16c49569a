"""shardtrain.kernels.xxh64 against the xxhash package."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import xxhash

from kernel_inputs import arrow_buffers, arrow_layout, random_bytes
from shardtrain.kernels import xxh64

_SEEDS = [0, 1, 0x9E3779B1, 2**32 + 5, 2**63, 2**64 - 1]


def test_xxh64_matches_xxhash():
    rng = np.random.default_rng(3)
    buf = rng.integers(0, 256, size=5000, dtype=np.uint8)
    raw = buf.tobytes()
    sizes = [*range(101), 127, 128, 129, 1000, 4099]  # every tail shape around 32-byte stripes
    for seed in _SEEDS:
        for size in sizes:
            start = size % 7
            expected = xxhash.xxh64_intdigest(raw[start : start + size], seed)
            assert xxh64.xxh64(buf[start : start + size], seed) == expected, (seed, size)
    assert xxh64.xxh64(b"") == 0xEF46DB3751D8E999  # reference value for the empty input
    assert xxh64.xxh64(b"abc", 7) == xxhash.xxh64_intdigest(b"abc", 7)
    with pytest.raises(ValueError):
        xxh64.xxh64(b"x", 2**64)


def test_hash_strings_and_slices_match_xxhash():
    rng = np.random.default_rng(4)
    strings = [b"", "żółw".encode(), b"\x00", *random_bytes(rng, 400)]
    strings += [bytes(rng.integers(0, 256, size=k, dtype=np.uint8)) for k in range(1, 101)]
    for seed in _SEEDS:
        expected = np.array([xxhash.xxh64_intdigest(s, seed) for s in strings], dtype=np.uint64)
        for dtype, pad in ((np.int32, 0), (np.int64, 0), (np.int32, 13), (np.int64, 5)):
            data, offsets = arrow_layout(strings, dtype, pad=pad)
            got = xxh64.hash_strings(data, offsets, seed)
            assert got.dtype == np.uint64
            np.testing.assert_array_equal(got, expected)
            # A slice of the offsets (a sliced Arrow array) starts mid-buffer.
            np.testing.assert_array_equal(
                xxh64.hash_strings(data, offsets[50:120], seed), expected[50:119]
            )
            np.testing.assert_array_equal(
                xxh64.hash_slices(data, offsets[:-1], offsets[1:], seed), expected
            )
    arrow = pa.array([s.decode("latin-1") for s in strings]).slice(7)
    data, offsets = arrow_buffers(arrow)
    latin = [s.decode("latin-1").encode() for s in strings[7:]]
    np.testing.assert_array_equal(
        xxh64.hash_strings(data, offsets),
        np.array([xxhash.xxh64_intdigest(s) for s in latin], dtype=np.uint64),
    )
    assert xxh64.hash_strings(np.empty(0, np.uint8), np.zeros(1, np.int64)).shape == (0,)


def test_hash_strings_rejects_bad_offsets():
    data = np.zeros(10, np.uint8)
    with pytest.raises(ValueError):
        xxh64.hash_strings(data, np.array([0, 5, 3]))
    with pytest.raises(ValueError):
        xxh64.hash_strings(data, np.array([0, 11]))
    with pytest.raises(ValueError):
        xxh64.hash_slices(data, np.array([4]), np.array([2]))
