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

import builtins
import contextlib
import errno
import functools
import gzip
import io
import json
import logging
import mmap
import os
import random
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any, TypeVar

import fsspec
import numpy as np

from shardtrain.errors import NotCommittedError, StorageError, StorageUnavailableError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Name of the manifest that commits a directory written with the publish pattern.
MANIFEST_NAME = "_MANIFEST.json"

#: Part size of streaming uploads to S3/GCS. Small enough that many shards can be open for
#: writing at once in bounded memory, large enough for the S3 multipart minimum (5 MiB).
DEFAULT_BLOCK_SIZE = 8 * 1024 * 1024

_LOCAL_SCHEMES = ("", "file", "local")
_TF_NATIVE_SCHEMES = ("", "file", "local", "gs")
_SUPPORTED_SCHEMES = ("", "file", "local", "s3", "s3a", "gs", "gcs")


# --------------------------------------------------------------------------------------------
# URIs
# --------------------------------------------------------------------------------------------


def scheme(uri: str) -> str:
    """The lower-case scheme of ``uri`` ('' for a plain local path)."""
    head, sep, _ = str(uri).partition("://")
    return head.lower() if sep else ""


def is_local(uri: str) -> bool:
    """True for plain paths and ``file://`` URIs."""
    return scheme(uri) in _LOCAL_SCHEMES


def tf_can_open(uri: str) -> bool:
    """True when TensorFlow's own file system layer can read ``uri`` directly.

    TF 2.21 reads local paths and ``gs://`` natively; ``s3://`` must be staged through a local
    cache (see ``shardtrain.train.dataset``) because tensorflow-io no longer loads.
    """
    return scheme(uri) in _TF_NATIVE_SCHEMES


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


def _check_scheme(uri: str) -> str:
    sch = scheme(uri)
    if sch not in _SUPPORTED_SCHEMES:
        raise StorageError(
            f"{uri}: unsupported URI scheme '{sch}://' (use a local path, s3:// or gs://)"
        )
    return sch


# --------------------------------------------------------------------------------------------
# File systems, configured from the environment only
# --------------------------------------------------------------------------------------------


def s3_settings() -> dict[str, Any]:
    """The ``s3fs.S3FileSystem`` keyword arguments derived from the standard AWS variables.

    Returns a dict safe to pass to s3fs; secrets are included only as read from the
    environment and must never be logged (use :func:`describe_s3_settings` for logs).
    """
    env = os.environ
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    client_kwargs: dict[str, Any] = {}
    # botocore's own retries: few, because every operation is also retried by _retrying().
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


def _s3_filesystem(settings: dict[str, Any]) -> fsspec.AbstractFileSystem:
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **settings)
    # s3fs retries some errors itself (5 times by default) inside every call; keep that short
    # because retrying() bounds and logs the retries of each whole operation.
    fs.retries = 2
    return fs


_fs_cache: dict[tuple, fsspec.AbstractFileSystem] = {}
_fs_lock = threading.Lock()


