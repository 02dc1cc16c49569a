"""The HTML report's page and charts, without a browser or TensorFlow: a tiny sharded dataset, a
model directory as the trainer leaves it (metrics, blessing, TensorBoard event files written
with TensorBoard's own writer) and per-example scores given as numbers.

What a browser does with the page (no console error, every chart drawn, the column picker) is
tested in tests/integration/htmlreport/test_browser.py.
"""

from __future__ import annotations

import contextlib
import csv
import html.parser
import re
from pathlib import Path

import numpy as np
import pytest

from model_dirs import EVAL_METRICS
from shardtrain import storage
from shardtrain.data import datagen, sharding
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.htmlreport import charts, history, page
from shardtrain.htmlreport.build import make_report, write_report
from shardtrain.htmlreport.inputs import ReportInputs, gather
from shardtrain.htmlreport.sample import ScoredSample

METRICS = {
    "task": "binary",
    **EVAL_METRICS,
    "slices": {
        "difficulty": [
            {"value": "easy", "num_examples": 25, "auc": 0.9, "accuracy": 0.8},
            {"value": "(other)", "num_examples": 15, "auc": float("nan"), "accuracy": 0.7},
        ]
    },
}
BLESSING = {
    "blessed": False,
    "summary": "not blessed: auc 0.84 < 0.9",
    "thresholds": [{"threshold": "auc>=0.9", "value": 0.84, "bound": 0.9, "pass": False}],
    "candidate": {"export": "x", "metrics": {"auc": 0.84}},
    "baseline": {"uri": "/serving/1", "version": "1", "metrics": {"auc": 0.8, "accuracy": 0.7}},
}


def _shard(csv_path: str, out: str, label: str = "cleared", key: str | None = "attempt_id") -> str:
    sharding.shard(
        sharding.ShardConfig(
            sources=(csv_path,),
            output=out,
            label=label,
            key=key,
            processes=1,
            max_bad_fraction=0.05,
        )
    )
    return out


