"""Whole objects: read or write one in a call, and what storage knows about it.

These helpers are for the small documents shardtrain keeps next to its data (manifests,
metadata, configurations): each call reads or writes the whole object, retried as a whole on
transient errors, and a write is atomic like every write through
:func:`~shardtrain.storage.streams.open`.
"""

from __future__ import annotations

import contextlib
import inspect
import json
from dataclasses import dataclass
from typing import Any

from shardtrain.errors import StorageError
from shardtrain.storage.filesystems import filesystem
from shardtrain.storage.retry import retrying
from shardtrain.storage.streams import open


def read_bytes(uri: str) -> bytes:
    """The whole content of a (small) object: one GET on S3."""
    raw = _read_whole(uri, missing_ok=False)
    assert raw is not None  # a missing object raised
    return raw


def read_bytes_if_exists(uri: str) -> bytes | None:
    """The whole content of a (small) object, or None when there is none: one request
    either way (``exists`` then ``read_bytes`` take two or three on S3, where a missing key
    is also listed as a prefix)."""
    return _read_whole(uri, missing_ok=True)


def _read_whole(uri: str, *, missing_ok: bool) -> bytes | None:
    fs, path = filesystem(uri)
    kwargs = _one_request(fs)

    def read() -> bytes | None:
        try:
            return fs.cat_file(path, **kwargs)
        except FileNotFoundError:
            if missing_ok:
                return None
            raise

    return retrying("read", uri, read)


def read_json_if_exists(uri: str) -> Any:
    """:func:`read_json`, or None when there is no object at ``uri``."""
    raw = read_bytes_if_exists(uri)
    return None if raw is None else _parse_json(uri, raw)


def _one_request(fs: Any) -> dict[str, Any]:
    """``cat_file`` arguments that read an object whole in one request.

    Recent s3fs (2026.9; not 2025.9), with its default ``max_concurrency`` (10), first asks
    an object's size (a HEAD) to read a large one in parallel ranges; a small document
    needs neither, and ``max_concurrency=1`` keeps it to the GET (half the requests of the
    settle step, which reads a summary per worker). Older s3fs and other file systems take
    no such argument.
    """
    cls = type(fs)
    if cls not in _ONE_REQUEST:
        cat_file = getattr(cls, "_cat_file", None)
        takes = cat_file is not None and "max_concurrency" in inspect.signature(cat_file).parameters
        _ONE_REQUEST[cls] = {"max_concurrency": 1} if takes else {}
    return _ONE_REQUEST[cls]


_ONE_REQUEST: dict[type, dict[str, Any]] = {}


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
    return _parse_json(uri, read_bytes(uri))


def _parse_json(uri: str, raw: bytes) -> Any:
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
    return ObjectInfo(uri=uri, size=int(meta.get("size", 0)), version=version_tag(meta))


def version_tag(meta: dict[str, Any]) -> str:
    """:attr:`ObjectInfo.version` from an fsspec ``info``/``find`` entry of any store."""
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


def delete(uri: str, recursive: bool = False) -> None:
    """Delete an object (or, with ``recursive``, everything under a prefix). Missing is fine."""
    fs, path = filesystem(uri)

    def _rm() -> None:
        with contextlib.suppress(FileNotFoundError):
            fs.rm(path, recursive=recursive)

    retrying("delete", uri, _rm)
