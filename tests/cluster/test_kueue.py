"""Queued TrainJobs under a live Kueue, their pods real containers of our image on the node:
two jobs with quota for one run one after the other, and a repeated submit attaches.

scripts/k8s-up runs Kueue as root (integrations ``trainer.kubeflow.org/trainjob``,
``jobset.x-k8s.io/jobset`` and ``kubeflow.org/tfjob``) beside the training operator, JobSet and
Trainer. The queues are ``k8s/kueue`` as a cluster admin applies them: a ClusterQueue with quota
for exactly one 2-node CPU job (1 CPU, 2Gi: 500m and 1Gi a node) and the LocalQueue
``shardtrain``, here in the test's namespace. Nothing fakes Kueue: its webhook suspends a new
job that names the queue (we also create it suspended), its scheduler reserves quota and admits
the job's Workload, its job controller unsuspends the job, and it frees the quota when the job
finishes, which here means when the kubelet reports the chief's container exited 0.

The twins of the pod-running tests of tests/integration/kubeflow/jobs/test_kueue.py (from the
days of the node agent); what needs no running pod (a queued TFJob admitted and unsuspended)
stays there.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cluster.jobs import assert_runs_our_image, cli, describe, no_credentials, start
from cluster.nodes import Node
from cluster_jobs import job_namespace
from kueue_queues import (
    QUEUE,
    condition,
    install_queues,
    is_true,
    local_queue,
    wait_for,
    workload_of,
)
from servers import MinioServer

KINDS = "pods,jobs,jobsets,trainjobs,workloads"


@pytest.fixture(scope="module")
def queues(node: Node) -> str:
    """k8s/kueue applied (ResourceFlavor, ClusterQueue); LocalQueues come per namespace."""
    queue = install_queues(node)
    assert queue, "k8s-up ran without Kueue (the cluster tier runs as root)"
    return queue


# ------------------------------------------------------------------------------------------
# Two TrainJobs, quota for one
# ------------------------------------------------------------------------------------------


@dataclass
class Pair:
    """What the two-job run saw (asserted by the tests below)."""

    ns: str
    args: dict[str, list[str]]
    outputs: dict[str, str] = field(default_factory=dict)
    codes: dict[str, int] = field(default_factory=dict)
    #: The second's Workload once Kueue had looked at it: its QuotaReserved condition, and
    #: whether the first job had not completed yet then.
    held: dict | None = None
    first_unfinished_then: bool = False
    #: What the polls saw while the first job's pods ran with the second admitted or
    #: unsuspended (must be nothing).
    overlaps: list[str] = field(default_factory=list)
    #: Whether a poll saw pods of both jobs Pending or Running at once (must be never).
    both_pods: list[str] = field(default_factory=list)


def _submit(ns: str, name: str, image: str, data: str, model_dir: str) -> list[str]:
    """A 2-node TrainJob of exactly the ClusterQueue's quota (2 x 500m, 2 x 1Gi)."""
    return [
        "trainjob", "submit", "--namespace", ns, "--name", name, "--image", image,
        "--data", data, "--model-dir", model_dir, "--queue", QUEUE, "--nodes", "2",
        "--gpus-per-node", "0", "--cpu", "500m", "--memory", "1Gi", "--poll-interval", "2",
        "--termination-grace-seconds", "30", "--wait-timeout", "900",
        "--", "--train-steps", "40", "--batch-size", "32", "--checkpoint-every", "40",
    ]  # fmt: skip


def _pods(node: Node, ns: str, name: str) -> list[dict]:
    return node.pods(ns, f"jobset.sigs.k8s.io/jobset-name={name}")


def _live(pods: list[dict]) -> int:
    return sum(p["status"].get("phase") in ("Pending", "Running") for p in pods)


