"""The HTML page of a report: one self-contained file, inline SVG charts, a little inline script.

:func:`render_html` turns :class:`~shardtrain.htmlreport.inputs.ReportInputs` into the page.
Nothing is fetched when it opens (no CDN, no font, no image file): it must work from a laptop's
disk, in the Kubeflow Pipelines UI's HTML viewer, and on air-gapped clusters.

Sections, each chart a ``<figure class="chart" data-chart="KIND">`` with a stable id:

* **Model** (with a model directory): headline metrics beside the served model's and the
  blessing's thresholds; ``chart-training-curve``; a classifier's ``chart-roc``, ``chart-pr``,
  ``chart-confusion``, ``chart-calibration``; a regression's ``chart-predicted-vs-actual``
  and ``chart-residuals``; ``chart-slice-<column>`` per sliced column.
* **Data**: ``chart-label-balance``, ``chart-rejects``, the data checks' failures, and one
  chart per column (``col-<index>``, schema order).

Wide datasets: every column's chart is drawn once, into an inert ``<template>`` (parsed, never
laid out or painted), and the page shows one page of :data:`PAGE_SIZE` columns at a time,
picked by a name filter, a kind (numeric, categorical, drifted) and an order (schema, drift,
missing values). A 500-column report is a few megabytes and shows its first page at once;
a table of every column with its drift verdict sits folded below.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from shardtrain import __version__
from shardtrain.data.report import fmt
from shardtrain.data.validation import Finding
from shardtrain.htmlreport import charts
from shardtrain.htmlreport.inputs import ReportInputs
from shardtrain.train.evaluation import headline_keys

#: Column charts shown per page.
PAGE_SIZE = 24
#: The checks that measure a column's drift.
DRIFT_CHECKS = ("numeric_drift", "categorical_drift")


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "x"


def _figure(kind: str, chart_id: str, svg: str, caption: str = "", cls: str = "") -> str:
    extra = f" {cls}" if cls else ""
    cap = f"<figcaption>{caption}</figcaption>" if caption else ""
    return (
        f'<figure class="chart{extra}" id="{_e(chart_id)}" data-chart="{_e(kind)}">'
        f"{svg}{cap}</figure>"
    )


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], cls: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    extra = f' class="{cls}"' if cls else ""
    return f"<table{extra}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------


def _model_section(inputs: ReportInputs) -> list[str]:
    metrics = inputs.metrics or {}
    sample = inputs.sample
    task = str(metrics.get("task") or (sample.task if sample else "") or "binary")
    keys = headline_keys({**metrics, "task": task})
    out = ['<section id="model"><h2>Model</h2>']
    out.append(f"<p>Model directory <code>{_e(inputs.model_dir)}</code>")
    if metrics:
        out.append(
            f"; evaluated at step {_e(fmt(metrics.get('step')))} on "
            f"{_e(fmt(metrics.get('num_examples')))} eval examples ({_e(task)})."
        )
    out.append("</p>")
    out += _blessing(inputs.blessing, metrics, keys)

    out.append('<div class="charts">')
    out.append(
        _figure(
            "training-curve",
            "chart-training-curve",
            charts.training_curve(
                inputs.history,
                loss=("loss", "loss" if task == "regression" else "log_loss"),
                metric=keys[0],
                chart_id="chart-training-curve",
            ),
            "From the run's TensorBoard summaries (<code>logs/train</code>, "
            "<code>logs/eval</code>).",
            "wide",
        )
    )
    if task == "regression":
        if sample is not None and sample.rows:
            caption = _sample_caption(sample.rows, sample.split_rows)
            out.append(
                _figure(
                    "predicted-vs-actual",
                    "chart-predicted-vs-actual",
                    charts.predicted_vs_actual(
                        sample.predictions, sample.labels, chart_id="chart-predicted-vs-actual"
                    ),
                    caption,
                )
            )
            out.append(
                _figure(
                    "residuals",
                    "chart-residuals",
                    charts.residuals(sample.predictions, sample.labels, chart_id="chart-residuals"),
                    caption,
                    "wide",
                )
            )
    else:
        out += _classification(metrics, sample)
    out.append("</div>")
    out += _slices(metrics.get("slices") or {}, metrics, keys)
    out.append("</section>")
    return out


def _sample_caption(rows: int, split_rows: int) -> str:
    return f"Per-example scores of the first {rows:,} of the eval split's {split_rows:,} rows."


def _blessing(
    blessing: Mapping[str, Any] | None, metrics: Mapping[str, Any], keys: tuple[str, ...]
) -> list[str]:
    base = (blessing or {}).get("baseline") or {}
    served = base.get("metrics") or {}
    if served:
        rows = [(k, fmt(metrics.get(k)), fmt(served.get(k))) for k in keys]
        out = [_table(["metric", "this model", "served model"], rows, "metrics")]
    else:
        out = [_table(["metric", "this model"], [(k, fmt(metrics.get(k))) for k in keys])]
    if blessing is None:
        return out
    verdict = "blessed" if blessing.get("blessed") else "not blessed"
    out.insert(
        0,
        f'<p class="verdict {verdict.replace(" ", "-")}" id="blessing"><strong>'
        f"{_e(verdict.capitalize())}</strong>: "
        f"{_e(re.sub(r'^(not )?blessed: ', '', str(blessing.get('summary', ''))))}</p>",
    )
    if base.get("uri"):
        out.append(f"<p>Served model: <code>{_e(base['uri'])}</code></p>")
    checks = blessing.get("thresholds") or []
    if checks:
        holds = {True: "yes", False: "NO", None: "skipped"}
        out.append(
            _table(
                ["threshold", "value", "bound", "holds"],
                [
                    (c["threshold"], fmt(c.get("value")), fmt(c.get("bound")), holds[c.get("pass")])
                    for c in checks
                ],
            )
        )
    return out


def _classification(metrics: Mapping[str, Any], sample: Any) -> list[str]:
    out = []
    roc = metrics.get("roc") or {}
    cm = metrics.get("confusion_matrix") or {}
    if roc.get("fpr"):
        out.append(
            _figure(
                "roc",
                "chart-roc",
                charts.roc_curve(roc, metrics.get("auc"), chart_id="chart-roc"),
                "The whole eval split (<code>eval/metrics.json</code>).",
            )
        )
        matrix = np.asarray(cm.get("matrix") or [[0]], dtype=np.int64)
        if len(cm.get("labels") or ()) == 2:
            positives, negatives = int(matrix[1].sum()), int(matrix[0].sum())
            caption = f"Of class '{_e(cm['labels'][1])}', the whole eval split."
        else:  # micro-averaged one-vs-rest, as the ROC curve is
            n = int(matrix.sum())
            positives, negatives = n, n * max(len(matrix) - 1, 1)
            caption = "Micro-averaged one-vs-rest, the whole eval split."
        out.append(
            _figure(
                "pr",
                "chart-pr",
                charts.precision_recall(roc, positives, negatives, chart_id="chart-pr"),
                caption,
            )
        )
    if cm.get("labels"):
        out.append(
            _figure(
                "confusion",
                "chart-confusion",
                charts.confusion_heatmap(cm["labels"], cm["matrix"], chart_id="chart-confusion"),
                "Rows: true class; cells: examples, shaded by the share of their row.",
            )
        )
    if sample is not None and sample.rows:
        if sample.task == "binary":
            predicted, observed = sample.predictions, (sample.labels == 1).astype(np.float64)
            what = f"the probability of class '{_e(sample.classes[1])}'"
        else:  # top-label calibration: the confidence against how often it is right
            predicted = sample.predictions.max(axis=1)
            observed = (sample.predictions.argmax(axis=1) == sample.labels).astype(np.float64)
            what = "the most probable class's probability (observed: it is the true class)"
        out.append(
            _figure(
                "calibration",
                "chart-calibration",
                charts.calibration(predicted, observed, chart_id="chart-calibration"),
                f"Of {what}. {_sample_caption(sample.rows, sample.split_rows)}",
            )
        )
    return out


def _slices(
    slices: Mapping[str, Sequence[Mapping[str, Any]]],
    metrics: Mapping[str, Any],
    keys: tuple[str, ...],
) -> list[str]:
    if not slices:
        return []
    out = ['<h3 id="slices">Slices</h3><div class="charts">']
    for column, rows in slices.items():
        chart_id = f"chart-slice-{_slug(column)}"
        svg = charts.slice_metric(column, rows, keys[0], metrics.get(keys[0]), chart_id=chart_id)
        caption = "Each value's examples in brackets; the dashed line is the whole eval split."
        out.append(_figure("slice", chart_id, svg, caption))
    out.append("</div>")
    return out


# --------------------------------------------------------------------------------------------
# The data
# --------------------------------------------------------------------------------------------


def _data_section(inputs: ReportInputs) -> list[str]:
    meta = inputs.meta
    served_meta = inputs.served.metadata if inputs.served else None
    reasons = ", ".join(f"{k}: {fmt(v)}" for k, v in meta.rejects_by_reason.items())
    out = ['<section id="data"><h2>Data</h2>']
    out.append(
        f"<p><code>{_e(inputs.dataset_uri)}</code>: {_e(fmt(meta.rows_read))} rows read, "
        f"{_e(fmt(meta.rows_accepted))} accepted, {_e(fmt(meta.rows_rejected))} rejected"
        f"{_e(f' ({reasons})' if reasons else '')}; label <code>{_e(meta.label)}</code> "
        f"({_e(meta.label_info.task)}); splits "
        + _e(", ".join(f"{n} {fmt(s.num_records)}" for n, s in meta.splits.items()))
        + ".</p>"
    )
    if inputs.served is not None:
        out.append(
            f"<p>Compared with the served model's training data: "
            f"<code>{_e(inputs.served.uri)}</code> (read from "
            f"<code>{_e(inputs.served.source)}</code>).</p>"
        )
    out += _checks(inputs)
    out.append('<div class="charts">')
    out.append(_label_chart(inputs))
    out.append(
        _figure(
            "rejects",
            "chart-rejects",
            charts.bars(
                dict(meta.rejects_by_reason),
                chart_id="chart-rejects",
                title="rejected rows by reason",
                xlabel="rows",
            ),
            f"Rejected rows are kept in <code>{_e(meta.rejects)}</code>."
            if meta.rows_rejected
            else "No row was rejected.",
        )
    )
    out.append("</div>")
    out += _columns(inputs, served_meta)
    out.append("</section>")
    return out


def _checks(inputs: ReportInputs) -> list[str]:
    v = inputs.validation
    if v is None:
        return []
    verdict = "passed" if v.passed else f"FAILED ({len(v.failures)} finding(s))"
    out = [
        f'<p class="verdict {"blessed" if v.passed else "not-blessed"}" id="data-checks">'
        f"<strong>Data checks {_e(verdict)}</strong> against the served model's training "
        f"data; limits <code>{_e(v.limits.describe())}</code>.</p>"
    ]
    if v.failures:
        out.append(
            _table(
                ["check", "column", "found"], [(f.check, f.column, f.detail) for f in v.failures]
            )
        )
    return out


def _label_chart(inputs: ReportInputs) -> str:
    meta = inputs.meta
    label = meta.stats.label
    served = inputs.served.metadata.stats.label if inputs.served else None
    drift = ""
    if inputs.validation is not None:
        found = [f for f in inputs.validation.findings if f.check == "label_drift"]
        drift = "; ".join(_verdict_text(f) for f in found)
    if meta.label_info.task == "regression":
        svg = charts.numeric_histogram(
            meta.label,
            (label.get("numeric") or {}).get("histogram"),
            ((served or {}).get("numeric") or {}).get("histogram"),
            chart_id="chart-label-balance",
            title=f"label {meta.label}",
        )
    else:
        svg = charts.class_balance(
            label.get("counts") or {},
            (served or {}).get("counts") if served else None,
            chart_id="chart-label-balance",
            title=f"label {meta.label}",
        )
    return _figure("label-balance", "chart-label-balance", svg, _e(drift))


def _verdict_text(f: Finding) -> str:
    return f"{f.detail}: {'ok' if f.passed else 'DRIFTED'}"


def _column_caption(st: Mapping[str, Any], column_type: str) -> str:
    total = st.get("count", 0) + st.get("missing", 0) + st.get("nan", 0)
    missing = (st.get("missing", 0) + st.get("nan", 0)) / total if total else 0.0
    if st.get("kind") == "numeric":
        figures = ", ".join(f"{k} {fmt(st.get(k))}" for k in ("min", "max", "mean", "std"))
        return f"{column_type}; missing {missing:.1%}; {figures}"
    if st.get("kind") == "categorical":
        distinct = ("~" if st.get("approximate") else "") + fmt(st.get("distinct"))
        return f"{distinct} distinct; missing {missing:.1%}"
    return f"{st.get('kind')}; missing {missing:.1%}"


def _bool_top(st: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A bool column's values and counts, as a categorical column's ``top`` (its statistics
    are numeric: the mean of 0/1 over ``count`` non-missing rows)."""
    count = int(st.get("count") or 0)
    true = round(float(st.get("mean") or 0.0) * count)
    return [{"value": "true", "count": true}, {"value": "false", "count": count - true}]