def filesystem(uri: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec file system for ``uri`` and the path to use with it.

    File-system objects are cached per process and per configuration, so a change of the
    environment (other credentials, another endpoint) takes effect on the next call.
    """
    sch = _check_scheme(uri)
    if sch in _LOCAL_SCHEMES:
        return fsspec.filesystem("file", auto_mkdir=True), os.path.abspath(local_path(uri))
    path = str(uri).split("://", 1)[1]
    if sch in ("s3", "s3a"):
        settings = s3_settings()
        key = ("s3", os.getpid(), json.dumps(settings, sort_keys=True))
        factory: Callable[[], fsspec.AbstractFileSystem] = lambda: _s3_filesystem(settings)  # noqa: E731
    else:
        project = os.environ.get("GOOGLE_CLOUD_PROJECT")
        key = ("gs", os.getpid(), project)
        factory = lambda: fsspec.filesystem(  # noqa: E731
            "gs", skip_instance_cache=True, project=project, token=None
        )
    with _fs_lock:
        fs = _fs_cache.get(key)
        if fs is None:
            fs = _fs_cache[key] = factory()
    return fs, path


# --------------------------------------------------------------------------------------------
# Errors and retries
# --------------------------------------------------------------------------------------------

_TRANSIENT_ERRNOS = {
    errno.ECONNREFUSED,
    errno.ECONNRESET,
    errno.ECONNABORTED,
    errno.ETIMEDOUT,
    errno.EPIPE,
    errno.EAGAIN,
    errno.EBUSY,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
}
_TRANSIENT_MARKERS = (
    "slowdown",
    "slow down",
    "throttl",
    "too many requests",
    "serviceunavailable",
    "service unavailable",
    "internalerror",
    "internal error",
    "requesttimeout",
    "503",
    "502",
    "504",
    "500 ",
    "connection refused",
    "connection reset",
    "could not connect",
    "connect timeout",
    "read timeout",
    "server disconnected",
    "connection aborted",
    "cannot connect to host",
    "broken pipe",
)
_PERMISSION_MARKERS = (
    "accessdenied",
    "access denied",
    "invalidaccesskeyid",
    "signaturedoesnotmatch",
    "forbidden",
    "403",
    "invalidtoken",
    "expiredtoken",
    "unauthorized",
    "401",
)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` (or its cause) is worth retrying: network trouble, 5xx, throttling."""
    for e in _chain(exc):
        if isinstance(e, (FileNotFoundError, PermissionError, IsADirectoryError)):
            return False
        if isinstance(e, (ConnectionError, TimeoutError)):
            return True
        if isinstance(e, OSError) and e.errno in _TRANSIENT_ERRNOS:
            return True
        name = type(e).__name__
        if name in {
            "EndpointConnectionError",
            "ConnectionClosedError",
            "ReadTimeoutError",
            "ConnectTimeoutError",
            "ClientConnectorError",
            "ServerDisconnectedError",
            "ClientPayloadError",
            "ClientOSError",
            "FSTimeoutError",
            "IncompleteRead",
            "ResponseStreamingError",
        }:
            return True
        text = str(e).lower()
        if any(marker in text for marker in _TRANSIENT_MARKERS):
            return True
    return False


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _translate(exc: BaseException, uri: str, op: str) -> StorageError:
    """Turn a low-level exception into one clear line naming the URI."""
    text = " ".join(str(e) for e in _chain(exc)).lower()
    if isinstance(exc, FileNotFoundError) or "nosuchkey" in text or "not found" in text:
        if "nosuchbucket" in text or "bucket does not exist" in text:
            bucket = uri.split("://", 1)[-1].split("/", 1)[0]
            return StorageError(f"{uri}: bucket '{bucket}' does not exist")
        return StorageError(f"{uri}: no such file or object")
    if isinstance(exc, PermissionError) or any(m in text for m in _PERMISSION_MARKERS):
        hint = (
            "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and the endpoint"
            if scheme(uri) in ("s3", "s3a")
            else "check the credentials and permissions"
        )
        return StorageError(f"{uri}: access denied while trying to {op} ({hint})")
    if isinstance(exc, IsADirectoryError):
        return StorageError(f"{uri}: is a directory, expected a file")
    if isinstance(exc, NotADirectoryError):
        return StorageError(f"{uri}: is a file, expected a directory")
    return StorageError(f"{uri}: {op} failed: {_short(exc)}")


def _retry_policy() -> tuple[int, float]:
    attempts = max(1, int(os.environ.get("SHARDTRAIN_STORAGE_RETRIES", "5")))
    backoff = max(0.0, float(os.environ.get("SHARDTRAIN_STORAGE_BACKOFF", "0.5")))
    return attempts, backoff


_retry_state = threading.local()


def _in_retry() -> bool:
    return getattr(_retry_state, "depth", 0) > 0


def retrying(op: str, uri: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` with bounded, jittered exponential backoff on transient errors.

    Calls nest: an operation built from other retried operations (a copy is an open for
    reading plus an open for writing) retries as a whole at the outermost level only, so the
    bound is the bound, not its square.

    Args:
        op: what is being done, for messages ("read", "upload", ...).
        uri: the URI concerned, for messages.
        fn: the operation; it must be safe to repeat (idempotent).

    Returns:
        What ``fn`` returns.

    Raises:
        StorageUnavailableError: transient errors persisted through every attempt.
        StorageError: a permanent error (missing object, access denied, ...).
    """
    if _in_retry():
        return fn()
    attempts, backoff = _retry_policy()
    for attempt in range(1, attempts + 1):
        _retry_state.depth = 1
        try:
            return fn()
        except StorageError:
            raise
        except Exception as exc:
            if not is_transient(exc):
                raise _translate(exc, uri, op) from exc
            if attempt == attempts:
                raise StorageUnavailableError(
                    f"{uri}: {op} failed after {attempts} attempts: {_short(exc)}"
                ) from exc
            delay = min(backoff * 2 ** (attempt - 1), 20.0) * (0.5 + random.random() / 2)
            log.warning(
                "%s %s: transient error (%s); retry %d/%d in %.1fs",
                op,
                uri,
                _short(exc),
                attempt,
                attempts - 1,
                delay,
            )
            time.sleep(delay)
        finally:
            _retry_state.depth = 0
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------------------------
# Reading and writing
# --------------------------------------------------------------------------------------------


class _RetryingReader(io.RawIOBase):
    """A binary reader that retries transient errors of each ``read`` in place.

    fsspec files keep their position when a ranged GET fails, so repeating the read resumes
    exactly where the stream was; a reconnect in the middle of a 100 GB CSV costs one retry,
    not the whole job.
    """

    def __init__(self, raw: IO[bytes], uri: str):
        super().__init__()
        self._raw = raw
        self._uri = uri

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return self._raw.seekable()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = retrying("read", self._uri, lambda: self._raw.read(len(view)))
        view[: len(data)] = data
        return len(data)

    def read(self, size: int = -1) -> bytes:
        return retrying("read", self._uri, lambda: self._raw.read(size))

    def close(self) -> None:
        if not self.closed:
            with contextlib.suppress(Exception):
                self._raw.close()
        super().close()


def _wants_gzip(uri: str, compression: str | None) -> bool:
    if compression in (None, "none", ""):
        return False
    if compression == "gzip":
        return True
    if compression == "infer":
        return str(uri).endswith(".gz")
    raise StorageError(f"{uri}: unknown compression '{compression}' (use gzip, none or infer)")


@contextlib.contextmanager
def open(
    uri: str,
    mode: str = "rb",
    *,
    compression: str | None = None,
    block_size: int | None = None,
    encoding: str = "utf-8",
    newline: str | None = None,
    direct: bool = False,
) -> Iterator[IO[Any]]:
    """Open ``uri`` for streaming read or write; use it as a context manager.

    Args:
        uri: a local path, ``file://``, ``s3://`` or ``gs://`` URI.
        mode: 'rb', 'r' (text), 'wb' or 'w' (text). Writes are atomic per object: the object
            appears only when the ``with`` block exits without an exception.
        compression: None/'none', 'gzip', or 'infer' (gzip when the name ends in '.gz').
        block_size: read-ahead / upload part size for remote objects.
        encoding: text encoding for text modes.
        newline: as for :func:`builtins.open` in text modes.
        direct: for a local file written in 'wb' mode, write around the page cache
            (``O_DIRECT``, see :class:`_DirectWriter`) where the file system allows it and
            ``SHARDTRAIN_DIRECT_IO`` is not ``0``. For large outputs read by other
            processes later (shards): it halves the CPU cost of writing them and keeps them
            from evicting useful pages. Ignored for remote objects.

    Yields:
        A file object.

    Raises:
        StorageError: the object is missing, access is denied, or the write failed (the
            partial object is discarded).
    """
    if mode not in ("rb", "r", "wb", "w"):
        raise StorageError(f"{uri}: unsupported mode '{mode}'")
    gz = _wants_gzip(uri, compression)
    text = "b" not in mode
    if mode.startswith("r"):
        with _open_read(uri, block_size) as raw:
            stream: IO[Any] = raw
            if gz:
                stream = gzip.GzipFile(fileobj=raw, mode="rb")
            if text:
                stream = io.TextIOWrapper(stream, encoding=encoding, newline=newline)
            try:
                yield stream
            finally:
                with contextlib.suppress(Exception):
                    stream.close()
    else:
        with _open_write(uri, block_size, direct=direct and not gz and not text) as raw:
            stream = raw
            gzfile = None
            if gz:
                # mtime=0 keeps the bytes (and so checksums) identical across runs.
                gzfile = stream = gzip.GzipFile(fileobj=raw, mode="wb", mtime=0)
            if text:
                stream = io.TextIOWrapper(stream, encoding=encoding, newline=newline)
            yield stream
            if text:
                stream.flush()
                stream.detach()
            if gzfile is not None:
                gzfile.close()


@contextlib.contextmanager
def _open_read(uri: str, block_size: int | None) -> Iterator[IO[bytes]]:
    fs, path = filesystem(uri)
    if is_local(uri):
        try:
            raw = builtins.open(path, "rb")  # noqa: SIM115 - closed by the with below
        except OSError as exc:
            raise _translate(exc, uri, "open") from exc
        with raw:
            yield raw
        return
    kwargs = {"block_size": block_size} if block_size else {}
    fobj = retrying("open", uri, lambda: fs.open(path, "rb", **kwargs))
    reader = io.BufferedReader(_RetryingReader(fobj, uri), buffer_size=1024 * 1024)
    try:
        yield reader
    except (OSError, ValueError) as exc:
        if isinstance(exc, StorageError) or _in_retry():
            raise
        raise _translate(exc, uri, "read") from exc
    finally:
        reader.close()


#: Set to ``0`` to make every local write go through the page cache.
DIRECT_IO_ENV = "SHARDTRAIN_DIRECT_IO"


def direct_io_enabled() -> bool:
    """Whether ``open(..., direct=True)`` may use ``O_DIRECT`` (``SHARDTRAIN_DIRECT_IO``)."""
    return os.environ.get(DIRECT_IO_ENV, "1").strip() != "0" and hasattr(os, "O_DIRECT")


class _DirectWriter(io.RawIOBase):
    """A local file written with ``O_DIRECT``: from an aligned buffer straight to the device.

    A buffered ``write`` copies every byte into the page cache, and on the benchmark VM that
    copy (plus allocating and accounting the pages) costs about as much CPU as encoding the
    data did: ~1 s per GB written, for output that nobody reads back soon and that, at
    hundreds of GB, could never stay cached anyway. ``O_DIRECT`` hands the device our own
    buffer instead. Its rules: the memory address, the length and the file offset of every
    write must be multiples of the device's block size. So writes are staged in a
    page-aligned buffer (an anonymous ``mmap``) and leave in whole ``buffer_size`` chunks;
    on close, whole blocks of the remainder go the same way and the last partial block is
    written after switching ``O_DIRECT`` off for the descriptor.

    Whatever happens (a full disk, an interrupt), ``close`` and ``discard`` close the
    descriptor; no view of the buffer outlives a call, so the buffer can always be freed.
    """

    ALIGN = 4096  # a multiple of every common logical block size (512, 4096)
    #: Smaller pieces given to :meth:`write_in_place` are copied and staged instead: a
    #: direct write per piece would make a task with hundreds of open shards issue
    #: hundreds of small synchronous writes per block, where staging sends 1 MiB at a time.
    IN_PLACE_MIN = 128 * 1024

    def __init__(self, fd: int, buffer_size: int = 1024 * 1024):
        super().__init__()
        self._fd = fd
        self._size = buffer_size
        try:
            self._buf = mmap.mmap(-1, buffer_size)  # page-aligned, zero-filled
        except BaseException:
            os.close(fd)
            raise
        self._view = memoryview(self._buf)
        self._used = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        with memoryview(data) as raw, raw.cast("B") as source:
            n = len(source)
            pos = 0
            while pos < n:
                take = min(n - pos, self._size - self._used)
                self._view[self._used : self._used + take] = source[pos : pos + take]
                self._used += take
                pos += take
                if self._used == self._size:
                    self._write_range(0, self._size)
                    self._used = 0
        return n

    def write_in_place(self, buffer: np.ndarray, start: int, end: int) -> int:
        """Write ``buffer[start:end]``, sending its whole pages from ``buffer`` itself.

        ``write`` copies everything into the staging buffer first (~1.3 ms per 15 MB,
        a twentieth of sharding's CPU). Here only the edges are copied: the bytes of the
        file's last, partial page still staged (``tail``: the file size so far modulo
        :attr:`ALIGN`) go into ``buffer[start - tail:start]``, which the caller left free
        for them, and from there whole pages are written straight out of ``buffer``; the
        last partial page is staged for the next write. That needs ``buffer`` (1-D uint8,
        writable) to have ``buffer[start - tail]`` at an aligned address, which
        ``example_encode.encode_example_groups`` arranges when given the tail as the phase, and
        at least :attr:`IN_PLACE_MIN` bytes. Anything else is written with ``write``:
        still correct, only slower.
        """
        if not 0 <= start <= end <= len(buffer):
            raise ValueError(f"[{start}, {end}) is not a range of a {len(buffer)}-byte buffer")
        tail = self._used % self.ALIGN
        room = start - tail
        if (
            room < 0
            or end - start < self.IN_PLACE_MIN
            or buffer.dtype != np.uint8
            or buffer.ndim != 1
            or not buffer.flags.writeable
            or not buffer.flags.c_contiguous
            or (buffer.ctypes.data + room) % self.ALIGN
        ):
            return self.write(memoryview(buffer)[start:end])
        if self._used > tail:  # whole pages staged by `write`: out first
            self._write_range(0, self._used - tail)
            self._view[:tail] = self._view[self._used - tail : self._used]
        buffer[room:start] = np.frombuffer(self._view, dtype=np.uint8, count=tail)
        whole = (end - room) // self.ALIGN * self.ALIGN
        self._used = 0  # the staged tail now lives in `buffer`
        with memoryview(buffer) as view:
            self._write_all(view[room : room + whole])
            rest = view[room + whole : end]
            self._view[: len(rest)] = rest
            self._used = len(rest)
        return end - start

    def _write_range(self, start: int, end: int) -> None:
        """Write ``buffer[start:end]``, all of it."""
        with self._view[start:end] as chunk:
            self._write_all(chunk)

    def _write_all(self, data: memoryview) -> None:
        """Write all of ``data`` (aligned in address and length while O_DIRECT is on)."""
        done = 0
        while done < len(data):
            with data[done:] as chunk:
                try:
                    done += os.write(self._fd, chunk)
                except OSError as exc:
                    # Some file systems accept O_DIRECT at open and refuse it at write:
                    # carry on through the page cache.
                    if exc.errno != errno.EINVAL or not self._buffered_from_now_on():
                        raise

    def _buffered_from_now_on(self) -> bool:
        """Switch O_DIRECT off; False if it was off already (the EINVAL has another cause)."""
        import fcntl  # POSIX only, like O_DIRECT itself

        flags = fcntl.fcntl(self._fd, fcntl.F_GETFL)
        if not flags & os.O_DIRECT:
            return False
        fcntl.fcntl(self._fd, fcntl.F_SETFL, flags & ~os.O_DIRECT)
        return True

    def close(self) -> None:
        """Write what is staged, then release everything (also when the write fails)."""
        if self.closed:
            return
        try:
            whole = self._used - self._used % self.ALIGN
            if whole:
                self._write_range(0, whole)
            if self._used > whole:
                self._buffered_from_now_on()  # the last, partial block
                self._write_range(whole, self._used)
        finally:
            self.discard()

    def discard(self) -> None:
        """Release the descriptor and the buffer without writing what is staged."""
        if self.closed:
            return
        try:
            os.close(self._fd)
        finally:
            self._view.release()
            with contextlib.suppress(BufferError):  # a caller's view: freed with it
                self._buf.close()
            super().close()


#: File systems on a local block device, where O_DIRECT does what it should. Elsewhere
#: (NFS, CIFS, FUSE, overlay, tmpfs) it is refused, ignored, or makes every write a round
#: trip, so local writes there go through the page cache.
_DIRECT_IO_FILE_SYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs"})


@functools.cache
def _mounts() -> tuple[tuple[str, str], ...]:
    """``(mount point, file system type)`` of every mount, longest mount point first."""
    try:
        with builtins.open("/proc/self/mounts", encoding="utf-8") as f:
            entries = [line.split()[1:3] for line in f if len(line.split()) >= 3]
    except OSError:
        return ()
    points = [(point.replace("\\040", " "), kind) for point, kind in entries]
    return tuple(sorted(points, key=lambda e: len(e[0]), reverse=True))


def _on_block_device(path: str) -> bool:
    """Whether ``path`` lies on a file system from :data:`_DIRECT_IO_FILE_SYSTEMS`."""
    path = os.path.realpath(path)
    for point, kind in _mounts():
        if path == point or path.startswith(point.rstrip("/") + "/"):
            return kind in _DIRECT_IO_FILE_SYSTEMS
    return False


def _open_local_for_writing(tmp: str, direct: bool) -> IO[bytes]:
    if direct and direct_io_enabled() and _on_block_device(os.path.dirname(tmp) or "."):
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o666)
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # EINVAL: no O_DIRECT here after all
                raise
        else:
            return _DirectWriter(fd)  # type: ignore[return-value]
    return builtins.open(tmp, "wb")


@contextlib.contextmanager
def _open_write(uri: str, block_size: int | None, direct: bool = False) -> Iterator[IO[bytes]]:
    fs, path = filesystem(uri)
    if is_local(uri):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:12]}"
        try:
            fobj = _open_local_for_writing(tmp, direct)
        except OSError as exc:
            raise _translate(exc, uri, "write") from exc
        try:
            yield fobj
            fobj.close()
            os.replace(tmp, path)
        except BaseException:
            # Nothing may stop the clean-up or hide the first error (a full disk fails the
            # close too): drop what is staged and the temporary file.
            with contextlib.suppress(Exception):
                getattr(fobj, "discard", fobj.close)()
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return
    kwargs = {"block_size": block_size or DEFAULT_BLOCK_SIZE}
    fobj = retrying("open for writing", uri, lambda: fs.open(path, "wb", **kwargs))
    try:
        yield fobj
        fobj.close()  # completes the multipart / resumable upload: the commit point
    except BaseException as exc:
        # Abort the upload so that nothing partial ever becomes visible. If the server is
        # gone the abort fails too; the incomplete upload stays invisible and the bucket's
        # lifecycle rule (or the next successful write) cleans it up.
        with contextlib.suppress(Exception):
            fobj.discard()
        with contextlib.suppress(Exception):
            fobj.closed = True  # type: ignore[misc]
        if isinstance(exc, StorageError) or not isinstance(exc, Exception) or _in_retry():
            raise
        if is_transient(exc):
            raise StorageUnavailableError(f"{uri}: write failed: {_short(exc)}") from exc
        if isinstance(exc, OSError):
            raise _translate(exc, uri, "write") from exc
        raise


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
    large internal documents (Python's C encoder only runs without indentation, ~10x
    faster)."""
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


def _to_uri(uri_like: str, path: str) -> str:
    sch = scheme(uri_like)
    if sch in _LOCAL_SCHEMES:
        return path if sch == "" else f"file://{path}"
    return f"{sch}://{path}"


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
