"""The report's charts: matplotlib figures drawn as inline SVG, from plain numbers.

Every function takes the figures a report holds (a histogram's edges and counts, a ROC curve's
points, a confusion matrix...) and returns one ``<svg>`` element as text, ready to be placed in
an HTML page. No storage, no TensorFlow: tested on plain values.

Why matplotlib and SVG: the report must open on an air-gapped cluster and from a laptop's
disk, so nothing may be fetched (no CDN, no JavaScript charting library to inline); SVG is
drawn by any browser, scales, and keeps text as text (``svg.fonttype: none``: a histogram is
a few kilobytes, so 500 columns stay a few megabytes). Figures are built with
:class:`matplotlib.figure.Figure` (no pyplot: no global state, no GUI backend).

Each SVG's ids are prefixed with the chart's own id (:func:`to_svg`), so that many figures in
one document never share an id (a clip path found in another figure would cut this one).
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator, PercentFormatter

#: Colours: this dataset or model, and the served model's (its training data).
NEW, SERVED = "#1f77b4", "#ff7f0e"
#: Sizes in inches: a column's chart, a model chart.
SMALL, WIDE = (4.2, 2.5), (5.6, 3.6)

_RC: dict[Any, Any] = {
    "svg.fonttype": "none",  # text as <text>: small files, selectable labels
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.fontsize": 7,
    "legend.frameon": False,
}
_ID = re.compile(r'\bid="([^"]+)"')


def figure(size: tuple[float, float] = SMALL, *, fixed: bool = False) -> Figure:
    """A new figure with the report's style (apply :func:`to_svg` to draw it).

    ``fixed``: margins set once instead of by constrained layout, which measures every
    label and costs about half of a small chart's time -- for the charts drawn once per
    column (500 columns: 500 charts)."""
    with rc_context(_RC):
        if not fixed:
            return Figure(figsize=size, layout="constrained")
        fig = Figure(figsize=size)
        fig.subplots_adjust(left=0.08, right=0.97, bottom=0.2, top=0.8)
        return fig


def to_svg(fig: Figure, chart_id: str) -> str:
    """The figure as one ``<svg>`` element, its ids prefixed with ``chart_id`` (unique in the
    page) and no XML prolog, sized by its ``viewBox`` (it shrinks with the page)."""
    buf = io.StringIO()
    with rc_context({**_RC, "svg.hashsalt": chart_id}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    # The RDF metadata block says only "made by matplotlib" (in bytes on every chart).
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, count=1, flags=re.S)
    text = re.sub(r' xmlns:(?:dc|cc|rdf)="[^"]*"', "", text)
    ids = set(_ID.findall(text))
    if ids:
        text = re.sub(
            r'(\bid="|url\(#|href="#)([^")]+)',
            lambda m: f"{m.group(1)}{chart_id}-{m.group(2)}" if m.group(2) in ids else m.group(0),
            text,
        )
    # Responsive: drop the fixed size in points, keep the viewBox.
    text = re.sub(r'^<svg([^>]*?) width="[^"]+" height="[^"]+"', r"<svg\1", text, count=1)
    return text.strip()


def _note(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_axis_off()


# --------------------------------------------------------------------------------------------
# The data
# --------------------------------------------------------------------------------------------


def _density(hist: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, float, float]:
    """A histogram's inner edges, its share per unit of width in each inner bin, and the
    shares below the first edge and at or above the last (``metadata.json``'s layout)."""
    edges = np.asarray(hist["edges"], dtype=np.float64)
    counts = np.asarray(hist["counts"], dtype=np.float64)
    total = counts.sum() or 1.0
    widths = np.diff(edges)
    density = counts[1:-1] / total / np.where(widths > 0, widths, 1.0)
    return edges, density, counts[0] / total, counts[-1] / total


def numeric_histogram(
    name: str,
    hist: Mapping[str, Any] | None,
    served: Mapping[str, Any] | None = None,
    *,
    chart_id: str,
    title: str | None = None,
) -> str:
    """A numeric column's distribution (share per unit, so two datasets binned differently
    compare), overlaid with the served model's training data when given; the shares beyond
    the outer edges are written under the axis."""
    fig = figure(fixed=True)
    ax = fig.add_subplot()
    ax.set_title(title or name, loc="left")
    if not hist or not sum(hist.get("counts") or ()):
        _note(ax, "no histogram (no finite values, or sharded before histograms)")
        return to_svg(fig, chart_id)
    beyond = []
    sides = ((hist, NEW, "this data", True), (served, SERVED, "served", False))
    for h, colour, label, filled in sides:
        if not h or not sum(h.get("counts") or ()):
            continue
        edges, density, below, above = _density(h)
        if below or above:
            beyond.append(f"{label} {below:.1%}/{above:.1%}")
        ax.stairs(
            density,
            edges,
            fill=filled,
            alpha=0.45 if filled else 1.0,
            color=colour,
            linewidth=1.4,
            label=label,
        )
    # Density (share per unit of the column): comparable across bin widths; its scale says
    # little, the shape says it all.
    ax.set_ylabel("density")
    ax.tick_params(labelleft=False)
    ax.xaxis.set_major_locator(MaxNLocator(6))
    ax.xaxis.set_major_formatter(_compact)
    if beyond:  # the outer bins: values beyond the planning sample's range
        ax.set_xlabel("below/above the bins: " + ", ".join(beyond), fontsize=7, color="0.35")
    fig.legend(loc="upper right", ncols=2)
    return to_svg(fig, chart_id)


def top_values(
    name: str,
    top: Sequence[Mapping[str, Any]],
    total: int,
    served: Sequence[Mapping[str, Any]] | None = None,
    served_total: int = 0,
    *,
    chart_id: str,
    title: str | None = None,
    limit: int = 10,
) -> str:
    """A categorical column's most frequent values as horizontal bars of their share of the
    non-missing rows, beside the served model's training data's share of the same values."""
    shown = [str(t["value"]) for t in top[:limit]]
    ticks = [v if len(v) <= 24 else v[:23] + "…" for v in shown]
    height = max(1.6, 0.9 + 0.2 * len(shown))
    fig = figure((SMALL[0], height), fixed=True)
    # Margins in inches (the labels' length, the title and legend above, the axis below).
    left = 0.3 + 0.075 * max((len(t) for t in ticks), default=1)
    fig.subplots_adjust(
        left=min(left / SMALL[0], 0.5), right=0.97, bottom=0.5 / height, top=1 - 0.42 / height
    )
    ax = fig.add_subplot()
    ax.set_title(title or name, loc="left")
    if not shown or total <= 0:
        _note(ax, "no values")
        return to_svg(fig, chart_id)
    y = np.arange(len(shown))
    new = [int(t["count"]) / total for t in top[:limit]]
    bar = 0.4 if served else 0.8
    ax.barh(y - (bar / 2 if served else 0), new, bar, color=NEW, label="this data")
    if served and served_total > 0:
        counts = {str(t["value"]): int(t["count"]) for t in served}
        old = [counts.get(v, 0) / served_total for v in shown]
        ax.barh(y + bar / 2, old, bar, color=SERVED, label="served")
        fig.legend(loc="upper right", ncols=2)
    ax.set_yticks(y, ticks)
    ax.invert_yaxis()
    ax.xaxis.set_major_formatter(_percent)
    ax.xaxis.set_major_locator(MaxNLocator(5))
    ax.set_xlabel("share of non-missing rows")
    return to_svg(fig, chart_id)


#: Shares as percentages with as many decimals as the axis's range needs (a key column's
#: values each hold 0.01 % of the rows: ticks 0.00 %, 0.01 %, 0.02 %, not 0.0 % five times).
_percent = PercentFormatter(1.0, decimals=None)


def _compact_format(x: float, _pos: int) -> str:
    """Tick labels that fit: 20k, 1.5M (a column of large numbers has long ticks)."""
    for scale, unit, start in ((1e9, "G", 1e9), (1e6, "M", 1e6), (1e3, "k", 1e4)):
        if abs(x) >= start:
            return f"{x / scale:g}{unit}"
    return f"{x:g}"


_compact = FuncFormatter(_compact_format)


def class_balance(
    counts: Mapping[str, int],
    served: Mapping[str, int] | None = None,
    *,
    chart_id: str,
    title: str = "label balance",
) -> str:
    """The label's classes as bars of their share of the rows, beside the served model's."""
    total = sum(counts.values())
    top = [{"value": k, "count": v} for k, v in counts.items()]
    old = [{"value": k, "count": v} for k, v in (served or {}).items()]
    return top_values(
        title,
        top,
        total,
        old or None,
        sum((served or {}).values()),
        chart_id=chart_id,
        title=title,
        limit=30,
    )


def bars(
    values: Mapping[str, float],
    *,
    chart_id: str,
    title: str,
    xlabel: str,
) -> str:
    """Horizontal bars of named counts (the rejected rows by reason)."""
    fig = figure((SMALL[0], max(1.6, 0.8 + 0.25 * len(values))))
    ax = fig.add_subplot()
    ax.set_title(title, loc="left")
    if not values:
        _note(ax, "none")
        return to_svg(fig, chart_id)
    names = list(values)
    y = np.arange(len(names))
    ax.barh(y, [values[n] for n in names], color=NEW)
    for i, n in enumerate(names):
        ax.annotate(f" {values[n]:,.0f}", (values[n], i), va="center", fontsize=7)
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    return to_svg(fig, chart_id)


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------


def roc_curve(roc: Mapping[str, Sequence[float]], auc: float | None, *, chart_id: str) -> str:
    """The ROC curve (false against true positive rate) with its AUC and the chance line."""
    fig = figure(WIDE)
    ax = fig.add_subplot()
    auc_text = f"AUC {auc:.4f}" if auc is not None and math.isfinite(auc) else "AUC n/a"
    ax.plot(roc["fpr"], roc["tpr"], color=NEW, linewidth=1.8, label=f"model ({auc_text})")
    ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1, label="chance")
    ax.set(xlim=(0, 1), ylim=(0, 1.01), xlabel="false positive rate", ylabel="true positive rate")
    ax.set_title("ROC curve", loc="left")
    ax.legend(loc="lower right")
    return to_svg(fig, chart_id)


