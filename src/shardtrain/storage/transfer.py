"""Copies between stores and between a store and the local disk.

Within one object store a copy is server-side; anything else streams through this process
in :data:`~shardtrain.storage.filesystems.DEFAULT_BLOCK_SIZE` pieces, never holding a whole
object in memory. Each file is copied atomically and retried as a whole: a copy is an open
for reading plus an open for writing, and :func:`~shardtrain.storage.retry.retrying` nests,
so the retry bound applies once per file.
"""

from __future__ import annotations

import os
import shutil

from shardtrain.errors import StorageError
from shardtrain.storage.filesystems import DEFAULT_BLOCK_SIZE, filesystem
from shardtrain.storage.listing import walk_files
from shardtrain.storage.retry import retrying
from shardtrain.storage.streams import open
from shardtrain.storage.uri import is_local, join, scheme


def copy(src: str, dst: str) -> None:
    """Copy one object; server-side within one store, streamed between stores."""
    _copy(src, dst, "copy", f"{src} -> {dst}")


def _copy(src: str, dst: str, op: str, label: str) -> None:
    """Copy ``src`` to ``dst``; ``op`` and ``label`` are what retry messages call it."""
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
