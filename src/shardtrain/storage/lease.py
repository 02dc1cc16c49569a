"""Leases: one live writer per lock object, with an owner and an expiry, on every store.

A writer that must not run twice at once (two ``shard`` runs of the same worker on one
output) takes a :class:`Lease` on a small JSON lock object before it writes. The object
records its owner — host, pid, run id — and when the lease expires; a thread renews it every
third of its time to live while the process lives. Another writer that finds a *live* lease
waits (bounded) or gives up with the owner's description; a lease whose owner is gone is
*stale* and is taken over. How "gone" is proven depends on the store:

* **local paths**: the lock object is also ``flock``-ed for as long as the owner lives, and
  the kernel drops that lock the moment the process dies (kill -9 included). A lease is live
  exactly when its file is locked; the expiry is only information for people.
* **S3 / MinIO**: conditional writes. The lease is created with ``If-None-Match: *`` (only one
  of two simultaneous creators succeeds: S3 and MinIO answer 412 to the other), renewed and
  taken over with ``If-Match: <ETag>`` (a takeover of an expired lease by two writers at once
  succeeds for one), and S3's strong read-after-write consistency makes the record read back
  the one in force. A lease is live until its expiry: an owner killed without releasing it
  blocks others for at most the time to live.
* **other stores** (GCS): write the record when absent or expired, wait a moment, read it back
  and compare: the writer whose record is read back holds the lease (the last writer wins,
  and every loser sees it lost). Weaker than a conditional create but never two holders once
  both have read back.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from shardtrain.errors import StorageError
from shardtrain.storage.filesystems import filesystem
from shardtrain.storage.objects import delete, read_bytes, write_bytes
from shardtrain.storage.retry import _translate, retrying
from shardtrain.storage.uri import is_local, scheme

#: Seconds a lease lives without renewal (``SHARDTRAIN_LEASE_TTL`` overrides).
DEFAULT_TTL = 60.0


def lease_ttl() -> float:
    """The time to live of new leases, from ``SHARDTRAIN_LEASE_TTL`` (seconds)."""
    return max(1.0, float(os.environ.get("SHARDTRAIN_LEASE_TTL", DEFAULT_TTL)))


def new_run_id() -> str:
    """A run id that sorts by start time (hex nanoseconds), then randomly."""
    return f"{time.time_ns():016x}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Holder:
    """Who holds a lease, as recorded in its lock object."""

    host: str
    pid: int
    run: str
    expires: float
    info: dict[str, Any]

    @classmethod
    def from_bytes(cls, raw: bytes) -> Holder | None:
        try:
            doc = json.loads(raw)
            return cls(
                str(doc["host"]), int(doc["pid"]), str(doc["run"]), float(doc["expires"]),
                dict(doc.get("info", {})),
            )  # fmt: skip
        except (ValueError, KeyError, TypeError):
            return None  # half-written or foreign: not a lease anyone can prove live

    def describe(self) -> str:
        when = time.strftime("%H:%M:%S UTC", time.gmtime(self.expires))
        return f"host {self.host}, pid {self.pid}, run {self.run}, lease until {when}"


class Lease:
    """A lease held on ``uri`` by this process; renewed by a thread until :meth:`release`."""

    def __init__(self, uri: str, run: str, info: dict[str, Any], ttl: float):
        self.uri = uri
        self.run = run
        self.info = info
        self.ttl = ttl
        self._fd: int | None = None
        self._etag: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def record(self) -> bytes:
        doc = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "run": self.run,
            "expires": time.time() + self.ttl,
            "info": self.info,
        }
        return (json.dumps(doc, sort_keys=True) + "\n").encode()

    def _start_renewing(self) -> None:
        def renew() -> None:
            while not self._stop.wait(self.ttl / 3):
                try:
                    _renew(self)
                except Exception as exc:  # the owner keeps running; others may take over
                    import logging

                    logging.getLogger(__name__).warning("%s: lease not renewed: %s", self.uri, exc)

        self._thread = threading.Thread(target=renew, name="lease-renewal", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Give the lease up (stop renewing, delete the lock object if still ours)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._fd is not None:
            # Unlink while locked: a waiter that opened the old file retries on the new one.
            # The folder goes too when empty: a finished writer leaves nothing behind.
            path = filesystem(self.uri)[1]
            with contextlib.suppress(OSError):
                os.unlink(path)
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(path))
            os.close(self._fd)
            self._fd = None
            return
        with contextlib.suppress(Exception):
            current = holder(self.uri)
            if current is not None and current.run == self.run:
                delete(self.uri)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def try_acquire(
    uri: str,
    info: dict[str, Any] | None = None,
    *,
    run: str | None = None,
    ttl: float | None = None,
) -> Lease | Holder:
    """Take the lease on ``uri`` now, or say who holds it.

    Returns:
        The :class:`Lease` (renewed until released), or the live :class:`Holder`.
    """
    lease = Lease(uri, run or new_run_id(), dict(info or {}), ttl or lease_ttl())
    try:
        if is_local(uri):
            got = _acquire_local(lease)
        elif scheme(uri) in ("s3", "s3a"):
            got = _acquire_s3(lease)
        else:
            got = _acquire_by_read_back(lease)
    except BaseException:
        # Stopped (a SIGTERM turned into an exception) or failed once the lease object may be
        # written: delete it if it is ours, rather than leave it to expire (a minute during
        # which the run's next attempt would wait).
        lease.release()
        raise
    if isinstance(got, Lease):
        got._start_renewing()
    return got


def holder(uri: str) -> Holder | None:
    """The live holder of the lease on ``uri``, or None when it is free or stale."""
    if is_local(uri):
        path = filesystem(uri)[1]
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _translate(exc, uri, "read the lease") from exc
        try:
            if _flock(fd):
                return None  # nobody holds the lock: its owner is gone
            return Holder.from_bytes(os.pread(fd, 65536, 0)) or Holder("?", 0, "?", 0.0, {})
        finally:
            os.close(fd)  # also drops the lock taken just to test it
    try:
        raw = read_bytes(uri)
    except StorageError as exc:
        if "no such file" in str(exc):
            return None
        raise
    found = Holder.from_bytes(raw)
    return found if found is not None and found.expires > time.time() else None


def _flock(fd: int) -> bool:
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _acquire_local(lease: Lease) -> Lease | Holder:
    path = filesystem(lease.uri)[1]
    try:
        for _ in range(20):
            try:
                os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:
                continue  # its folder was removed by a releasing owner meanwhile
            if not _flock(fd):
                found = Holder.from_bytes(os.pread(fd, 65536, 0))
                os.close(fd)
                return found or Holder("?", 0, "?", 0.0, {})
            # Locked: still the file at the path (a releasing owner unlinks it)?
            if os.path.exists(path) and os.stat(path).st_ino == os.fstat(fd).st_ino:
                lease._fd = fd
                _write_local(lease)
                return lease
            os.close(fd)
    except OSError as exc:
        raise _translate(exc, lease.uri, "take the lease") from exc
    raise StorageError(f"{lease.uri}: could not take the lease (its file keeps changing)")


def _write_local(lease: Lease) -> None:
    assert lease._fd is not None
    data = lease.record()
    os.ftruncate(lease._fd, 0)
    os.pwrite(lease._fd, data, 0)


def _renew(lease: Lease) -> None:
    if lease._fd is not None:
        _write_local(lease)
    elif lease._etag is not None:
        lease._etag = _s3_put(lease, lease.record(), if_match=lease._etag)
        if lease._etag is None:
            raise StorageError(f"{lease.uri}: the lease was taken over by another writer")
    else:
        current = Holder.from_bytes(read_bytes(lease.uri))
        if current is None or current.run != lease.run:
            raise StorageError(f"{lease.uri}: the lease was taken over by another writer")
        write_bytes(lease.uri, lease.record())


_CONDITION_FAILED = (
    "PreconditionFailed",
    "412",
    "ConditionalRequestConflict",
    "pre-conditions you specified did not hold",
)


def _s3_put(lease: Lease, body: bytes, *, if_match: str | None = None) -> str | None:
    """A conditional put: create-only without ``if_match``; the new ETag, or None when the
    condition failed (someone else created or changed the lease first)."""
    fs, path = filesystem(lease.uri)
    bucket, key = path.split("/", 1)
    condition = {"IfMatch": if_match} if if_match else {"IfNoneMatch": "*"}

    def put() -> str | None:
        try:
            out = fs.call_s3("put_object", Bucket=bucket, Key=key, Body=body, **condition)
        except Exception as exc:
            text = f"{type(exc).__name__} {exc} {exc.__cause__!r}"
            # s3fs reports a 412 as an OSError quoting the server's message.
            if any(m in text for m in _CONDITION_FAILED):
                return None
            if if_match and ("NoSuchKey" in text or "404" in text):
                return None
            raise
        return str(out.get("ETag", "")).strip('"')

    return retrying("take the lease", lease.uri, put)


def _acquire_s3(lease: Lease) -> Lease | Holder:
    fs, path = filesystem(lease.uri)
    for _ in range(5):
        etag = _s3_put(lease, lease.record())
        if etag is not None:
            lease._etag = etag
            return lease
        try:
            meta = retrying("read the lease", lease.uri, lambda: fs.info(path, refresh=True))
            raw = read_bytes(lease.uri)
        except StorageError as exc:
            if "no such file" in str(exc):
                continue  # released meanwhile: create again
            raise
        found = Holder.from_bytes(raw)
        if found is not None and found.expires > time.time():
            return found
        # Expired (or unreadable): take it over, unless someone else does first.
        stale = str(meta.get("ETag", meta.get("etag", ""))).strip('"')
        etag = _s3_put(lease, lease.record(), if_match=stale)
        if etag is not None:
            lease._etag = etag
            return lease
    return holder(lease.uri) or Holder("?", 0, "?", 0.0, {})


def _acquire_by_read_back(lease: Lease) -> Lease | Holder:
    found = holder(lease.uri)
    if found is not None and found.run != lease.run:
        return found
    write_bytes(lease.uri, lease.record())
    time.sleep(0.5)
    found = Holder.from_bytes(read_bytes(lease.uri))
    if found is not None and found.run == lease.run:
        return lease
    return found or Holder("?", 0, "?", 0.0, {})
