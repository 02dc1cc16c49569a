"""Publish-last: many objects made visible at once by writing their manifest last.

Object stores have no atomic rename of a directory, so a writer that produces *many* objects
(the shards of a dataset, the files of a SavedModel) cannot make them appear at once. The
convention used throughout shardtrain:

1. write every data object (each one is atomic by itself, see
   :mod:`shardtrain.storage.streams`);
2. write the manifest last, with :func:`publish` — a JSON document listing what was written
   (names, sizes, checksums). Its presence is the *commit*;
3. readers call :func:`read_committed` (or :func:`is_committed`) and trust only what the
   manifest lists. Objects without a manifest are leftovers of a crashed writer: they are
   ignored by readers and simply overwritten when the writer runs again.

S3 and GCS give strong read-after-write consistency, so a reader that sees the manifest also
sees every object it lists.
"""

from __future__ import annotations

from typing import Any

from shardtrain.errors import NotCommittedError, StorageError
from shardtrain.storage.filesystems import filesystem
from shardtrain.storage.objects import exists, read_json, write_json
from shardtrain.storage.retry import retrying
from shardtrain.storage.uri import is_local, join

#: Name of the manifest that commits a directory written with the publish pattern.
MANIFEST_NAME = "_MANIFEST.json"


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
        _check_bucket(uri)
        raise NotCommittedError(
            f"{uri}: not committed ({name} is missing: the writer has not finished or crashed)"
        )
    manifest = read_json(target)
    if not isinstance(manifest, dict):
        raise StorageError(f"{target}: manifest is not a JSON object")
    return manifest


def _check_bucket(uri: str) -> None:
    """A missing bucket is named as such, not taken for a writer that never finished."""
    if is_local(uri):
        return
    fs, path = filesystem(uri)
    bucket = path.split("/", 1)[0]
    if bucket and not retrying("check", uri, lambda: fs.exists(bucket)):
        raise StorageError(f"{uri}: bucket '{bucket}' does not exist")
