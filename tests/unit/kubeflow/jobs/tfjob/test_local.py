"""TFJob manifests as local processes (``shardtrain run-local job.yaml``)."""

from __future__ import annotations

import io
import json
import logging
import sys

import pytest
import yaml

from helpers import run_cli_here
from shardtrain import __version__
from shardtrain.errors import ConfigError
from shardtrain.kubeflow.jobs import tfjob
from shardtrain.kubeflow.local import processes
from tfjob_examples import DATA, MODEL_DIR, container_of, make_manifest, replica_specs

LOGGER = "shardtrain.kubeflow.jobs.tfjob.local"


def test_manifest_maps_to_launcher_replicas(monkeypatch, caplog):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local-key-id-value")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    manifest = make_manifest(env={"SHARDTRAIN_MARK": "m1"}, train_args=("--train-steps", "3"))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        replicas = tfjob.local_replicas(manifest)
    argv = (sys.executable, "-m", "shardtrain.cli", "train", "--data", DATA)
    argv += ("--model-dir", MODEL_DIR, "--train-steps", "3", "--batch-size", "255")
    assert replicas == [
        processes.Replica("chief", 1, argv, {"PYTHONUNBUFFERED": "1", "SHARDTRAIN_MARK": "m1"}),
        processes.Replica("worker", 2, argv, {"PYTHONUNBUFFERED": "1", "SHARDTRAIN_MARK": "m1"}),
        processes.Replica("evaluator", 1, argv, {"PYTHONUNBUFFERED": "1", "SHARDTRAIN_MARK": "m1"}),
    ]
    # Secret-backed variables: named in the log (missing required ones warned), never valued.
    assert "AWS_ACCESS_KEY_ID" in caplog.text and "AWS_ENDPOINT_URL" in caplog.text
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning == ["not set in this environment: AWS_SECRET_ACCESS_KEY"]
    assert "local-key-id-value" not in caplog.text


def test_zero_count_replicas_are_skipped_and_a_missing_command_is_the_entrypoint():
    manifest = make_manifest()
    replica_specs(manifest)["Worker"]["replicas"] = 0
    del container_of(manifest, "Chief")["command"]
    replicas = tfjob.local_replicas(manifest)
    assert [r.type for r in replicas] == ["chief", "evaluator"]
    assert replicas[0].command[:4] == (sys.executable, "-m", "shardtrain.cli", "train")


def test_load_manifest_picks_the_tfjob_out_of_a_kustomize_rendering(tmp_path):
    path = tmp_path / "all.yaml"
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "x"}}
    path.write_text(yaml.safe_dump_all([sa, make_manifest()]))
    assert tfjob.load_manifest(path) == make_manifest()
    path.write_text(yaml.safe_dump(sa))
    with pytest.raises(ConfigError, match="expected one TFJob, found 0"):
        tfjob.load_manifest(path)
    with pytest.raises(ConfigError, match="cannot read"):
        tfjob.load_manifest(tmp_path / "missing.yaml")
    assert tfjob.is_manifest_path(["job.yaml"]) and tfjob.is_manifest_path(["j.JSON"])
    assert not tfjob.is_manifest_path(["train", "--data", "x.yaml"])
    assert not tfjob.is_manifest_path(["train"])


PRINT_ENV = (
    "import json, os; print('SEEN=' + json.dumps({'tf_config': json.loads(os.environ"
    "['TF_CONFIG']), 'mark': os.environ.get('SHARDTRAIN_MARK'), 'key_ok': os.environ.get("
    "'AWS_ACCESS_KEY_ID') == 'local-id'}))"
)


def _seen(text: str) -> dict[str, dict]:
    seen = {}
    for line in text.splitlines():
        prefix, _, rest = line.partition("] ")
        if rest.startswith("SEEN="):
            seen[prefix.lstrip("[")] = json.loads(rest.removeprefix("SEEN="))
    return seen


def test_run_local_runs_a_rendered_manifest_with_operator_shaped_tf_config(tmp_path):
    manifest = make_manifest(env={"SHARDTRAIN_MARK": "from-manifest"})
    for rspec in replica_specs(manifest).values():
        container = rspec["template"]["spec"]["containers"][0]
        container["command"], container["args"] = ["python", "-c", PRINT_ENV], []
    path = tmp_path / "job.yaml"
    path.write_text(tfjob.to_yaml(manifest))

    proc = run_cli_here(
        "run-local", "--grace", "5", str(path), env={"AWS_ACCESS_KEY_ID": "local-id"}
    )
    assert proc.returncode == 0, proc.stderr
    assert "local job succeeded" in proc.stdout
    seen = _seen(proc.stdout)
    assert sorted(seen) == ["chief-0", "evaluator-0", "worker-0", "worker-1"]
    cluster = seen["chief-0"]["tf_config"]["cluster"]
    assert list(cluster) == ["chief", "evaluator", "worker"]  # the operator's order
    assert [len(cluster[t]) for t in cluster] == [1, 1, 2]
    for name, got in seen.items():
        kind, index = name.rsplit("-", 1)
        assert got["tf_config"] == {
            "cluster": cluster,
            "task": {"type": kind, "index": int(index)},
            "environment": "cloud",
        }
        assert got["mark"] == "from-manifest" and got["key_ok"] is True


def test_the_shardtrain_entrypoint_runs_this_installation():
    manifest = make_manifest(workers=1)
    for rspec in replica_specs(manifest).values():
        rspec["template"]["spec"]["containers"][0]["args"] = ["--version"]
    out = io.StringIO()
    result = processes.run_local(tfjob.local_replicas(manifest), out=out, grace=5, timeout=120)
    assert result.succeeded, result.reason
    lines = [line for line in out.getvalue().splitlines() if "version" in line]
    assert sorted(line.split("]")[0] for line in lines) == ["[chief-0", "[evaluator-0", "[worker-0"]
    assert all(line.endswith(f"shardtrain, version {__version__}") for line in lines)


def test_run_local_refuses_replica_options_with_a_manifest(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(tfjob.to_yaml(make_manifest()))
    proc = run_cli_here("run-local", "--workers", "3", str(path))
    assert proc.returncode == 2
    assert "drop --workers/--evaluator" in proc.stderr


def test_run_local_reports_a_bad_manifest_in_one_line(tmp_path):
    path, manifest = tmp_path / "job.yaml", make_manifest()
    container_of(manifest, "Worker").update(name="tf")
    path.write_text(tfjob.to_yaml(manifest))
    proc = run_cli_here("run-local", str(path))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "error: TFJob shardtrain: tfReplicaSpecs.Worker: needs a container named 'tensorflow'"
    ]


def test_a_queued_manifest_runs_locally_at_once(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    replicas = tfjob.local_replicas(make_manifest(queue="q", workers=1, evaluator=False))
    assert [r.type for r in replicas] == ["chief", "worker"]
    assert "queue and gang-scheduling settings apply on a cluster" in caplog.text
