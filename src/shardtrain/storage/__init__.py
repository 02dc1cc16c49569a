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

import contextlib
import json
import os
import shutil
from dataclasses import dataclass
from typing import Any

from shardtrain.errors import NotCommittedError, StorageError
from shardtrain.storage.direct import DIRECT_IO_ENV, direct_io_enabled
from shardtrain.storage.filesystems import (
    DEFAULT_BLOCK_SIZE,
    describe_s3_settings,
    filesystem,
    s3_settings,
)
from shardtrain.storage.retry import is_transient, retrying
from shardtrain.storage.streams import open
from shardtrain.storage.uri import (
    _to_uri,
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
# Reading and writing
# --------------------------------------------------------------------------------------------


def read_bytes(uri: str) -> bytes:
    """The whole content of a (small) object."""
    fs, path = filesystem(uri)
    return retrying("read", uri, lambda: fs.cat_file(path))


def write_bytes(uri: str, data: bytes) -> None:
    """Write a (small) object atomically, retrying transient errors."""

    def _put() -> None:
        with open(uri, "wb") as f:
            f.write(data)

    retrying("write", uri, _put)


def read_text(uri: str, encoding: str = "utf-8") -> str:
    """The whole content of a (small) text object."""
    return read_bytes(uri).decode(encoding)


def write_text(uri: str, text: str, encoding: str = "utf-8") -> None:
    """Write a (small) text object atomically."""
    write_bytes(uri, text.encode(encoding))


def read_json(uri: str) -> Any:
    """Parse a JSON object; a malformed document is a StorageError naming the URI."""
    raw = read_bytes(uri)
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise StorageError(f"{uri}: not valid JSON ({exc})") from exc


def write_json(uri: str, obj: Any, *, compact: bool = False) -> None:
    """Write ``obj`` as JSON, atomically: indented for people to read, or ``compact`` for
    large internal documents (Python's C encoder only runs without indentation)."""
    if compact:
        text = json.dumps(obj, separators=(",", ":"))
    else:
        text = json.dumps(obj, indent=2, sort_keys=False)
    write_text(uri, text + "\n")


# --------------------------------------------------------------------------------------------
# Listing and metadata
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ObjectInfo:
    """What storage knows about one object."""

    uri: str
    size: int
    #: A version tag that changes when the content changes: ETag (S3), generation/md5 (GCS),
    #: or mtime in nanoseconds (local). Used for source fingerprints.
    version: str


def exists(uri: str) -> bool:
    """True when an object (or a non-empty prefix / directory) exists at ``uri``."""
    fs, path = filesystem(uri)
    return retrying("check", uri, lambda: fs.exists(path))


def info(uri: str) -> ObjectInfo:
    """Size and version tag of one object."""
    fs, path = filesystem(uri)
    meta = retrying("stat", uri, lambda: fs.info(path))
    if meta.get("type") == "directory":
        raise StorageError(f"{uri}: is a directory, expected a file")
    return ObjectInfo(uri=uri, size=int(meta.get("size", 0)), version=_version_tag(meta))


def _version_tag(meta: dict[str, Any]) -> str:
    version = (
        meta.get("ETag")
        or meta.get("etag")
        or meta.get("generation")
        or meta.get("md5Hash")
        or str(meta.get("mtime", meta.get("LastModified", "")))
    )
    return str(version).strip('"')


def size(uri: str) -> int:
    """Size of one object in bytes."""
    return info(uri).size


def ls(uri: str) -> list[str]:
    """URIs directly under ``uri`` (sorted); an empty list when there is nothing."""
    fs, path = filesystem(uri)

    def _ls() -> list[str]:
        try:
            return fs.ls(path, detail=False)
        except FileNotFoundError:
            if "/" not in path.strip("/"):  # a bucket: missing bucket must be an error
                raise
            return []

    return sorted(_to_uri(uri, p) for p in retrying("list", uri, _ls))


def walk_files(uri: str) -> list[str]:
    """URIs of every file below ``uri``, recursively (sorted)."""
    fs, path = filesystem(uri)

    def _find() -> list[str]:
        try:
            return fs.find(path)
        except FileNotFoundError:
            return []

    return sorted(_to_uri(uri, p) for p in retrying("list", uri, _find))


def walk_infos(uri: str) -> list[ObjectInfo]:
    """Every file below ``uri``, recursively, with its size and version (sorted by URI).

    One listing call per page of objects, no request per file: what listing a tree of
    images costs on S3/GCS.
    """
    fs, path = filesystem(uri)

    def _find() -> dict[str, dict[str, Any]]:
        try:
            return fs.find(path, detail=True)
        except FileNotFoundError:
            return {}

    found = retrying("list", uri, _find)
    return sorted(
        (
            ObjectInfo(uri=_to_uri(uri, p), size=int(m.get("size") or 0), version=_version_tag(m))
            for p, m in found.items()
            if m.get("type", "file") != "directory"
        ),
        key=lambda o: o.uri,
    )


def glob(pattern: str) -> list[str]:
    """URIs matching a glob pattern (``*``, ``?``, ``[..]``, ``**``), sorted."""
    fs, path = filesystem(pattern)
    return sorted(_to_uri(pattern, p) for p in retrying("glob", pattern, lambda: fs.glob(path)))


def has_magic(pattern: str) -> bool:
    """True when ``pattern`` contains glob characters."""
    return any(ch in str(pattern) for ch in "*?[")


def delete(uri: str, recursive: bool = False) -> None:
    """Delete an object (or, with ``recursive``, everything under a prefix). Missing is fine."""
    fs, path = filesystem(uri)

    def _rm() -> None:
        with contextlib.suppress(FileNotFoundError):
            fs.rm(path, recursive=recursive)

    retrying("delete", uri, _rm)


def copy(src: str, dst: str) -> None:
    """Copy one object; server-side within one store, streamed between stores."""
    _copy(src, dst, "copy", f"{src} -> {dst}")


def _copy(src: str, dst: str, op: str, label: str) -> None:
    if scheme(src) == scheme(dst) and not is_local(src):
        fs, spath = filesystem(src)
        _, dpath = filesystem(dst)
        retrying(op, label, lambda: fs.copy(spath, dpath))
        return

    def _stream() -> None:
        with open(src, "rb") as fin, open(dst, "wb") as fout:
            shutil.copyfileobj(fin, fout, length=DEFAULT_BLOCK_SIZE)

    retrying(op, label, _stream)


def upload_file(local_file: str, uri: str) -> None:
    """Upload one local file to ``uri`` (atomic; retried as a whole on transient errors)."""
    if not os.path.isfile(local_file):
        raise StorageError(f"{local_file}: no such file")
    _copy(local_file, uri, "upload", uri)


def download_file(uri: str, local_file: str) -> None:
    """Download one object to a local file (atomic; retried as a whole)."""
    _copy(uri, local_file, "download", uri)


def upload_dir(local_dir: str, uri: str) -> list[str]:
    """Upload every file under ``local_dir`` to the prefix ``uri``, keeping relative paths.

    Returns:
        The destination URIs written, sorted.
    """
    if not os.path.isdir(local_dir):
        raise StorageError(f"{local_dir}: no such directory")
    written = []
    for root, _, files in os.walk(local_dir):
        for name in sorted(files):
            src = os.path.join(root, name)
            rel = os.path.relpath(src, local_dir).replace(os.sep, "/")
            dst = join(uri, rel)
            upload_file(src, dst)
            written.append(dst)
    return sorted(written)


def download_dir(uri: str, local_dir: str) -> list[str]:
    """Download every object under the prefix ``uri`` into ``local_dir``.

    Returns:
        The local paths written, sorted.

    Raises:
        StorageError: nothing exists under ``uri``.
    """
    files = walk_files(uri)
    if not files:
        raise StorageError(f"{uri}: no such directory or prefix (nothing to download)")
    _, base = filesystem(uri)
    base = base.rstrip("/")
    written = []
    for src in files:
        _, path = filesystem(src)
        rel = path[len(base) :].lstrip("/")
        dst = os.path.join(local_dir, *rel.split("/"))
        download_file(src, dst)
        written.append(dst)
    return sorted(written)


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
