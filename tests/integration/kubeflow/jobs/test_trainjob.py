"""TrainJobs against the real Kubeflow Trainer v2, JobSet and Job controllers.

The ``k8s`` fixture (tests/conftest.py) starts etcd, kube-apiserver, kube-controller-manager,
the JobSet and Trainer controllers (with their webhooks) beside the training operator, and a
node agent that runs the pods here; ``trainer_runtime`` installs our runtime as a user does
(``kubectl apply --server-side -k k8s/trainer-v2``). Nothing here fakes a controller: Trainer
turns the TrainJob into a JobSet, JobSet into an Indexed Job, the Job controller into pods, and
the restarts and failures below are their decisions on the exit codes our trainer gives.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest
import yaml

from cluster_jobs import (
    REPO,
    describe,
    get,
    job_namespace,
    pid_of,
    run_pipeline_on_cluster,
    shard_quest,
)
from helpers import run_cli
from shardtrain import storage

DATA, MODEL = "s3://shardtrain-data/quest", "s3://shardtrain-data/models/quest"
ROWS = 4000
KINDS = "pods,jobs,jobsets,trainjobs"


@pytest.fixture(scope="module")
def trainer_runtime(k8s) -> str:
    """Our ClusterTrainingRuntimes, installed as the README says."""
    for variant in ("", "volcano", "coscheduling"):
        k8s.kubectl("apply", "--server-side", "-k", str(REPO / "k8s" / "trainer-v2" / variant))
    return "shardtrain-tensorflow"


@pytest.fixture(scope="module")
def quest_data(minio, tmp_path_factory) -> str:
    return shard_quest(minio, tmp_path_factory.mktemp("quest"), "tj-data", ROWS)


def _render(*args: str) -> dict:
    out = run_cli("trainjob", "render", "--data", DATA, "--model-dir", MODEL, *args, check=True)
    return yaml.safe_load(out.stdout)


def _dry_run(k8s, docs: list[dict]) -> subprocess.CompletedProcess[str]:
    text = yaml.safe_dump_all(docs)
    return k8s.kubectl("apply", "--dry-run=server", "-f", "-", input=text, check=False)


def _submit_args(ns: str, name: str, data: str, model_dir: str, *more: str) -> list[str]:
    return [
        "trainjob", "submit", "--namespace", ns, "--name", name, "--data", data,
        "--model-dir", model_dir, "--gpus-per-node", "0", "--cpu", "500m", "--memory", "1Gi",
        "--poll-interval", "2", *more,
    ]  # fmt: skip


def _jobset(k8s, ns: str, name: str) -> dict:
    return json.loads(k8s.kubectl("get", "jobset", name, "-n", ns, "-o", "json").stdout)


# ------------------------------------------------------------------------------------------
# The runtime and every TrainJob shape we write, through the API server's own checks
# ------------------------------------------------------------------------------------------


SHAPES = {
    "default": (),
    "kueue": ("--queue", "gpu-team", "--priority-class", "high"),
    "patched-pods": ("--service-account", "team-trainer", "--termination-grace-seconds", "45"),
    "gcs": ("--secret", "", "--nodes", "1"),
    "volcano": ("--gang-scheduler", "volcano", "--queue", "research"),
    "coscheduling": ("--gang-scheduler", "coscheduling"),
    "deadline": ("--active-deadline-seconds", "3600", "--nodes", "8", "--gpus-per-node", "2"),
}


@pytest.mark.cluster
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_trainjob_we_render_passes_the_crd_and_trainers_webhook(k8s, trainer_runtime, shape):
    ns = k8s.namespace()
    job = _render("--namespace", ns, *SHAPES[shape])
    out = _dry_run(k8s, [job])
    assert out.returncode == 0, out.stderr
    assert "created (server dry run)" in out.stdout


@pytest.mark.cluster
def test_the_shipped_runtimes_and_example_job_are_accepted(k8s, trainer_runtime):
    for name in (trainer_runtime, f"{trainer_runtime}-volcano", f"{trainer_runtime}-coscheduling"):
        runtime = get(k8s, "clustertrainingruntime", "default", name)
        assert runtime["metadata"]["labels"]["trainer.kubeflow.org/framework"] == "tensorflow"
    if k8s.kubectl("get", "namespace", "shardtrain", check=False).returncode != 0:
        k8s.kubectl("create", "namespace", "shardtrain")
    example = k8s.kubectl(
        "apply", "--dry-run=server", "-k", str(REPO / "k8s/trainer-v2/job"), check=False
    )
    assert example.returncode == 0, example.stderr


@pytest.mark.cluster
def test_trainers_webhook_denies_a_trainjob_whose_runtime_does_not_exist(k8s, trainer_runtime):
    job = _render("--namespace", k8s.namespace(), "--runtime", "no-such-runtime")
    out = _dry_run(k8s, [job])
    assert out.returncode != 0
    assert "no-such-runtime" in out.stderr, out.stderr


# ------------------------------------------------------------------------------------------
# Jobs that train
# ------------------------------------------------------------------------------------------

#: Storage credentials reach the pods only through the Secret.
NO_AWS = {name: "" for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}


@pytest.mark.minio
@pytest.mark.slow
@pytest.mark.cluster
def test_a_trainjob_of_three_nodes_trains_to_complete_and_a_repeated_submit_attaches(
    k8s, minio, trainer_runtime, quest_data
):
    ns = job_namespace(k8s, minio)
    model_dir = minio.uri("tj-model")
    args = _submit_args(
        ns, "quest", quest_data, model_dir, "--nodes", "3", "--wait-timeout", "900", "--",
        "--train-steps", "60", "--batch-size", "48", "--checkpoint-every", "30",
    )  # fmt: skip
    proc = run_cli(*args, env=NO_AWS, timeout=1000)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-5000:] + describe(k8s, ns, KINDS)
    assert f"created TrainJob {ns}/quest" in text
    assert f"TrainJob {ns}/quest succeeded" in text
    # The chief (node 0) log streamed through the API server; the three nodes trained together.
    assert re.search(r"\[quest-node-0-0-\w+\]: chief: trained to step 60 \(from 0\)", text), text[
        -3000:
    ]
    assert "group_size = 3" in text, text[-3000:]
    trainjob = get(k8s, "trainjob", ns, "quest")
    assert {c["type"] for c in trainjob["status"]["conditions"] if c["status"] == "True"} >= {
        "Complete"
    }
    jobset = _jobset(k8s, ns, "quest")
    assert jobset["status"].get("restarts", 0) == 0
    metrics = storage.read_json(storage.join(model_dir, "eval", "metrics.json"))
    assert metrics["step"] == 60
    assert any(p.endswith("saved_model.pb") for p in storage.walk_files(f"{model_dir}/export"))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert minio.env[name] not in text, name

    # The same submit again (a retried pipeline step): it attaches to the finished job.
    again = run_cli(*args, env=NO_AWS, timeout=300)
    text = again.stdout + again.stderr
    assert again.returncode == 0, text[-3000:]
    assert f"attached to TrainJob {ns}/quest" in text and "succeeded" in text
    # Another job under that name is refused in one line.
    other = run_cli(*_submit_args(ns, "quest", quest_data, minio.uri("tj-other")), timeout=300)
    assert other.returncode != 0
    assert "already exists and runs something else" in other.stderr.strip().splitlines()[-1]


@pytest.mark.minio
@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize("signal", ["TERM", "KILL"])
def test_a_lost_worker_restarts_every_node_and_the_job_resumes_to_exactly_its_steps(
    k8s, minio, trainer_runtime, quest_data, tmp_path, signal
):
    """SIGTERM (preemption: the worker checkpoints and exits 143) or SIGKILL (the survivors lose
    a peer and exit 200) to worker 0's process: JobSet's failure policy recreates every node,
    they restore the last checkpoint and end at exactly --train-steps."""
    ns = job_namespace(k8s, minio)
    model_dir = minio.uri(f"tj-lost-{signal.lower()}")
    steps = 300
    args = _submit_args(
        ns, "lost", quest_data, model_dir, "--nodes", "2", "--wait-timeout", "900", "--",
        "--train-steps", str(steps), "--batch-size", "32", "--checkpoint-every", "20",
    )  # fmt: skip
    log_path = tmp_path / "submit.log"
    with open(log_path, "w") as log:
        submit = subprocess.Popen(
            [sys.executable, "-m", "shardtrain.cli", *args], stdout=log, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 600
        killed = None
        while time.monotonic() < deadline:
            pods = json.loads(
                k8s.kubectl(
                    "get",
                    "pods",
                    "-n",
                    ns,
                    "-l",
                    "jobset.sigs.k8s.io/jobset-name=lost",
                    "-o",
                    "json",
                ).stdout
            )["items"]
            worker = [
                p
                for p in pods
                if p["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index")
                == "1"
            ]
            pid = pid_of(worker[0]) if worker else None
            if pid and storage.exists(storage.join(model_dir, "checkpoints")):
                killed = worker[0]["metadata"]["uid"]
                subprocess.run(["kill", f"-{signal}", str(pid)], check=True)
                break
            assert submit.poll() is None, log_path.read_text()[-3000:]
            time.sleep(0.5)
        assert killed, "training never reached a checkpoint" + describe(k8s, ns, KINDS)
        code = submit.wait(timeout=900)
    finally:
        if submit.poll() is None:
            submit.kill()
    text = log_path.read_text()
    assert code == 0, text[-5000:] + describe(k8s, ns, KINDS)
    jobset = _jobset(k8s, ns, "lost")
    assert jobset["status"]["restarts"] >= 1, jobset["status"]
    pods = json.loads(k8s.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
    assert killed not in {p["metadata"]["uid"] for p in pods}
    assert all(p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] != "0" for p in pods)
    assert "restored checkpoint step" in text, text[-3000:]
    metrics = storage.read_json(storage.join(model_dir, "eval", "metrics.json"))
    assert metrics["step"] == steps


@pytest.mark.minio
@pytest.mark.slow
@pytest.mark.cluster
def test_a_permanent_error_fails_the_trainjob_at_once_in_one_line(k8s, minio, trainer_runtime):
    """Exit code 1 (no dataset there): the Job's pod failure policy fails it, JobSet's rule
    fails the JobSet without a restart, the TrainJob is Failed and submit says why."""
    ns = job_namespace(k8s, minio)
    args = _submit_args(
        ns, "bad", minio.uri("tj-no-such-dataset"), minio.uri("tj-bad-model"), "--nodes", "2",
        "--wait-timeout", "600", "--", "--train-steps", "10",
    )  # fmt: skip
    proc = run_cli(*args, timeout=700)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1, text[-3000:] + describe(k8s, ns, KINDS)
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: TrainJob {ns}/bad failed: "), text[-3000:]
    # JobSet's reason, then the trainer's own error from the pod that failed.
    assert "FailJobSet" in line and re.search(r"; pod bad-node-0-\d-\w+ exited 1: error: ", line)
    assert "tj-no-such-dataset" in line, line
    assert _jobset(k8s, ns, "bad")["status"].get("restarts", 0) == 0


@pytest.mark.cluster
def test_a_queued_trainjob_stays_suspended_without_pods(k8s, trainer_runtime):
    ns = k8s.namespace(service_accounts=("shardtrain-trainer",))
    args = _submit_args(ns, "queued", DATA, MODEL, "--queue", "gpu-team", "--secret", "")
    args += ["--wait-timeout", "8", "--poll-interval", "1"]
    proc = run_cli(*args, timeout=120)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    assert "is queued: suspended until its queue admits it" in text, text
    assert "did not end within 8s; it is still queued (suspended" in text, text
    job = get(k8s, "trainjob", ns, "queued")
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-team"
    assert job["spec"]["suspend"] is True
    assert k8s.kubectl("get", "pods", "-n", ns, "-o", "name").stdout.strip() == ""


# ------------------------------------------------------------------------------------------
# The pipeline's train step on a cluster with Trainer v2, with the launcher's Role only
# ------------------------------------------------------------------------------------------


@pytest.mark.minio
@pytest.mark.slow
@pytest.mark.cluster
def test_the_pipeline_trains_a_trainjob_where_the_cluster_serves_trainer_v2(
    k8s, minio, trainer_runtime, tmp_path, monkeypatch, capfd
):
    """The whole csv_to_model pipeline under kfp.local; its train step in cluster mode
    (job_api auto) finds trainer.kubeflow.org and submits a TrainJob of 2 nodes with a token
    bound to k8s/rbac's Role only."""
    ns, run = run_pipeline_on_cluster(k8s, minio, tmp_path, monkeypatch, "tj-pipeline")
    logs = capfd.readouterr()
    text = logs.out + logs.err
    jobs = json.loads(k8s.kubectl("get", "trainjobs", "-n", ns, "-o", "json").stdout)["items"]
    assert len(jobs) == 1, text[-3000:]
    job = jobs[0]
    assert job["spec"]["trainer"]["numNodes"] == 2
    assert {c["type"] for c in job["status"]["conditions"] if c["status"] == "True"} >= {"Complete"}
    assert f"TrainJob {ns}/{job['metadata']['name']} succeeded" in text
    assert not json.loads(k8s.kubectl("get", "tfjobs", "-n", ns, "-o", "json").stdout)["items"]
    assert run.metrics["step"] == 40
    assert storage.exists(f"{run.served}/saved_model.pb")
