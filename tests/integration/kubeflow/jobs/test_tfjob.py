"""TFJobs against a real Kubernetes control plane and the real Kubeflow training operator,
without a node.

The ``k8s`` fixture (tests/conftest.py) starts the control plane with ``scripts/k8s-up``
(etcd, kube-apiserver, kube-controller-manager, the training operator, JobSet, Trainer,
Kueue) and no node: the operator creates pods and nothing runs them (they stay Pending). What
is here needs no pod to run: what the CRD's schema and the operator's webhook accept, the
launcher's RBAC, the submit command's wait and timeouts, a job suspended for its queue.
Nothing here re-implements the operator. Jobs whose pods run (TF_CONFIG as the process sees
it, exit codes, training, preemption, the pipeline's train step): tests/cluster/test_tfjob.py
and tests/cluster/test_jobs.py, on a real kubelet.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from cluster_jobs import describe, get, launcher_kubeconfig
from helpers import run_cli
from tfjob_examples import example_manifests

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[4]
OVERLAYS = sorted(p.parent for p in (REPO / "k8s" / "overlays").glob("*/kustomization.yaml"))
DATA, MODEL = "s3://shardtrain-data/quest", "s3://shardtrain-data/models/quest"


def _render(*args: str) -> Callable[..., list[dict]]:
    def make(k8s=None) -> list[dict]:
        out = run_cli("tfjob", "render", "--data", DATA, "--model-dir", MODEL, *args, check=True)
        return [d for d in yaml.safe_load_all(out.stdout) if d]

    return make


def _overlay(path: Path) -> Callable[..., list[dict]]:
    def make(k8s) -> list[dict]:
        out = k8s.kubectl("kustomize", str(path))
        return [d for d in yaml.safe_load_all(out.stdout) if d and d.get("kind") == "TFJob"]

    return make


def _example(name: str) -> Callable[..., list[dict]]:
    def make(k8s=None) -> list[dict]:
        return [example_manifests()[name]]

    return make


#: Every TFJob we ship or generate, by name: each must be accepted by the CRD's schema and by
#: the operator's webhook. Add a render (e.g. with queue options) here to have it checked.
MANIFESTS: dict[str, Callable[..., list[dict]]] = {
    "render-default": _render(),
    "render-cpu-chief-only": _render(
        "--workers", "0", "--no-evaluator", "--gpus-per-worker", "0", "--secret", ""
    ),
    "render-all-options": _render(
        "--name",
        "quest-7",
        "--workers",
        "4",
        "--gpus-per-worker",
        "2",
        "--cpu",
        "8",
        "--memory",
        "32Gi",
        "--backoff-limit",
        "5",
        "--ttl-seconds-after-finished",
        "600",
        "--clean-pod-policy",
        "All",
        "--termination-grace-seconds",
        "300",
        "--active-deadline-seconds",
        "7200",
        "--",
        "--train-steps",
        "1000",
    ),
    **{f"overlay-{p.name}": _overlay(p) for p in OVERLAYS},
    # Every shape tests/tfjob_examples.py lists: queues (Kueue, Volcano), priority, gs://.
    **{f"example-{n}": _example(n) for n in example_manifests()},
}


@pytest.fixture(scope="module")
def shardtrain_ns(k8s):
    """The namespace the shipped manifests name."""
    if k8s.kubectl("get", "namespace", "shardtrain", check=False).returncode != 0:
        k8s.kubectl("create", "namespace", "shardtrain")
    return "shardtrain"


def _server_dry_run(k8s, docs: list[dict]) -> subprocess.CompletedProcess[str]:
    text = yaml.safe_dump_all(docs)
    return k8s.kubectl("apply", "--dry-run=server", "-f", "-", input=text, check=False)


@pytest.mark.parametrize("name", sorted(MANIFESTS))
def test_shipped_and_rendered_tfjobs_are_accepted_by_the_crd_and_the_operator(
    k8s, shardtrain_ns, name
):
    docs = MANIFESTS[name](k8s)
    assert [d["kind"] for d in docs] == ["TFJob"], name
    out = _server_dry_run(k8s, docs)
    assert out.returncode == 0, out.stderr
    assert "created (server dry run)" in out.stdout


def _broken(mutate: Callable[[dict], None]) -> list[dict]:
    docs = _render("--workers", "1")()
    mutate(docs[0])
    return docs


def _rename_container(job: dict) -> None:
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "main"


def _chief_and_master(job: dict) -> None:
    job["spec"]["tfReplicaSpecs"]["Master"] = job["spec"]["tfReplicaSpecs"]["Chief"]


def test_the_operator_webhook_denies_a_tfjob_it_cannot_run(k8s, shardtrain_ns):
    """The denial comes from the operator's own webhook, not from our validation."""
    for mutate, words in (
        (_rename_container, "tensorflow"),
        (_chief_and_master, "Chief"),
    ):
        out = _server_dry_run(k8s, _broken(mutate))
        assert out.returncode != 0, mutate.__name__
        assert 'admission webhook "validator.tfjob.training-operator.kubeflow.org" denied' in (
            out.stderr
        ), out.stderr
        assert words in out.stderr, out.stderr


