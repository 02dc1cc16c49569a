"""``shardtrain trainjob render|submit``: options, output and errors (the jobs themselves run
against the live controllers in tests/integration/kubeflow/jobs/test_trainjob.py)."""

from __future__ import annotations

import pytest
import yaml

from shardtrain import cli
from shardtrain.kubeflow.jobs import trainjob

DATA, MODEL_DIR = "s3://data/quest", "s3://data/models/quest"


def _main(*args: str) -> int:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(list(args))
    return exit_info.value.code or 0


def test_render_prints_the_generators_yaml(capsys):
    code = _main(
        "trainjob", "render", "--data", DATA, "--model-dir", MODEL_DIR, "--nodes", "4",
        "--gpus-per-node", "0", "--secret", "", "--name", "quest", "--", "--train-steps", "9",
    )  # fmt: skip
    assert code == 0
    expected = trainjob.build_trainjob(
        trainjob.TrainJobConfig(
            data=DATA,
            model_dir=MODEL_DIR,
            nodes=4,
            gpus_per_node=0,
            secret=None,
            name="quest",
            train_args=("--train-steps", "9"),
        )
    )
    assert yaml.safe_load(capsys.readouterr().out) == expected


def test_render_needs_data_and_model_dir(capsys):
    assert _main("trainjob", "render", "--data", DATA) == 2
    assert "--model-dir" in capsys.readouterr().err


def test_a_bad_setting_is_one_line_and_exit_1(capsys):
    assert _main("trainjob", "render", "--data", DATA, "--model-dir", MODEL_DIR, "--name", "Q") == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: TrainJob name 'Q' is not a DNS-1035 label")


def test_submit_refuses_job_options_with_a_manifest_file(tmp_path):
    path = tmp_path / "job.yaml"
    job = trainjob.build_trainjob(trainjob.TrainJobConfig(data=DATA, model_dir=MODEL_DIR))
    path.write_text(trainjob.to_yaml(job))
    assert _main("trainjob", "submit", "-f", str(path), "--nodes", "4") == 2


def test_submit_checks_a_manifest_file_before_the_cluster(tmp_path, capsys):
    path = tmp_path / "job.yaml"
    job = trainjob.build_trainjob(trainjob.TrainJobConfig(data=DATA, model_dir=MODEL_DIR))
    job["spec"]["trainer"]["numNodes"] = 5
    path.write_text(trainjob.to_yaml(job))
    assert _main("trainjob", "submit", "-f", str(path)) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "SHARDTRAIN_NUM_NODES=3 but trainer.numNodes=5" in line


def test_submit_without_a_cluster_is_one_clear_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert _main("trainjob", "submit", "--data", DATA, "--model-dir", MODEL_DIR) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: no Kubernetes configuration")
