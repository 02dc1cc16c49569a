"""Transient or permanent: retrying whole operations, and one clear error naming the URI.

Object stores fail in two ways. Transient failures (connection refused or reset, timeouts,
HTTP 5xx, throttling) go away by themselves: :func:`retrying` repeats the operation with
exponential backoff and jitter, up to ``SHARDTRAIN_STORAGE_RETRIES`` attempts (default 8;
base delay ``SHARDTRAIN_STORAGE_BACKOFF`` seconds, default 0.5: an outage of about half a
minute to a minute is ridden out — a restarted server, a rolling upgrade), logging each retry, and
raises :class:`~shardtrain.errors.StorageUnavailableError` naming the URI when the bound is
exhausted. Permanent failures (missing object or bucket, wrong credentials) are not retried:
:func:`_translate` turns them into a :class:`~shardtrain.errors.StorageError` whose one-line
message names the URI and, for access errors, what to check.

The clients underneath (botocore, s3fs) are told to retry little themselves (see
:mod:`shardtrain.storage.filesystems`), so the bound set here is the real one.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, Any, TypeVar

from shardtrain.errors import StorageError, StorageFullError, StorageUnavailableError
from shardtrain.storage.uri import scheme

# The retry warnings keep the logger name they always had: the storage layer's.
log = logging.getLogger("shardtrain.storage")

T = TypeVar("T")

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
    """``exc`` and the exceptions it was raised from or while handling, each once: libraries
    wrap the telling error (a refused connection) in their own."""
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
    """``exc`` as one line of at most 300 characters, for messages and logs."""
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
    errnos = {getattr(e, "errno", None) for e in _chain(exc)}
    if errnos & {errno.ENOSPC, errno.EDQUOT} or "no space left" in text:
        return StorageFullError(
            f"{uri}: {op} failed: no space left on the device (or quota exceeded); free "
            "space and run the same command again"
        )
    if errno.EROFS in errnos:
        return StorageError(f"{uri}: {op} failed: the file system is read-only")
    if errno.EIO in errnos:
        return StorageError(f"{uri}: {op} failed: input/output error of the device ({_short(exc)})")
    if isinstance(exc, IsADirectoryError):
        return StorageError(f"{uri}: is a directory, expected a file")
    if isinstance(exc, NotADirectoryError):
        return StorageError(f"{uri}: is a file, expected a directory")
    return StorageError(f"{uri}: {op} failed: {_short(exc)}")


def _retry_policy() -> tuple[int, float]:
    """(attempts, base delay in seconds), read from the environment at every operation."""
    attempts = max(1, int(os.environ.get("SHARDTRAIN_STORAGE_RETRIES", "8")))
    backoff = max(0.0, float(os.environ.get("SHARDTRAIN_STORAGE_BACKOFF", "0.5")))
    return attempts, backoff


#: ``depth`` > 0 while this thread runs inside :func:`retrying`.
_retry_state = threading.local()


def _in_retry() -> bool:
    """True inside :func:`retrying` on this thread: an inner operation then leaves retrying
    and translating its errors to the outermost one."""
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
