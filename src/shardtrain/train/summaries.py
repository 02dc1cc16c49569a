"""TensorBoard summaries under ``MODEL_DIR/logs/<name>`` (``train`` and ``eval``).

TensorFlow 2.21 cannot write ``s3://``: for such a model directory the event files are
written to a local scratch directory and uploaded on every :meth:`Summaries.sync`.
"""

from __future__ import annotations

import math
import os

from shardtrain import storage


class Summaries:
    """Scalar summaries of one run (``train`` or ``eval``), staged locally for ``s3://``.

    Args:
        model_dir: the model directory URI.
        scratch: a local directory for staged event files.
        name: the run's name: ``logs/<name>`` in the model directory.
        enabled: False for replicas that must not write (workers): every call is a no-op.
    """

    def __init__(self, model_dir: str, scratch: str, name: str, enabled: bool = True):
        import tensorflow as tf

        self.enabled = enabled
        self.remote = storage.join(model_dir, "logs", name)
        native = storage.tf_can_open(model_dir)
        self.local = self.remote if native else os.path.join(scratch, "logs", name)
        self._sync_needed = not native
        self.writer = (
            tf.summary.create_file_writer(self.local)
            if enabled
            else tf.summary.create_noop_writer()
        )

    def scalars(self, step: int, values: dict[str, float]) -> None:
        """Write ``values`` at ``step``; None and non-finite values are left out."""
        import tensorflow as tf

        if not self.enabled:
            return
        with self.writer.as_default(step=step):
            for name, value in values.items():
                if value is not None and math.isfinite(value):
                    tf.summary.scalar(name, value)

    def sync(self) -> None:
        """Flush, and upload the event files when TensorFlow cannot write the model dir."""
        if not self.enabled:
            return
        self.writer.flush()
        if self._sync_needed and os.path.isdir(self.local):
            storage.upload_dir(self.local, self.remote)
