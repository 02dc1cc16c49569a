"""Blessing: should a newly trained model replace the one being served?

:func:`evaluate_model` is what ``shardtrain evaluate`` and the pipeline's ``evaluate`` step
run. It finds the *baseline* — the model published at the serving location
(``SERVING_URI/latest.json`` → ``SERVING_URI/<version>/``, written by
:func:`shardtrain.kubeflow.publish.publish_export`) — scores the candidate (the model
directory's newest export) and the baseline on the same eval split of the dataset, through
their serving signatures (:mod:`shardtrain.train.scoring`), and blesses the candidate only if
every threshold holds (:mod:`shardtrain.train.thresholds`). It writes:

* ``MODEL_DIR/eval/blessing.json``: ``blessed``, every threshold with its value, bound and
  pass, the candidate's and the baseline's metrics, the baseline's URI and version;
* with ``slice_by``, a ``slices`` section in ``MODEL_DIR/eval/metrics.json``: the candidate's
  metrics per value of each column (:mod:`shardtrain.train.slices`); without, the section of
  an earlier run is removed, so that the report never shows slices of another model.

The rules:

* **No baseline** (nothing published yet): blessed on the absolute thresholds alone; the
  relative ones are skipped ("no baseline").
* **The baseline is the candidate** (a re-run after the export published it): the same;
  comparing a model with itself says nothing.
* **A baseline that cannot score this data** (trained on another dataset version: a column
  it needs is missing or retyped, another label or set of classes), or that fails to load or
  to predict: said in one warning naming its URI, recorded in ``blessing.json``
  (``baseline.error``) and treated as no baseline. The new data is what the next model must
  serve, and a baseline that cannot read it could never be beaten: keep absolute thresholds
  beside the relative ones to keep a floor in that case.
* **Nothing to compare with and no slices** (no baseline, or no thresholds) on the split the
  trainer evaluated, of the data it evaluated (``metrics.json`` records the dataset's plan
  fingerprint, ``data_plan``, which covers its sources and layout): nothing is scored; the
  thresholds are checked on the trainer's metrics of that split, which the serving signature
  reproduces. No TensorFlow is loaded then. Another split, or another dataset (or a
  ``metrics.json`` that does not say which), is always scored.

``data``'s shards of ``split`` are always checked first (present, of their recorded sizes:
listings only), whether they are scored or stood for by the trainer's metrics.

Both models are scored through the SavedModel exactly as a client sends rows, so their metrics
are comparable; the candidate's may differ from the trainer's ``metrics.json`` in the last
digits (float32 serving outputs).
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from typing import Any

from shardtrain import documents
from shardtrain.errors import DataError, NotCommittedError, one_line
from shardtrain.options import check, option
from shardtrain.train.slices import MAX_SLICES, parse_columns
from shardtrain.train.thresholds import (
    Decision,
    Threshold,
    check_task,
    decide,
    format_thresholds,
    parse_thresholds,
)

# Light at import (``shardtrain evaluate --help`` builds its flags from EvaluateConfig): the
# storage layer, the dataset's metadata and numpy are imported by the functions that use them.

log = logging.getLogger(__name__)

#: The pointer at the serving location naming the newest published version.
SERVING_POINTER = "latest.json"
BLESSING_NAME = "blessing.json"
METRICS_NAME = "metrics.json"


@dataclass(frozen=True)
class EvaluateConfig:
    """What ``shardtrain evaluate`` and the pipeline's ``evaluate`` step are asked to do."""

    model_dir: str = option(help="The candidate's model directory (its newest export).")
    data: str = option(help="The sharded dataset both models are scored on (its eval split).")
    serving_uri: str | None = option(
        None,
        help="Where the served model is published (SERVING_URI/latest.json names the "
        "baseline); none: no baseline.",
    )
    thresholds: tuple[Threshold, ...] = option(
        (),
        parse=parse_thresholds,
        format=format_thresholds,
        metavar="CLAUSES",
        pipeline="thresholds",
        help="Bless the model only if every clause holds: METRIC>=BOUND or METRIC<=BOUND, "
        "BOUND a number or baseline[+-*NUMBER] (the served model's value), comma-separated, "
        "e.g. auc>=0.8,auc>=baseline-0.002 or rmse<=baseline*1.05. Empty: no thresholds.",
    )
    slice_by: tuple[str, ...] = option(
        (),
        parse=parse_columns,
        format=",".join,
        metavar="COLUMNS",
        pipeline="slice_by",
        help="Categorical columns to compute the eval metrics for per value (the most "
        "frequent ones; the rest as '(other)'), comma-separated, e.g. difficulty,platform.",
    )
    max_slices: int = option(
        MAX_SLICES, min=1, help="Slices per --slice-by column; the rest is '(other)'."
    )
    split: str = option("eval", help="The split both models are scored on.")

    def __post_init__(self) -> None:
        check(self)


