"""The pipeline from the outside: the checked-in YAML, arguments, loading, submission."""

from __future__ import annotations

import re
from pathlib import Path
from unittest import mock

import pytest

from helpers import REPO
from shardtrain.errors import (
    ConfigError,
    ShardtrainError,
)
from shardtrain.kubeflow import client


def test_the_checked_in_pipeline_and_component_yaml_are_the_packages(tmp_path):
    """pipelines/ and components/ at the top of the repository hold the compiled definitions
    (uploaded in the UI, or loaded into other pipelines); they must be the package's."""
    written = client.compile_definitions(str(tmp_path))
    assert len(written) == 1 + len(client.COMPONENTS)
    stale = [
        rel
        for rel in (str(Path(w).relative_to(tmp_path)) for w in written)
        if not (REPO / rel).is_file() or (REPO / rel).read_text() != (tmp_path / rel).read_text()
    ]
    assert not stale, f"out of date (run `make pipeline-yaml`): {stale}"


def test_parse_arguments_converts_by_parameter_type():
    args = client.parse_arguments(
        [
            "sources=s3://b/a.csv, s3://b/b.csv",
            "train-steps=300",
            "task_mb=0.5",
            "evaluator=no",
            "secret_name=",
            "splits=train=0.8,eval=0.2",
            "thresholds=auc>=0.8,auc>=baseline-0.002",
            "slice_by=difficulty,platform",
        ]
    )
    assert args == {
        "sources": ["s3://b/a.csv", "s3://b/b.csv"],
        "train_steps": 300,
        "task_mb": 0.5,
        "evaluator": False,
        "secret_name": "",
        "splits": "train=0.8,eval=0.2",
        "thresholds": "auc>=0.8,auc>=baseline-0.002",
        "slice_by": "difficulty,platform",
    }
    assert client.parse_arguments(['sources=["x,1.csv"]']) == {"sources": ["x,1.csv"]}
    for bad, message in (
        ("train_steps=many", "train_steps (Integer)"),
        ("evaluator=maybe", "expected true or false"),
        ("nope=1", "unknown pipeline parameter 'nope'"),
        ("train_steps", "NAME=VALUE"),
        # The gates of earlier versions: the thresholds to write instead.
        ("min_auc=0.8", 'pipeline parameter min_auc was replaced: set thresholds="auc>=0.8"'),
        ("max_rmse=3", 'pipeline parameter max_rmse was replaced: set thresholds="rmse<=3"'),
    ):
        with pytest.raises(ConfigError, match=re.escape(message)):
            client.parse_arguments([bad])


def test_the_pipeline_is_loaded_from_the_package():
    assert client.load_pipeline().name == "csv-to-model"
    with pytest.raises(ConfigError, match="no pipeline named 'nope'"):
        client.load_pipeline("nope")


# --------------------------------------------------------------------------------------------
# Submission to a Kubeflow Pipelines server (the kfp.Client seam)
# --------------------------------------------------------------------------------------------

REQUIRED = {
    "sources": ["s3://b/q.csv"],
    "dataset_uri": "s3://b/ds",
    "model_dir": "s3://b/m",
    "serving_uri": "s3://b/s",
}


def test_submit_creates_a_run_and_reports_how_it_ended():
    import kfp

    with (
        mock.patch.object(kfp, "Client", autospec=True) as client_cls,
        mock.patch.object(client, "preflight_run", autospec=True) as preflight_run,
    ):
        kfp_client = client_cls.return_value
        kfp_client.create_run_from_pipeline_func.return_value.run_id = "run-42"
        run = client.submit(
            "http://kfp.example:8080/",
            REQUIRED,
            namespace="team-a",
            service_account="default-editor",
        )
        assert run == client.SubmittedRun("run-42", "http://kfp.example:8080/#/runs/details/run-42")
        client_cls.assert_called_once_with(host="http://kfp.example:8080/", namespace="team-a")
        call = kfp_client.create_run_from_pipeline_func.call_args
        assert call.args[0].name == "csv-to-model"
        assert call.kwargs["arguments"] == REQUIRED
        assert call.kwargs["service_account"] == "default-editor"
        kfp_client.wait_for_run_completion.assert_not_called()
        # Checked first, as the runner, with every parameter (the defaults filled in).
        host, values, namespace, account, _ = preflight_run.call_args.args
        assert host == "http://kfp.example:8080/"
        assert (namespace, account) == ("team-a", "default-editor")
        assert values["secret_name"] == "shardtrain-storage" and values["model_dir"] == "s3://b/m"

        kfp_client.wait_for_run_completion.return_value.state = "FAILED"
        with pytest.raises(ShardtrainError, match="run run-42 ended FAILED"):
            client.submit("http://kfp.example:8080", REQUIRED, wait=True)
        kfp_client.wait_for_run_completion.return_value.state = "SUCCEEDED"
        assert client.submit("http://h", REQUIRED, wait=True).state == "SUCCEEDED"

        kfp_client.create_run_from_pipeline_func.side_effect = ValueError("403 Forbidden")
        with pytest.raises(ShardtrainError, match="cannot create the run: 403 Forbidden"):
            client.submit("http://h", REQUIRED)
    with pytest.raises(ConfigError, match=r"missing pipeline argument.*serving_uri"):
        client.submit("http://h", {k: v for k, v in REQUIRED.items() if k != "serving_uri"})
