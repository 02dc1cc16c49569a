"""The storage layer against a live MinIO server (started by scripts/minio-up)."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time

import pytest

from shardtrain import storage
from shardtrain.errors import StorageError, StorageUnavailableError

pytestmark = pytest.mark.minio


def test_round_trip_50mb_streaming(minio, tmp_path):
    uri = minio.uri("roundtrip", "blob-50mb.bin")
    payload = os.urandom(50 * 1024 * 1024)
    with storage.open(uri, "wb") as f:
        for start in range(0, len(payload), 3 * 1024 * 1024 + 17):  # odd-sized writes
            f.write(payload[start : start + 3 * 1024 * 1024 + 17])
    assert storage.size(uri) == len(payload)
    digest = hashlib.sha256()
    with storage.open(uri, "rb") as f:
        while chunk := f.read(4 * 1024 * 1024 - 3):
            digest.update(chunk)
    assert digest.hexdigest() == hashlib.sha256(payload).hexdigest()
    # And through the whole-file helpers.
    local = tmp_path / "blob.bin"
    storage.download_file(uri, str(local))
    assert local.read_bytes() == payload


def test_glob_ls_exists_delete_copy(minio):
    base = minio.uri()
    for name in ("a.csv", "b.csv", "c.txt", "deep/d.csv"):
        storage.write_text(storage.join(base, name), name)
    assert [storage.basename(u) for u in storage.glob(f"{base}/*.csv")] == ["a.csv", "b.csv"]
    assert [storage.basename(u) for u in storage.glob(f"{base}/**/*.csv")] == [
        "a.csv",
        "b.csv",
        "d.csv",
    ]
    assert [storage.basename(u) for u in storage.ls(base)] == ["a.csv", "b.csv", "c.txt", "deep"]
    assert storage.exists(storage.join(base, "c.txt"))
    storage.copy(storage.join(base, "a.csv"), storage.join(base, "copied.csv"))
    assert storage.read_text(storage.join(base, "copied.csv")) == "a.csv"
    info = storage.info(storage.join(base, "a.csv"))
    assert info.size == 5 and info.version
    storage.delete(base, recursive=True)
    assert storage.walk_files(base) == []


def test_upload_and_download_directory(minio, tmp_path):
    src = tmp_path / "model"
    (src / "variables").mkdir(parents=True)
    (src / "saved_model.pb").write_bytes(b"pb" * 1000)
    (src / "variables" / "variables.index").write_bytes(b"idx")
    (src / "variables" / "variables.data-00000-of-00001").write_bytes(os.urandom(100_000))
    uri = minio.uri()
    written = storage.upload_dir(str(src), uri)
    assert len(written) == 3
    back = tmp_path / "back"
    storage.download_dir(uri, str(back))
    for rel in (
        "saved_model.pb",
        "variables/variables.index",
        "variables/variables.data-00000-of-00001",
    ):
        assert (back / rel).read_bytes() == (src / rel).read_bytes()


def test_missing_object_and_bucket_errors(minio):
    missing = minio.uri("does", "not-exist.json")
    with pytest.raises(StorageError, match=r"^s3://shardtrain-test/does/not-exist.json: no such"):
        storage.read_json(missing)
    with pytest.raises(StorageError, match="no such file or object"), storage.open(missing) as f:
        f.read()
    with pytest.raises(StorageError, match="bucket 'no-such-bucket-st' does not exist"):
        storage.read_bytes("s3://no-such-bucket-st/x")


def test_wrong_credentials_error(minio, monkeypatch, fast_retries):
    uri = minio.uri("creds.txt")
    storage.write_text(uri, "secret data")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "definitely-wrong-secret")
    with pytest.raises(StorageError, match=r"s3://shardtrain-test/creds.txt: access denied") as ei:
        storage.read_text(uri)
    assert "definitely-wrong-secret" not in str(ei.value)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "nobody")
    with pytest.raises(StorageError, match="access denied"):
        storage.write_text(uri, "overwrite")


def test_publish_pattern_on_minio(minio):
    base = minio.uri()
    storage.write_bytes(storage.join(base, "part-0"), b"data")
    assert not storage.is_committed(base)
    storage.publish(base, {"files": ["part-0"]})
    assert storage.read_committed(base)["files"] == ["part-0"]


def _wait_for_multipart_upload(minio, key: str, timeout: float = 30) -> None:
    client = minio.s3_client()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        uploads = client.list_multipart_uploads(Bucket=minio.bucket).get("Uploads", [])
        for up in uploads:
            if up["Key"] == key:
                parts = client.list_parts(Bucket=minio.bucket, Key=key, UploadId=up["UploadId"])
                if parts.get("Parts"):
                    return
        time.sleep(0.02)
    raise AssertionError("the upload never started")


@pytest.mark.slow
def test_server_killed_mid_upload_retries_then_fails_with_nothing_committed(
    minio, tmp_path, fast_retries, caplog
):
    """Kill -9 MinIO while a 256 MB upload is in flight: bounded retries, one clear error,
    and after the server comes back neither the object nor a commit marker is visible."""
    src = tmp_path / "big.bin"
    with open(src, "wb") as f:
        for _ in range(256):
            f.write(os.urandom(1024 * 1024))
    key = "killed/big.bin"
    uri = f"s3://{minio.bucket}/{key}"
    outcome: dict[str, BaseException] = {}

    def upload_then_publish():
        try:
            storage.upload_file(str(src), uri)
            storage.publish(f"s3://{minio.bucket}/killed", {"files": ["big.bin"]})
        except BaseException as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=upload_then_publish)
    worker.start()
    try:
        _wait_for_multipart_upload(minio, key)
        minio.kill()
        worker.join(timeout=120)
        assert not worker.is_alive(), "upload did not give up within its retry bound"
    finally:
        minio.restart()
    error = outcome.get("error")
    assert isinstance(error, StorageUnavailableError), repr(error)
    message = str(error)
    assert message.startswith(f"{uri}: ") and "after 3 attempts" in message
    assert "\n" not in message
    assert caplog.text.count("transient error") == 2  # retried twice, then gave up
    # The server is back: nothing of the failed upload is visible, and nothing is committed.
    assert not storage.exists(uri)
    assert not storage.is_committed(f"s3://{minio.bucket}/killed")


@pytest.mark.slow
def test_retries_ride_out_a_short_outage(minio, monkeypatch):
    """The server goes away for ~1 s; the retrying layer waits it out and the write lands."""
    monkeypatch.setenv("SHARDTRAIN_STORAGE_RETRIES", "6")
    monkeypatch.setenv("SHARDTRAIN_STORAGE_BACKOFF", "0.5")
    monkeypatch.setenv("SHARDTRAIN_STORAGE_CONNECT_TIMEOUT", "1")
    uri = minio.uri("outage.txt")
    minio.kill()
    restarter = threading.Timer(1.0, minio.restart)
    restarter.start()
    try:
        storage.write_text(uri, "survived")
    finally:
        restarter.join()
    assert storage.read_text(uri) == "survived"


@pytest.mark.slow
def test_streaming_upload_retries_each_part_through_an_outage(minio, monkeypatch):
    """MinIO is killed between two parts of a streamed upload whose data exists nowhere
    else, and restarted once shardtrain has retried a part: the failed part is sent again
    (not the object), and the object is whole."""
    monkeypatch.setenv("SHARDTRAIN_STORAGE_RETRIES", "8")
    monkeypatch.setenv("SHARDTRAIN_STORAGE_CONNECT_TIMEOUT", "1")
    key = "parts/streamed.bin"
    uri = f"s3://{minio.bucket}/{key}"
    retried, digest = threading.Event(), hashlib.md5()
    outcome: dict[str, BaseException] = {}

    class _PartRetried(logging.Handler):  # the storage layer's own retry, not botocore's
        def emit(self, record: logging.LogRecord) -> None:
            if "upload (upload_part)" in record.getMessage():
                retried.set()

    watcher = _PartRetried(logging.WARNING)
    logging.getLogger("shardtrain.storage").addHandler(watcher)

    def write() -> None:
        try:
            with storage.open(uri, "wb", block_size=5 * 1024 * 1024) as f:
                for i in range(24):  # 24 MiB, generated on the fly
                    chunk = hashlib.sha256(str(i).encode()).digest() * 32768
                    digest.update(chunk)
                    f.write(chunk)
                    if i == 11:
                        _wait_for_multipart_upload(minio, key)
                        minio.kill()
        except BaseException as exc:
            outcome["error"] = exc

    writer = threading.Thread(target=write)
    try:
        writer.start()
        # Down until a part upload has failed and been retried (however long that takes on
        # a loaded machine), then back within the retry window.
        assert retried.wait(timeout=60), "no part upload was retried while MinIO was down"
        minio.restart()
        writer.join(timeout=120)
    finally:
        logging.getLogger("shardtrain.storage").removeHandler(watcher)
    assert "error" not in outcome, outcome
    assert hashlib.md5(storage.read_bytes(uri)).hexdigest() == digest.hexdigest()


def test_a_small_document_is_read_in_one_request(minio, monkeypatch):
    """Regression (issue 29): s3fs' cat_file asked every object's size (a HEAD) before
    reading it, which doubled the requests of the settle step (a summary per worker)."""
    import aiobotocore.client

    uri = minio.uri("one-request.json")
    storage.write_json(uri, {"a": 1})
    calls: list[str] = []
    make_call = aiobotocore.client.AioBaseClient._make_api_call

    async def counted(self, name, params):
        calls.append(name)
        return await make_call(self, name, params)

    monkeypatch.setattr(aiobotocore.client.AioBaseClient, "_make_api_call", counted)
    assert storage.read_json(uri) == {"a": 1}
    assert calls == ["GetObject"]
    calls.clear()
    with pytest.raises(StorageError, match="no such"):
        storage.read_json(minio.uri("not-there.json"))
    assert calls == ["GetObject"]
    calls.clear()  # a document that may be absent (a task manifest): one request too
    assert storage.read_json_if_exists(minio.uri("not-there.json")) is None
    assert storage.read_json_if_exists(uri) == {"a": 1}
    assert calls == ["GetObject", "GetObject"]
