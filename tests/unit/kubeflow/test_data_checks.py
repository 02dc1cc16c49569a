"""The data checks against the model served at serving_uri (in the finalize step, or in the
settle step that commits): the first run, the same data, a tripled column in fail, warn and
off modes, per-column limits, a model exported without its training data's statistics."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardtrain import storage
from shardtrain.data import datagen, sharding
from shardtrain.data.profile import write_profile
from shardtrain.data.validation import DataChecksFailed
from shardtrain.errors import ConfigError
from shardtrain.kubeflow import data_checks

VERSION = "1700000000"


def _served(tmp_path: Path, dataset_uri: str) -> str:
    """A serving location whose latest version was trained on ``dataset_uri``."""
    serving = tmp_path / "serving"
    (serving / VERSION).mkdir(parents=True)
    (serving / VERSION / "saved_model.pb").write_bytes(b"")
    write_profile(str(serving / VERSION), dataset_uri)
    storage.write_json(str(serving / "latest.json"), {"version": VERSION, "path": VERSION})
    return str(serving)


def _old_and_drifted(tmp_path: Path) -> tuple[str, str]:
    """A dataset of 3,000 quest rows (``old``) and the CSV of the same rows with gear_score
    tripled (``drifted``)."""
    csv = tmp_path / "q.csv"
    datagen.generate_quest_logs(str(csv), 3000, seed=5)
    old = str(tmp_path / "old")
    sharding.shard(sharding.ShardConfig(sources=(str(csv),), output=old, label="cleared"))
    lines = csv.read_text().splitlines()
    at = lines[0].split(",").index("gear_score")
    rows = [line.split(",") for line in lines[1:]]
    for row in rows:
        row[at] = str(float(row[at]) * 3)
    drifted = tmp_path / "new.csv"
    drifted.write_text("\n".join([lines[0], *map(",".join, rows)]) + "\n")
    return old, str(drifted)


def test_finalize_checks_the_data_against_the_served_model(tmp_path):
    old, drifted = _old_and_drifted(tmp_path)
    new = str(tmp_path / "new")
    sharding.shard(sharding.ShardConfig(sources=(drifted,), output=new, label="cleared"))
    report = tmp_path / "report.md"

    # First run: nothing served, the check passes with a note.
    first = data_checks.data_checks_step(new, str(tmp_path / "serving"), mode="fail", limits="",
                             report_path=str(report))  # fmt: skip
    assert first is None and "first run" in report.read_text()
    assert storage.read_json(f"{new}/data_checks.json")["passed"] is True

    serving = _served(tmp_path, old)
    same = data_checks.data_checks_step(
        old, serving, mode="fail", limits="", report_path=str(report)
    )
    assert same is not None and same.passed and "**Result: passed**" in report.read_text()
    with pytest.raises(DataChecksFailed, match=r"numeric_drift: gear_score \(JS divergence"):
        data_checks.data_checks_step(new, serving, mode="fail", limits="", report_path=str(report))
    assert "**data_checks=fail**: the run stops here" in report.read_text()
    saved = storage.read_json(f"{new}/data_checks.json")
    assert saved["passed"] is False and saved["failures"][0]["column"] == "gear_score"
    warned = data_checks.data_checks_step(
        new, serving, mode="warn", limits="", report_path=str(report)
    )
    assert warned is not None and not warned.passed
    assert "warn mode: the run goes on" in report.read_text()
    limits = "numeric_drift.gear_score=off"
    assert data_checks.data_checks_step(
        new, serving, mode="fail", limits=limits, report_path=None
    ).passed
    assert (
        data_checks.data_checks_step(new, serving, mode="off", limits="", report_path=None) is None
    )
    with pytest.raises(ConfigError, match="data_checks must be one of fail, warn, off"):
        data_checks.data_checks_step(new, serving, mode="stop", limits="", report_path=None)
    # A model exported before models carried their training data: nothing to compare with.
    (tmp_path / "serving" / VERSION / "training_data.json").unlink()
    data_checks.data_checks_step(new, serving, mode="fail", limits="", report_path=str(report))
    assert "carries no statistics of its training data" in report.read_text()
    # The dataset's own file is no foreign file: --overwrite re-shards it.
    sharding.shard(
        sharding.ShardConfig(
            sources=(str(tmp_path / "q.csv"),), output=new, label="cleared", overwrite=True
        )
    )


def test_a_settle_step_that_commits_stops_the_run_on_a_failed_check(tmp_path):
    """The pipeline's settle step commits the dataset when no worker runs again, and checks
    it there (the finalize step only points at it): a drifted dataset stops the run before
    training, from that step, after the commit (a re-run's finalize checks it again)."""
    from shardtrain.kubeflow import shard_steps

    old, drifted = _old_and_drifted(tmp_path)
    new = str(tmp_path / "new")
    common = dict(sources=[drifted], dataset_uri=new, label="cleared", task_mb=0.1)
    reports = [
        shard_steps.shard_step(**common, worker_index=i, num_workers=2, cpu="1") for i in (0, 1)
    ]
    assert not storage.exists(f"{new}/metadata.json")  # two workers: settle commits
    settled = tmp_path / "settled"
    with pytest.raises(DataChecksFailed, match=r"numeric_drift: gear_score"):
        shard_steps.settle_step(
            **common,
            num_workers=2,
            worker_reports=reports,
            serving_uri=_served(tmp_path, old),
            data_checks="fail",
            settled=str(settled),
        )
    assert storage.exists(f"{new}/metadata.json") and not settled.exists()
    assert storage.read_json(f"{new}/data_checks.json")["passed"] is False
