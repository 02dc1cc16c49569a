"""URIs and paths: which store a location lives in, and string operations on locations.

A location is a plain local path, a ``file://`` URI, or an ``s3://`` / ``gs://`` URI (with
the aliases ``local://``, ``s3a://`` and ``gcs://``). Everything here works on strings only,
with '/' as the separator whatever the store, so callers can build and take apart locations
without knowing where they live. Nothing here touches a file system.
"""

from __future__ import annotations

import os

from shardtrain.errors import StorageError

LOCAL_SCHEMES = ("", "file", "local")
_SUPPORTED_SCHEMES = ("", "file", "local", "s3", "s3a", "gs", "gcs")


def scheme(uri: str) -> str:
    """The lower-case scheme of ``uri`` ('' for a plain local path)."""
    head, sep, _ = str(uri).partition("://")
    return head.lower() if sep else ""


def is_local(uri: str) -> bool:
    """True for plain paths and ``file://`` URIs."""
    return scheme(uri) in LOCAL_SCHEMES


def tf_can_open(uri: str) -> bool:
    """True when ``uri`` goes to TensorFlow's own file system layer (``tf.data``, ``tf.io``,
    summary writers); False when it must be staged through this package (the trainer's shard
    cache, local scratch directories synced by :mod:`shardtrain.storage`).

    The one place that decides:

    * local paths: TensorFlow.
    * ``gs://`` on real GCS: TensorFlow. TF 2.21's GCS file system streams shards with its own
      block cache and retries, authenticates like gcsfs (application-default credentials,
      Workload Identity), and needs no local disk, so training reads shards directly.
    * ``gs://`` under an emulator (``STORAGE_EMULATOR_HOST`` set, e.g. fake-gcs-server):
      through the cache. TF's GCS file system has no endpoint override and would go to the real
      storage.googleapis.com; gcsfs honours the emulator.
    * ``s3://``: through the cache. TF 2.21 has no S3 file system (tensorflow-io no longer
      loads).
    """
    sch = scheme(uri)
    if sch in ("gs", "gcs"):
        return sch == "gs" and gcs_emulator() is None
    return sch in LOCAL_SCHEMES


def gcs_emulator() -> str | None:
    """The GCS emulator's address from ``STORAGE_EMULATOR_HOST``, or None on real GCS.

    The variable is the one the Google client libraries and gcsfs honour: every ``gs://``
    request then goes to that server (``http://127.0.0.1:4443``) without credentials.
    ``default`` or empty means real GCS, as it does for gcsfs.
    """
    host = os.environ.get("STORAGE_EMULATOR_HOST", "").strip()
    if host in ("", "default"):
        return None
    return host if host.startswith(("http://", "https://")) else f"http://{host}"


def local_path(uri: str) -> str:
    """The file-system path of a local ``uri`` (strips ``file://``)."""
    if not is_local(uri):
        raise StorageError(f"{uri}: not a local path")
    return str(uri).split("://", 1)[1] if "://" in str(uri) else str(uri)


def join(base: str, *parts: str) -> str:
    """Join URI/path components with '/' (works for local paths and URIs alike)."""
    out = str(base)
    for part in parts:
        part = str(part)
        if not part:
            continue
        out = out.rstrip("/") + "/" + part.lstrip("/")
    return out


def basename(uri: str) -> str:
    """The last component of ``uri``."""
    return str(uri).rstrip("/").rsplit("/", 1)[-1]


def check_scheme(uri: str) -> str:
    """The scheme of ``uri``; a StorageError naming the URI when no store serves it."""
    sch = scheme(uri)
    if sch not in _SUPPORTED_SCHEMES:
        raise StorageError(
            f"{uri}: unsupported URI scheme '{sch}://' (use a local path, s3:// or gs://)"
        )
    return sch


def to_uri(uri_like: str, path: str) -> str:
    """A file system's ``path`` (as fsspec returns it) in the form of ``uri_like``.

    Listings come back as bare paths; this puts the caller's scheme back, so that a listing
    of ``file:///d`` yields ``file://`` URIs and a listing of ``/d`` plain paths.
    """
    sch = scheme(uri_like)
    if sch in LOCAL_SCHEMES:
        return path if sch == "" else f"file://{path}"
    return f"{sch}://{path}"
