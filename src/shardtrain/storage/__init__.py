"""One storage layer for local paths, ``file://``, ``s3://`` (AWS S3, MinIO) and ``gs://`` URIs.

Everything in shardtrain that touches data — the sharder, the trainer's shard cache, the
TFJob launcher, the pipeline components — goes through this package, so that the rules below
hold everywhere. Callers use the functions re-exported here::

    from shardtrain import storage

    with storage.open("s3://bucket/data/part-0.bin", "wb") as f:
        f.write(payload)
    storage.publish("s3://bucket/data", {"files": ["part-0.bin"]})
    manifest = storage.read_committed("s3://bucket/data")

Locations
---------
A location is a plain local path, a ``file://`` URI, an ``s3://`` (or ``s3a://``) URI or a
``gs://`` (or ``gcs://``) URI; any other scheme is a :class:`~shardtrain.errors.StorageError`
naming the URI. Every function takes all of them, paths are joined with '/' whatever the
store (:func:`join`), and listings answer with URIs in the form they were asked in, ready to
pass back.

Credentials and endpoints
-------------------------
Only from the standard places. For ``s3://``: ``AWS_ENDPOINT_URL_S3`` or
``AWS_ENDPOINT_URL`` (MinIO, or any S3-compatible server), ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_REGION`` (or
``AWS_DEFAULT_REGION``), else boto's default chain (IRSA, instance profile, ...). For
``gs://``: Google application-default credentials (Workload Identity on GKE), or, when
``STORAGE_EMULATOR_HOST`` is set, that GCS emulator (fake-gcs-server) without credentials
(:func:`gcs_emulator`). Nothing is hard-coded and no secret is ever logged
(:func:`describe_s3_settings` is the loggable form).

Failures and retries
--------------------
* Transient failures (connection refused/reset, timeouts, HTTP 5xx, throttling) are retried
  with exponential backoff and jitter, up to a bound (``SHARDTRAIN_STORAGE_RETRIES``
  attempts, default 8; base delay ``SHARDTRAIN_STORAGE_BACKOFF`` seconds, default 0.5). When
  the bound is exhausted a :class:`~shardtrain.errors.StorageUnavailableError` names the URI
  (exit code 3, see :mod:`shardtrain.errors`).
* Permanent failures (missing object, missing bucket, wrong credentials) are not retried:
  they raise a :class:`~shardtrain.errors.StorageError` whose one-line message names the URI.
* Every operation is retried as a whole, and retries nest: a copy (an open for reading plus
  an open for writing) retries once at the outermost level, so the bound is the bound. The
  clients underneath (botocore, s3fs) are told to retry little themselves.
* A streamed upload to S3 cannot restart its object (the parts already sent are no longer
  in memory), so it retries each request instead: every part, the completion and the
  one-shot put of a small object, each with the bound above; an error names the object
  being written, never another one open at the same time.

All-or-nothing objects
----------------------
Writes are all-or-nothing per object: :func:`open` in a write mode streams to a temporary
file renamed into place on success (local), or to a multipart/resumable upload that is only
completed on success and aborted on error (S3/GCS). A reader therefore never sees a
half-written object. Large local outputs may also bypass the page cache (``direct=True``).

Publish-last
------------
Object stores have no atomic rename of a directory, so a writer of *many* objects (the
shards of a dataset, the files of a SavedModel) writes every object first and a manifest
last, with :func:`publish`: the manifest's presence is the commit. Readers call
:func:`read_committed` (or :func:`is_committed`) and trust only what the manifest lists;
objects without a manifest are a crashed writer's leftovers, ignored by readers and
overwritten when the writer runs again. S3 and GCS give strong read-after-write
consistency, so a reader that sees the manifest also sees every object it lists.

TensorFlow never gets ``s3://``
-------------------------------
TF 2.21 has no working S3 file system: its S3 support lived in tensorflow-io, which no
longer loads. :func:`tf_can_open` tells callers whether a URI may go to ``tf.io`` /
``tf.data`` directly (local paths, and ``gs://`` on real GCS, which TF reads natively) or
must first be staged through a local cache with this package (``shardtrain.train.dataset``
does so for shards on S3, and on ``gs://`` under a GCS emulator: TF's GCS file system has no
endpoint override). This package itself never imports TensorFlow or pandas: importing it stays
cheap for processes that only move data.

Where things are
----------------
* :mod:`~shardtrain.storage.uri` — schemes, local paths, joining and taking URIs apart.
* :mod:`~shardtrain.storage.filesystems` — the fsspec file system of a URI, S3 settings
  from the environment.
* :mod:`~shardtrain.storage.retry` — transient or permanent, :func:`retrying`, one-line
  errors naming the URI.
* :mod:`~shardtrain.storage.streams` — :func:`open`: streaming reads, atomic writes;
  :func:`remove_temporaries` of writers killed mid-write.
* :mod:`~shardtrain.storage.direct` — ``O_DIRECT`` local writes around the page cache.
* :mod:`~shardtrain.storage.objects` — whole-object read/write (bytes, text, JSON; a read of
  an object that may be absent in one request: :func:`read_json_if_exists`),
  :func:`exists`, :func:`info`, :func:`size`, :func:`delete`.
* :mod:`~shardtrain.storage.listing` — :func:`ls`, :func:`walk_files`, :func:`walk_infos`,
  :func:`glob`.
* :mod:`~shardtrain.storage.transfer` — :func:`copy`, uploads and downloads of files and
  directories.
* :mod:`~shardtrain.storage.commit` — publish-last: :func:`publish`, :func:`is_committed`,
  :func:`read_committed`.
* :mod:`~shardtrain.storage.lease` — leases: one live writer per lock object (owner, expiry;
  ``flock`` locally, conditional writes on S3).
"""

from __future__ import annotations

from shardtrain.storage.commit import MANIFEST_NAME, is_committed, publish, read_committed
from shardtrain.storage.direct import DIRECT_IO_ENV, direct_io_enabled
from shardtrain.storage.filesystems import (
    DEFAULT_BLOCK_SIZE,
    describe_s3_settings,
    filesystem,
    import_client,
    s3_settings,
)
from shardtrain.storage.listing import glob, has_magic, ls, walk_files, walk_infos
from shardtrain.storage.objects import (
    ObjectInfo,
    delete,
    exists,
    info,
    read_bytes,
    read_bytes_if_exists,
    read_json,
    read_json_if_exists,
    read_text,
    size,
    write_bytes,
    write_json,
    write_text,
)
from shardtrain.storage.retry import is_transient, retrying
from shardtrain.storage.streams import open, remove_temporaries
from shardtrain.storage.transfer import (
    copy,
    download_dir,
    download_file,
    upload_dir,
    upload_file,
)
from shardtrain.storage.uri import (
    basename,
    gcs_emulator,
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
    "gcs_emulator",
    "glob",
    "has_magic",
    "import_client",
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
    "read_bytes_if_exists",
    "read_committed",
    "read_json",
    "read_json_if_exists",
    "read_text",
    "remove_temporaries",
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