@dataclass(frozen=True)
class Blessing:
    """The outcome of :func:`evaluate_model` (what ``blessing.json`` holds).

    Attributes:
        decision: every threshold checked.
        candidate: the candidate's metrics (with ``slices`` when asked for).
        baseline: the baseline's metrics (None: no baseline scored).
        baseline_info: ``uri``, ``version``, ``step`` of the served model (None: none), and
            ``error`` when it could not score the data.
        export: the candidate's export URI.
    """

    decision: Decision
    candidate: dict[str, Any]
    baseline: dict[str, Any] | None
    baseline_info: dict[str, Any] | None
    export: str

    @property
    def blessed(self) -> bool:
        return self.decision.blessed

    def summary(self) -> str:
        return self.decision.summary()

    def to_dict(self) -> dict[str, Any]:
        return {
            "blessed": self.blessed,
            "summary": self.summary(),
            "thresholds": [c.to_dict() for c in self.decision.checks],
            "candidate": {"export": self.export, "metrics": _scalars(self.candidate)},
            "baseline": (
                None
                if self.baseline_info is None
                else {
                    **self.baseline_info,
                    "metrics": None if self.baseline is None else _scalars(self.baseline),
                }
            ),
        }


def _scalars(metrics: dict[str, Any]) -> dict[str, Any]:
    """The scalar metrics (no ROC, confusion matrix or slices): what blessing.json keeps."""
    from shardtrain.train.evaluation import headline_keys

    keys = (*headline_keys(metrics), "mse", "mean_error", "num_examples")
    return {k: metrics[k] for k in keys if k in metrics}


def find_baseline(serving_uri: str | None) -> dict[str, Any] | None:
    """The served model: ``{"uri", "version", "step", "source"}`` from
    ``SERVING_URI/latest.json``; None when nothing was published there yet.

    Raises:
        DataError: the pointer names a version that is not there.
    """
    from shardtrain import storage

    if not serving_uri:
        return None
    pointer_uri = storage.join(serving_uri, SERVING_POINTER)
    if not storage.exists(pointer_uri):
        return None
    pointer = storage.read_json(pointer_uri)
    documents.check(pointer, documents.SERVING_POINTER, pointer_uri)
    if not (pointer.get("path") or pointer.get("version")):
        raise DataError(f"{pointer_uri}: names no version (neither 'path' nor 'version')")
    uri = storage.join(serving_uri, str(pointer.get("path") or pointer.get("version")))
    if not storage.exists(storage.join(uri, "saved_model.pb")):
        raise DataError(f"{pointer_uri} names {uri}, which holds no saved_model.pb")
    return {
        "uri": uri,
        "version": pointer.get("version"),
        "step": pointer.get("step"),
        "source": pointer.get("source"),
    }


