"""shardtrain.kernels.crc32c against google_crc32c."""

from __future__ import annotations

import google_crc32c
import numpy as np
import pytest

from shardtrain.kernels import crc32c


def test_crc32c_matches_google_crc32c_for_every_size_and_alignment():
    rng = np.random.default_rng(1)
    buf = rng.integers(0, 256, size=5000 + 16, dtype=np.uint8)
    raw = buf.tobytes()
    for size in range(5001):
        start = size % 11  # unaligned starts, all residues mod 8
        expected = google_crc32c.value(raw[start : start + size])
        assert crc32c.crc32c(buf[start : start + size]) == expected, size
    assert crc32c.crc32c(raw) == google_crc32c.value(raw)
    assert crc32c.crc32c(bytearray(raw[:77])) == google_crc32c.value(raw[:77])
    assert crc32c.crc32c(memoryview(raw)[3:99]) == google_crc32c.value(raw[3:99])
    words = rng.integers(0, 2**32, size=33, dtype=np.uint32)  # raw bytes of any array
    assert crc32c.crc32c(words) == google_crc32c.value(words.tobytes())
    assert crc32c.crc32c(b"123456789") == 0xE3069283  # the standard check value
    assert crc32c.crc32c(b"") == 0


def test_crc32c_continuation_matches_extend():
    rng = np.random.default_rng(2)
    for _ in range(300):
        a = rng.integers(0, 256, size=int(rng.integers(0, 300)), dtype=np.uint8).tobytes()
        b = rng.integers(0, 256, size=int(rng.integers(0, 300)), dtype=np.uint8).tobytes()
        head = crc32c.crc32c(a)
        assert crc32c.crc32c(b, head) == google_crc32c.value(a + b)
        assert crc32c.crc32c(b, head) == google_crc32c.extend(google_crc32c.value(a), b)
    with pytest.raises(ValueError):
        crc32c.crc32c(b"x", 2**32)


def test_table_driven_crc32c_matches_google_crc32c():
    """The slicing-by-8 CRC that CPUs without SSE4.2 (ARM) compile in, tested on any CPU."""
    rng = np.random.default_rng(5)
    tables = crc32c.crc32c_tables()
    for size in [*range(0, 40), 255, 4096 + 3]:
        data = rng.integers(0, 256, size=size, dtype=np.uint8)
        start = int(rng.integers(0, 4)) if size > 4 else 0
        head = google_crc32c.value(b"seed")
        got = crc32c._crc32c_buffer_sw(tables, head, data, start, size)
        assert got == google_crc32c.extend(head, data[start:].tobytes())


def test_masked_crc32c():
    for crc in (0, 1, 0xFFFFFFFF, 0x12345678, google_crc32c.value(b"tfrecord")):
        rotated = ((crc >> 15) | (crc << 17)) & 0xFFFFFFFF
        assert crc32c.masked_crc32c(crc) == (rotated + 0xA282EAD8) % 2**32
    with pytest.raises(ValueError):
        crc32c.masked_crc32c(-1)


@pytest.mark.parametrize(
    ("cpu_name", "cpu_features", "expected"),
    [
        ("x86-64-v2", "", True),  # the image's portable target: SSE4.2 is part of the level
        ("x86-64-v3", "", True),
        ("generic", "", False),  # no SSE4.2: LLVM could not select the crc32 instruction
        ("x86-64", "", False),
        ("generic", "+sse4.2,+popcnt", True),
        ("x86-64-v2", "-sse4.2", False),
    ],
)
def test_hardware_crc32c_follows_the_compile_target_not_the_host(
    monkeypatch, cpu_name, cpu_features, expected
):
    """A portable cache's CRC kernel must run on every CPU of its target."""
    import numba

    from shardtrain.kernels.native import has_hardware_crc32c

    monkeypatch.setattr(numba.config, "CPU_NAME", cpu_name)
    monkeypatch.setattr(numba.config, "CPU_FEATURES", cpu_features)
    assert has_hardware_crc32c() is expected