def test_the_crd_schema_denies_a_malformed_tfjob(k8s, shardtrain_ns):
    def bad_replicas(job: dict) -> None:
        job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "two"

    out = _server_dry_run(k8s, _broken(bad_replicas))
    assert out.returncode != 0
    # The CRD schema says "integer"; Kueue's TFJob webhook, which the API server calls first
    # when Kueue runs, fails to decode the job and says "int32": either way, denied by name.
    assert "replicas" in out.stderr, out.stderr
    assert "integer" in out.stderr or "of type int32" in out.stderr, out.stderr


# ------------------------------------------------------------------------------------------
# shardtrain tfjob submit: the wait, without a node
# ------------------------------------------------------------------------------------------


def _submit_args(ns: str, name: str, data: str, model_dir: str, *more: str) -> list[str]:
    return [
        "tfjob",
        "submit",
        "--namespace",
        ns,
        "--name",
        name,
        "--data",
        data,
        "--model-dir",
        model_dir,
        "--gpus-per-worker",
        "0",
        "--cpu",
        "500m",
        "--memory",
        "1Gi",
        "--poll-interval",
        "2",
        *more,
    ]


def test_a_job_outlasting_the_wait_timeout_fails_the_submit_command(k8s):
    """A job that never ends (here no node runs its pod) outlasts the wait: the submit
    command fails naming the timeout, and --delete removes the job and, by the garbage
    collector, its pod. (On a real node its GPU request keeps it Pending, and the scheduler's
    reason: tests/cluster/test_tfjob.py.)"""
    ns = k8s.namespace(service_accounts=("shardtrain-trainer",))
    args = [
        "tfjob",
        "submit",
        "--namespace",
        ns,
        "--name",
        "stuck",
        "--data",
        DATA,
        "--model-dir",
        MODEL,
        "--workers",
        "0",
        "--no-evaluator",
        "--gpus-per-worker",
        "1",
        "--secret",
        "",
        "--poll-interval",
        "1",
        "--wait-timeout",
        "4",
        "--delete",
    ]
    proc = run_cli(*args, timeout=120)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    assert f"TFJob {ns}/stuck did not end within 4s; deleted (--delete)" in text, text
    assert "still on the cluster" not in text, text  # what it said before deleting the job
    # --delete: the job is gone once the wait ended, and the garbage collector takes its pod.
    assert "NotFound" in k8s.kubectl("get", "tfjob", "stuck", "-n", ns, check=False).stderr
    deadline = time.monotonic() + 60
    while (pod := get(k8s, "pod", ns, "stuck-chief-0")) is not None:
        assert "nodeName" not in pod["spec"], pod["spec"]  # no node, no scheduler here
        assert time.monotonic() < deadline, "the deleted TFJob's pod stayed" + describe(k8s, ns)
        time.sleep(0.5)


# ------------------------------------------------------------------------------------------
# The pipeline's train step: the launcher's Role (the pipeline on it: tests/cluster)
# ------------------------------------------------------------------------------------------


def test_the_launcher_role_allows_launching_and_nothing_more(k8s, tmp_path):
    ns = k8s.namespace(service_accounts=("shardtrain-trainer",))
    kubeconfig = launcher_kubeconfig(k8s, ns, tmp_path / "launcher.kubeconfig")

    def can(*what: str) -> bool:
        out = k8s.kubectl("--kubeconfig", str(kubeconfig), "auth", "can-i", *what, check=False)
        return out.stdout.strip() == "yes"

    assert can("create", "tfjobs.kubeflow.org", "-n", ns)
    assert can("get", "pods", "--subresource=log", "-n", ns)
    assert not can("get", "secrets", "-n", ns)
    assert not can("create", "pods", "-n", ns)
    assert not can("create", "tfjobs.kubeflow.org", "-n", "default")


def test_a_queued_job_waits_suspended_and_a_timeout_says_it_is_still_queued(k8s):
    """``--queue`` creates the job suspended, as Kueue expects: the real operator then creates no
    pods and reports Suspended until Kueue admits it (clears ``runPolicy.suspend``); ``submit``
    says the job is queued, and a wait that ends first is a timeout naming the queue state, not
    a failure. (Admission and preemption sequences:
    tests/unit/kubeflow/jobs/tfjob/test_submit.py.)"""
    ns = k8s.namespace(service_accounts=("shardtrain-trainer",))
    args = _submit_args(ns, "queued", DATA, MODEL, "--queue", "gpu-team", "--secret", "")
    args += ["--wait-timeout", "8", "--poll-interval", "1"]
    proc = run_cli(*args, timeout=120)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    assert "is queued: suspended until its queue admits it" in text, text
    assert "did not end within 8s; it is still queued (suspended" in text, text
    job = json.loads(k8s.kubectl("get", "tfjob", "queued", "-n", ns, "-o", "json").stdout)
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-team"
    assert job["spec"]["runPolicy"]["suspend"] is True
    conditions = {c["type"]: c["status"] for c in job["status"]["conditions"]}
    assert conditions.get("Suspended") == "True", conditions
    assert k8s.kubectl("get", "pods", "-n", ns, "-o", "name").stdout.strip() == ""
