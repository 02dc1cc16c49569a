"""What the HTML report shows, gathered from storage into one typed value.

:func:`gather` reads, for a dataset and optionally a model directory and a served model:

* the dataset's ``metadata.json`` (per-column statistics with numeric histograms and
  categorical top values, the label's classes, rejects by reason);
* the served model's training data (``training_data.json`` beside the version
  ``SERVED/latest.json`` names, :mod:`shardtrain.data.profile`) and the data checks of the
  dataset against it (:func:`shardtrain.data.validation.validate`, with the limits of the
  pipeline's own checks when the dataset holds their ``data_checks.json``);
* the model directory's ``eval/metrics.json`` (ROC points, confusion matrix, slices),
  ``eval/blessing.json``, its TensorBoard summaries (:mod:`.history`) and the per-example
  scores of a sample of the eval split (:mod:`.sample`).

What is missing is a note, not an error: the report of a dataset alone, of a model trained
before summaries existed, or of a first run with nothing served, still renders.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from shardtrain import storage
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.data.profile import DataProfile, load_profile
from shardtrain.data.validation import Limits, Validation, validate
from shardtrain.errors import ShardtrainError, one_line
from shardtrain.htmlreport.history import History, read_history
from shardtrain.htmlreport.sample import SAMPLE_ROWS, ScoredSample

log = logging.getLogger(__name__)

#: The pipeline's data checks beside a dataset's metadata.json
#: (:data:`shardtrain.kubeflow.data_checks.DATA_CHECKS_NAME`, a layer above this one).
DATA_CHECKS_NAME = "data_checks.json"


@dataclass(frozen=True)
class ReportInputs:
    """Everything one report shows.

    Attributes:
        dataset_uri: the dataset.
        meta: its metadata.
        served: the served model's training data (None: nothing to compare with).
        validation: the data checks against ``served``.
        model_dir: the model directory (None: a report of the data alone).
        metrics: ``eval/metrics.json``.
        blessing: ``eval/blessing.json`` (None: not evaluated against a served model).
        history: the run's TensorBoard scalars.
        sample: per-example scores of the first eval rows.
        notes: what could not be shown, and why, one line each.
    """

    dataset_uri: str
    meta: DatasetMetadata
    served: DataProfile | None = None
    validation: Validation | None = None
    model_dir: str | None = None
    metrics: dict[str, Any] | None = None
    blessing: dict[str, Any] | None = None
    history: History = field(default_factory=dict)
    sample: ScoredSample | None = None
    notes: tuple[str, ...] = ()


def _limits(dataset_uri: str) -> Limits:
    """The limits of the pipeline's data checks of this dataset, else the defaults."""
    checks = storage.read_json_if_exists(storage.join(dataset_uri, DATA_CHECKS_NAME))
    text = checks.get("limits") if isinstance(checks, dict) else None
    return Limits.parse(text) if isinstance(text, str) else Limits()


def gather(
    dataset_uri: str,
    *,
    model_dir: str | None = None,
    against: str | None = None,
    sample_rows: int = SAMPLE_ROWS,
) -> ReportInputs:
    """Read what the report of ``dataset_uri`` shows (see the module docstring).

    Args:
        dataset_uri: a sharded dataset.
        model_dir: a model directory trained on it (its evaluation, curves and scores).
        against: the served model: a serving location, a SavedModel version, a model
            directory or a dataset (anything :func:`~shardtrain.data.profile.load_profile`
            reads).
        sample_rows: eval rows scored for the per-example pictures (0: none scored).

    Raises:
        NotCommittedError, DataError: ``dataset_uri`` is not a complete dataset.
    """
    meta = DatasetMetadata.load(dataset_uri)
    notes: list[str] = []
    served = validation = None
    if against:
        try:
            served = load_profile(against)
        except ShardtrainError as exc:
            if _holds_nothing(against):  # the first model: nothing published there yet
                notes.append(f"served data: nothing at {against} yet, so no drift to show")
            else:
                notes.append(f"served data: {one_line(exc)}")
        if served is not None:
            validation = validate(
                DataProfile(uri=dataset_uri, metadata=meta, source=dataset_uri),
                served,
                _limits(dataset_uri),
            )
    metrics = blessing = None
    history: History = {}
    sample = None
    if model_dir:
        eval_dir = storage.join(model_dir, "eval")
        metrics = storage.read_json_if_exists(storage.join(eval_dir, "metrics.json"))
        if metrics is None:
            notes.append(f"{model_dir}: no eval/metrics.json: no evaluation to show")
        blessing = storage.read_json_if_exists(storage.join(eval_dir, "blessing.json"))
        history = read_history(model_dir)
        if not any(history.values()):
            notes.append(f"{model_dir}: no TensorBoard summaries under logs/: no training curve")
        if sample_rows > 0:
            from shardtrain.htmlreport.sample import score_sample

            try:
                sample = score_sample(model_dir, dataset_uri, meta, rows=sample_rows)
            except ShardtrainError as exc:
                notes.append(f"per-example scores: {one_line(exc)}")
    return ReportInputs(
        dataset_uri=dataset_uri,
        meta=meta,
        served=served,
        validation=validation,
        model_dir=model_dir,
        metrics=metrics,
        blessing=blessing,
        history=history,
        sample=sample,
        notes=tuple(notes),
    )


def _holds_nothing(uri: str) -> bool:
    """Whether nothing is stored under ``uri`` (a serving location before its first model)."""
    try:
        return not storage.walk_infos(uri)
    except (ShardtrainError, FileNotFoundError):
        return True
