"""Checkpoints in object storage, published so a reader never sees a half-written one.

TensorFlow 2.21 cannot write ``s3://`` at all, and no object store renames atomically, so
checkpoints are written by TensorFlow to a local staging directory and then published into
the model directory through :mod:`shardtrain.storage`::

    MODEL_DIR/checkpoints/ckpt-<step>.index
    MODEL_DIR/checkpoints/ckpt-<step>.data-00000-of-00001
    MODEL_DIR/checkpoints/latest.json      <- written last: {"step", "prefix", "history", ...}

``latest.json`` is the commit: a checkpoint exists for readers (restarting replicas, the
sidecar evaluator) only once every file of it has been uploaded. A crash mid-upload leaves
files nobody points at; the next publish of the same step overwrites them. Older checkpoints
beyond ``max_to_keep`` are deleted after the pointer has moved on.

Only the chief publishes. Every other replica still writes its checkpoint (under
MultiWorkerMirroredStrategy saving may take part in collective ops, so all replicas must
call it at the same step) into its scratch directory, where it is deleted again.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from shardtrain import documents, storage
from shardtrain.errors import StorageError

log = logging.getLogger(__name__)

POINTER = "latest.json"


@dataclass(frozen=True)
class CheckpointInfo:
    """A published checkpoint.

    Attributes:
        step: the global step it was taken at.
        prefix: its name inside ``MODEL_DIR/checkpoints`` (``ckpt-<step>``).
        files: the file names that make it up.
        final: written at the end of training (the requested step count was reached).
    """

    step: int
    prefix: str
    files: tuple[str, ...]
    final: bool = False


class CheckpointStore:
    """Publish and fetch checkpoints under ``MODEL_DIR/checkpoints``.

    Args:
        model_dir: the model directory URI (local, s3://, gs://).
        local_dir: a local directory for staging and downloaded checkpoints.
        max_to_keep: published checkpoints kept; older ones are deleted.
    """

    def __init__(self, model_dir: str, local_dir: str, max_to_keep: int = 3):
        self.uri = storage.join(model_dir, "checkpoints")
        self.local_dir = local_dir
        self.max_to_keep = max_to_keep
        os.makedirs(local_dir, exist_ok=True)

    # -- reading -----------------------------------------------------------------------------

    def latest(self) -> CheckpointInfo | None:
        """The newest published checkpoint, or None when there is none yet."""
        pointer = storage.join(self.uri, POINTER)
        if not storage.exists(pointer):
            return None
        data = documents.check(storage.read_json(pointer), documents.CHECKPOINT_POINTER, pointer)
        return CheckpointInfo(
            step=data["step"],
            prefix=data["prefix"],
            files=tuple(data["files"]),
            final=bool(data.get("final", False)),
        )

    def fetch(self, info: CheckpointInfo) -> str:
        """Download ``info``'s files (unless staged here already); returns the local prefix."""
        local_prefix = os.path.join(self.local_dir, info.prefix)
        for name in info.files:
            local = os.path.join(self.local_dir, name)
            if not os.path.exists(local):
                storage.download_file(storage.join(self.uri, name), local)
        return local_prefix

    # -- writing -----------------------------------------------------------------------------

    def local_prefix(self, step: int) -> str:
        """Where TensorFlow should write the checkpoint of ``step`` before publishing."""
        return os.path.join(self.local_dir, f"ckpt-{step}")

    def publish(self, step: int, *, final: bool = False) -> CheckpointInfo:
        """Upload the staged checkpoint of ``step``, then move ``latest.json`` to it.

        Raises:
            StorageError: nothing was staged for ``step``, or an upload failed.
        """
        prefix = f"ckpt-{step}"
        files = sorted(
            os.path.basename(p)
            for p in glob.glob(os.path.join(self.local_dir, prefix + ".*"))
            if not p.endswith(".tmp")
        )
        if not any(f.endswith(".index") for f in files):
            raise StorageError(f"{self.local_dir}: no staged checkpoint for step {step}")
        started = time.monotonic()
        for name in files:
            storage.upload_file(os.path.join(self.local_dir, name), storage.join(self.uri, name))
        previous = self._history()
        history = [h for h in previous if h["step"] != step] + [{"step": step, "files": files}]
        keep, drop = history[-self.max_to_keep :], history[: -self.max_to_keep]
        storage.write_json(
            storage.join(self.uri, POINTER),
            {
                "step": step,
                "prefix": prefix,
                "files": files,
                "final": final,
                "time": time.time(),
                "history": keep,
            },
        )
        for old in drop:
            for name in old["files"]:
                with contextlib.suppress(StorageError):
                    storage.delete(storage.join(self.uri, name))
        self._prune_local(keep_steps={h["step"] for h in keep})
        log.info(
            "checkpoint step %d published to %s (%.1fs)", step, self.uri, time.monotonic() - started
        )
        return CheckpointInfo(step=step, prefix=prefix, files=tuple(files), final=final)

    def discard_local(self, step: int) -> None:
        """Delete a staged checkpoint that is not to be published (non-chief replicas)."""
        for path in glob.glob(self.local_prefix(step) + ".*"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def _history(self) -> list[dict[str, Any]]:
        pointer = storage.join(self.uri, POINTER)
        if not storage.exists(pointer):
            return []
        data = documents.check(storage.read_json(pointer), documents.CHECKPOINT_POINTER, pointer)
        return list(data.get("history") or [])

    def _prune_local(self, keep_steps: set[int]) -> None:
        for path in glob.glob(os.path.join(self.local_dir, "ckpt-*")):
            step_text = os.path.basename(path).split(".")[0].removeprefix("ckpt-")
            if step_text.isdigit() and int(step_text) not in keep_steps:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