def precision_recall(
    roc: Mapping[str, Sequence[float]], positives: int, negatives: int, *, chart_id: str
) -> str:
    """The precision-recall curve, from the ROC points and the class counts of the same
    examples (at each threshold: TP = tpr * P, FP = fpr * N), and the positives' share as the
    line of a model that guesses."""
    fig = figure(WIDE)
    ax = fig.add_subplot()
    tpr = np.asarray(roc["tpr"], dtype=np.float64)
    fpr = np.asarray(roc["fpr"], dtype=np.float64)
    tp, fp = tpr * positives, fpr * negatives
    keep = (tp + fp) > 0
    precision = tp[keep] / (tp[keep] + fp[keep])
    recall = tpr[keep]
    ap = float(np.sum(np.diff(np.concatenate([[0.0], recall])) * precision)) if keep.any() else 0
    ax.plot(recall, precision, color=NEW, linewidth=1.8, label=f"model (AP ~{ap:.3f})")
    base = positives / max(positives + negatives, 1)
    ax.axhline(base, color="0.6", linestyle="--", linewidth=1, label=f"guessing ({base:.1%})")
    ax.set(xlim=(0, 1), ylim=(0, 1.01), xlabel="recall", ylabel="precision")
    ax.set_title("Precision-recall curve", loc="left")
    ax.legend(loc="lower left")
    return to_svg(fig, chart_id)


