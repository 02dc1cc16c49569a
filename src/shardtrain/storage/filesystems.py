"""The fsspec file system behind a URI, configured from the environment only.

For ``s3://``: ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` (MinIO, or any S3-compatible
server), ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``,
``AWS_REGION`` (or ``AWS_DEFAULT_REGION``), else boto's default chain (IRSA, instance
profile, ...). For ``gs://``: Google application-default credentials (Workload Identity on
GKE), ``GOOGLE_CLOUD_PROJECT``; or, when ``STORAGE_EMULATOR_HOST`` is set (fake-gcs-server,
``scripts/gcs-up``), that emulator without credentials (see :func:`gcs_emulator`). Nothing is
hard-coded, and :func:`describe_s3_settings` is the only form of the settings fit for a log.

The clients' own retries are kept short where they can be: every operation is retried as a
whole, with a bound and a log line per retry, by :func:`shardtrain.storage.retry.retrying`.
gcsfs retries each HTTP request itself (6 tries over ~30 s, fixed in the library), so a GCS
outage is ridden out for that long inside one attempt before ``retrying`` counts it.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from typing import Any

import fsspec

from shardtrain.storage.uri import LOCAL_SCHEMES, check_scheme, gcs_emulator, local_path

#: Part size of streaming uploads to S3/GCS. Small enough that many shards can be open for
#: writing at once in bounded memory, large enough for the S3 multipart minimum (5 MiB).
DEFAULT_BLOCK_SIZE = 8 * 1024 * 1024


def s3_settings() -> dict[str, Any]:
    """The ``s3fs.S3FileSystem`` keyword arguments derived from the standard AWS variables.

    Returns a dict safe to pass to s3fs; secrets are included only as read from the
    environment and must never be logged (use :func:`describe_s3_settings` for logs).
    """
    env = os.environ
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    client_kwargs: dict[str, Any] = {}
    # botocore's own retries: few, because every operation is also retried by retrying().
    config_kwargs: dict[str, Any] = {
        "retries": {"max_attempts": 2, "mode": "standard"},
        "connect_timeout": float(env.get("SHARDTRAIN_STORAGE_CONNECT_TIMEOUT", "5")),
        "read_timeout": float(env.get("SHARDTRAIN_STORAGE_READ_TIMEOUT", "60")),
    }
    if endpoint:
        client_kwargs["endpoint_url"] = endpoint
        # S3-compatible servers behind a plain host name (minio.ns.svc:9000, 127.0.0.1) cannot
        # serve virtual-hosted bucket names.
        config_kwargs["s3"] = {"addressing_style": "path"}
    if region:
        client_kwargs["region_name"] = region
    settings: dict[str, Any] = {
        "client_kwargs": client_kwargs,
        "config_kwargs": config_kwargs,
        "use_listings_cache": False,
        "default_block_size": DEFAULT_BLOCK_SIZE,
    }
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        settings["key"] = env["AWS_ACCESS_KEY_ID"]
        settings["secret"] = env["AWS_SECRET_ACCESS_KEY"]
        if env.get("AWS_SESSION_TOKEN"):
            settings["token"] = env["AWS_SESSION_TOKEN"]
    return settings


def describe_s3_settings() -> str:
    """A log-safe description of the S3 configuration (never includes secrets)."""
    s = s3_settings()
    endpoint = s["client_kwargs"].get("endpoint_url", "AWS default")
    who = "access key from AWS_ACCESS_KEY_ID" if "key" in s else "boto default credential chain"
    return f"endpoint={endpoint}, credentials: {who}"


def _gcs_filesystem(project: str | None, emulator: str | None) -> fsspec.AbstractFileSystem:
    # No listings cache (as for S3): a process that polls for another's objects (the sharder's
    # task markers, a pipeline waiting for a manifest) must see what is there now.
    if emulator is None:
        return fsspec.filesystem(
            "gs", skip_instance_cache=True, project=project, token=None, use_listings_cache=False
        )
    # Under an emulator: anonymous, and gcsfs's core class. The class fsspec registers for
    # gs:// (gcsfs >= 2025.x, ExtendedGcsFileSystem) first asks the Storage Control gRPC API
    # for every bucket's layout (zonal/hierarchical); an emulator does not serve it, and each
    # lookup hangs for its 60 s timeout before falling back (and is never cached).
    from gcsfs.core import GCSFileSystem

    return GCSFileSystem(
        skip_instance_cache=True,
        project=project or "shardtrain-emulator",
        token="anon",
        endpoint_url=emulator,
        use_listings_cache=False,
    )


def _s3_filesystem(settings: dict[str, Any]) -> fsspec.AbstractFileSystem:
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **settings)
    # s3fs retries some errors itself (5 times by default) inside every call; keep that short
    # because retrying() bounds and logs the retries of each whole operation.
    fs.retries = 2
    return fs


_fs_cache: dict[tuple, fsspec.AbstractFileSystem] = {}
_fs_lock = threading.Lock()


def import_client(uri: str) -> None:
    """Import the client library of ``uri``'s object store (s3fs, gcsfs), connecting to
    nothing and starting no thread.

    For a process about to fork workers before its first storage call (the sharder's pool):
    the workers then share the modules imported once (~300 of them, ~0.25 CPU-s for s3fs,
    aiobotocore and aiohttp) instead of each importing them again.
    """
    sch = check_scheme(uri)
    if sch not in LOCAL_SCHEMES:
        fsspec.get_filesystem_class(_protocol(sch))


def _protocol(sch: str) -> str:
    """The fsspec protocol of a remote scheme (``s3a`` is read as ``s3``)."""
    return "s3" if sch in ("s3", "s3a") else "gs"


def filesystem(uri: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec file system for ``uri`` and the path to use with it.

    File-system objects are cached per process and per configuration, so a change of the
    environment (other credentials, another endpoint) takes effect on the next call.
    """
    sch = check_scheme(uri)
    if sch in LOCAL_SCHEMES:
        return fsspec.filesystem("file", auto_mkdir=True), os.path.abspath(local_path(uri))
    path = str(uri).split("://", 1)[1]
    if _protocol(sch) == "s3":
        settings = s3_settings()
        key: tuple[str, int, str | None] = ("s3", os.getpid(), json.dumps(settings, sort_keys=True))
        factory: Callable[[], fsspec.AbstractFileSystem] = lambda: _s3_filesystem(settings)  # noqa: E731
    else:
        project = os.environ.get("GOOGLE_CLOUD_PROJECT")
        emulator = gcs_emulator()
        key = ("gs", os.getpid(), f"{project}@{emulator}")
        factory = lambda: _gcs_filesystem(project, emulator)  # noqa: E731
    with _fs_lock:
        fs = _fs_cache.get(key)
        if fs is None:
            fs = _fs_cache[key] = factory()
    return fs, path
