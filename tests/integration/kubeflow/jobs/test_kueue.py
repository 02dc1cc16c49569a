"""Queued jobs under a live Kueue: admitted within a ClusterQueue's quota, held back, resumed.

The ``k8s`` fixture (tests/conftest.py) starts the control plane with ``scripts/k8s-up``, which
runs Kueue (integrations ``trainer.kubeflow.org/trainjob``, ``jobset.x-k8s.io/jobset`` and
``kubeflow.org/tfjob``) beside the training operator, JobSet and Trainer, and a node agent that
runs the pods here. The queues are ``k8s/kueue`` as a cluster admin applies them: a ClusterQueue
with quota for exactly one 2-node CPU job (1 CPU, 2Gi) and the LocalQueue ``shardtrain``, here
in each test's namespace. Nothing fakes Kueue: its webhook suspends a new job that names the
queue (we also create it suspended), its scheduler reserves quota and admits the job's Workload,
its job controller unsuspends the job, and it frees the quota when the job finishes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from cluster_jobs import REPO, describe, get, job_namespace, shard_quest
from helpers import run_cli

pytestmark = pytest.mark.k8s

QUEUE = "shardtrain"
KINDS = "pods,jobs,jobsets,trainjobs,workloads,tfjobs"
#: Storage credentials reach the pods only through the Secret.
NO_AWS = {name: "" for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}


@pytest.fixture(scope="module")
def queues(k8s) -> str:
    """k8s/kueue applied (ResourceFlavor, ClusterQueue); LocalQueues come per namespace."""
    if "KUEUE=true" not in (k8s.state_dir / "env").read_text():
        pytest.skip("scripts/k8s-up runs Kueue only as root")
    if k8s.kubectl("get", "namespace", "shardtrain", check=False).returncode != 0:
        k8s.kubectl("create", "namespace", "shardtrain")  # the LocalQueue's, as shipped
    k8s.kubectl("apply", "--server-side", "-k", str(REPO / "k8s" / "kueue"))
    return QUEUE


def local_queue(k8s, ns: str) -> None:
    """k8s/kueue's LocalQueue in namespace ``ns``."""
    docs = [d for d in yaml.safe_load_all(k8s.kubectl("kustomize", str(REPO / "k8s/kueue")).stdout)]
    (lq,) = [d for d in docs if d and d["kind"] == "LocalQueue"]
    lq["metadata"]["namespace"] = ns
    k8s.kubectl("apply", "-f", "-", input=yaml.safe_dump(lq))


@pytest.fixture(scope="module")
def trainer_runtime(k8s) -> str:
    k8s.kubectl("apply", "--server-side", "-k", str(REPO / "k8s" / "trainer-v2"))
    return "shardtrain-tensorflow"


def workload_of(k8s, ns: str, kind: str, name: str) -> dict | None:
    """The Workload Kueue made for the job (its owner), None before it exists."""
    out = json.loads(k8s.kubectl("get", "workloads", "-n", ns, "-o", "json").stdout)
    for wl in out["items"]:
        owners = wl["metadata"].get("ownerReferences") or ()
        if any(o["kind"] == kind and o["name"] == name for o in owners):
            return wl
    return None


def condition(obj: dict | None, kind: str) -> dict | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or ():
        if c["type"] == kind:
            return c
    return None


def is_true(obj: dict | None, kind: str) -> bool:
    c = condition(obj, kind)
    return bool(c and c["status"] == "True")


def wait_for(what: str, check, timeout: float, explain) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} within {timeout:.0f} s" + explain()
        time.sleep(1)


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


def _submit(ns: str, name: str, data: str, model_dir: str) -> list[str]:
    return [
        "trainjob", "submit", "--namespace", ns, "--name", name, "--data", data,
        "--model-dir", model_dir, "--queue", QUEUE, "--nodes", "2", "--gpus-per-node", "0",
        "--cpu", "500m", "--memory", "1Gi", "--poll-interval", "2", "--wait-timeout", "900",
        "--", "--train-steps", "40", "--batch-size", "32", "--checkpoint-every", "40",
    ]  # fmt: skip


def _running_pods(k8s, ns: str, name: str) -> int:
    pods = json.loads(
        k8s.kubectl(
            "get", "pods", "-n", ns, "-l", f"jobset.sigs.k8s.io/jobset-name={name}", "-o", "json"
        ).stdout
    )["items"]
    return sum(p["status"].get("phase") in ("Pending", "Running") for p in pods)


