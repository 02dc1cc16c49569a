"""``metadata.json``: the contract between sharding and training."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from shardtrain import storage
from shardtrain.errors import ShardtrainError

METADATA_NAME = "metadata.json"


def load_metadata(uri: str) -> dict[str, Any]:
    """The committed metadata of a sharded dataset.

    Raises:
        NotCommittedError: the dataset is not complete (metadata.json missing).
    """
    return storage.read_committed(uri, name=METADATA_NAME)


def shard_uris(uri: str, metadata: dict[str, Any], split: str) -> list[str]:
    """Absolute URIs of the shards of one split."""
    if split not in metadata["splits"]:
        raise ShardtrainError(
            f"{uri}: no split '{split}' (splits: {', '.join(metadata['splits'])})"
        )
    return [storage.join(uri, s["path"]) for s in metadata["splits"][split]["shards"]]


def iter_rejects(uri: str, metadata: dict[str, Any], limit: int = 10) -> Iterator[dict[str, Any]]:
    """The first ``limit`` rejected rows of a dataset."""
    if not metadata.get("rows_rejected"):
        return
    with storage.open(storage.join(uri, metadata["rejects"]), "r") as f:
        for i, line in enumerate(f):
            if i >= limit:
                return
            yield json.loads(line)
