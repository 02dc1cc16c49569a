"""The storage layer on ``gs://`` against a live fake-gcs-server (started by scripts/gcs-up).

gcsfs sends every request to ``STORAGE_EMULATOR_HOST`` (the ``gcs`` fixture sets it), without
credentials. What the emulator showed, and these tests pin down:

* gcsfs >= 2025 registers ``ExtendedGcsFileSystem`` for ``gs://``, which first asks the
  Storage Control gRPC API for each bucket's layout; the emulator does not serve it and every
  lookup hung for its 60 s timeout (never cached). Under an emulator the storage layer uses
  gcsfs's core class (:mod:`shardtrain.storage.filesystems`).
* Streamed writes larger than the block size go through GCS resumable uploads (an initiate
  ``POST``, then ``PUT`` of each chunk with ``Content-Range``; the last one finalizes). The
  emulator hands out upload URLs from ``-external-url``, which ``scripts/gcs-up`` sets to the
  loopback address it listens on.
* An upload abandoned before its last chunk leaves nothing visible: the object appears only
  when the upload is finalized, as on GCS.
* Listing with a delimiter returns "directories" as prefixes, so ``ls`` sees ``deep``.
* gcsfs caches listings by default: a process polling for objects another process writes (the
  sharder's task markers) never saw them. The storage layer turns the cache off, as for S3.
* A missing bucket reads as a missing object (gcsfs raises the same FileNotFoundError for
  both 404s): the error names the URI either way.
"""

from __future__ import annotations

import hashlib
import os
import threading
import urllib.parse
import urllib.request

import pytest

from shardtrain import storage
from shardtrain.errors import StorageError

pytestmark = pytest.mark.gcs


def test_the_emulator_is_used_and_tensorflow_is_kept_away(gcs):
    assert storage.gcs_emulator() == gcs.endpoint
    fs, path = storage.filesystem(gcs.uri("x.bin"))
    assert fs._location == gcs.endpoint and path == f"{gcs.bucket}/x.bin"
    # TF's own GCS file system has no endpoint override: gs:// goes through the cache.
    assert not storage.tf_can_open(gcs.uri("x.bin"))


def test_round_trip_20mb_streaming_through_a_resumable_upload(gcs, tmp_path):
    uri = gcs.uri("roundtrip", "blob-20mb.bin")
    payload = os.urandom(20 * 1024 * 1024)
    with storage.open(uri, "wb", block_size=4 * 1024 * 1024) as f:  # 5 chunks
        for start in range(0, len(payload), 3 * 1024 * 1024 + 17):  # odd-sized writes
            f.write(payload[start : start + 3 * 1024 * 1024 + 17])
    assert storage.size(uri) == len(payload)
    digest = hashlib.sha256()
    with storage.open(uri, "rb") as f:
        while chunk := f.read(4 * 1024 * 1024 - 3):
            digest.update(chunk)
    assert digest.hexdigest() == hashlib.sha256(payload).hexdigest()
    local = tmp_path / "blob.bin"
    storage.download_file(uri, str(local))
    assert local.read_bytes() == payload


def test_a_failed_write_leaves_no_object(gcs):
    """The block raises after two chunks went up: the resumable upload is never finalized."""
    uri = gcs.uri("failed", "half.bin")
    with (
        pytest.raises(RuntimeError, match="writer crashed"),
        storage.open(uri, "wb", block_size=256 * 1024) as f,
    ):
        f.write(os.urandom(600 * 1024))
        raise RuntimeError("writer crashed")
    assert not storage.exists(uri)
    assert storage.walk_files(gcs.uri("failed")) == []


