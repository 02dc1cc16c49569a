"""Streaming reads and all-or-nothing writes of one object: :func:`open`.

A write never leaves a half-written object behind. Locally it streams to a temporary file in
the same directory, renamed into place when the ``with`` block exits cleanly and deleted
otherwise. On S3/GCS it streams to a multipart/resumable upload, which is completed only on
success (that completion is the commit point) and aborted on error. Each request of an S3
upload (every part, the completion) is retried by itself on transient errors, with the bound
of :func:`~shardtrain.storage.retry.retrying`; see :func:`_retry_each_request`.

A remote read is opened with retries and then streams through a
:class:`~shardtrain.storage.retry._RetryingReader`, which retries each failed read in place,
so a dropped connection in the middle of a large object costs one retry, not the job.

Gzip (``compression``) and text decoding are layered on top of the byte stream, the same way
for every store.
"""

from __future__ import annotations

import builtins
import contextlib
import gzip
import hashlib
import io
import os
import re
import uuid
from collections.abc import Iterable, Iterator
from typing import IO, Any, cast

from shardtrain.errors import StorageError, StorageUnavailableError
from shardtrain.storage.direct import open_local_for_writing
from shardtrain.storage.filesystems import DEFAULT_BLOCK_SIZE, filesystem
from shardtrain.storage.retry import (
    _chain,
    _in_retry,
    _RetryingReader,
    _short,
    _translate,
    is_transient,
    retrying,
)
from shardtrain.storage.uri import is_local


def _wants_gzip(uri: str, compression: str | None) -> bool:
    """Whether ``compression`` means gzip for ``uri``; a StorageError for an unknown value."""
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
            (``O_DIRECT``, see :mod:`shardtrain.storage.direct`) where the file system
            allows it and ``SHARDTRAIN_DIRECT_IO`` is not ``0``. For large outputs read by
            other processes later (shards): it cuts the CPU cost of writing them (figures in
            ``benchmarks/RESULTS.md``) and keeps them from evicting useful pages. Ignored for
            remote objects.

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
                stream = cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb"))
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
                gzfile = gzip.GzipFile(fileobj=raw, mode="wb", mtime=0)
                stream = cast(IO[bytes], gzfile)
            wrapper = None
            if text:
                stream = wrapper = io.TextIOWrapper(stream, encoding=encoding, newline=newline)
            yield stream
            if wrapper is not None:
                wrapper.flush()
                wrapper.detach()
            if gzfile is not None:
                gzfile.close()


#: A local write's temporary file: the object's name, ``.tmp-`` and 12 hex digits.
_TEMPORARY = re.compile(r"\.tmp-[0-9a-f]{12}$")


def remove_temporaries(uris: Iterable[str]) -> int:
    """Delete the temporary files that killed writers of these objects left behind.

    A local write streams to ``<name>.tmp-<12 hex>`` next to its object (see :func:`open`);
    a process killed mid-write leaves it there. Only those of the objects named are removed,
    so a caller passes the objects it alone writes. Remote stores have nothing to remove: an
    unfinished upload is invisible and expires with the bucket's lifecycle rule.

    Returns:
        How many files were removed.
    """
    wanted: dict[str, set[str]] = {}
    for uri in uris:
        if is_local(uri):
            directory, name = os.path.split(filesystem(uri)[1])
            wanted.setdefault(directory, set()).add(name)
    removed = 0
    for directory, names in wanted.items():
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            for entry in os.listdir(directory):
                match = _TEMPORARY.search(entry)
                if match and entry[: match.start()] in names:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(directory, entry))
                        removed += 1
    return removed


@contextlib.contextmanager
def _open_read(uri: str, block_size: int | None) -> Iterator[IO[bytes]]:
    """The raw byte stream of ``uri``; remote reads retry in place, errors name the URI."""
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


@contextlib.contextmanager
def _open_write(uri: str, block_size: int | None, direct: bool = False) -> Iterator[IO[bytes]]:
    """A byte stream whose object appears at ``uri`` only if the block exits cleanly."""
    fs, path = filesystem(uri)
    if is_local(uri):
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:12]}"
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            fobj = open_local_for_writing(tmp, direct)
        except OSError as exc:
            raise _translate(exc, uri, "write") from exc
        try:
            yield cast(IO[bytes], _LocalNamedErrors(fobj, uri))
            try:
                fobj.close()
                os.replace(tmp, path)
            except OSError as exc:
                raise _translate(exc, uri, "write") from exc
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
    upload: Any = retrying("open for writing", uri, lambda: fs.open(path, "wb", **kwargs))
    _retry_each_request(upload, uri)
    _name_errors(upload, uri)
    try:
        yield upload
    except BaseException:
        # The block failed (maybe another object's error, passed on as it is): abort the
        # upload so that nothing partial ever becomes visible. If the server is gone the
        # abort fails too; the incomplete upload stays invisible and the bucket's lifecycle
        # rule (or the next successful write) cleans it up.
        _abandon(upload)
        raise
    try:
        upload.close()  # completes the multipart / resumable upload: the commit point
    except BaseException:
        _abandon(upload)
        raise


