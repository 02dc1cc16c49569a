"""The evaluate step's HTML report: the ``dsl.HTML`` output, its copy in ``MODEL_DIR/eval`` and
the Markdown report's link to it; a report that cannot be made never fails the step.

The model directory is as the trainer leaves it but with a fake SavedModel (files, not a
model), so the per-example pictures are a note; the real thing runs in
tests/integration/htmlreport/test_browser.py.
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
from kfp import dsl

from model_dirs import EVAL_METRICS, EXPORT_VERSION, tiny_quest_dataset
from shardtrain import storage
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.kubeflow import pointers, steps

METRICS = EVAL_METRICS
VERSION = EXPORT_VERSION


@pytest.fixture(scope="module")
def dataset_uri(tmp_path_factory) -> str:
    return tiny_quest_dataset(tmp_path_factory.mktemp("tiny"))


def _artifact(kind, root: Path, name: str):
    return kind(name=name, uri=str(root / "artifacts" / name), metadata={})


def _run(root: Path, dataset_uri: str, **kwargs) -> tuple[str, dict]:
    model_dir = str(root / "model")
    storage.write_bytes(f"{model_dir}/export/{VERSION}/saved_model.pb", b"graph")
    storage.write_json(f"{model_dir}/export/latest.json", {"path": f"export/{VERSION}"})
    plan = DatasetMetadata.load(dataset_uri).plan  # the trainer's metrics are of this data
    storage.write_json(f"{model_dir}/eval/metrics.json", {**METRICS, "data_plan": plan})
    dataset = _artifact(dsl.Dataset, root, "dataset")
    pointers.write_pointer(dataset, dataset_uri)
    model = _artifact(dsl.Model, root, "model")
    pointers.write_pointer(model, model_dir, export=f"{model_dir}/export/{VERSION}", step=300)
    outputs = {
        "metrics": _artifact(dsl.Metrics, root, "metrics"),
        "classification": _artifact(dsl.ClassificationMetrics, root, "classification"),
        "sliced": _artifact(dsl.SlicedClassificationMetrics, root, "sliced"),
        "report": _artifact(dsl.Markdown, root, "report"),
        "html_report": _artifact(dsl.HTML, root, "html_report"),
    }
    assert steps.evaluate_step(dataset=dataset, model=model, **outputs, **kwargs) is True
    return model_dir, outputs


def test_the_step_writes_the_html_report_and_the_markdown_links_it(tmp_path, dataset_uri):
    model_dir, outputs = _run(tmp_path, dataset_uri, serving_uri=str(tmp_path / "serving"))
    page = Path(outputs["html_report"].path).read_text()
    assert page.startswith("<!DOCTYPE html>")
    for chart in ("chart-roc", "chart-pr", "chart-confusion", "chart-label-balance"):
        assert f'id="{chart}"' in page
    copy = Path(model_dir, "eval", "report.html")
    assert copy.read_text() == page
    markdown = Path(outputs["report"].path).read_text()
    assert f"[`{copy}`]({copy})" in markdown and f"* HTML report: `{copy}`" in markdown
    assert "| auc | 0.84 |" in markdown  # the tables stay


def test_a_report_that_cannot_be_made_is_a_page_saying_why(tmp_path, dataset_uri):
    boom = mock.patch(
        "shardtrain.htmlreport.build.make_report", side_effect=RuntimeError("no fonts\nat all")
    )
    with boom:
        model_dir, outputs = _run(tmp_path, dataset_uri)
    page = Path(outputs["html_report"].path).read_text()
    assert "could not be made: no fonts at all" in page
    assert not Path(model_dir, "eval", "report.html").exists()
    assert "HTML report" not in Path(outputs["report"].path).read_text()
