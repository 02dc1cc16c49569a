"""Which input files a run's patterns name: files and globs expanded, each file once, with
what storage knows of it (size, version tag). Light on purpose (storage only): the
pipeline's fan-out lists the inputs with it and reads nothing else (:mod:`.task_rule`)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from shardtrain import storage
from shardtrain.errors import DataError


def expand(patterns: Sequence[str]) -> list[storage.ObjectInfo]:
    """Expand files and globs into the files they name, in order, each once (a local file
    named two ways, relative and by a glob, is one; its URI is its absolute path).

    Raises:
        DataError: a pattern matches nothing, or no pattern is given.
        StorageError: a named file is missing or unreadable.
    """
    if not patterns:
        raise DataError("no source given")
    seen: dict[str, storage.ObjectInfo] = {}
    for pattern in patterns:
        uris = storage.glob(pattern) if storage.has_magic(pattern) else [pattern]
        if not uris:
            raise DataError(f"{pattern}: no file matches this pattern")
        for uri in uris:
            if storage.is_local(uri):
                uri = os.path.abspath(storage.local_path(uri))
            if uri not in seen:
                seen[uri] = storage.info(uri)
    return list(seen.values())