class _LocalNamedErrors:
    """A local file being written whose I/O errors (a full disk, a read-only or failing
    device) name its object: a task writes many files at once, and a bare ``OSError`` says
    neither which nor what to do. Everything else is the file's own."""

    def __init__(self, fobj: Any, uri: str):
        self.raw = self._f = fobj  # the file itself
        self._uri = uri
        if hasattr(fobj, "write_in_place"):
            self.write_in_place = self._named(fobj.write_in_place)

    def _named(self, method: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, **kwargs)
            except StorageError:
                raise
            except OSError as exc:
                raise _translate(exc, self._uri, "write") from exc

        return call

    def write(self, data: Any) -> int:
        try:
            return self._f.write(data)
        except OSError as exc:
            raise _translate(exc, self._uri, "write") from exc

    def flush(self) -> None:
        try:
            self._f.flush()
        except OSError as exc:
            raise _translate(exc, self._uri, "write") from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def _abandon(upload: Any) -> None:
    with contextlib.suppress(Exception):
        upload.discard()
    with contextlib.suppress(Exception):
        upload.closed = True


def _retry_each_request(upload: Any, uri: str) -> None:
    """Retry every request of an s3fs upload by itself, with :func:`retrying`'s bound.

    An upload streams: once a part is sent, its bytes are gone from memory, so the object
    cannot be restarted from the beginning. Each request can be repeated instead. s3fs sends
    one request per part (``upload_part`` with the part's bytes in hand, recording the part
    only after it succeeded), then ``complete_multipart_upload`` (or one ``put_object`` for
    a small object), all through ``S3File._call_s3``: repeating that call repeats exactly
    the request that failed, with no extra memory, and a part uploaded before an outage
    stays uploaded (the server keeps the parts of an unfinished upload). Inside an outer
    :func:`retrying` (a small object written whole, a copy) the outer level retries the
    whole object instead, as its data is still there.
    """
    call = getattr(upload, "_call_s3", None)
    if call is None:
        return  # gcsfs retries each request of a resumable upload itself

    def _call(method: str, *args: Any, **kwargs: Any) -> Any:
        state = {"failed": False}

        def attempt() -> Any:
            try:
                return call(method, *args, **kwargs)
            except Exception as exc:
                if method == "complete_multipart_upload" and state["failed"]:
                    done = _completed_before(upload, kwargs, exc)
                    if done is not None:
                        return done
                state["failed"] = True
                raise

        return retrying(f"upload ({method})", uri, attempt)

    upload._call_s3 = _call
    commit = upload.commit

    def _commit() -> None:
        if upload.tell() == 0:  # an empty object is created by fs.touch, not _call_s3
            retrying("upload (empty object)", uri, commit)
        else:
            commit()

    upload.commit = _commit


def _completed_before(upload: Any, kwargs: dict[str, Any], exc: Exception) -> Any:
    """When a retried ``complete_multipart_upload`` finds its upload gone, the attempt whose
    answer was lost completed it: the object's ETag (the MD5 of its parts' MD5s, ``-N``)
    tells. Returns a result for s3fs, or None."""
    if not any("nosuchupload" in f"{type(e).__name__} {e}".lower() for e in _chain(exc)):
        return None
    parts = kwargs["MultipartUpload"]["Parts"]
    digest = hashlib.md5(b"".join(bytes.fromhex(p["ETag"].strip('"')) for p in parts))
    expected = f"{digest.hexdigest()}-{len(parts)}"
    try:
        head = upload.fs.call_s3("head_object", Bucket=kwargs["Bucket"], Key=kwargs["Key"])
    except Exception:
        return None
    return head if head.get("ETag", "").strip('"') == expected else None


def _name_errors(upload: Any, uri: str) -> None:
    """Make the upload's own errors name ``uri``: its ``write`` runs inside the caller's
    block, where another object's error must not be taken for this one's (and vice versa)."""
    for name in ("write", "flush", "close"):
        method = getattr(upload, name)

        def named(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
            try:
                return _method(*args, **kwargs)
            except StorageError:
                raise
            except Exception as exc:
                if _in_retry():
                    raise  # the outer retrying() decides and names the URI
                if is_transient(exc):
                    raise StorageUnavailableError(f"{uri}: write failed: {_short(exc)}") from exc
                if isinstance(exc, OSError):
                    raise _translate(exc, uri, "write") from exc
                raise

        setattr(upload, name, named)
