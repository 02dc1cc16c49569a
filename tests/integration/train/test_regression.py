"""Regression labels end to end: shard, train, evaluate, export and serve raw rows.

Two datasets: generated linear data with a known noise level (so the best possible RMSE is
known: the noise's standard deviation), and a real file, vega_datasets' Seattle weather
(predict the day's maximum temperature). Every training run goes through the ``shardtrain``
command as a TFJob's pods run it, with ``TF_DETERMINISTIC_OPS=1``; the exported SavedModel is
loaded here and scores rows of the source CSV through both signatures.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from helpers import DETERMINISTIC_TF, run_cli
from shardtrain import storage
from shardtrain.data import sharding
from shardtrain.data.metadata import DatasetMetadata

pytestmark = [pytest.mark.slow]

ROWS = 6000
#: The label's noise (standard deviation) around its exact linear function: no model can
#: get an RMSE below it; the label's own spread is ~8 times larger.
NOISE = 1.0
#: The label is far from zero: the model must learn the standardised target.
OFFSET = 1000.0
GRADE = {"low": -6.0, "mid": 0.0, "high": 6.0}
TRAIN = ("--train-steps", "400", "--batch-size", "128", "--checkpoint-every", "200")


def _truth(x1: float, x2: float, x3: float, grade: str) -> float:
    return OFFSET + 5.0 * x1 - 3.0 * x2 + 2.0 * x3 + GRADE[grade]


@pytest.fixture(scope="module")
def linear_csv(tmp_path_factory) -> Path:
    """id, three numbers, a category, an int column and the label ``y`` (float)."""
    rng = np.random.default_rng(27)
    path = tmp_path_factory.mktemp("linear") / "linear.csv"
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["id", "x1", "x2", "x3", "grade", "visits", "stars", "y"])
        for i in range(ROWS):
            x1, x2, x3 = (round(float(v), 4) for v in rng.normal(0.0, 1.0, 3))
            grade = str(rng.choice(list(GRADE)))
            y = _truth(x1, x2, x3, grade) + rng.normal(0.0, NOISE)
            stars = int(np.clip(round(3 + x1), 1, 5))  # a small int label: classes by auto
            out.writerow([f"r{i:05d}", x1, x2, x3, grade, int(rng.integers(0, 9)), stars, y])
    return path


def _shard(source: Path, out: str, label: str, key: str | None = "id") -> DatasetMetadata:
    config = sharding.ShardConfig(sources=(str(source),), output=out, label=label, key=key)
    return sharding.shard(config).metadata


@pytest.fixture(scope="module")
def linear_model(linear_csv, tmp_path_factory) -> tuple[str, str]:
    """The linear data sharded (label ``y``) and trained: ``(dataset, model dir)``."""
    root = tmp_path_factory.mktemp("linear-run")
    data, model_dir = str(root / "ds"), str(root / "model")
    meta = _shard(linear_csv, data, "y")
    assert meta.label_info.task == "regression" and meta.label_info.classes == ()
    label = meta.stats.label  # too many values to count: the moments only
    assert label["many_values"] and label["counts"] == {} and label["numeric"]["count"] == ROWS
    train = ("train", "--data", data, "--model-dir", model_dir, "--exclude", "stars", *TRAIN)
    proc = run_cli(*train, env=DETERMINISTIC_TF)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "label 'y': regression" in proc.stderr
    return data, model_dir


def _metrics(model_dir: str) -> dict:
    return storage.read_json(storage.join(model_dir, "eval", "metrics.json"))


def _rows(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    return lines[1:], [r for r in csv.reader(lines[1:])]


def _load_export(model_dir: str):
    import tensorflow as tf

    pointer = storage.read_json(storage.join(model_dir, "export", "latest.json"))
    return tf.saved_model.load(storage.join(model_dir, pointer["path"]))


def _serve_columns(model, header: list[str], rows: list[list[str]]):
    """``serving_default`` with one tensor per feature column, from CSV fields."""
    import tensorflow as tf

    fn = model.signatures["serving_default"]
    inputs = {}
    for name, spec in fn.structured_input_signature[1].items():
        values = [r[header.index(name)] for r in rows]
        if spec.dtype == tf.string:
            inputs[name] = tf.constant(values)
        else:
            inputs[name] = tf.constant([float(v) if v else math.nan for v in values], tf.float32)
    return fn(**inputs)


def test_a_float_label_trains_a_regression_exports_and_serves_values(linear_model, linear_csv):
    """RMSE near the noise (bars measured: see the asserts), R² near 1; the export's two
    signatures return values in the label's units, equal to the evaluator's predictions."""
    import tensorflow as tf

    _, model_dir = linear_model
    m = _metrics(model_dir)
    assert m["task"] == "regression" and m["step"] == 400
    assert set(m) >= {"rmse", "mae", "r2", "mean_error", "label_std", "num_examples"}
    assert "auc" not in m and "confusion_matrix" not in m
    # Measured on this data and seed: RMSE 1.059 (the noise: 1.0), R² 0.981.
    assert m["rmse"] < 1.5 * NOISE and m["r2"] > 0.95, m
    assert m["rmse"] < 0.2 * m["label_std"]
    assert m["mae"] <= m["rmse"] and abs(m["mean_error"]) < 1.0
    assert m["label_mean"] == pytest.approx(OFFSET, abs=1.0)
    # TensorBoard: training RMSE and the eval metrics.
    events = storage.walk_files(storage.join(model_dir, "logs", "eval"))
    assert events and storage.walk_files(storage.join(model_dir, "logs", "train"))

    samples = [
        json.loads(line)
        for line in storage.read_text(
            storage.join(model_dir, "eval", "sample_predictions.jsonl")
        ).splitlines()
    ]
    # The first eval shard's rows (at most 200).
    assert len(samples) >= 50 and set(samples[0]) == {"key", "label", "prediction"}
    want = {s["key"]: s["prediction"] for s in samples}

    model = _load_export(model_dir)
    header = ["id", "x1", "x2", "x3", "grade", "visits", "stars", "y"]
    lines, rows = _rows(linear_csv)
    picked = [i for i, r in enumerate(rows) if r[0] in want]
    assert len(picked) == len(samples)
    out = model.signatures["predict_csv"](lines=tf.constant([lines[i] for i in picked]))
    assert set(out) == {"predictions"}  # a regression's one output, in the label's units
    from_csv = out["predictions"].numpy()
    expected = np.array([want[rows[i][0]] for i in picked])
    np.testing.assert_allclose(from_csv, expected, rtol=1e-5)
    truth = np.array([_truth(*(float(rows[i][c]) for c in (1, 2, 3)), rows[i][4]) for i in picked])
    assert np.sqrt(np.mean((from_csv - truth) ** 2)) < 1.5 * NOISE  # close to the truth
    by_column = _serve_columns(model, header, [rows[i] for i in picked])
    np.testing.assert_allclose(by_column["predictions"].numpy(), from_csv, rtol=1e-6)


def test_a_chief_and_a_worker_train_the_same_regression(linear_model, tmp_path):
    """MultiWorkerMirroredStrategy: the per-example loss over the global batch and the
    squared errors summed over replicas; the model learns as well as in one process."""
    data, _ = linear_model
    model_dir = str(tmp_path / "model")
    command = (
        "run-local", "--workers", "1", "--timeout", "600", "--grace", "60", "--",
        "train", "--data", data, "--model-dir", model_dir, "--exclude", "stars", *TRAIN,
    )  # fmt: skip
    proc = run_cli(*command, env=DETERMINISTIC_TF, timeout=900)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    assert "2 replica(s) in sync" in text
    m = _metrics(model_dir)
    # Measured: RMSE 1.053, R² 0.981 (one process: 1.059, 0.981).
    assert m["task"] == "regression" and m["rmse"] < 1.5 * NOISE and m["r2"] > 0.95, m


def test_the_evaluate_step_blesses_a_regression_by_rmse(linear_model, tmp_path):
    """The pipeline's evaluate step on the trained model: the UI's scalars; rmse thresholds,
    absolute and against a served copy of the same model scored through its signature."""
    from kfp import dsl

    from shardtrain.kubeflow import pointers, steps
    from shardtrain.train.export import latest_export

    data, model_dir = linear_model
    rmse = _metrics(model_dir)["rmse"]

    def artifact(kind, name):
        return kind(name=name, uri=str(tmp_path / name), metadata={})

    dataset, model = artifact(dsl.Dataset, "dataset"), artifact(dsl.Model, "model")
    pointers.write_pointer(dataset, data)
    pointers.write_pointer(model, model_dir, export=f"{model_dir}/export", step=400)
    outputs = dict(
        metrics=artifact(dsl.Metrics, "metrics"),
        classification=artifact(dsl.ClassificationMetrics, "classification"),
        sliced=artifact(dsl.SlicedClassificationMetrics, "sliced"),
        report=artifact(dsl.Markdown, "report"),
    )
    assert steps.evaluate_step(
        dataset=dataset, model=model, **outputs, thresholds=f"rmse<={rmse * 1.5}"
    )
    shown = outputs["metrics"].metadata
    assert shown["rmse"] == rmse and {"mae", "r2", "num_examples", "step"} <= set(shown)
    assert outputs["classification"].metadata == {}
    report = Path(outputs["report"].path).read_text()
    assert "| rmse |" in report and "Label `y` (regression, float)" in report
    assert not steps.evaluate_step(
        dataset=dataset, model=model, **outputs, thresholds=f"rmse<={rmse / 2}"
    )

    # The same weights served from another export: scored through serving_default on the
    # same rows, the same RMSE (so rmse<=baseline holds, rmse<baseline does not).
    copy = tmp_path / "copy" / "1"
    shutil.copytree(latest_export(model_dir)["uri"], copy)
    serving = tmp_path / "serving"
    steps.publish_export(str(copy), str(serving))
    thresholds = "rmse<=baseline,r2>=baseline-0.001,rmse<baseline"
    blessed = steps.evaluate_step(
        dataset=dataset, model=model, **outputs, serving_uri=str(serving), thresholds=thresholds
    )
    blessing = json.loads(Path(model_dir, "eval", "blessing.json").read_text())
    assert not blessed and [t["pass"] for t in blessing["thresholds"]] == [True, True, False]
    cand, base = blessing["candidate"]["metrics"], blessing["baseline"]["metrics"]
    assert cand["rmse"] == pytest.approx(base["rmse"]) and cand["rmse"] == pytest.approx(
        rmse, rel=1e-4
    )
    assert outputs["metrics"].metadata["baseline_rmse"] == pytest.approx(rmse, rel=1e-4)


def test_task_regression_on_an_int_label(linear_csv, tmp_path):
    """``stars`` (1-5) is classes by the auto rule; ``--task regression`` predicts it."""
    data, model_dir = str(tmp_path / "ds"), str(tmp_path / "model")
    meta = _shard(linear_csv, data, "stars")
    assert meta.label_info.task == "multiclass" and meta.label_info.classes == tuple("12345")
    train = ("train", "--data", data, "--model-dir", model_dir, "--task", "regression")
    proc = run_cli(*train, "--exclude", "y", *TRAIN, env=DETERMINISTIC_TF)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    m = _metrics(model_dir)
    # stars = round(3 + x1) clipped to 1-5: x1 is a feature. Measured: RMSE 0.30, R² 0.91.
    assert m["task"] == "regression" and m["r2"] > 0.8 and m["rmse"] < 0.5, m
    out = _serve_columns(_load_export(model_dir), *_header_and_rows(linear_csv, 20))
    assert set(out) == {"predictions"} and out["predictions"].shape == (20,)


def _header_and_rows(path: Path, n: int) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1 : n + 1]


def test_task_binary_on_a_float_label_is_one_clear_line(linear_model, tmp_path):
    data, _ = linear_model
    proc = run_cli("train", "--data", data, "--model-dir", str(tmp_path / "m"), "--task", "binary")
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (
        f"error: {data}: label 'y' (float, more than 1,000 distinct values) cannot be binary "
        "classes (at most 1,000); use --task regression or auto"
    ), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def test_a_real_file_seattle_weather(tmp_path):
    """vega_datasets' seattle-weather.csv (1,461 days): the day's maximum temperature from
    its minimum, precipitation, wind and the weather's name (the date is left out)."""
    import tensorflow as tf
    import vega_datasets

    source = Path(vega_datasets.__file__).parent / "_data" / "seattle-weather.csv"
    data, model_dir = str(tmp_path / "ds"), str(tmp_path / "model")
    meta = _shard(source, data, "temp_max", key=None)
    assert meta.label_info.task == "regression" and meta.rows_accepted == 1461
    train = ("train", "--data", data, "--model-dir", model_dir, "--exclude", "date")
    proc = run_cli(*train, "--train-steps", "600", "--batch-size", "64", env=DETERMINISTIC_TF)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    m = _metrics(model_dir)
    # Measured: RMSE 2.76 °C against a spread of 6.59 °C, R² 0.824 (139 eval days).
    assert m["task"] == "regression" and m["r2"] > 0.7 and m["rmse"] < 0.55 * m["label_std"], m
    model = _load_export(model_dir)
    with open(source, newline="") as f:
        lines = f.read().splitlines()
    header, rows = lines[0].split(","), list(csv.reader(lines[1:]))
    out = model.signatures["predict_csv"](lines=tf.constant(lines[1:]))
    predictions = out["predictions"].numpy()
    truth = np.array([float(r[header.index("temp_max")]) for r in rows])
    # Every day of the file (train and eval) in °C, near the truth.
    assert predictions.shape == (1461,) and np.sqrt(np.mean((predictions - truth) ** 2)) < 4.0
    by_column = _serve_columns(model, header, rows)
    np.testing.assert_allclose(by_column["predictions"].numpy(), predictions, rtol=1e-5)