def _columns(inputs: ReportInputs, served_meta: Any) -> list[str]:
    meta = inputs.meta
    served_stats = served_meta.stats.columns if served_meta is not None else {}
    findings: dict[str, list[Finding]] = {}
    for f in inputs.validation.findings if inputs.validation else ():
        findings.setdefault(f.column, []).append(f)
    templates, rows = [], []
    index = 0
    for column in meta.schema.columns:
        st = meta.stats.columns.get(column.name)
        if column.drop or st is None or st.get("kind") not in ("numeric", "categorical"):
            continue
        kind = str(st["kind"])
        old = served_stats.get(column.name)
        old = old if old and old.get("kind") == kind else None
        chart_id = f"col-{index}"
        index += 1
        if kind == "numeric" and column.type == "bool":
            # Two values: their shares as bars, not a histogram of 0 and 1 spanning 0-2.
            svg = charts.top_values(
                column.name,
                _bool_top(st),
                int(st.get("count") or 0),
                _bool_top(old) if old else None,
                int(old.get("count") or 0) if old else 0,
                chart_id=chart_id,
            )
        elif kind == "numeric":
            svg = charts.numeric_histogram(
                column.name,
                st.get("histogram"),
                old.get("histogram") if old else None,
                chart_id=chart_id,
            )
        else:
            svg = charts.top_values(
                column.name,
                st.get("top") or [],
                int(st.get("count") or 0),
                (old.get("top") or []) if old else None,
                int(old.get("count") or 0) if old else 0,
                chart_id=chart_id,
            )
        found = findings.get(column.name, [])
        drift = next((f for f in found if f.check in DRIFT_CHECKS), None)
        failed = [f for f in found if not f.passed]
        verdict = "drifted" if failed else "ok" if found else ("" if old is None else "ok")
        value = drift.value if drift is not None and drift.value is not None else math.nan
        caption = _e(_column_caption(st, column.type))
        if found:
            caption += "<br>" + "; ".join(
                f'<span class="{"bad" if not f.passed else "ok"}">{_e(_verdict_text(f))}</span>'
                for f in found
            )
        total = st.get("count", 0) + st.get("missing", 0) + st.get("nan", 0)
        missing = (st.get("missing", 0) + st.get("nan", 0)) / total if total else 0.0
        figure = _figure("column", chart_id, svg, caption, f"column-chart {verdict}")
        templates.append(
            f'<template data-name="{_e(column.name)}" data-kind="{kind}" '
            f'data-drift="{"" if math.isnan(value) else f"{value:.6g}"}" '
            f'data-missing="{missing:.6g}" data-verdict="{verdict}">{figure}</template>'
        )
        rows.append(
            (column.name, kind, column.type, f"{missing:.1%}", fmt(value), verdict or "n/a")
        )
    kinds = [
        meta.stats.columns.get(c.name, {}).get("kind") for c in meta.schema.columns if not c.drop
    ]
    images = sum(k == "image" for k in kinds)
    not_drawn = f"; {images} image column(s): see shardtrain inspect" if images else ""
    out = [
        f'<h3 id="columns">Columns ({index:,} charted{not_drawn})</h3>',
        '<div class="picker">'
        '<input id="column-filter" type="search" placeholder="filter columns by name">'
        '<select id="column-kind"><option value="all">all kinds</option>'
        '<option value="numeric">numeric</option><option value="categorical">categorical'
        '</option><option value="drifted">drifted</option></select>'
        '<select id="column-sort"><option value="schema">schema order</option>'
        '<option value="drift">largest drift first</option>'
        '<option value="missing">most missing first</option></select>'
        '<button id="column-prev" type="button">&lsaquo; previous</button>'
        '<span id="column-page-info"></span>'
        '<button id="column-next" type="button">next &rsaquo;</button></div>',
        '<div class="charts" id="column-grid"></div>',
        f'<div id="column-templates" hidden>{"".join(templates)}</div>',
        '<details id="column-table"><summary>Every column\'s drift as a table</summary>',
        _table(["column", "kind", "type", "missing", "drift", "verdict"], rows),
        "</details>",
    ]
    return out