@pytest.fixture(scope="module")
def pair(k8s, minio, queues, trainer_runtime, tmp_path_factory) -> Pair:
    """Two 2-node TrainJobs submitted with ``--queue`` (the second once the first is
    admitted), watched until both submits end."""
    tmp = tmp_path_factory.mktemp("kueue")
    data = shard_quest(minio, tmp, "kq-data", 1200)
    ns = job_namespace(k8s, minio)
    local_queue(k8s, ns)
    run = Pair(ns, {n: _submit(ns, n, data, minio.uri(f"kq-{n}")) for n in ("first", "second")})
    procs: dict[str, subprocess.Popen] = {}
    logs: dict[str, Path] = {}

    def start(name: str) -> None:
        logs[name] = tmp / f"{name}.log"
        with open(logs[name], "w") as log:
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "shardtrain.cli", *run.args[name]],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **NO_AWS},
            )

    def explain() -> str:
        text = "".join(f"\n--- {n}:\n{p.read_text()[-2000:]}" for n, p in logs.items())
        return text + describe(k8s, ns, KINDS)

    try:
        start("first")
        # The second right behind the first (StrictFIFO admits in creation order).
        wait_for(
            "the first TrainJob's Workload",
            lambda: workload_of(k8s, ns, "TrainJob", "first"),
            180,
            explain,
        )
        start("second")
        wait_for(
            "Kueue's verdict on the second TrainJob's Workload",
            lambda: condition(workload_of(k8s, ns, "TrainJob", "second"), "QuotaReserved"),
            120,
            explain,
        )
        run.held = condition(workload_of(k8s, ns, "TrainJob", "second"), "QuotaReserved")
        run.first_unfinished_then = not is_true(get(k8s, "trainjob", ns, "first"), "Complete")
        while any(p.poll() is None for p in procs.values()):
            first_running = _running_pods(k8s, ns, "first")
            second = get(k8s, "trainjob", ns, "second")
            wl = workload_of(k8s, ns, "TrainJob", "second")
            admitted = second is not None and (
                not second["spec"].get("suspend") or is_true(wl, "Admitted")
            )
            if first_running and admitted:
                run.overlaps.append(
                    f"{first_running} pods of the first running; second suspend="
                    f"{second['spec'].get('suspend')}, Workload {wl and wl.get('status')}"
                )
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


@pytest.mark.minio
@pytest.mark.slow
def test_two_queued_trainjobs_run_one_after_the_other_within_the_quota(k8s, pair):
    ns = pair.ns
    assert pair.codes == {"first": 0, "second": 0}, pair.outputs.get("explain", pair.outputs)
    # While the first one's pods ran, the second waited suspended, its Workload without quota.
    assert not pair.overlaps, pair.overlaps
    assert pair.first_unfinished_then
    assert pair.held is not None and pair.held["status"] == "False", pair.held
    assert "insufficient unused quota" in pair.held["message"], pair.held
    second_out = pair.outputs["second"]
    assert f"TrainJob {ns}/second is queued" in second_out, second_out[-3000:]
    assert f"TrainJob {ns}/second was admitted" in second_out, second_out[-3000:]
    # Both ran to Complete; the second was admitted only once the first had completed.
    jobs = {n: get(k8s, "trainjob", ns, n) for n in ("first", "second")}
    for name, job in jobs.items():
        assert is_true(job, "Complete"), (name, job["status"])
        assert f"TrainJob {ns}/{name} succeeded" in pair.outputs[name], pair.outputs[name][-3000:]
    admitted = condition(workload_of(k8s, ns, "TrainJob", "second"), "Admitted")
    assert admitted is not None, "the second's Workload has no Admitted condition"
    completed = condition(jobs["first"], "Complete")
    assert admitted["lastTransitionTime"] >= completed["lastTransitionTime"], (admitted, completed)

    # Kueue released the quota of both: the ClusterQueue admits nothing and holds nothing.
    # Its status is written a moment after the Workload finishes (CI saw admittedWorkloads 1
    # just after the second job completed), so this is a wait, not a single read.
    def queue_status() -> dict:
        return json.loads(k8s.kubectl("get", "clusterqueue", QUEUE, "-o", "json").stdout)["status"]

    wait_for(
        "the ClusterQueue releasing both jobs' quota",
        lambda: (
            (s := queue_status()).get("admittedWorkloads", 0) == 0
            and s.get("pendingWorkloads", 0) == 0
        ),
        60,
        lambda: f": {queue_status()}",
    )


@pytest.mark.minio
@pytest.mark.slow
def test_a_repeated_submit_of_a_queued_trainjob_attaches(pair):
    again = run_cli(*pair.args["first"], env=NO_AWS, timeout=300)
    text = again.stdout + again.stderr
    assert again.returncode == 0, text[-3000:]
    assert f"attached to TrainJob {pair.ns}/first" in text and "succeeded" in text, text[-3000:]


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
