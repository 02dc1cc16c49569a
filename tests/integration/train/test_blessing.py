"""``shardtrain evaluate``: a trained model against the served one, on the same eval rows.

Two models are trained on the same sharded quest logs through the CLI, a weak one (5 steps,
AUC about 0.6) and a strong one (200 steps, about 0.85), and published with the pipeline's
own publish function; each is then the baseline of the other. A third model is trained on the
same logs without one column, which the strong model needs: a baseline that cannot score the
data. Everything runs as a user runs it (``shardtrain ...`` in a subprocess).
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from helpers import DETERMINISTIC_TF, run_cli
from shardtrain.data import datagen
from shardtrain.kubeflow.steps import publish_export
from shardtrain.train.export import latest_export

pytestmark = [pytest.mark.slow]

ROWS = 6000


def _train(data: Path, model_dir: Path, steps: int) -> None:
    run_cli(
        "train",
        "--data",
        str(data),
        "--model-dir",
        str(model_dir),
        "--train-steps",
        str(steps),
        "--batch-size",
        "64",
        "--checkpoint-every",
        str(steps),
        env=DETERMINISTIC_TF,
        check=True,
    )


def _shard(source: Path, out: Path) -> None:
    run_cli(
        "shard",
        str(source),
        "-o",
        str(out),
        "--label",
        "cleared",
        "--key",
        "attempt_id",
        check=True,
    )


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("blessing")
    source = root / "quest.csv"
    datagen.generate_quest_logs(str(source), ROWS, seed=1)
    _shard(source, root / "ds")
    _train(root / "ds", root / "weak", 5)
    _train(root / "ds", root / "strong", 200)
    # The same rows without the column 'gold': a dataset the strong model cannot score.
    with open(source, newline="") as f:
        rows = list(csv.reader(f))
    drop = rows[0].index("gold")
    with open(root / "no_gold.csv", "w", newline="") as f:
        csv.writer(f).writerows([r[:drop] + r[drop + 1 :] for r in rows])
    _shard(root / "no_gold.csv", root / "ds_no_gold")
    _train(root / "ds_no_gold", root / "no_gold", 5)
    return root


def _evaluate(root: Path, model: str, serving: Path, *args: str, data: str = "ds"):
    proc = run_cli(
        "evaluate",
        "--model-dir",
        str(root / model),
        "--data",
        str(root / data),
        "--serving-uri",
        str(serving),
        *args,
    )
    blessing = root / model / "eval" / "blessing.json"
    return proc, json.loads(blessing.read_text()) if blessing.exists() else None


def _publish(root: Path, model: str, serving: Path) -> str:
    return publish_export(latest_export(str(root / model))["uri"], str(serving))


def test_the_first_model_is_blessed_on_the_absolute_thresholds_alone(models, tmp_path):
    serving = tmp_path / "serving"  # nothing published yet
    proc, blessing = _evaluate(
        models, "strong", serving, "--thresholds", "auc>=0.8,auc>=baseline-0.002"
    )
    assert proc.returncode == 0, proc.stderr
    assert "auc>=baseline-0.002: skipped (no baseline)" in proc.stdout
    assert proc.stdout.strip().endswith("blessed: 1 threshold(s) hold, 1 skipped (no baseline)")
    assert blessing["blessed"] is True and blessing["baseline"] is None
    assert [t["pass"] for t in blessing["thresholds"]] == [True, None]
    # Without a baseline nothing is scored: the trainer's metrics of the same split.
    trained = json.loads((models / "strong" / "eval" / "metrics.json").read_text())
    assert blessing["candidate"]["metrics"]["auc"] == trained["auc"]

    proc, blessing = _evaluate(models, "weak", serving, "--thresholds", "auc>=0.8")
    assert proc.returncode == 1 and blessing["blessed"] is False
    last = proc.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"not blessed: auc 0\.\d{4} is not >= 0\.8000 \(auc>=0\.8\)", last), last


def test_a_worse_candidate_is_not_blessed_and_a_better_one_is(models, tmp_path):
    """Both models scored through their serving signatures on the same eval rows."""
    serving = tmp_path / "serving"
    weak_version = _publish(models, "weak", serving)
    thresholds = ("--thresholds", "auc>=0.7,auc>=baseline-0.002,log_loss<=baseline*1.05")
    proc, blessing = _evaluate(models, "strong", serving, *thresholds)
    assert proc.returncode == 0, proc.stderr
    assert blessing["blessed"] is True and proc.stdout.strip().endswith("3 threshold(s) hold")
    base, cand = blessing["baseline"], blessing["candidate"]
    assert base["uri"] == weak_version and base["version"] == Path(weak_version).name
    assert base["metrics"]["num_examples"] == cand["metrics"]["num_examples"] > 400
    assert cand["metrics"]["auc"] > base["metrics"]["auc"] + 0.2
    relative = blessing["thresholds"][1]
    assert relative["bound"] == pytest.approx(base["metrics"]["auc"] - 0.002)
    # The serving signature reproduces the trainer's evaluation of the same weights.
    trained = json.loads((models / "strong" / "eval" / "metrics.json").read_text())
    assert cand["metrics"]["auc"] == pytest.approx(trained["auc"], abs=1e-4)
    assert f"baseline {weak_version}: auc 0." in proc.stdout

    strong_version = _publish(models, "strong", serving)
    pointer = json.loads((serving / "latest.json").read_text())
    proc, blessing = _evaluate(models, "weak", serving, *thresholds)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("not blessed: auc 0.") and "(auc>=baseline-0.002)" in last
    assert "(auc>=0.7)" in last and "log_loss" in last  # every failing clause, one line
    assert blessing["blessed"] is False and blessing["baseline"]["uri"] == strong_version
    assert [t["pass"] for t in blessing["thresholds"]] == [False, False, False]
    assert (
        json.loads((serving / "latest.json").read_text()) == pointer
    )  # evaluate publishes nothing

    # The served model itself as the candidate (a re-run after its export): no baseline.
    proc, blessing = _evaluate(models, "strong", serving, *thresholds)
    assert proc.returncode == 0, proc.stderr
    assert "skipped (the served model is this candidate)" in proc.stdout


def test_a_baseline_that_cannot_score_the_data_is_reported_and_skipped(models, tmp_path):
    serving = tmp_path / "serving"
    _publish(models, "strong", serving)
    proc, blessing = _evaluate(
        models,
        "no_gold",
        serving,
        "--thresholds",
        "log_loss<=1,auc>=baseline-0.002",
        data="ds_no_gold",
    )
    assert proc.returncode == 0, proc.stderr
    reason = "it needs column 'gold', which the data does not have"
    assert f"cannot score this data: {reason}" in proc.stdout
    assert "judged on the absolute thresholds only" in proc.stderr
    assert blessing["blessed"] is True and blessing["baseline"]["error"] == reason
    assert blessing["baseline"]["metrics"] is None
    assert blessing["thresholds"][1]["note"] == "the baseline cannot score this data"


def test_sliced_metrics_per_value_with_the_rest_as_other(models, tmp_path):
    proc, _ = _evaluate(
        models,
        "strong",
        tmp_path / "none",
        "--slice-by",
        "difficulty,platform",
        "--max-slices",
        "2",
    )
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((models / "strong" / "eval" / "metrics.json").read_text())
    assert metrics["step"] == 200 and "roc" in metrics  # the trainer's metrics are kept
    slices = metrics["slices"]
    assert set(slices) == {"difficulty", "platform"}
    for column, rows in slices.items():
        values = [r["value"] for r in rows]
        assert len(values) == 3 and values[-1] == "(other)", column  # 2 most frequent + rest
        assert sum(r["num_examples"] for r in rows) == metrics["num_examples"]
        assert all(0.5 < r["auc"] <= 1 and len(r["roc"]["fpr"]) == 101 for r in rows)
    assert "slices by difficulty:" in proc.stdout and "  (other): auc 0." in proc.stdout

    # A later run without --slice-by leaves no slices of the earlier one behind.
    proc, _ = _evaluate(models, "strong", tmp_path / "none")
    assert proc.returncode == 0, proc.stderr
    after = json.loads((models / "strong" / "eval" / "metrics.json").read_text())
    assert "slices" not in after and after == {k: v for k, v in metrics.items() if k != "slices"}

    proc = run_cli(
        "evaluate",
        "--model-dir",
        str(models / "strong"),
        "--data",
        str(models / "ds"),
        "--slice-by",
        "player_level",
    )
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"error: --slice-by: column 'player_level' of {models / 'ds'} is int, not categorical "
        "(slice by a string column)"
    )


def test_another_split_is_scored_not_read_from_the_trainers_metrics(models, tmp_path):
    """metrics.json is of the eval split: --split train scores the train split, even with
    no baseline and no slices."""
    trained = json.loads((models / "strong" / "eval" / "metrics.json").read_text())
    proc, blessing = _evaluate(models, "strong", tmp_path / "none", "--split", "train")
    assert proc.returncode == 0, proc.stderr
    scored = blessing["candidate"]["metrics"]
    assert scored["num_examples"] > 4 * trained["num_examples"]
    assert scored["auc"] != trained["auc"]


def test_other_data_is_scored_and_a_damaged_split_is_refused(models, tmp_path):
    """The trainer's metrics stand for its own data only (metrics.json's ``data_plan``):
    other rows with the same label are scored, even with no baseline and no slices; a dataset
    whose eval split lost a shard is one line naming it, never blessed on the trainer's
    metrics."""
    import shutil

    trained = json.loads((models / "strong" / "eval" / "metrics.json").read_text())
    other = tmp_path / "other.csv"
    datagen.generate_quest_logs(str(other), 2000, seed=7)
    _shard(other, models / "ds_other")
    proc, blessing = _evaluate(
        models, "strong", tmp_path / "none", "--thresholds", "auc>=0.5", data="ds_other"
    )
    assert proc.returncode == 0, proc.stderr
    scored = blessing["candidate"]["metrics"]
    assert scored["num_examples"] < trained["num_examples"] and scored["auc"] != trained["auc"]
    fraction = json.loads((models / "ds_other" / "metadata.json").read_text())["splits"]["eval"]
    assert 0.5 < scored["num_examples"] / (2000 * fraction["fraction"]) < 1.5, scored

    shutil.copytree(models / "ds", models / "ds_damaged")
    shard = sorted((models / "ds_damaged" / "eval").glob("part-*.tfrecord"))[0]
    shard.unlink()
    proc, _ = _evaluate(models, "strong", tmp_path / "none", data="ds_damaged")
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert f"eval/{shard.name} missing" in last and "--overwrite" in last, last
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("broken", ["graph", "inputs"])
def test_a_baseline_that_fails_to_load_or_predict_is_reported_and_skipped(models, tmp_path, broken):
    """A served model TensorFlow cannot load (a corrupt saved_model.pb), or whose signature
    rejects the inputs its shardtrain_model.json lists: one warning naming it, recorded,
    judged on the absolute thresholds alone; no traceback."""
    serving = tmp_path / "serving"
    version = Path(_publish(models, "weak", serving))
    if broken == "graph":
        (version / "saved_model.pb").write_bytes(b"not a SavedModel")
    else:
        info_path = version / "shardtrain_model.json"
        info = json.loads(info_path.read_text())
        info["inputs"][0]["input"] = "no_such_input"
        info_path.write_text(json.dumps(info))
    proc, blessing = _evaluate(
        models, "strong", serving, "--thresholds", "auc>=0.7,auc>=baseline-0.002"
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    error = blessing["baseline"]["error"]
    failed = "it failed to load: " if broken == "graph" else "it failed to predict: "
    assert error.startswith(failed), error
    assert "\n" not in error and blessing["baseline"]["metrics"] is None
    warning = [line for line in proc.stderr.splitlines() if "judged on the absolute" in line]
    assert len(warning) == 1 and f"baseline {version} cannot score" in warning[0], proc.stderr
    assert blessing["blessed"] is True
    assert blessing["thresholds"][1]["note"] == "the baseline cannot score this data"
