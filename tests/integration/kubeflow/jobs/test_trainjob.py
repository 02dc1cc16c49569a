"""TrainJobs against the real Kubeflow Trainer v2 API server checks: our runtimes, every
TrainJob shape we render, Trainer's webhook, and a queued TrainJob that creates no pod.

The ``k8s`` fixture (tests/conftest.py) starts etcd, kube-apiserver, kube-controller-manager,
the JobSet and Trainer controllers (with their webhooks) beside the training operator, with no
node: a pod created here stays Pending, so nothing here needs one to run. ``trainer_runtime``
installs our runtimes as a user does (``kubectl apply --server-side -k k8s/trainer-v2``). The
TrainJobs that train (three nodes to Complete, a node SIGKILLed, a permanent error, the
pipeline's train step) run as real pods of our image in tests/cluster/test_trainjob.py.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from cluster_jobs import REPO, get
from helpers import run_cli

DATA, MODEL = "s3://shardtrain-data/quest", "s3://shardtrain-data/models/quest"


@pytest.fixture(scope="module")
def trainer_runtime(k8s) -> str:
    """Our ClusterTrainingRuntimes, installed as the README says."""
    for variant in ("", "volcano", "coscheduling"):
        k8s.kubectl("apply", "--server-side", "-k", str(REPO / "k8s" / "trainer-v2" / variant))
    return "shardtrain-tensorflow"


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


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_trainjob_we_render_passes_the_crd_and_trainers_webhook(k8s, trainer_runtime, shape):
    ns = k8s.namespace()
    job = _render("--namespace", ns, *SHAPES[shape])
    out = _dry_run(k8s, [job])
    assert out.returncode == 0, out.stderr
    assert "created (server dry run)" in out.stdout


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


def test_trainers_webhook_denies_a_trainjob_whose_runtime_does_not_exist(k8s, trainer_runtime):
    job = _render("--namespace", k8s.namespace(), "--runtime", "no-such-runtime")
    out = _dry_run(k8s, [job])
    assert out.returncode != 0
    assert "no-such-runtime" in out.stderr, out.stderr


# ------------------------------------------------------------------------------------------
# Queued: no pod is created
# ------------------------------------------------------------------------------------------


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
