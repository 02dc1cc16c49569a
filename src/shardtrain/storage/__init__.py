"""One storage layer for local paths, ``file://``, ``s3://`` (AWS S3, MinIO) and ``gs://`` URIs.

Everything in shardtrain that touches data — the sharder, the trainer's shard cache, the
TFJob launcher, the pipeline components — goes through this module, so that:

* credentials and endpoints come from the standard places only. For ``s3://``:
  ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` (MinIO, or any S3-compatible server),
  ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_REGION``
  (or ``AWS_DEFAULT_REGION``), else boto's default chain (IRSA, instance profile, ...). For
  ``gs://``: Google application-default credentials (Workload Identity on GKE). Nothing is
  hard-coded and no secret is ever logged.
* transient failures (connection refused/reset, timeouts, HTTP 5xx, throttling) are retried
  with exponential backoff and jitter, up to a bound (``SHARDTRAIN_STORAGE_RETRIES`` attempts,
  default 5; base delay ``SHARDTRAIN_STORAGE_BACKOFF`` seconds, default 0.5). When the bound
  is exhausted a :class:`~shardtrain.errors.StorageUnavailableError` names the URI.
* permanent failures (missing object, missing bucket, wrong credentials) raise a
  :class:`~shardtrain.errors.StorageError` whose one-line message names the URI.
* TensorFlow is never handed an ``s3://`` URI: TF 2.21 has no working S3 filesystem.
  :func:`tf_can_open` tells callers whether a URI may go to ``tf.io``/``tf.data`` directly
  (local and ``gs://``) or must be staged through a local cache first.

Writes are all-or-nothing per object: :func:`open` in a write mode streams to a temporary
file renamed into place on success (local), or to a multipart/resumable upload that is only
completed on success and aborted on error (S3/GCS). A reader therefore never sees a
half-written object.

The publish pattern
-------------------
Object stores have no atomic rename of a directory, so a writer that produces *many* objects
(the shards of a dataset, the files of a SavedModel) cannot make them appear at once. The
convention used throughout shardtrain:

1. write every data object (each one is atomic by itself, see above);
2. write the manifest last, with :func:`publish` — a JSON document listing what was written
   (names, sizes, checksums). Its presence is the *commit*;
3. readers call :func:`read_committed` (or :func:`is_committed`) and trust only what the
   manifest lists. Objects without a manifest are leftovers of a crashed writer: they are
   ignored by readers and simply overwritten when the writer runs again.

S3 and GCS give strong read-after-write consistency, so a reader that sees the manifest also
sees every object it lists.

Example::

    from shardtrain import storage

    with storage.open("s3://bucket/data/part-0.bin", "wb") as f:
        f.write(payload)
    storage.publish("s3://bucket/data", {"files": ["part-0.bin"]})
    manifest = storage.read_committed("s3://bucket/data")
"""

from __future__ import annotations

from typing import Any

from shardtrain.errors import NotCommittedError, StorageError
from shardtrain.storage.direct import DIRECT_IO_ENV, direct_io_enabled
from shardtrain.storage.filesystems import (
    DEFAULT_BLOCK_SIZE,
    describe_s3_settings,
    filesystem,
    s3_settings,
)
from shardtrain.storage.listing import glob, has_magic, ls, walk_files, walk_infos
from shardtrain.storage.objects import (
    ObjectInfo,
    delete,
    exists,
    info,
    read_bytes,
    read_json,
    read_text,
    size,
    write_bytes,
    write_json,
    write_text,
)
from shardtrain.storage.retry import is_transient, retrying
from shardtrain.storage.streams import open
from shardtrain.storage.transfer import (
    copy,
    download_dir,
    download_file,
    upload_dir,
    upload_file,
)
from shardtrain.storage.uri import (
    basename,
    is_local,
    join,
    local_path,
    scheme,
    tf_can_open,
)

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DIRECT_IO_ENV",
    "MANIFEST_NAME",
    "ObjectInfo",
    "basename",
    "copy",
    "delete",
    "describe_s3_settings",
    "direct_io_enabled",
    "download_dir",
    "download_file",
    "exists",
    "filesystem",
    "glob",
    "has_magic",
    "info",
    "is_committed",
    "is_local",
    "is_transient",
    "join",
    "local_path",
    "ls",
    "open",
    "publish",
    "read_bytes",
    "read_committed",
    "read_json",
    "read_text",
    "retrying",
    "s3_settings",
    "scheme",
    "size",
    "tf_can_open",
    "upload_dir",
    "upload_file",
    "walk_files",
    "walk_infos",
    "write_bytes",
    "write_json",
    "write_text",
]

#: Name of the manifest that commits a directory written with the publish pattern.
MANIFEST_NAME = "_MANIFEST.json"

# --------------------------------------------------------------------------------------------
# Publish / commit
# --------------------------------------------------------------------------------------------


def publish(uri: str, manifest: dict[str, Any], name: str = MANIFEST_NAME) -> str:
    """Commit the directory ``uri`` by writing its manifest last.

    Call this only after every object the manifest lists has been written successfully.

    Args:
        uri: the directory (prefix) being committed.
        manifest: JSON-serialisable description of the committed content.
        name: the manifest's object name inside ``uri``.

    Returns:
        The manifest's URI.
    """
    target = join(uri, name)
    write_json(target, manifest)
    return target


def is_committed(uri: str, name: str = MANIFEST_NAME) -> bool:
    """True when ``uri`` has been published (its manifest exists)."""
    return exists(join(uri, name))


def read_committed(uri: str, name: str = MANIFEST_NAME) -> dict[str, Any]:
    """The manifest of a published directory.

    Raises:
        NotCommittedError: the manifest is missing — the writer never finished (or crashed).
    """
    target = join(uri, name)
    if not exists(target):
        raise NotCommittedError(
            f"{uri}: not committed ({name} is missing: the writer has not finished or crashed)"
        )
    manifest = read_json(target)
    if not isinstance(manifest, dict):
        raise StorageError(f"{target}: manifest is not a JSON object")
    return manifest
