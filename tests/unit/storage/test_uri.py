"""URIs: local paths, s3:// and gs://, which schemes TensorFlow is handed, and the error for any
other."""

from __future__ import annotations

import pytest

from shardtrain import storage
from shardtrain.errors import StorageError


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