def confusion_heatmap(
    labels: Sequence[str], matrix: Sequence[Sequence[int]], *, chart_id: str
) -> str:
    """The confusion matrix as a heat map of each true class's shares (rows sum to 1), each
    cell with its count."""
    m = np.asarray(matrix, dtype=np.float64)
    shares = m / np.maximum(m.sum(axis=1, keepdims=True), 1)
    k = len(labels)
    side = min(2.8 + 0.35 * k, 8.0)
    fig = figure((side + 1.2, side))
    ax = fig.add_subplot()
    ax.grid(False)
    image = ax.imshow(shares, cmap="Blues", vmin=0, vmax=1)
    if k <= 20:
        for i in range(k):
            for j in range(k):
                colour = "white" if shares[i, j] > 0.6 else "black"
                ax.text(j, i, f"{int(m[i, j]):,}", ha="center", va="center", color=colour)
    ticks = [str(c) if len(str(c)) <= 12 else str(c)[:11] + "…" for c in labels]
    ax.set_xticks(range(k), ticks, rotation=45 if k > 4 else 0)
    ax.set_yticks(range(k), ticks)
    ax.set(xlabel="predicted class", ylabel="true class")
    ax.set_title("Confusion matrix", loc="left")
    fig.colorbar(image, ax=ax, shrink=0.8)
    return to_svg(fig, chart_id)


