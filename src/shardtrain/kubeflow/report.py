"""The Markdown report of a ``csv_to_model`` run: what the Kubeflow Pipelines UI shows as a card.

The evaluate step (:func:`shardtrain.kubeflow.steps.evaluate_step`) writes
:func:`render_report` to its ``dsl.Markdown`` output, beside the metrics table and the ROC
curve it logs. One page answers "is this model any good, on what data, and where is it":

* the decision: blessed or not, each threshold with the candidate's value, its bound and
  whether it holds, and the candidate's and the served model's (the baseline's) metrics side
  by side (``blessing.json``, :mod:`shardtrain.train.blessing`);
* the evaluation on the eval split: a classifier's AUC, accuracy and log loss and its
  confusion matrix; a regression's RMSE, MAE and R², its bias and the label's spread; with
  ``slice_by``, the same per value of each slicing column;
* the data: the dataset summary of :mod:`shardtrain.data.report` — the same one
  ``shardtrain inspect`` prints — rows read, accepted and rejected (by reason), the splits,
  the label's classes and per-column statistics (numeric, categorical, image);
* where things are: the model directory, the SavedModel, the TensorBoard command, the dataset,
  and the HTML report that shows all of it as pictures (:mod:`shardtrain.htmlreport`).

Pure formatting (no storage, no kfp), so it is tested on plain values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from shardtrain.data.report import fmt, markdown_table, summarize, to_markdown
from shardtrain.kubeflow.pipelines import PIPELINE_NAME
from shardtrain.train.evaluation import headline_keys

if TYPE_CHECKING:
    from shardtrain.data.metadata import DatasetMetadata

__all__ = ["fmt", "render_report"]

#: A regression's figures shown after its headline metrics.
_REGRESSION_MORE = ("mean_error", "label_mean", "label_std")


def render_report(
    metrics: Mapping[str, Any],
    meta: DatasetMetadata,
    *,
    dataset_uri: str,
    model: Mapping[str, Any],
    blessing: Mapping[str, Any] | None = None,
    html_report: str | None = None,
) -> str:
    """The Markdown report of a run: the decision, model metrics, the data's statistics,
    where things are.

    Args:
        metrics: ``MODEL_DIR/eval/metrics.json``.
        meta: the dataset's metadata.
        dataset_uri: the dataset's URI.
        model: the model pointer (``uri``, ``export``, ``step``, ``tensorboard``).
        blessing: ``MODEL_DIR/eval/blessing.json`` (None: no decision section).
        html_report: where the HTML report is (None: not made).

    Returns:
        Markdown for a ``dsl.Markdown`` artifact (the UI renders it as a static card).
    """
    out = [f"# {PIPELINE_NAME}: {model['uri']}", ""]
    if html_report:
        out += [
            f"Pictures of all of it (distributions and drift, ROC, calibration, slices, the "
            f"training curve): this step's `html_report` artifact, also at "
            f"[`{html_report}`]({html_report}).",
            "",
        ]
    if blessing is not None:
        out += _blessing(blessing, headline_keys(metrics))
    out += ["## Evaluation", ""]
    out += [
        f"On the eval split, {fmt(metrics.get('num_examples'))} examples, at step "
        f"{fmt(metrics.get('step'))}.",
        "",
    ]
    keys = headline_keys(metrics)
    if metrics.get("task") == "regression":
        keys = (*keys, *_REGRESSION_MORE)
    out += markdown_table(["metric", "value"], [(k, fmt(metrics.get(k))) for k in keys])
    if metrics.get("task") == "regression":
        out += [
            "RMSE and MAE are in the label's units; the eval labels' standard deviation "
            "(`label_std`) is the RMSE of always predicting their mean, and R² compares with "
            "it (1: perfect, 0: no better); `mean_error` is the mean of prediction minus label.",
            "",
        ]
    cm = metrics.get("confusion_matrix") or {}
    if cm.get("labels"):
        out += ["Confusion matrix (rows: true class, columns: predicted class):", ""]
        out += markdown_table(
            ["true \\ predicted", *map(str, cm["labels"])],
            [
                (label, *map(fmt, row))
                for label, row in zip(cm["labels"], cm["matrix"], strict=True)
            ],
        )

    out += _slices(metrics.get("slices") or {}, headline_keys(metrics))

    out += ["## Data", ""]
    out += to_markdown(summarize(dataset_uri, meta))

    out += ["## Where things are", ""]
    out += [
        f"* model directory: `{model['uri']}`",
        f"* SavedModel (step {fmt(model.get('step'))}): `{model.get('export', 'n/a')}`",
        f"* TensorBoard: `tensorboard --logdir {model.get('tensorboard', 'n/a')}`",
        f"* dataset: `{dataset_uri}` (`shardtrain inspect {dataset_uri}`)",
        *([f"* HTML report: `{html_report}`"] if html_report else []),
        "",
    ]
    return "\n".join(out)


def _blessing(blessing: Mapping[str, Any], keys: tuple[str, ...]) -> list[str]:
    """The decision: verdict, thresholds, and both models' metrics side by side."""
    verdict = "**Blessed**" if blessing.get("blessed") else "**Not blessed**: not exported"
    out = ["## Blessing", "", f"{verdict}. {blessing.get('summary', '')}", ""]
    checks = blessing.get("thresholds") or []
    if checks:
        out += markdown_table(
            ["threshold", "candidate", "bound", "holds"],
            [
                (
                    c["threshold"],
                    fmt(c.get("value")),
                    fmt(c.get("bound")),
                    {True: "yes", False: "**no**", None: f"skipped ({c.get('note', '')})"}[
                        c.get("pass")
                    ],
                )
                for c in checks
            ],
        )
    base = blessing.get("baseline") or {}
    candidate = (blessing.get("candidate") or {}).get("metrics") or {}
    if base.get("error"):
        out += [f"The served model `{base['uri']}` cannot score this data: {base['error']}.", ""]
    if base.get("metrics"):
        served = f"`{base['uri']}` (version {fmt(base.get('version'))})"
        out += [f"Candidate against the served model {served}, on the same eval rows:", ""]
        out += markdown_table(
            ["metric", "candidate", "served"],
            [
                (k, fmt(candidate.get(k)), fmt(base["metrics"].get(k)))
                for k in (*keys, "num_examples")
            ],
        )
    elif not base:
        out += ["Nothing is served yet: no baseline to compare with.", ""]
    return out


def _slices(slices: Mapping[str, Any], keys: tuple[str, ...]) -> list[str]:
    """The metrics per value of each slicing column."""
    out: list[str] = []
    for column, rows in slices.items():
        out += [f"### By `{column}`", ""]
        out += markdown_table(
            [column, "examples", *keys],
            [
                (row["value"], fmt(row.get("num_examples")), *(fmt(row.get(k)) for k in keys))
                for row in rows
            ],
        )
    return out