@pytest.fixture(scope="module")
def quest(tmp_path_factory) -> Path:
    """Two sharded quest logs: ``ds`` and ``shifted`` (its numbers tripled), and a model
    directory with metrics, a blessing and TensorBoard summaries."""
    base = tmp_path_factory.mktemp("report")
    datagen.generate_quest_logs(str(base / "quest.csv"), 600, seed=3, bad_fraction=0.01)
    _shard(str(base / "quest.csv"), str(base / "ds"))
    with open(base / "quest.csv", newline="") as f:
        rows = list(csv.reader(f))
    gold = rows[0].index("gold")
    with open(base / "shifted.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(rows[0])
        for row in rows[1:]:
            if len(row) == len(rows[0]):
                with contextlib.suppress(ValueError):  # a malformed value stays
                    row[gold] = str(float(row[gold]) * 3 + 500)
            out.writerow(row)
    _shard(str(base / "shifted.csv"), str(base / "shifted"))
    model = base / "model"
    storage.write_json(str(model / "eval" / "metrics.json"), METRICS)
    storage.write_json(str(model / "eval" / "blessing.json"), BLESSING)
    _events(model / "logs" / "train", {"loss": [(10, 0.7), (20, 0.6), (30, 0.5)]})
    _events(model / "logs" / "eval", {"auc": [(15, 0.7), (30, 0.84)]}, simple=True)
    return base


def _events(directory: Path, series: dict, simple: bool = False) -> None:
    """Event files as ``tf.summary.scalar`` writes them (tensor summaries; TF1's simple
    values with ``simple``), by TensorBoard's pure-Python writer."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util

    writer = EventFileWriter(str(directory))
    for tag, points in series.items():
        for step, value in points:
            if simple:
                v = summary_pb2.Summary.Value(tag=tag, simple_value=value)
            else:
                tensor = tensor_util.make_tensor_proto(np.float32(value))
                v = summary_pb2.Summary.Value(tag=tag, tensor=tensor)
            writer.add_event(event_pb2.Event(step=step, summary=summary_pb2.Summary(value=[v])))
    writer.close()


class _Ids(html.parser.HTMLParser):
    """The ids outside ``<template>`` (what a document holds before the picker clones any)."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.depth = 0

    def handle_starttag(self, tag, attrs):
        if tag == "template":
            self.depth += 1
        elif not self.depth:
            self.ids += [v for k, v in attrs if k == "id"]

    def handle_endtag(self, tag):
        if tag == "template":
            self.depth -= 1


def _ids(text: str) -> list[str]:
    parser = _Ids()
    parser.feed(text)
    return parser.ids


def test_history_reads_tensor_and_simple_value_summaries(quest):
    curves = history.read_history(str(quest / "model"))
    assert [(s, round(v, 5)) for s, v in curves["train"]["loss"]] == [
        (10, 0.7),
        (20, 0.6),
        (30, 0.5),
    ]
    assert [(s, round(v, 5)) for s, v in curves["eval"]["auc"]] == [(15, 0.7), (30, 0.84)]
    assert history.read_history(str(quest / "nowhere")) == {"train": {}, "eval": {}}


def test_history_skips_a_truncated_record():
    record = b"x" * 10
    framed = len(record).to_bytes(8, "little") + b"\0" * 4 + record + b"\0" * 4
    assert list(history._records(framed + framed[:-3])) == [record]


def test_a_classifier_report_has_every_chart_and_the_decision(quest):
    inputs = gather(
        str(quest / "ds"), model_dir=str(quest / "model"), against=str(quest / "ds"), sample_rows=0
    )
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 500)
    probs = np.clip(labels * 0.6 + rng.normal(0.2, 0.2, 500), 0, 1)
    sample = ScoredSample("binary", ("0", "1"), probs, labels, split_rows=1000)
    text = page.render_html(ReportInputs(**{**inputs.__dict__, "sample": sample}))
    ids = _ids(text)
    for chart in (
        "chart-training-curve",
        "chart-roc",
        "chart-pr",
        "chart-confusion",
        "chart-calibration",
        "chart-slice-difficulty",
        "chart-label-balance",
        "chart-rejects",
        "column-grid",
        "column-filter",
    ):
        assert chart in ids, chart
    assert len(ids) == len(set(ids)), "an id is used twice"
    assert "chart-predicted-vs-actual" not in ids
    assert "Not blessed" in text and "auc&gt;=0.9" in text
    # Against itself: every drift check holds, and every column is compared.
    assert "Data checks passed" in text
    meta = DatasetMetadata.load(str(quest / "ds"))
    charted = [
        n for n, st in meta.stats.columns.items() if st["kind"] in ("numeric", "categorical")
    ]
    templates = re.findall(r'<template data-name="([^"]+)"[^>]*data-verdict="(\w*)"', text)
    assert [n for n, _ in templates] == [
        c.name for c in meta.schema.columns if c.name in charted and not c.drop
    ]
    assert {v for _, v in templates} == {"ok"}
    # Nothing is fetched: no source or link leaves the page (xmlns names are not fetched).
    assert not re.search(r'(src|href)="(?!#|data:)', text)
    assert "<metadata>" not in text


def test_drift_is_drawn_and_flagged(quest):
    text = make_report(str(quest / "shifted"), against=str(quest / "ds"), sample_rows=0)
    assert "Data checks FAILED" in text
    verdicts = dict(re.findall(r'<template data-name="([^"]+)"[^>]*data-verdict="(\w*)"', text))
    assert verdicts["gold"] == "drifted"
    assert verdicts["player_level"] == "ok"
    gold = re.search(r'<template data-name="gold".*?</template>', text, re.S)
    assert gold is not None and "served" in gold.group(0)  # the overlay's legend


def test_a_regression_report_draws_predictions_not_roc(quest):
    meta = DatasetMetadata.load(str(quest / "ds"))
    rng = np.random.default_rng(1)
    y = rng.normal(10, 3, 400)
    sample = ScoredSample("regression", (), y + rng.normal(0, 1, 400), y, split_rows=400)
    metrics = {"task": "regression", "rmse": 1.0, "mae": 0.8, "r2": 0.9, "step": 5}
    inputs = ReportInputs(
        dataset_uri=str(quest / "ds"),
        meta=meta,
        model_dir=str(quest / "model"),
        metrics=metrics,
        history={"train": {"loss": [(1, 2.0), (2, 1.0)]}, "eval": {"rmse": [(2, 1.0)]}},
        sample=sample,
    )
    ids = _ids(page.render_html(inputs))
    assert {"chart-predicted-vs-actual", "chart-residuals", "chart-training-curve"} <= set(ids)
    assert not {"chart-roc", "chart-pr", "chart-confusion", "chart-calibration"} & set(ids)


