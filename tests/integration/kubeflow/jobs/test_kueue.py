"""Queued jobs under a live Kueue, as far as no pod has to run: a queued TFJob admitted within
a ClusterQueue's quota and unsuspended.

The ``k8s`` fixture (tests/conftest.py) starts the control plane with ``scripts/k8s-up``, which
runs Kueue as root (integrations ``trainer.kubeflow.org/trainjob``, ``jobset.x-k8s.io/jobset``
and ``kubeflow.org/tfjob``) beside the training operator, JobSet and Trainer, with no node: the
pods of an unsuspended job stay Pending, which Kueue's admission does not wait for. The queues
are ``k8s/kueue`` as a cluster admin applies them: a ClusterQueue with quota for exactly one
2-node CPU job (1 CPU, 2Gi) and the LocalQueue ``shardtrain``, here in each test's namespace.
Nothing fakes Kueue: its webhook suspends a new job that names the queue (we also create it
suspended), its scheduler reserves quota and admits the job's Workload, its job controller
unsuspends the job. Queued TrainJobs that run (two within the quota for one, one after the
other; a repeated submit attaching) are real pods in tests/cluster/test_kueue.py.
"""

from __future__ import annotations

import pytest
import yaml

from cluster_jobs import describe, get, job_namespace
from helpers import run_cli
from kueue_queues import (
    QUEUE,
    install_queues,
    is_true,
    local_queue,
    wait_for,
    workload_of,
)

pytestmark = pytest.mark.k8s

KINDS = "pods,jobs,jobsets,trainjobs,workloads,tfjobs"


@pytest.fixture(scope="module")
def queues(k8s) -> str:
    """k8s/kueue applied (ResourceFlavor, ClusterQueue); LocalQueues come per namespace."""
    queue = install_queues(k8s)
    if not queue:
        pytest.skip("scripts/k8s-up runs Kueue only as root")
    return queue


# ------------------------------------------------------------------------------------------
# TFJob: Kueue's `kubeflow.org/tfjob` integration (off by default upstream, on here)
# ------------------------------------------------------------------------------------------


def test_a_queued_tfjob_is_admitted_by_kueue_and_unsuspended(k8s, minio, queues):
    ns = job_namespace(k8s, minio)
    local_queue(k8s, ns)
    out = run_cli(
        "tfjob", "render", "--namespace", ns, "--name", "queued", "--queue", QUEUE,
        "--workers", "1", "--no-evaluator", "--gpus-per-worker", "0", "--cpu", "250m",
        "--memory", "512Mi",
        "--data", minio.uri("kq-none"), "--model-dir", minio.uri("kq-none-model"), check=True,
    )  # fmt: skip
    job = yaml.safe_load(out.stdout)
    assert job["spec"]["runPolicy"]["suspend"] is True
    k8s.kubectl("apply", "-f", "-", input=out.stdout)
    try:
        wait_for(
            "the TFJob's Workload admitted and the TFJob unsuspended",
            lambda: (
                is_true(workload_of(k8s, ns, "TFJob", "queued"), "Admitted")
                and not get(k8s, "tfjob", ns, "queued")["spec"]["runPolicy"].get("suspend")
            ),
            120,
            lambda: describe(k8s, ns, KINDS),
        )
        wl = workload_of(k8s, ns, "TFJob", "queued")
        assert wl["spec"]["queueName"] == QUEUE
        assert wl["status"]["admission"]["clusterQueue"] == QUEUE
        # Its two replicas (chief, worker) count against the quota, 250m and 512Mi each.
        usage = {
            ps["name"]: ps.get("resourceUsage")
            for ps in wl["status"]["admission"]["podSetAssignments"]
        }
        assert usage == {
            "chief": {"cpu": "250m", "memory": "512Mi"},
            "worker": {"cpu": "250m", "memory": "512Mi"},
        }, wl["status"]["admission"]
    finally:
        k8s.kubectl("delete", "tfjob", "queued", "-n", ns, "--wait=false", check=False)
