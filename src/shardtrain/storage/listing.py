"""Listing: what lies under a prefix or matches a pattern, as sorted URIs.

Results come back in the form of the URI asked about (a plain path lists plain paths, a
``file://`` URI ``file://`` URIs, ``s3://`` ``s3://``), so they can be passed straight back
to the other storage functions. Object stores have no directories: a "directory" is the
prefix of the objects' keys, so listing a prefix nothing lies under gives an empty list, not
an error (:func:`ls` of a missing bucket is one).
"""

from __future__ import annotations

from typing import Any

from shardtrain.storage.filesystems import filesystem
from shardtrain.storage.objects import ObjectInfo, version_tag
from shardtrain.storage.retry import retrying
from shardtrain.storage.uri import to_uri


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

    return sorted(to_uri(uri, p) for p in retrying("list", uri, _ls))


def walk_files(uri: str) -> list[str]:
    """URIs of every file below ``uri``, recursively (sorted)."""
    fs, path = filesystem(uri)

    def _find() -> list[str]:
        try:
            return fs.find(path)
        except FileNotFoundError:
            return []

    return sorted(to_uri(uri, p) for p in retrying("list", uri, _find))


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
            ObjectInfo(uri=to_uri(uri, p), size=int(m.get("size") or 0), version=version_tag(m))
            for p, m in found.items()
            if m.get("type", "file") != "directory"
        ),
        key=lambda o: o.uri,
    )


def glob(pattern: str) -> list[str]:
    """URIs matching a glob pattern (``*``, ``?``, ``[..]``, ``**``), sorted."""
    fs, path = filesystem(pattern)
    return sorted(to_uri(pattern, p) for p in retrying("glob", pattern, lambda: fs.glob(path)))


def has_magic(pattern: str) -> bool:
    """True when ``pattern`` contains glob characters."""
    return any(ch in str(pattern) for ch in "*?[")