def calibration(
    predicted: np.ndarray, observed: np.ndarray, *, chart_id: str, bins: int = 10
) -> str:
    """The calibration (reliability) curve: in each bin of the predicted probability, the
    share of examples that are positive against their mean prediction; the diagonal is
    perfect calibration. Under it, how many examples each bin holds."""
    p = np.asarray(predicted, dtype=np.float64)
    y = np.asarray(observed, dtype=np.float64)
    fig = figure(WIDE)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1))
    top.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1, label="perfect")
    index = np.minimum((np.clip(p, 0, 1) * bins).astype(np.int64), bins - 1)
    n = np.bincount(index, minlength=bins)
    mean_p = np.bincount(index, weights=p, minlength=bins) / np.maximum(n, 1)
    frac = np.bincount(index, weights=y, minlength=bins) / np.maximum(n, 1)
    filled = n > 0
    top.plot(mean_p[filled], frac[filled], marker="o", color=NEW, linewidth=1.6, label="model")
    top.set(ylim=(0, 1.01), ylabel="observed share positive")
    top.set_title(f"Calibration ({len(p):,} eval examples)", loc="left")
    top.legend(loc="upper left")
    bottom.bar((np.arange(bins) + 0.5) / bins, n, width=0.9 / bins, color=NEW, alpha=0.6)
    bottom.set(xlim=(0, 1), xlabel="predicted probability", ylabel="examples")
    return to_svg(fig, chart_id)


def predicted_vs_actual(predicted: np.ndarray, actual: np.ndarray, *, chart_id: str) -> str:
    """A regression's predictions against the labels, with the line of perfect prediction
    (a hexbin density past a few thousand points, where dots would hide each other)."""
    p = np.asarray(predicted, dtype=np.float64)
    y = np.asarray(actual, dtype=np.float64)
    fig = figure(WIDE)
    ax = fig.add_subplot()
    if len(p) > 3000:
        art = ax.hexbin(y, p, gridsize=45, mincnt=1, cmap="Blues", bins="log")
        fig.colorbar(art, ax=ax, label="examples")
    else:
        ax.scatter(y, p, s=5, alpha=0.5, color=NEW, linewidths=0)
    if len(p):
        lo, hi = float(min(y.min(), p.min())), float(max(y.max(), p.max()))
        ax.plot([lo, hi], [lo, hi], color="0.4", linestyle="--", linewidth=1, label="perfect")
        ax.legend(loc="upper left")
    ax.set(xlabel="actual (label)", ylabel="predicted")
    ax.set_title(f"Predicted against actual ({len(p):,} eval examples)", loc="left")
    return to_svg(fig, chart_id)


