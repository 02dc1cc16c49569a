"""Storage layer on the local file system: the same interface the S3/GCS paths use."""

from __future__ import annotations

import gzip
import os
import random

import numpy as np
import pytest

from shardtrain import storage
from shardtrain.errors import NotCommittedError, StorageError
from shardtrain.storage import direct


def test_uri_helpers(monkeypatch):
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    assert storage.scheme("s3://b/k") == "s3"
    assert storage.scheme("/tmp/x") == ""
    assert storage.scheme("gs://b") == "gs"
    assert storage.join("s3://b/", "/a/", "c.txt") == "s3://b/a/c.txt"
    assert storage.join("/tmp", "a") == "/tmp/a"
    assert storage.tf_can_open("gs://b/x") and storage.tf_can_open("/x")
    assert not storage.tf_can_open("s3://b/x")
    assert storage.local_path("file:///tmp/x") == "/tmp/x"
    assert storage.basename("s3://b/a/c.txt/") == "c.txt"


@pytest.mark.parametrize(
    ("value", "emulator"),
    [
        ("", None),
        ("default", None),
        ("127.0.0.1:4443", "http://127.0.0.1:4443"),
        ("http://127.0.0.1:9", "http://127.0.0.1:9"),
    ],
)
def test_gs_goes_to_tensorflow_only_on_real_gcs(monkeypatch, value, emulator):
    """TF's GCS file system has no endpoint override: under an emulator gs:// is staged through
    the storage layer (the shard cache), like s3://; gcs:// (an alias TF does not know) always."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", value)
    assert storage.gcs_emulator() == emulator
    assert storage.tf_can_open("gs://b/x") is (emulator is None)
    assert not storage.tf_can_open("gcs://b/x")
    assert storage.tf_can_open("/x") and not storage.tf_can_open("s3://b/x")


def test_unsupported_scheme_is_one_clear_error():
    with pytest.raises(StorageError, match=r"ftp://h/x: unsupported URI scheme"):
        storage.exists("ftp://h/x")


def test_write_is_atomic_and_read_back(tmp_path):
    target = tmp_path / "sub" / "obj.bin"
    with storage.open(str(target), "wb") as f:
        f.write(b"hello ")
        # Nothing visible under the final name until the block exits.
        assert not target.exists()
        f.write(b"world")
    assert target.read_bytes() == b"hello world"
    assert os.listdir(target.parent) == ["obj.bin"]  # no temporary left behind


def test_failed_write_leaves_nothing(tmp_path):
    target = tmp_path / "obj.bin"
    with pytest.raises(RuntimeError), storage.open(str(target), "wb") as f:
        f.write(b"partial")
        raise RuntimeError("writer crashed")
    assert not target.exists()
    assert os.listdir(tmp_path) == []


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
            assert isinstance(f, direct._DirectWriter) == expected
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
        assert isinstance(f, direct._DirectWriter)
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
    reaches the caller, the descriptor is closed and the temporary file is gone."""
    real_write = os.write

    def full_disk(fd, data):
        raise OSError(28, "No space left on device")

    uri = str(tmp_path / "full.bin")
    fds = len(os.listdir("/proc/self/fd"))
    with pytest.raises(OSError) as caught, storage.open(uri, "wb", direct=True) as f:
        f.write(b"a" * 5000)
        if fail_at == "write":
            monkeypatch.setattr(os, "write", full_disk)
            f.write(b"b" * (2 << 20))  # fills the 1 MiB staging buffer: a write
        else:
            monkeypatch.setattr(os, "write", full_disk)  # the write at close fails
    monkeypatch.setattr(os, "write", real_write)
    assert caught.value.errno == 28
    assert os.listdir(tmp_path) == []
    assert len(os.listdir("/proc/self/fd")) == fds


def test_failed_direct_write_leaves_nothing(tmp_path):
    uri = str(tmp_path / "direct.bin")
    with pytest.raises(RuntimeError), storage.open(uri, "wb", direct=True) as f:
        f.write(b"y" * 5000)
        raise RuntimeError("crash mid-write")
    assert os.listdir(tmp_path) == []


def test_text_and_gzip_round_trip(tmp_path):
    uri = f"file://{tmp_path}/t.csv.gz"
    with storage.open(uri, "w", compression="infer") as f:
        f.write("a,b\n1,2\n")
    assert gzip.decompress((tmp_path / "t.csv.gz").read_bytes()) == b"a,b\n1,2\n"
    with storage.open(uri, "r", compression="infer") as f:
        assert f.read() == "a,b\n1,2\n"


