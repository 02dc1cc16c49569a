"""Publish-last against a live MinIO: what a reader is told when there is nothing to read."""

from __future__ import annotations

import pytest

from shardtrain import storage
from shardtrain.errors import NotCommittedError, StorageError

pytestmark = pytest.mark.minio


def test_a_missing_bucket_is_named_not_taken_for_an_unfinished_writer(minio):
    with pytest.raises(StorageError, match=r"bucket 'no-such-bucket-31' does not exist") as e:
        storage.read_committed("s3://no-such-bucket-31/x", name="metadata.json")
    assert not isinstance(e.value, NotCommittedError)
    with pytest.raises(NotCommittedError, match="has not finished or crashed"):
        storage.read_committed(storage.join(minio.uri(), "never-written"), name="metadata.json")
