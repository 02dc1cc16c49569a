"""The training curve: every scalar the run logged, read back from its TensorBoard event files.

The trainer writes ``MODEL_DIR/logs/train`` (loss, accuracy or rmse, learning rate, examples
per second, by step) and the evaluator ``MODEL_DIR/logs/eval`` (the headline metrics of each
evaluation) with ``tf.summary`` (:mod:`shardtrain.train.summaries`). Event files are TFRecord
files of ``Event`` protos; they are read here with the storage layer (``s3://`` too) and the
proto classes TensorBoard ships, so no TensorFlow is loaded for a report.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator

from shardtrain import storage

log = logging.getLogger(__name__)

#: The runs under ``MODEL_DIR/logs``.
RUNS = ("train", "eval")

#: ``run -> tag -> [(step, value)]``, sorted by step (the last value of a step kept).
History = dict[str, dict[str, list[tuple[int, float]]]]


def _records(data: bytes) -> Iterator[bytes]:
    """The records of a TFRecord file's bytes (length, its CRC, data, its CRC); a truncated
    last record (a file still being written) ends the iteration."""
    offset = 0
    while offset + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        start = offset + 12
        if start + length + 4 > len(data):
            return
        yield data[start : start + length]
        offset = start + length + 4


def _scalar(value: object) -> float | None:
    """A summary value's scalar: a TF2 tensor summary, or a TF1 ``simple_value``."""
    from tensorboard.util import tensor_util

    if value.HasField("tensor"):  # type: ignore[attr-defined]
        array = tensor_util.make_ndarray(value.tensor)  # type: ignore[attr-defined]
        return float(array) if array.size == 1 else None
    if value.HasField("simple_value"):  # type: ignore[attr-defined]
        return float(value.simple_value)  # type: ignore[attr-defined]
    return None


def read_history(model_dir: str) -> History:
    """The scalars of ``MODEL_DIR/logs/{train,eval}`` (empty runs when there are none).

    A file that cannot be parsed is skipped with a warning: a curve with a gap is better than
    no report.
    """
    from tensorboard.compat.proto import event_pb2

    out: History = {}
    for run in RUNS:
        directory = storage.join(model_dir, "logs", run)
        points: dict[str, dict[int, float]] = {}
        files = sorted(u for u in storage.walk_files(directory) if "tfevents" in u)
        for uri in files:
            try:
                for record in _records(storage.read_bytes(uri)):
                    event = event_pb2.Event.FromString(record)
                    if not event.HasField("summary"):
                        continue
                    for value in event.summary.value:
                        scalar = _scalar(value)
                        if scalar is not None:
                            points.setdefault(value.tag, {})[int(event.step)] = scalar
            except Exception as exc:  # a corrupt or foreign file: the curve goes without it
                log.warning("%s: cannot read its summaries (%s): skipped", uri, exc)
        out[run] = {tag: sorted(by_step.items()) for tag, by_step in points.items()}
    return out
