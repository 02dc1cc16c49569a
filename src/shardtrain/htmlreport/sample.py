"""Per-example scores of a sample of the eval split: what the calibration curve of a classifier
and the predicted-against-actual and residual plots of a regression are drawn from.

``metrics.json`` holds what the whole eval split summed to (the ROC points, the confusion
matrix, a regression's error sums) but no per-example predictions, and these pictures need
them. So the model's newest export is scored here through its serving signature, as
:mod:`shardtrain.train.scoring` scores it for blessing, on the first :data:`SAMPLE_ROWS` rows
of the eval split (a hash sample of the data, so its first rows are as good a sample as any).
The bound keeps the report's cost flat however large the split: one batch of TensorFlow work.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass

import numpy as np

from shardtrain.data.metadata import DatasetMetadata

log = logging.getLogger(__name__)

#: Eval rows scored for the per-example pictures.
SAMPLE_ROWS = 20_000
_BATCH = 1024


@dataclass(frozen=True)
class ScoredSample:
    """Predictions of the first eval rows.

    Attributes:
        task: ``binary``, ``multiclass`` or ``regression``.
        classes: a classifier's classes (the order of ``predictions``' columns).
        predictions: a regression's values, a binary classifier's probability of
            ``classes[1]`` (``[rows]``), a multi-class one's probabilities (``[rows, k]``).
        labels: a regression's label values, a classifier's class indices (``[rows]``).
        split_rows: the rows of the split (the sample is the first ``len(labels)``).
    """

    task: str
    classes: tuple[str, ...]
    predictions: np.ndarray
    labels: np.ndarray
    split_rows: int

    @property
    def rows(self) -> int:
        return len(self.labels)


def score_sample(
    model_dir: str,
    data_uri: str,
    meta: DatasetMetadata,
    *,
    split: str = "eval",
    rows: int = SAMPLE_ROWS,
) -> ScoredSample:
    """Score the first ``rows`` rows of ``split`` with ``model_dir``'s newest export.

    Raises:
        NotCommittedError: the model directory has no export.
        DataError: the export cannot score this dataset (a column it needs, another label).
    """
    from shardtrain.errors import DataError
    from shardtrain.train.export import latest_export
    from shardtrain.train.scoring import ExportedModel, incompatibility, labelled_batches

    model = ExportedModel.read(latest_export(model_dir)["uri"])
    reason = incompatibility(model, model, meta)
    if reason:
        raise DataError(f"{model_dir}: cannot score {data_uri}: {reason}")
    predictions: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    taken = 0
    with tempfile.TemporaryDirectory(prefix="shardtrain-report-") as scratch:
        model.load(scratch)
        with labelled_batches(
            data_uri,
            meta,
            split,
            sorted({i["column"] for i in model.inputs}),
            task=model.task,
            classes=model.classes,
            scratch=scratch,
            batch_size=_BATCH,
        ) as batches:
            for columns, batch_labels in batches:
                labels.append(batch_labels)
                predictions.append(model.predict(columns, model.classes))
                taken += len(batch_labels)
                if taken >= rows:
                    break
    task = model.task
    shape = (0, len(model.classes)) if task == "multiclass" else (0,)
    return ScoredSample(
        task=task,
        classes=model.classes,
        predictions=np.concatenate(predictions)[:rows] if predictions else np.zeros(shape),
        labels=np.concatenate(labels)[:rows] if labels else np.zeros(0),
        split_rows=meta.split(split, data_uri).num_records,
    )