def evaluate_model(config: EvaluateConfig) -> Blessing:
    """Score the candidate and the served model, decide, write ``blessing.json``.

    See the module docstring for the rules.

    Returns:
        The :class:`Blessing`.

    Raises:
        NotCommittedError: the model directory has no export or no metrics.
        ConfigError: a threshold names a metric the model's task lacks, or a slice column is
            unknown or not categorical.
        DataError: the dataset cannot be scored by the candidate.
    """
    from shardtrain import storage
    from shardtrain.data.metadata import DatasetMetadata
    from shardtrain.data.verify import require_shards
    from shardtrain.train.export import MODEL_INFO, latest_export
    from shardtrain.train.scoring import ExportedModel, incompatibility, score_split
    from shardtrain.train.slices import slice_values

    export_uri = latest_export(config.model_dir)["uri"]
    metrics_uri = storage.join(config.model_dir, "eval", METRICS_NAME)
    if not storage.exists(metrics_uri):
        raise NotCommittedError(f"{config.model_dir}: no evaluation metrics (eval/{METRICS_NAME})")
    trained = storage.read_json(metrics_uri)
    task = trained.get("task") or ("regression" if "rmse" in trained else "binary")
    check_task(config.thresholds, str(task), config.model_dir)
    # Always read: a model is never blessed against data that is not there or not its own.
    meta = DatasetMetadata.load(config.data)
    require_shards(config.data, meta, [config.split])
    if storage.exists(storage.join(export_uri, MODEL_INFO)):
        model = ExportedModel.read(export_uri)
        reason = _label_mismatch(model, meta) or incompatibility(model, model, meta)
        if reason:
            raise DataError(f"{config.model_dir}: cannot be evaluated on {config.data}: {reason}")
    slices = {}
    if config.slice_by:
        slices = slice_values(
            meta, config.slice_by, where=config.data, max_values=config.max_slices
        )

    baseline_info = find_baseline(config.serving_uri)
    no_baseline = "no baseline"
    baseline: ExportedModel | None = None
    if baseline_info is None:
        if config.serving_uri:
            log.info("nothing published at %s yet: no baseline", config.serving_uri)
    elif baseline_info.get("source") == export_uri:
        no_baseline = "the served model is this candidate"
        log.info("%s is already served (%s): no baseline", export_uri, baseline_info["uri"])
    elif config.thresholds:
        try:
            baseline = ExportedModel.read(baseline_info["uri"])
        except Exception as exc:  # anything unreadable there: judged without it
            why = f"it cannot be read: {one_line(exc)}"
            no_baseline = _without_baseline(baseline_info, why, config.data)

    # The trainer's metrics.json is of its eval split (``eval`` if it does not say) of the
    # dataset whose plan it records: another split or other data must be scored.
    same_split = trained.get("split", "eval") == config.split
    same_data = same_split and bool(meta.plan) and trained.get("data_plan") == meta.plan
    if same_split and not same_data:
        log.info("%s: the trainer's metrics are not of this data: scoring it", config.data)
    candidate: ExportedModel | None = None
    if baseline is not None or slices or not same_data:
        meta = meta or DatasetMetadata.load(config.data)
        candidate = ExportedModel.read(export_uri)
        reason = incompatibility(candidate, candidate, meta)
        if reason:
            raise DataError(f"{config.model_dir}: cannot score {config.data}: {reason}")
        why = "" if baseline is None else incompatibility(baseline, candidate, meta)
        if why and baseline_info is not None:
            no_baseline = _without_baseline(baseline_info, why, config.data)
            baseline = None
    if candidate is None or meta is None or (baseline is None and not slices and same_data):
        # Nothing to compare with and no slices: the trainer's metrics of the same split.
        decision = decide(config.thresholds, trained, None, no_baseline=no_baseline)
        blessing = Blessing(decision, trained, None, baseline_info, export_uri)
        _write(config, blessing, None)
        return blessing

    models = {"candidate": candidate}
    with tempfile.TemporaryDirectory(prefix="shardtrain-score-") as scratch:
        candidate.load(scratch)
        if baseline is not None and baseline_info is not None:
            try:
                baseline.load(scratch)
                models["baseline"] = baseline
            except Exception as exc:  # a SavedModel TensorFlow cannot load
                why = f"it failed to load: {one_line(exc)}"
                no_baseline = _without_baseline(baseline_info, why, config.data)
        scores = score_split(
            config.data,
            meta,
            config.split,
            models,
            candidate=candidate,
            slices=slices,
            sliced=["candidate"],
            optional=["baseline"],
            scratch=scratch,
        )
    scored = scores.get("baseline")
    if scored is not None and "error" in scored and baseline_info is not None:
        why = f"it failed to predict: {scored['error']}"
        no_baseline = _without_baseline(baseline_info, why, config.data)
        scored = None
    decision = decide(config.thresholds, scores["candidate"], scored, no_baseline=no_baseline)
    blessing = Blessing(decision, scores["candidate"], scored, baseline_info, export_uri)
    _write(config, blessing, scores["candidate"].get("slices"))
    return blessing


def _label_mismatch(model: Any, meta: Any) -> str:
    """Why the dataset of ``meta`` is not one ``model`` (an ``ExportedModel``) predicts
    ('' if it is): another label column, or a regression's label that is not a number."""
    if model.label != meta.label:
        return f"the model predicts '{model.label}', the dataset's label is '{meta.label}'"
    if model.task == "regression" and meta.label_info.type in ("string", "image"):
        return f"the model is a regression, the dataset's label '{meta.label}' is not a number"
    return ""


def _without_baseline(info: dict[str, Any], why: str, data: str) -> str:
    """Record why the baseline is not scored (``info["error"]``), say so in one warning line
    naming its URI, and return the note its relative thresholds are skipped with."""
    info["error"] = why
    log.warning(
        "baseline %s cannot score %s (%s): judged on the absolute thresholds only",
        info["uri"],
        data,
        why,
    )
    return "the baseline cannot score this data"


def _write(config: EvaluateConfig, blessing: Blessing, slices: dict[str, Any] | None) -> None:
    """``blessing.json``, and the slices into ``metrics.json`` (the trainer's, kept): this
    run's, or none (an earlier run's slices are removed when this one has no ``slice_by``)."""
    from shardtrain import storage

    eval_dir = storage.join(config.model_dir, "eval")
    target = storage.join(eval_dir, METRICS_NAME)
    if slices is not None:
        metrics = storage.read_json(target) if storage.exists(target) else {}
        storage.write_json(target, {**metrics, "slices": slices})
    elif not config.slice_by and storage.exists(target):
        metrics = storage.read_json(target)
        if "slices" in metrics:
            del metrics["slices"]
            storage.write_json(target, metrics)
    storage.write_json(storage.join(eval_dir, BLESSING_NAME), blessing.to_dict())
    log.info("%s (%s)", blessing.summary(), storage.join(eval_dir, BLESSING_NAME))
