"""A run's parameters are checked before anything costs: by the pipeline commands and again
in the pipeline's first step (``plan_shards``), each by the parser of the step that uses it;
a user error ends a step in one line, not a traceback; and the fan-out is never empty."""

from __future__ import annotations

import subprocess
import sys
from unittest import mock

import pytest

from helpers import cli_exit_code
from shardtrain.data import datagen, task_rule
from shardtrain.errors import ConfigError
from shardtrain.kubeflow import shard_steps
from shardtrain.kubeflow.components.plan_shards import plan_shards
from shardtrain.kubeflow.parameters import CHECKED, PLAN_SHARDS, check_arguments

RUN = {
    "sources": ["s3://b/raw/q.csv"],
    "dataset_uri": "s3://b/quest",
    "model_dir": "s3://b/models/quest",
    "serving_uri": "s3://b/serving/quest",
}

REFUSED = {
    "threshold": ({"thresholds": "auc>>0.8"}, "thresholds: 'auc>>0.8': '>0.8' is not a number"),
    "threshold-of-another-task": (
        {"task": "regression", "thresholds": "auc>=0.8"},
        "thresholds: 'auc>=0.8': task 'regression' is a regression, which has no auc",
    ),
    "limits": ({"data_check_limits": "drift=0.1"}, "data check limit 'drift=0.1': expected"),
    "data-checks": ({"data_checks": "maybe"}, "data_checks must be one of fail, warn, off"),
    "worker-memory": ({"worker_memory": "lots"}, "worker_memory 'lots' is not a Kubernetes"),
    "worker-cpu": ({"worker_cpu": "-2"}, "worker_cpu '-2' must be a positive quantity"),
    "shard-cpu": ({"shard_cpu": "0"}, "shard_cpu '0' must be a positive quantity"),
    "local-model-dir": ({"model_dir": "/tmp/m"}, "model_dir '/tmp/m' is a local path"),
    "local-source": ({"sources": ["s3://b/a.csv", "b.csv"]}, "sources 'b.csv' is a local path"),
    "scheme": ({"serving_uri": "http://h/s"}, "unsupported URI scheme 'http://'"),
    "train-steps": ({"train_steps": 0}, "train_steps must be at least 1, not 0"),
    "batch-size-flag": (
        {"train_flags": "--batch-size 7"},
        "--batch-size 7 is not divisible by the 3 replicas in sync",
    ),
    "train-flags-quoting": ({"train_flags": "--x 'y"}, "train_flags: No closing quotation"),
    # By `shardtrain train`'s own parser, in the plan step too (a run made in the UI).
    "train-flags-unknown": ({"train_flags": "--bogus 1"}, "train_flags: No such option"),
    "train-flags-range": ({"train_flags": "--train-steps -5"}, "train_flags: Invalid value"),
    "job-api": ({"job_api": "mpijob"}, "job_api 'mpijob' is not one of auto, trainjob, tfjob"),
    "namespace": ({"namespace": "Team A"}, "namespace 'Team A' is not a DNS-1123 label"),
    "splits": ({"splits": "train=2"}, "the fraction of 'train' must be in (0, 1]"),
    "shard-workers": ({"shard_workers": 0}, "shard_workers must be at least 1, not 0"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_value_a_step_would_refuse_is_refused_up_front(case):
    given, message = REFUSED[case]
    with pytest.raises(ConfigError) as info:
        check_arguments({**RUN, **given}, cluster=True)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_the_defaults_and_a_local_run_on_local_paths_pass():
    check_arguments(RUN, cluster=True)
    check_arguments({}, cluster=True)  # compile -p: only what is given
    local = {"sources": ["q.csv"], "dataset_uri": "ds", "model_dir": "m", "serving_uri": "s"}
    check_arguments(local, cluster=False)
    with pytest.raises(ConfigError, match="model_dir '/m' is a local path"):
        check_arguments({**RUN, "model_dir": "/m"}, cluster=True)


def test_the_plan_step_gets_every_parameter_it_checks():
    names = {p.name for p in PLAN_SHARDS}
    assert {"thresholds", "data_check_limits", "worker_memory", "train_flags", "local"} <= names
    assert {p.name for p in CHECKED} <= set(plan_shards.component_spec.inputs)


def test_the_plan_step_refuses_a_bad_parameter_before_listing(tmp_path):
    """The sources are not there either: the parameter is what it names first."""
    common = dict(sources=[str(tmp_path / "nope.csv")], dataset_uri=str(tmp_path / "ds"))
    with pytest.raises(ConfigError, match=r"^thresholds: 'auc>>0\.8'"):
        shard_steps.plan_step(num_workers=2, label="cleared", thresholds="auc>>0.8", **common)
    with pytest.raises(ConfigError, match=r"is a local path, which no pod can read"):
        shard_steps.plan_step(num_workers=2, label="cleared", local=False, **common)
    assert not (tmp_path / "ds").exists()


def test_the_plan_step_never_returns_an_empty_fan_out(tmp_path):
    """KFP's driver fails on dsl.Collected of a loop without iterations: a listing that
    promises no task still gets one worker."""
    csv = tmp_path / "q.csv"
    datagen.generate_quest_logs(str(csv), 200, seed=1)
    common = dict(sources=[str(csv)], dataset_uri=str(tmp_path / "ds"), label="cleared")
    with mock.patch.object(task_rule, "listed_tasks", autospec=True, return_value=0):
        assert shard_steps.plan_step(num_workers=4, **common) == [0]
    assert shard_steps.plan_step(num_workers=4, **common) == [0]  # a small file: one task


def test_a_user_error_in_a_step_is_one_line_and_a_bug_keeps_its_traceback():
    code = (
        "import sys\n"
        "from shardtrain.errors import ConfigError, StorageUnavailableError\n"
        "from shardtrain.kubeflow import shard_steps\n"
        "kind = {'config': ConfigError, 'storage': StorageUnavailableError,\n"
        "        'bug': KeyError}[sys.argv[1]]\n"
        "with shard_steps.user_errors():\n"
        "    raise kind('s3://b/x: what is wrong')\n"
    )

    def run(kind: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", code, kind], capture_output=True, text=True, check=False
        )

    config, storage, bug = run("config"), run("storage"), run("bug")
    assert (config.returncode, config.stderr) == (1, "error: s3://b/x: what is wrong\n")
    assert (storage.returncode, storage.stderr) == (3, "error: s3://b/x: what is wrong\n")
    assert bug.returncode == 1 and "Traceback" in bug.stderr


def test_every_component_body_runs_its_step_under_user_errors():
    from shardtrain.kubeflow import client

    for name in client.COMPONENTS:
        module = __import__(f"shardtrain.kubeflow.components.{name}", fromlist=[name])
        source = getattr(module, name).component_spec.implementation.container.command[-1]
        assert ".user_errors():" in source, name


@pytest.mark.parametrize(
    ("param", "message"),
    [
        ("thresholds=auc>>0.8", "error: thresholds: 'auc>>0.8'"),
        ("train_flags=--no-such-flag 1", "error: train_flags: No such option '--no-such-flag'"),
        ("worker_memory=-1Gi", "error: worker_memory '-1Gi' must be a positive quantity"),
        ("model_dir=models/quest", "error: model_dir 'models/quest' is a local path"),
    ],
)
def test_pipeline_commands_refuse_a_bad_parameter_in_one_line(tmp_path, capsys, param, message):
    out = tmp_path / "p.yaml"
    assert cli_exit_code("pipeline", "compile", "-o", str(out), "-p", param) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(message), line
    assert not out.exists()


def test_run_local_refuses_a_bad_threshold_before_the_run_starts(tmp_path, capsys):
    root = tmp_path / "runs"
    code = cli_exit_code(
        "pipeline", "run-local", "--pipeline-root", str(root), "-p", "sources=q.csv",
        "-p", "dataset_uri=ds", "-p", "model_dir=m", "-p", "serving_uri=s",
        "-p", "thresholds=auc>>0.8",
    )  # fmt: skip
    assert code == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: thresholds: 'auc>>0.8'")
    assert not root.exists()