@pytest.fixture(scope="module")
def pair(
    node: Node,
    image: str,
    node_minio: MinioServer,
    quest_data: str,
    queues: str,
    trainer_runtime: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Pair:
    """Two 2-node TrainJobs submitted with ``--queue`` (the second once the first has its
    Workload), watched until both submits end."""
    tmp = tmp_path_factory.mktemp("kueue")
    ns = job_namespace(node, node_minio)
    local_queue(node, ns)
    names = ("first", "second")
    run = Pair(ns, {n: _submit(ns, n, image, quest_data, node_minio.uri(f"kq-{n}")) for n in names})
    procs: dict[str, subprocess.Popen] = {}
    logs: dict[str, Path] = {}

    def launch(name: str) -> None:
        logs[name] = tmp / f"{name}.log"
        procs[name] = start(node, run.args[name], logs[name])

    def explain() -> str:
        text = "".join(f"\n--- {n}:\n{p.read_text()[-2000:]}" for n, p in logs.items())
        return text + describe(node, ns, KINDS)

    try:
        launch("first")
        # The second right behind the first (StrictFIFO admits in creation order).
        wait_for(
            "the first TrainJob's Workload",
            lambda: workload_of(node, ns, "TrainJob", "first"),
            180,
            explain,
        )
        launch("second")
        wait_for(
            "Kueue's verdict on the second TrainJob's Workload",
            lambda: condition(workload_of(node, ns, "TrainJob", "second"), "QuotaReserved"),
            120,
            explain,
        )
        run.held = condition(workload_of(node, ns, "TrainJob", "second"), "QuotaReserved")
        run.first_unfinished_then = not is_true(node.get("trainjob", "first", ns), "Complete")
        while any(p.poll() is None for p in procs.values()):
            first_live = _live(_pods(node, ns, "first"))
            second_live = _live(_pods(node, ns, "second"))
            second = node.get("trainjob", "second", ns)
            wl = workload_of(node, ns, "TrainJob", "second")
            admitted = second is not None and (
                not second["spec"].get("suspend") or is_true(wl, "Admitted")
            )
            if first_live and admitted:
                run.overlaps.append(
                    f"{first_live} pods of the first live; second suspend="
                    f"{second['spec'].get('suspend')}, Workload {wl and wl.get('status')}"
                )
            if first_live and second_live:
                run.both_pods.append(f"first {first_live}, second {second_live} pods live")
            time.sleep(1)
        for name, proc in procs.items():
            run.codes[name] = proc.wait()
            run.outputs[name] = logs[name].read_text()
        if any(run.codes.values()):
            run.outputs["explain"] = explain()
        return run
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_two_queued_trainjobs_run_one_after_the_other_within_the_quota(
    node: Node, image: str, node_minio: MinioServer, pair: Pair
) -> None:
    """Quota for one job: while the first one's pods ran, the second waited suspended, its
    Workload without quota ("insufficient unused quota"), and no pod of it existed; Kueue
    admitted it once the first had completed, and both trained to Complete in real pods of our
    image. Then the ClusterQueue holds nothing."""
    ns = pair.ns
    assert pair.codes == {"first": 0, "second": 0}, pair.outputs.get("explain", pair.outputs)
    assert not pair.overlaps, pair.overlaps
    assert not pair.both_pods, pair.both_pods
    assert pair.first_unfinished_then
    assert pair.held is not None and pair.held["status"] == "False", pair.held
    assert "insufficient unused quota" in pair.held["message"], pair.held
    second_out = pair.outputs["second"]
    assert f"TrainJob {ns}/second is queued" in second_out, second_out[-3000:]
    assert f"TrainJob {ns}/second was admitted" in second_out, second_out[-3000:]
    jobs = {n: node.get("trainjob", n, ns) for n in ("first", "second")}
    for name, job in jobs.items():
        assert is_true(job, "Complete"), (name, job["status"])
        assert f"TrainJob {ns}/{name} succeeded" in pair.outputs[name], pair.outputs[name][-3000:]
        pods = _pods(node, ns, name)
        assert len(pods) == 2, describe(node, ns, KINDS)
        for pod in pods:
            assert_runs_our_image(pod, node, image)
            state = pod["status"]["containerStatuses"][0]["state"]
            assert state["terminated"]["exitCode"] == 0, pod["status"]
        no_credentials(node_minio, pair.outputs[name])
    admitted = condition(workload_of(node, ns, "TrainJob", "second"), "Admitted")
    assert admitted is not None, "the second's Workload has no Admitted condition"
    completed = condition(jobs["first"], "Complete")
    assert admitted["lastTransitionTime"] >= completed["lastTransitionTime"], (admitted, completed)
    # The second's pods started only after the first's containers had all exited.
    first_end = max(
        p["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"]
        for p in _pods(node, ns, "first")
    )
    second_start = min(
        p["status"]["containerStatuses"][0]["state"]["terminated"]["startedAt"]
        for p in _pods(node, ns, "second")
    )
    assert second_start >= first_end, (first_end, second_start)

    # Kueue released the quota of both: the ClusterQueue admits nothing and holds nothing.
    # Its status is written a moment after the Workload finishes, so this is a wait.
    def queue_status() -> dict:
        return json.loads(node.kubectl("get", "clusterqueue", QUEUE, "-o", "json").stdout)["status"]

    wait_for(
        "the ClusterQueue releasing both jobs' quota",
        lambda: (
            (s := queue_status()).get("admittedWorkloads", 0) == 0
            and s.get("pendingWorkloads", 0) == 0
        ),
        60,
        lambda: f": {queue_status()}",
    )


def test_a_repeated_submit_of_a_queued_trainjob_attaches(node: Node, pair: Pair) -> None:
    """The first job's submit again (a retried pipeline step): it attaches to the finished
    TrainJob and reports its success; no pod is created, nothing is queued again."""
    before = {p["metadata"]["uid"] for p in _pods(node, pair.ns, "first")}
    again = cli(node, *pair.args["first"], timeout=300)
    text = again.stdout + again.stderr
    assert again.returncode == 0, text[-3000:]
    assert f"attached to TrainJob {pair.ns}/first" in text and "succeeded" in text, text[-3000:]
    assert {p["metadata"]["uid"] for p in _pods(node, pair.ns, "first")} == before
    assert is_true(workload_of(node, pair.ns, "TrainJob", "first"), "Finished")
