"""Pointer artifacts: how the pipeline's steps hand data to each other without moving it.

The data never goes through the pipeline's artifact store: shards, checkpoints and exports
live at URIs the user chooses (``s3://``, ``gs://``, local), read and written through
:mod:`shardtrain.storage`. The ``dsl.Dataset`` and ``dsl.Model`` artifacts that connect the
steps are small JSON files ``{"uri": ..., ...}`` (:func:`write_pointer`), with the same facts in
the artifact's metadata so the UI shows where the data is. That works unchanged on a cluster
(artifacts in the pipeline root) and with ``kfp.local`` (artifacts in a local directory).

The steps (:mod:`shardtrain.kubeflow.steps`) write and read pointers; a local run
(:func:`shardtrain.kubeflow.client.run_local`) reads the last ones to say where the model is.
Only the standard library is needed: an artifact is anything with a ``path`` and a
``metadata`` dict, so neither kfp nor storage is imported here.
"""

from __future__ import annotations

import json
import os
from typing import Any

from shardtrain import documents
from shardtrain.errors import ConfigError


def write_pointer(artifact: Any, uri: str, **facts: Any) -> dict[str, Any]:
    """Make ``artifact`` (a ``dsl.Dataset``/``dsl.Model`` output) point at ``uri``.

    Writes ``{"uri": uri, **facts}`` as JSON to ``artifact.path`` (what the next step reads)
    and copies the same keys into ``artifact.metadata`` (what the UI shows).

    Args:
        artifact: an output artifact: anything with ``path`` and a ``metadata`` dict.
        uri: where the data really is.
        **facts: JSON-serialisable details (row counts, the step, the export's URI …).

    Returns:
        The pointer written.
    """
    pointer = {"uri": uri, **facts}
    path = artifact.path
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(pointer, f, indent=2)
    artifact.metadata.update(pointer)
    return pointer


def read_pointer(artifact: Any) -> dict[str, Any]:
    """The pointer written by :func:`write_pointer` (an input artifact of a later step).

    Raises:
        ConfigError: the artifact holds no pointer (it was not written by shardtrain).
    """
    try:
        with open(artifact.path, encoding="utf-8") as f:
            pointer = json.load(f)
    except (OSError, ValueError) as exc:
        pointer = dict(artifact.metadata or {})
        if "uri" not in pointer:
            raise ConfigError(
                f"artifact {artifact.path} is not a shardtrain pointer ({exc})"
            ) from exc
    if not isinstance(pointer, dict) or not pointer.get("uri"):
        raise ConfigError(f"artifact {artifact.path} is not a shardtrain pointer (no 'uri')")
    return documents.check(pointer, documents.ARTIFACT_POINTER, f"artifact {artifact.path}")