def test_glob_ls_exists_delete_copy(gcs):
    base = gcs.uri()
    for name in ("a.csv", "b.csv", "c.txt", "deep/d.csv"):
        storage.write_text(storage.join(base, name), name)
    assert [storage.basename(u) for u in storage.glob(f"{base}/*.csv")] == ["a.csv", "b.csv"]
    assert [storage.basename(u) for u in storage.glob(f"{base}/**/*.csv")] == [
        "a.csv",
        "b.csv",
        "d.csv",
    ]
    assert [storage.basename(u) for u in storage.ls(base)] == ["a.csv", "b.csv", "c.txt", "deep"]
    assert all(u.startswith("gs://") for u in storage.ls(base))
    assert storage.exists(storage.join(base, "c.txt"))
    storage.copy(storage.join(base, "a.csv"), storage.join(base, "copied.csv"))
    assert storage.read_text(storage.join(base, "copied.csv")) == "a.csv"
    info = storage.info(storage.join(base, "a.csv"))
    assert info.size == 5 and info.version
    storage.delete(base, recursive=True)
    assert storage.walk_files(base) == []


def _upload_from_elsewhere(gcs, key: str, data: bytes) -> None:
    """Write an object the way another process would: straight to the emulator's JSON API."""
    query = urllib.parse.urlencode({"uploadType": "media", "name": key})
    request = urllib.request.Request(
        f"{gcs.endpoint}/upload/storage/v1/b/{gcs.bucket}/o?{query}", data=data, method="POST"
    )
    urllib.request.urlopen(request, timeout=10).close()


def test_listings_see_objects_other_processes_wrote(gcs):
    base = gcs.uri()
    prefix = base.split("/", 3)[3]
    storage.write_text(f"{base}/_tasks/0.json", "{}")
    assert [storage.basename(u) for u in storage.ls(f"{base}/_tasks")] == ["0.json"]
    assert not storage.exists(f"{base}/_plan.json")
    _upload_from_elsewhere(gcs, f"{prefix}/_tasks/1.json", b"{}")
    _upload_from_elsewhere(gcs, f"{prefix}/_plan.json", b"{}")
    assert [storage.basename(u) for u in storage.ls(f"{base}/_tasks")] == ["0.json", "1.json"]
    assert storage.exists(f"{base}/_plan.json")


def test_overwrite_changes_the_version(gcs):
    uri = gcs.uri("versioned.txt")
    storage.write_text(uri, "one")
    first = storage.info(uri).version
    storage.write_text(uri, "two")
    assert storage.read_text(uri) == "two" and storage.info(uri).version != first


def test_upload_and_download_directory(gcs, tmp_path):
    src = tmp_path / "model"
    (src / "variables").mkdir(parents=True)
    (src / "saved_model.pb").write_bytes(b"pb" * 1000)
    (src / "variables" / "variables.index").write_bytes(b"idx")
    (src / "variables" / "variables.data-00000-of-00001").write_bytes(os.urandom(100_000))
    uri = gcs.uri()
    assert len(storage.upload_dir(str(src), uri)) == 3
    back = tmp_path / "back"
    storage.download_dir(uri, str(back))
    for rel in (
        "saved_model.pb",
        "variables/variables.index",
        "variables/variables.data-00000-of-00001",
    ):
        assert (back / rel).read_bytes() == (src / rel).read_bytes()


def test_missing_object_and_bucket_errors(gcs):
    missing = gcs.uri("does", "not-exist.json")
    with pytest.raises(StorageError, match=r"^gs://shardtrain-test/does/not-exist.json: no such"):
        storage.read_json(missing)
    with pytest.raises(StorageError, match="no such file or object"), storage.open(missing) as f:
        f.read()
    with pytest.raises(StorageError, match=r"^gs://no-such-bucket-st/x: "):
        storage.read_bytes("gs://no-such-bucket-st/x")


def test_publish_pattern(gcs):
    base = gcs.uri()
    storage.write_bytes(storage.join(base, "part-0"), b"data")
    assert not storage.is_committed(base)
    storage.publish(base, {"files": ["part-0"]})
    assert storage.read_committed(base)["files"] == ["part-0"]


@pytest.mark.slow
def test_a_short_outage_is_ridden_out(gcs):
    """The emulator is killed and back ~1 s later: the write lands (gcsfs retries each request
    itself with backoff; shardtrain's retrying() wraps the whole operation)."""
    uri = gcs.uri("outage.txt")
    gcs.kill()
    restarter = threading.Timer(1.0, gcs.restart)
    restarter.start()
    try:
        storage.write_text(uri, "survived")
    finally:
        restarter.join()
    assert storage.read_text(uri) == "survived"