def test_a_dataset_alone_and_missing_pieces_are_notes_not_errors(quest, tmp_path):
    out = write_report(
        str(quest / "ds"), model_dir=str(tmp_path / "empty"), output=str(tmp_path / "r.html")
    )
    text = Path(out).read_text()
    assert "no eval/metrics.json" in text and "no TensorBoard summaries" in text
    assert "per-example scores" in text  # no export to score
    alone = make_report(str(quest / "ds"), sample_rows=0)
    assert 'id="model"' not in alone and 'id="chart-label-balance"' in alone
    # The first model's serving location holds nothing yet: said so, not as an error.
    first = make_report(str(quest / "ds"), against=str(tmp_path / "serving"), sample_rows=0)
    assert f"nothing at {tmp_path / 'serving'} yet, so no drift to show" in first
    assert "neither a dataset" not in first
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "notes.txt").write_text("not a model")
    odd = make_report(str(quest / "ds"), against=str(tmp_path / "odd"), sample_rows=0)
    assert "neither a dataset (no metadata.json) nor a model" in odd


def test_charts_are_svg_with_ids_of_their_own():
    hist = {"edges": [0.0, 1.0, 2.0, 3.0], "counts": [1, 5, 9, 4, 1]}
    a = charts.numeric_histogram("x", hist, hist, chart_id="col-1")
    b = charts.numeric_histogram("x", hist, hist, chart_id="col-2")
    assert a.startswith("<svg") and "<?xml" not in a and 'width="' not in a.split(">")[0]
    ids_a, ids_b = set(re.findall(r'id="([^"]+)"', a)), set(re.findall(r'id="([^"]+)"', b))
    assert ids_a and all(i.startswith("col-1-") for i in ids_a) and not ids_a & ids_b
    for ref in re.findall(r"url\(#([^)]+)\)", a):
        assert ref in ids_a  # clip paths point into their own figure
    assert "below/above the bins: this data 5.0%/5.0%, served 5.0%/5.0%" in a


def test_a_column_name_is_escaped(tmp_path):
    path = tmp_path / "odd.csv"
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["id", "<b>x&y</b>", "label"])
        for i in range(200):
            out.writerow([i, i % 7, i % 2])
    ds = _shard(str(path), str(tmp_path / "ds"), label="label", key="id")
    text = make_report(ds, sample_rows=0)
    assert "<b>x&y</b>" not in text and "&lt;b&gt;x&amp;y&lt;/b&gt;" in text


def test_tick_labels_of_large_numbers_stay_short():
    labels = [charts._compact_format(x, 0) for x in (0.25, 5000, 20000, 160000, 2.5e6, -30000)]
    assert labels == ["0.25", "5000", "20k", "160k", "2.5M", "-30k"]


def _tick_labels(svg: str) -> list[str]:
    """The x-axis tick labels of a chart (text is kept as <text> in our SVG)."""
    return re.findall(r"<text[^>]*>\s*([-\d.,]+\s*%)\s*</text>", svg)


def test_a_key_columns_tiny_shares_get_distinct_tick_labels():
    """A column of ids: each value holds a few hundredths of a percent of the rows. The axis
    once read 0.0% 0.0% 0.0% 0.0%; its ticks must say which share is which."""
    top = [{"value": f"p{i}", "count": 3 + i % 2} for i in range(10)]
    labels = _tick_labels(charts.top_values("player_id", top, 10_000, chart_id="col-0"))
    assert len(labels) >= 3, labels
    assert len(set(labels)) == len(labels), labels


def test_a_bool_column_is_drawn_as_the_shares_of_true_and_false(tmp_path):
    """Its statistics are numeric (the mean of 0/1); drawn as a histogram its bins spanned
    0-2. It is drawn as two bars, true and false, with their shares."""
    path = tmp_path / "flags.csv"
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["id", "weekend", "label"])
        for i in range(400):
            out.writerow([i, "true" if i % 4 == 0 else "false", i % 2])
    ds = _shard(str(path), str(tmp_path / "ds"), label="label", key="id")
    assert DatasetMetadata.load(ds).schema.column("weekend").type == "bool"
    text = make_report(ds, sample_rows=0)
    charts_drawn = re.findall(r"<svg.*?</svg>", text, re.S)
    chart = next(c for c in charts_drawn if re.search(r"<text[^>]*>\s*weekend\s*</text>", c))
    values = re.findall(r"<text[^>]*>\s*(true|false)\s*</text>", chart)
    assert sorted(values) == ["false", "true"], chart[:2000]
    assert "density" not in chart  # not a histogram
