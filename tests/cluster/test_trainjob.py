"""TrainJobs of our runtime as real pods of our image: three nodes to Complete and a repeated
submit that attaches, a node SIGKILLed (as the OOM killer does) and the job resumed, a permanent
error failing the job at once, and the Kubeflow pipeline's train step.

The twins of the pod-running tests that tests/integration/kubeflow/jobs/test_trainjob.py had
while a node agent ran pods as host processes. Nothing fakes a controller or a kubelet: Trainer
turns the TrainJob into a JobSet, JobSet into Indexed Jobs, the Job controller into pods, the
kubelet runs them as containers (uid 10001) and reports the exit codes our trainer gives, and
the restarts and failures below are JobSet's and the Job controller's decisions on those codes
under our runtime's failure policy (k8s/trainer-v2: exit 1-3 fails the JobSet at once, any other
failure recreates every node, at most maxRestarts times).
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from cluster.jobs import (
    INDEX,
    assert_every_node_restarted,
    assert_runs_our_image,
    cli,
    common_args,
    describe,
    has_export,
    keep_pod,
    no_credentials,
    running_after_a_checkpoint,
    start,
)
from cluster.nodes import Node
from cluster_jobs import job_namespace, run_pipeline_on_cluster
from servers import MinioServer
from shardtrain import storage

KINDS = "pods,jobs,jobsets,trainjobs"
#: Long enough that the survivors still train when the killed node's exit is seen (40-70 steps
#: a second per node here once started; slower with three sessions on two cores).
KILL_STEPS = 600


def _submit_args(
    ns: str, name: str, image: str, data: str, model_dir: str, runtime: str, *more: str
) -> list[str]:
    return [
        "trainjob", "submit", *common_args(ns, name, image, data, model_dir),
        "--gpus-per-node", "0", "--runtime", runtime, *more,
    ]  # fmt: skip


def _true(obj: dict) -> set[str]:
    return {c["type"] for c in obj["status"].get("conditions", ()) if c["status"] == "True"}


def _terminated(pod: dict) -> dict | None:
    return (pod["status"].get("containerStatuses") or [{}])[0].get("state", {}).get("terminated")


def test_a_trainjob_of_three_nodes_trains_to_complete_and_a_repeated_submit_attaches(
    node: Node, image: str, node_minio: MinioServer, quest_data: str, trainer_runtime: str
) -> None:
    """Three nodes of 500m (the node's 2 CPUs hold them beside CoreDNS) all-reduce to
    Complete; the same submit again (a retried pipeline step) attaches to the finished TrainJob
    and reports its success without creating a pod; another job under the name is refused in
    one line."""
    ns = job_namespace(node, node_minio)
    model_dir = node_minio.uri("tj-three")
    args = _submit_args(
        ns, "quest", image, quest_data, model_dir, trainer_runtime,
        "--nodes", "3", "--cpu", "500m", "--wait-timeout", "900",
        "--", "--train-steps", "60", "--batch-size", "48", "--checkpoint-every", "30",
    )  # fmt: skip
    proc = cli(node, *args, timeout=1000)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-5000:] + describe(node, ns, KINDS)
    assert f"created TrainJob {ns}/quest" in text
    assert f"TrainJob {ns}/quest succeeded" in text
    # The chief (node 0) log streamed through the API server; the three nodes trained together,
    # peers by JobSet's DNS names through CoreDNS.
    assert re.search(r"\[quest-node-0-0-\w+\]: chief: trained to step 60 \(from 0\)", text), text[
        -3000:
    ]
    assert "group_size = 3" in text, text[-3000:]
    trainjob = node.get("trainjob", "quest", ns)
    assert "Complete" in _true(trainjob), trainjob["status"]
    assert node.get("jobset", "quest", ns)["status"].get("restarts", 0) == 0
    pods = node.pods(ns)
    assert sorted(p["metadata"]["labels"][INDEX] for p in pods) == ["0", "1", "2"], describe(
        node, ns, KINDS
    )
    for pod in pods:
        assert_runs_our_image(pod, node, image)
        assert _terminated(pod)["exitCode"] == 0, pod["status"]
    metrics = storage.read_json(storage.join(model_dir, "eval", "metrics.json"))
    assert metrics["step"] == 60
    assert has_export(model_dir)
    no_credentials(node_minio, text)

    # The same submit again: it attaches to the finished job, which neither reruns nor restarts.
    again = cli(node, *args, timeout=300)
    text = again.stdout + again.stderr
    assert again.returncode == 0, text[-3000:]
    assert f"attached to TrainJob {ns}/quest" in text and "succeeded" in text, text[-3000:]
    assert "created TrainJob" not in text
    after = node.get("trainjob", "quest", ns)
    assert after["metadata"]["uid"] == trainjob["metadata"]["uid"]
    assert {p["metadata"]["uid"] for p in node.pods(ns)} == {p["metadata"]["uid"] for p in pods}
    assert node.get("jobset", "quest", ns)["status"].get("restarts", 0) == 0
    # Another job under that name is refused in one line.
    other = cli(
        node,
        *_submit_args(ns, "quest", image, quest_data, node_minio.uri("tj-other"), trainer_runtime),
        timeout=300,
    )
    assert other.returncode != 0
    assert "already exists and runs something else" in other.stderr.strip().splitlines()[-1]


def sigkill_container(node: Node, ns: str, pod: dict, survivor: dict) -> tuple[dict, dict]:
    """SIGKILL the pod's container's main process from the host, as the kernel's OOM killer
    does (from inside, PID 1 of the container ignores a SIGKILL of its own namespace). Returns
    the terminated states the kubelet reports for it and for ``survivor``, the other node's
    pod, which JobSet's restart (or the lost peer) ends next; both pods are kept until read."""
    cid = pod["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    tasks = node.ctr("tasks", "ls").stdout.splitlines()
    (pid,) = [int(line.split()[1]) for line in tasks[1:] if line.split()[0] == cid]
    # The host process is our trainer (the image's entrypoint, PID 1 in the container).
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"train" in cmdline and any(b"shardtrain" in a for a in cmdline), cmdline
    kept = []
    try:
        for p in (pod, survivor):
            keep_pod(node, ns, p, True)
            kept.append(p)
        os.kill(pid, signal.SIGKILL)
        states = [
            _terminated(node.wait_pod(p["metadata"]["name"], ns, _terminated, timeout=180))
            for p in kept
        ]
    finally:
        for p in kept:
            keep_pod(node, ns, p, False)
    return states[0], states[1]


def test_a_node_sigkilled_exits_137_every_node_restarts_and_the_job_resumes_to_its_steps(
    node: Node,
    image: str,
    node_minio: MinioServer,
    quest_data: str,
    trainer_runtime: str,
    tmp_path: Path,
) -> None:
    """A real fault, not a preemption: node 1's trainer is SIGKILLed (no checkpoint on the
    way out). The kubelet reports exit 137, which our runtime's pod failure policy does not
    take as permanent (only 1-3): the Job fails on its backoff limit, JobSet's failure policy
    recreates every node, they restore the last checkpoint and end at exactly --train-steps.
    (SIGTERM, by pod deletion with a grace period, is test_jobs.py's preemption test; the node
    agent's twin of this test signalled a host process, with exit code -9 turned into 137.)"""
    ns = job_namespace(node, node_minio)
    model_dir = node_minio.uri("tj-killed")
    args = _submit_args(
        ns, "lost", image, quest_data, model_dir, trainer_runtime,
        "--nodes", "2", "--cpu", "900m", "--wait-timeout", "900",
        "--", "--train-steps", str(KILL_STEPS), "--batch-size", "32", "--checkpoint-every", "20",
    )  # fmt: skip
    log_path = tmp_path / "submit.log"

    def of_index(i: int) -> dict | None:
        return next(iter(node.pods(ns, f"jobset.sigs.k8s.io/jobset-name=lost,{INDEX}={i}")), None)

    submit = start(node, args, log_path)
    try:
        first = running_after_a_checkpoint(
            node, ns, lambda: of_index(1), model_dir, submit, log_path
        )
        chief = of_index(0)
        terminated, chief_end = sigkill_container(node, ns, first, chief)
        code = submit.wait(timeout=900)
    finally:
        if submit.poll() is None:
            submit.kill()
    text = log_path.read_text()

    assert terminated["exitCode"] == 137, terminated
    assert terminated["reason"] == "Error", terminated  # not OOMKilled: no cgroup OOM
    # The chief ends on its own terms: 200 when it saw its peer go (PeerLostError), or 143
    # when JobSet's restart deleted it first (SIGTERM: checkpoint, exit); never the kubelet's
    # 137 after the grace period (a collective left waiting forever on the lost peer).
    assert chief_end["exitCode"] in (143, 200), chief_end
    assert code == 0, text[-5000:] + describe(node, ns, KINDS)
    assert f"TrainJob {ns}/lost succeeded" in text
    for pod in assert_every_node_restarted(node, ns, "lost", first, image, KINDS):
        assert _terminated(pod)["exitCode"] == 0, pod["status"]
    step = int(re.search(r"restored checkpoint step (\d+)", text).group(1))
    assert 20 <= step < KILL_STEPS, text[-3000:]
    metrics = storage.read_json(storage.join(model_dir, "eval", "metrics.json"))
    assert metrics["step"] == KILL_STEPS
    no_credentials(node_minio, text)


def test_a_permanent_error_fails_the_trainjob_at_once_in_one_line(
    node: Node, image: str, node_minio: MinioServer, trainer_runtime: str
) -> None:
    """Exit code 1 (no dataset there): the kubelet reports it, the Job's pod failure policy
    fails the Job (reason PodFailurePolicy), JobSet's rule fails the JobSet without a restart,
    the TrainJob is Failed and submit says why in its last line: JobSet's reason, then the
    failed pod's exit code and the trainer's own error line (read through ``kubectl logs``)."""
    ns = job_namespace(node, node_minio)
    args = _submit_args(
        ns, "bad", image, node_minio.uri("tj-no-such-dataset"), node_minio.uri("tj-bad-model"),
        trainer_runtime, "--nodes", "2", "--cpu", "300m", "--wait-timeout", "600",
        "--", "--train-steps", "10",
    )  # fmt: skip
    proc = cli(node, *args, timeout=700)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1, text[-3000:] + describe(node, ns, KINDS)
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: TrainJob {ns}/bad failed: "), text[-3000:]
    assert "FailJobSet" in line, line
    assert re.search(r"; pod bad-node-0-\d-\w+ exited 1: error: ", line), line
    assert "tj-no-such-dataset" in line, line
    no_credentials(node_minio, text)

    assert "Failed" in _true(node.get("trainjob", "bad", ns))
    assert node.get("jobset", "bad", ns)["status"].get("restarts", 0) == 0
    jobs = json.loads(node.kubectl("get", "jobs", "-n", ns, "-o", "json").stdout)["items"]
    reasons = {c.get("reason") for j in jobs for c in j["status"].get("conditions", ())}
    assert "PodFailurePolicy" in reasons, [j["status"] for j in jobs]
    pods = node.pods(ns)
    failed = [p for p in pods if (_terminated(p) or {}).get("exitCode") == 1]
    assert failed, describe(node, ns, KINDS)
    for pod in failed:
        assert_runs_our_image(pod, node, image)
    # Never recreated: every pod is of the first attempt.
    assert all(p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "0" for p in pods)


@pytest.mark.usefixtures("trainer_runtime")
def test_the_pipeline_trains_a_trainjob_where_the_cluster_serves_trainer_v2(
    node: Node,
    image: str,
    node_minio: MinioServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The whole csv_to_model pipeline under kfp.local, its steps here; its train step in
    cluster mode (job_api auto) finds trainer.kubeflow.org and our runtime and submits a
    TrainJob of 2 nodes of our image (the pipeline's ``image`` parameter) with a token bound to
    k8s/rbac's Role only; the nodes read the dataset from the node's MinIO with the namespace's
    Secret."""
    ns, run = run_pipeline_on_cluster(
        node, node_minio, tmp_path, monkeypatch, "tj-pipeline", image=image
    )
    logs = capfd.readouterr()
    text = logs.out + logs.err
    jobs = json.loads(node.kubectl("get", "trainjobs", "-n", ns, "-o", "json").stdout)["items"]
    assert len(jobs) == 1, text[-3000:]
    job = jobs[0]
    assert job["spec"]["trainer"]["numNodes"] == 2
    assert job["spec"]["trainer"]["image"] == image
    assert "Complete" in _true(job), job["status"]
    assert f"TrainJob {ns}/{job['metadata']['name']} succeeded" in text
    assert not json.loads(node.kubectl("get", "tfjobs", "-n", ns, "-o", "json").stdout)["items"]
    pods = node.pods(ns)
    assert len(pods) == 2, describe(node, ns, KINDS)
    for pod in pods:
        assert_runs_our_image(pod, node, image)
        assert _terminated(pod)["exitCode"] == 0, pod["status"]
    assert run.metrics["step"] == 40
    assert storage.exists(f"{run.served}/saved_model.pb")
    no_credentials(node_minio, text)