def residuals(predicted: np.ndarray, actual: np.ndarray, *, chart_id: str) -> str:
    """A regression's residuals (prediction minus label): against the prediction (a trend
    is a bias the model missed) and their distribution."""
    p = np.asarray(predicted, dtype=np.float64)
    r = p - np.asarray(actual, dtype=np.float64)
    fig = figure((WIDE[0] + 1.4, WIDE[1]))
    left, right = fig.subplots(1, 2, width_ratios=(3, 2))
    if len(p) > 3000:
        left.hexbin(p, r, gridsize=45, mincnt=1, cmap="Blues", bins="log")
    else:
        left.scatter(p, r, s=5, alpha=0.5, color=NEW, linewidths=0)
    left.axhline(0, color="0.4", linestyle="--", linewidth=1)
    left.set(xlabel="predicted", ylabel="residual (predicted - actual)")
    left.set_title("Residuals", loc="left")
    if len(r):
        right.hist(r, bins=40, color=NEW, alpha=0.7, orientation="horizontal")
        right.axhline(float(r.mean()), color=SERVED, linewidth=1.2, label=f"mean {r.mean():.3g}")
        right.legend(loc="upper right")
    right.set(xlabel="examples")
    return to_svg(fig, chart_id)


def slice_metric(
    column: str,
    rows: Sequence[Mapping[str, Any]],
    metric: str,
    overall: float | None,
    *,
    chart_id: str,
) -> str:
    """One metric per slice of a column as bars, each labelled with its examples; the
    whole eval split's value as a line."""
    fig = figure((WIDE[0], max(1.8, 0.9 + 0.28 * len(rows))))
    ax = fig.add_subplot()
    names = [str(r["value"]) for r in rows]
    values = [float(r.get(metric, math.nan)) for r in rows]
    y = np.arange(len(rows))
    ax.barh(y, np.nan_to_num(values), color=NEW)
    for i, (v, r) in enumerate(zip(values, rows, strict=True)):
        shown = f"{v:.3f}" if math.isfinite(v) else "n/a"
        ax.annotate(
            f" {shown} (n={int(r.get('num_examples') or 0):,})",
            (0 if not math.isfinite(v) else v, i),
            va="center",
            fontsize=7,
        )
    if overall is not None and math.isfinite(overall):
        ax.axvline(
            overall, color=SERVED, linestyle="--", linewidth=1.2, label=f"all: {overall:.3f}"
        )
        fig.legend(loc="outside upper right")
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.set_xlabel(metric)
    finite = [v for v in values if math.isfinite(v)]
    if finite:
        ax.set_xlim(0, max(finite) * 1.35)
    ax.set_title(f"{metric} by {column}", loc="left")
    return to_svg(fig, chart_id)


def training_curve(
    history: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]],
    *,
    loss: tuple[str, str],
    metric: str,
    chart_id: str,
) -> str:
    """The loss by step and the eval metric by step, from the run's TensorBoard summaries
    (``history[run][tag]``: ``(step, value)``). ``loss`` names the loss in the ``train`` and
    the ``eval`` run (a classifier's eval ``log_loss`` is its training loss on eval rows);
    the metric is drawn for both runs where both log it (a regression's ``rmse``)."""
    fig = figure((WIDE[0] + 1.6, WIDE[1]))
    left, right = fig.subplots(1, 2)
    for ax, tags, name in ((left, loss, "loss"), (right, (metric, metric), metric)):
        drawn = False
        for run, tag, colour in (("train", tags[0], NEW), ("eval", tags[1], SERVED)):
            points = (history.get(run) or {}).get(tag) or ()
            if points:
                steps, values = zip(*points, strict=True)
                # Markers where points are few (a short run logs a handful; one is no line).
                marker = "o" if run == "eval" or len(points) < 30 else None
                ax.plot(steps, values, color=colour, marker=marker, markersize=3, linewidth=1.4,
                        label=f"{run} {tag}")  # fmt: skip
                drawn = True
        if drawn:
            ax.legend(loc="best")
            ax.set(xlabel="step", ylabel=name)
            ax.set_title("Loss" if name == "loss" else f"{name} by step", loc="left")
        else:
            _note(ax, f"no {name} summaries")
    return to_svg(fig, chart_id)
