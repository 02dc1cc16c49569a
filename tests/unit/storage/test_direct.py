"""O_DIRECT local writes: the same bytes as buffered writes, fallbacks, and nothing left open or
half-written on failure."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

from shardtrain import storage
from shardtrain.errors import StorageFullError
from shardtrain.storage import direct


@pytest.mark.parametrize("direct_io", ["1", "0"])
def test_direct_writes_give_the_same_bytes_for_every_size(tmp_path, monkeypatch, direct_io):
    """``direct=True`` (O_DIRECT around the page cache) stages writes in an aligned buffer;
    whatever the sizes of the writes, the file holds exactly the bytes written."""
    monkeypatch.setenv(storage.DIRECT_IO_ENV, direct_io)
    try:  # does this file system take O_DIRECT (ext4, xfs: yes; tmpfs: no)?
        os.close(os.open(tmp_path / "probe", os.O_WRONLY | os.O_CREAT | os.O_DIRECT))
        supported = True
    except OSError:
        supported = False
    (tmp_path / "probe").unlink(missing_ok=True)
    rng = random.Random(3)
    for total in (0, 1, 4095, 4096, 4097, 1024 * 1024, 3 * 1024 * 1024 + 7):
        data = rng.randbytes(total)
        uri = str(tmp_path / f"direct-{total}.bin")
        with storage.open(uri, "wb", direct=True) as f:
            expected = direct_io == "1" and supported and direct._on_block_device(tmp_path)
            # The file as written (storage names its I/O errors through a thin wrapper).
            assert isinstance(f.raw, direct._DirectWriter) == expected
            pos = 0
            while pos < total:  # writes of every size, some larger than the staging buffer
                step = rng.choice([1, 511, 4096, 65_537, 1_500_000])
                f.write(memoryview(data)[pos : pos + step])
                pos += step
        assert storage.read_bytes(uri) == data
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


def test_in_place_direct_writes_mixed_with_copying_writes(tmp_path, monkeypatch):
    """``write_in_place`` sends whole pages straight from the caller's buffer, with the
    staged tail copied into the room before the data; in any mix with ``write``, with the
    room laid out right or wrong (unaligned, too little room, too short: copied instead),
    the file holds exactly the bytes written, and the room is all that gets overwritten."""
    if not direct._on_block_device(str(tmp_path)):
        pytest.skip("O_DIRECT is not used on this file system")
    sent = []
    real_write = os.write

    def recording_write(fd, data):
        sent.append(memoryview(data).obj)
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", recording_write)
    rng = np.random.default_rng(5)
    page = direct._DirectWriter.ALIGN
    uri = str(tmp_path / "in-place.bin")
    expected, in_place = bytearray(), 0
    with storage.open(uri, "wb", direct=True) as f:
        assert isinstance(f.raw, direct._DirectWriter)
        for step in range(90):
            n = int(rng.choice([1, 100, page - 1, page + 1, 50_000, 131_072, 1_300_000]))
            data = rng.integers(0, 256, n, dtype=np.uint8)
            if step % 4 == 3:
                f.write(data.tobytes())
                expected += data.tobytes()
                continue
            tail = len(expected) % page
            layout = ["right", "unaligned", "no room"][step % 3] if step < 40 else "right"
            raw = np.full(n + 3 * page, 0xEE, dtype=np.uint8)
            base = -raw.ctypes.data % page
            start = base + page + tail
            if layout == "unaligned":
                start += 1
            elif layout == "no room":
                start = tail - 1 if tail else 0
                raw = raw[base:]  # page-aligned, but no room before a non-zero tail
            raw[start : start + n] = data
            before = raw.copy()
            sent.clear()
            f.write_in_place(raw, start, start + n)
            expected += data.tobytes()
            if layout == "right" and n >= direct._DirectWriter.IN_PLACE_MIN:
                in_place += 1
                assert any(obj is raw for obj in sent)  # pages sent from the buffer itself
                changed = np.flatnonzero(raw != before)  # only the room before the data
                assert np.all((changed >= start - tail) & (changed < start))
            else:
                assert np.array_equal(raw, before)  # copied: the caller's buffer is untouched
    assert in_place > 5
    with pytest.raises(ValueError, match="not a range"), storage.open(uri, "wb", direct=True) as f:
        f.write_in_place(np.zeros(10, dtype=np.uint8), 4, 11)
    assert storage.read_bytes(uri) == bytes(expected)


def test_direct_writes_fall_back_where_o_direct_is_refused(tmp_path):
    """tmpfs refuses O_DIRECT at open: the write goes through the page cache instead."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no tmpfs at /dev/shm on this machine")
    target = f"/dev/shm/shardtrain-direct-{os.getpid()}.bin"
    try:
        with storage.open(target, "wb", direct=True) as f:
            f.write(b"x" * 10_000)
        assert storage.read_bytes(target) == b"x" * 10_000
    finally:
        if os.path.exists(target):
            os.unlink(target)


@pytest.mark.parametrize("fail_at", ["write", "close"])
def test_a_full_disk_during_a_direct_write_leaves_nothing_open(tmp_path, monkeypatch, fail_at):
    """ENOSPC from a staged chunk (write) or from the last blocks (close): the disk's error
    reaches the caller as one line naming the object (exit 3: a full disk is not a data
    error), the descriptor is closed and the temporary file is gone."""
    real_write = os.write

    def full_disk(fd, data):
        raise OSError(28, "No space left on device")

    uri = str(tmp_path / "full.bin")
    fds = len(os.listdir("/proc/self/fd"))
    with pytest.raises(StorageFullError) as caught, storage.open(uri, "wb", direct=True) as f:
        f.write(b"a" * 5000)
        if fail_at == "write":
            monkeypatch.setattr(os, "write", full_disk)
            f.write(b"b" * (2 << 20))  # fills the 1 MiB staging buffer: a write
        else:
            monkeypatch.setattr(os, "write", full_disk)  # the write at close fails
    monkeypatch.setattr(os, "write", real_write)
    assert caught.value.__cause__.errno == 28
    assert str(caught.value).startswith(f"{uri}: write failed: no space left")
    assert caught.value.exit_code == 3
    assert os.listdir(tmp_path) == []
    assert len(os.listdir("/proc/self/fd")) == fds


def test_failed_direct_write_leaves_nothing(tmp_path):
    uri = str(tmp_path / "direct.bin")
    with pytest.raises(RuntimeError), storage.open(uri, "wb", direct=True) as f:
        f.write(b"y" * 5000)
        raise RuntimeError("crash mid-write")
    assert os.listdir(tmp_path) == []