def test_the_pipeline_trains_a_regression_by_its_task_parameter_and_blesses_it(
    linear_csv, tmp_path, monkeypatch
):
    """kfp.local, local storage: the pipeline's ``task`` parameter makes an int label (auto:
    classes) a regression; its metrics reach the UI's table; an rmse threshold it does not
    meet skips the export, and the run still ends well."""
    from shardtrain.kubeflow import client

    for name, value in DETERMINISTIC_TF.items():  # the steps' processes only: no TF here
        monkeypatch.setenv(name, value)
    arguments = client.parse_arguments([f"sources={linear_csv}"]) | {
        "dataset_uri": str(tmp_path / "dataset"),
        "model_dir": str(tmp_path / "model"),
        "serving_uri": str(tmp_path / "serving"),
        "label": "stars",
        "key": "id",
        "task": "regression",
        "thresholds": "rmse<=0.5",
        "shard_workers": 1,
        "shard_cpu": "1",
        "tfjob_workers": 0,
        "evaluator": False,
        "gpus_per_worker": 0,
        "train_steps": 400,
        "batch_size": 128,
        "checkpoint_every": 200,
        "train_flags": "--exclude y",
    }
    run = client.run_local(arguments, pipeline_root=str(tmp_path / "runs"))
    # The same training as test_task_regression_on_an_int_label: RMSE 0.30.
    assert {"rmse", "mae", "r2", "mean_error", "label_std"} <= set(run.metrics), run.metrics
    assert run.metrics["rmse"] < 0.5 and "auc" not in run.metrics
    assert run.classification == {}
    assert "| rmse |" in Path(run.report).read_text()
    assert run.blessed and storage.exists(f"{run.served}/saved_model.pb")

    gated = arguments | {"serving_uri": str(tmp_path / "serving-gated"), "thresholds": "rmse<=0.01"}
    run = client.run_local(gated, pipeline_root=str(tmp_path / "runs-gated"))
    assert not run.blessed and run.served is None and run.metrics["blessed"] == 0.0
    assert not storage.exists(gated["serving_uri"])  # not blessed: no export