def test_list_glob_size_delete_copy(tmp_path):
    for name in ("a.csv", "b.csv", "c.txt", "d/e.csv"):
        storage.write_text(str(tmp_path / name), name)
    base = str(tmp_path)
    assert storage.glob(f"{base}/*.csv") == [f"{base}/a.csv", f"{base}/b.csv"]
    assert storage.glob(f"{base}/**/*.csv")[-1] == f"{base}/d/e.csv"
    assert storage.size(f"{base}/c.txt") == 5
    assert storage.exists(f"{base}/d")
    storage.copy(f"{base}/a.csv", f"{base}/copy/a.csv")
    assert storage.read_text(f"{base}/copy/a.csv") == "a.csv"
    storage.delete(f"{base}/d", recursive=True)
    assert not storage.exists(f"{base}/d")
    storage.delete(f"{base}/never-there")  # missing is fine


def test_missing_object_errors_name_the_uri(tmp_path):
    missing = str(tmp_path / "nope.json")
    with pytest.raises(StorageError, match=r"nope.json: no such file or object"):
        storage.read_json(missing)
    with (
        pytest.raises(StorageError, match=r"nope.json: no such file or object"),
        storage.open(missing),
    ):
        pass
    with pytest.raises(StorageError, match="no such directory or prefix"):
        storage.download_dir(str(tmp_path / "nodir"), str(tmp_path / "out"))


def test_malformed_json_is_a_clear_error(tmp_path):
    storage.write_text(str(tmp_path / "m.json"), "{not json")
    with pytest.raises(StorageError, match=r"m.json: not valid JSON"):
        storage.read_json(str(tmp_path / "m.json"))


def test_publish_pattern(tmp_path):
    out = str(tmp_path / "dataset")
    storage.write_bytes(storage.join(out, "part-0"), b"x")
    assert not storage.is_committed(out)
    with pytest.raises(NotCommittedError, match="not committed"):
        storage.read_committed(out)
    storage.publish(out, {"files": ["part-0"]})
    assert storage.read_committed(out) == {"files": ["part-0"]}


def test_upload_download_dir_local(tmp_path):
    src = tmp_path / "src"
    (src / "x" / "y").mkdir(parents=True)
    (src / "a.txt").write_text("A")
    (src / "x" / "y" / "b.txt").write_text("B")
    written = storage.upload_dir(str(src), str(tmp_path / "remote"))
    assert [w.rsplit("remote/", 1)[1] for w in written] == ["a.txt", "x/y/b.txt"]
    storage.download_dir(str(tmp_path / "remote"), str(tmp_path / "back"))
    assert (tmp_path / "back" / "x" / "y" / "b.txt").read_text() == "B"


def test_transient_classification():
    assert storage.is_transient(ConnectionRefusedError())
    assert storage.is_transient(OSError("503 Service Unavailable"))
    assert storage.is_transient(OSError("SlowDown: please reduce your request rate"))
    assert not storage.is_transient(FileNotFoundError("nope"))
    assert not storage.is_transient(PermissionError("AccessDenied"))
    assert not storage.is_transient(ValueError("bad"))


def test_retrying_is_bounded_and_recovers(monkeypatch, caplog):
    monkeypatch.setenv("SHARDTRAIN_STORAGE_RETRIES", "3")
    monkeypatch.setenv("SHARDTRAIN_STORAGE_BACKOFF", "0")
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionResetError("connection reset by peer")
        return "ok"

    assert storage.retrying("read", "s3://b/k", flaky) == "ok"
    assert len(calls) == 3
    assert "retry 1/2" in caplog.text

    def down():
        raise ConnectionRefusedError("connection refused")

    from shardtrain.errors import StorageUnavailableError

    with pytest.raises(StorageUnavailableError, match=r"s3://b/k: read failed after 3 attempts"):
        storage.retrying("read", "s3://b/k", down)


def test_s3_settings_come_from_the_environment_only(monkeypatch):
    for name in (
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
    ):
        monkeypatch.delenv(name, raising=False)
    bare = storage.s3_settings()
    assert "key" not in bare and "endpoint_url" not in bare["client_kwargs"]
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://general:9000")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://s3-specific:9000")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "very-secret")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    s = storage.s3_settings()
    assert s["client_kwargs"] == {
        "endpoint_url": "http://s3-specific:9000",
        "region_name": "eu-west-1",
    }
    assert s["config_kwargs"]["s3"] == {"addressing_style": "path"}
    assert (s["key"], s["secret"]) == ("id", "very-secret")
    assert "very-secret" not in storage.describe_s3_settings()
