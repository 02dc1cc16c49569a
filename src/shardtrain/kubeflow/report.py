"""The Markdown report of a ``csv_to_model`` run: what the Kubeflow Pipelines UI shows as a card.

The evaluate step (:func:`shardtrain.kubeflow.steps.evaluate_step`) writes
:func:`render_report` to its ``dsl.Markdown`` output, beside the metrics table and the ROC
curve it logs. One page answers "is this model any good, on what data, and where is it":

* the evaluation: AUC, accuracy and log loss on the eval split, and the confusion matrix;
* the data, from the dataset's ``metadata.json``: rows read, accepted and rejected (by
  reason), the splits, the label's classes, and per-column statistics (numeric, categorical,
  and a short line for any other kind such as images);
* where things are: the model directory, the SavedModel, the TensorBoard command, the dataset.

Pure formatting over the two JSON documents (no storage, no kfp), so it is tested on plain
dicts; :func:`fmt` is also how the evaluate step writes numbers in its log and errors.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from shardtrain.kubeflow.pipelines import PIPELINE_NAME


def fmt(value: Any, digits: int = 4) -> str:
    """A value as the report writes it: integers with thousands separators, floats to
    ``digits`` significant digits, ``n/a`` for a missing or non-finite value."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _cell(value: Any) -> str:
    """A table cell: a ``|`` or a line break in a value would break the Markdown table."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    """A Markdown table's lines, and the blank line that ends it."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def render_report(
    metrics: Mapping[str, Any],
    meta: Mapping[str, Any],
    *,
    dataset_uri: str,
    model: Mapping[str, Any],
) -> str:
    """The Markdown report of a run: model metrics, the data's statistics, where things are.

    Args:
        metrics: ``MODEL_DIR/eval/metrics.json``.
        meta: the dataset's ``metadata.json``.
        dataset_uri: the dataset's URI.
        model: the model pointer (``uri``, ``export``, ``step``, ``tensorboard``).

    Returns:
        Markdown for a ``dsl.Markdown`` artifact (the UI renders it as a static card).
    """
    out = [f"# {PIPELINE_NAME}: {model['uri']}", ""]
    out += ["## Evaluation", ""]
    out += [
        f"On the eval split, {fmt(metrics.get('num_examples'))} examples, at step "
        f"{fmt(metrics.get('step'))}.",
        "",
    ]
    out += _table(
        ["metric", "value"], [(k, fmt(metrics.get(k))) for k in ("auc", "accuracy", "log_loss")]
    )
    cm = metrics.get("confusion_matrix") or {}
    if cm.get("labels"):
        out += ["Confusion matrix (rows: true class, columns: predicted class):", ""]
        out += _table(
            ["true \\ predicted", *map(str, cm["labels"])],
            [
                (label, *map(fmt, row))
                for label, row in zip(cm["labels"], cm["matrix"], strict=True)
            ],
        )

    out += ["## Data", ""]
    out += [
        f"`{dataset_uri}`: {fmt(meta['rows_read'])} rows read, "
        f"{fmt(meta['rows_accepted'])} accepted, {fmt(meta['rows_rejected'])} rejected"
        + (
            " (" + ", ".join(f"{k}: {fmt(v)}" for k, v in meta["rejects_by_reason"].items()) + ")"
            if meta.get("rejects_by_reason")
            else ""
        )
        + ".",
        "",
    ]
    out += _table(
        ["split", "fraction", "records", "shards", "MB"],
        [
            (
                n,
                f"{s['fraction']:g}",
                fmt(s["num_records"]),
                s["num_shards"],
                f"{s['bytes'] / 1e6:.1f}",
            )
            for n, s in meta["splits"].items()
        ],
    )
    counts = meta["stats"]["label"]["counts"]
    total = sum(counts.values()) or 1
    out += [f"Label `{meta['label']}` ({meta['label_info']['task']}):", ""]
    out += _table(
        ["class", "rows", "share"], [(k, fmt(v), f"{v / total:.1%}") for k, v in counts.items()]
    )

    stats = meta["stats"]["columns"]
    numeric, categorical, other = [], [], []
    for column in meta["schema"]["columns"]:
        st = stats.get(column["name"])
        if column.get("drop") or st is None:
            continue
        kind = st.get("kind")
        if kind == "numeric":
            numeric.append(
                (
                    column["name"],
                    fmt(st["missing"]),
                    *(fmt(st[k]) for k in ("min", "max", "mean", "std")),
                )
            )
        elif kind == "categorical":
            top = ", ".join(f"{t['value']} ({fmt(t['count'])})" for t in st["top"][:5])
            categorical.append((column["name"], fmt(st["missing"]), fmt(st["distinct"]), top))
        else:  # kinds this report has no table for (e.g. images): name, kind, count
            other.append((column["name"], kind, fmt(st.get("count")), fmt(st.get("missing"))))
    if numeric:
        out += ["### Numeric columns", ""]
        out += _table(["column", "missing", "min", "max", "mean", "std"], numeric)
    if categorical:
        out += ["### Categorical columns", ""]
        out += _table(["column", "missing", "distinct", "top values"], categorical)
    if other:
        out += ["### Other columns", ""]
        out += _table(["column", "kind", "count", "missing"], other)

    out += ["## Where things are", ""]
    out += [
        f"* model directory: `{model['uri']}`",
        f"* SavedModel (step {fmt(model.get('step'))}): `{model.get('export', 'n/a')}`",
        f"* TensorBoard: `tensorboard --logdir {model.get('tensorboard', 'n/a')}`",
        f"* dataset: `{dataset_uri}` (`shardtrain inspect {dataset_uri}`)",
        "",
    ]
    return "\n".join(out)