# --------------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5rem auto;
max-width:1400px;padding:0 1rem;color:#222}
h1{font-size:1.4rem}h2{border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2rem}
code{font-size:.85em;background:#f4f4f4;padding:0 .2em}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(380px,1fr));gap:1rem}
figure.chart{margin:0;border:1px solid #e4e4e4;border-radius:4px;padding:.4rem;background:#fff}
figure.chart.wide{grid-column:span 2}
figure.chart svg{width:100%;height:auto;display:block}
figure.column-chart.drifted{border-color:#d62728;box-shadow:0 0 0 1px #d62728}
figcaption{font-size:.8rem;color:#444;margin-top:.2rem}
.bad{color:#b00;font-weight:600}.ok{color:#275}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}
td,th{border:1px solid #ddd;padding:.15rem .5rem;text-align:left}
.verdict.blessed{color:#275}.verdict.not-blessed{color:#b00}
.picker{display:flex;gap:.5rem;align-items:center;margin:.5rem 0;flex-wrap:wrap}
.picker input{min-width:16rem}.notes{color:#555}
@media (max-width:900px){figure.chart.wide{grid-column:auto}}
"""

_JS = """
(function () {
  "use strict";
  var PAGE = %d;
  var templates = Array.prototype.slice.call(
    document.querySelectorAll("#column-templates template"));
  var grid = document.getElementById("column-grid");
  var filter = document.getElementById("column-filter");
  var kind = document.getElementById("column-kind");
  var order = document.getElementById("column-sort");
  var info = document.getElementById("column-page-info");
  var prev = document.getElementById("column-prev");
  var next = document.getElementById("column-next");
  var shown = [], page = 0;
  function num(t, key) {
    var v = parseFloat(t.dataset[key]);
    return isNaN(v) ? -1 : v;
  }
  function render() {
    if (!grid) { return; }
    var pages = Math.max(1, Math.ceil(shown.length / PAGE));
    page = Math.min(Math.max(page, 0), pages - 1);
    var nodes = shown.slice(page * PAGE, (page + 1) * PAGE).map(function (t) {
      return t.content.cloneNode(true);
    });
    grid.replaceChildren.apply(grid, nodes);
    info.textContent = shown.length + " of " + templates.length + " columns, page " +
      (page + 1) + " of " + pages;
    prev.disabled = page === 0;
    next.disabled = page >= pages - 1;
  }
  function select() {
    var q = filter ? filter.value.trim().toLowerCase() : "";
    var k = kind ? kind.value : "all";
    shown = templates.filter(function (t) {
      if (q && t.dataset.name.toLowerCase().indexOf(q) < 0) { return false; }
      if (k === "drifted") { return t.dataset.verdict === "drifted"; }
      return k === "all" || t.dataset.kind === k;
    });
    if (order && order.value !== "schema") {
      var key = order.value;
      shown.sort(function (a, b) { return num(b, key) - num(a, key); });
    }
    page = 0;
    render();
  }
  if (grid) {
    filter.addEventListener("input", select);
    kind.addEventListener("change", select);
    order.addEventListener("change", select);
    prev.addEventListener("click", function () { page -= 1; render(); });
    next.addEventListener("click", function () { page += 1; render(); });
    select();
  }
  document.body.setAttribute("data-ready", "true");
})();
"""


def render_html(inputs: ReportInputs) -> str:
    """The report's page (see the module docstring)."""
    meta = inputs.meta
    title = f"shardtrain report: {inputs.model_dir or inputs.dataset_uri}"
    body = [f"<h1>{_e(title)}</h1>"]
    body.append(
        f"<p>Dataset <code>{_e(inputs.dataset_uri)}</code> ({_e(meta.data_kind)}, "
        f"{_e(fmt(meta.rows_accepted))} rows, {len(meta.schema.columns):,} columns). Made by "
        f"shardtrain {_e(__version__)} at {datetime.now(UTC).strftime('%Y-%m-%d %H:%M')} UTC."
        "</p>"
    )
    nav = ['<a href="#data">data</a>', '<a href="#columns">columns</a>']
    if inputs.model_dir:
        nav.insert(0, '<a href="#model">model</a>')
    body.append(f"<nav>{' · '.join(nav)}</nav>")
    if inputs.notes:
        body.append(
            '<ul class="notes" id="notes">'
            + "".join(f"<li>{_e(n)}</li>" for n in inputs.notes)
            + "</ul>"
        )
    if inputs.model_dir:
        body += _model_section(inputs)
    body += _data_section(inputs)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head>\n"
        "<body>\n" + "\n".join(body) + f"\n<script>{_JS % PAGE_SIZE}</script>\n</body></html>\n"
    )
