"""Our training jobs as real pods of our image: TFJob and TrainJob end to end on MinIO, and a
preemption as the kubelet does it (pod deletion with a grace period, SIGTERM, checkpoint, exit
143, restart, resume).

The twins of tests/integration/kubeflow/jobs/test_tfjob.py and test_trainjob.py, whose pods
the node agent runs as host processes: here the kubelet runs them as containers of the image
built from the Dockerfile (uid 10001, the image's filesystem and environment), the storage
Secret reaches them through ``secretKeyRef``, peers find each other through CoreDNS, MinIO is
at the node's address, and logs come through ``kubectl logs``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster.nodes import Node
from cluster_jobs import job_namespace, shard_quest
from helpers import run_cli
from servers import MinioServer
from shardtrain import storage

REPO = Path(__file__).resolve().parents[2]
ROWS = 2000
#: Enough steps that a replica still trains well after the first checkpoint has been seen
#: (here 40-70 steps a second once started).
PREEMPT_STEPS = 600
_INDEX = "batch.kubernetes.io/job-completion-index"  # the Job controller's pod label


@pytest.fixture(scope="module")
def quest_data(node_minio: MinioServer, tmp_path_factory: pytest.TempPathFactory) -> str:
    return shard_quest(node_minio, tmp_path_factory.mktemp("quest"), "quest-data", ROWS)


def _env(node: Node) -> dict[str, str]:
    """The submit command's: the cluster's kubeconfig and no storage credentials (the pods get
    theirs from the Secret only; the command needs none)."""
    return {"KUBECONFIG": node.kubeconfig, "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}


def _cli(node: Node, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=_env(node), timeout=timeout)


def _common(ns: str, name: str, image: str, data: str, model_dir: str) -> list[str]:
    return [
        "--namespace", ns, "--name", name, "--image", image, "--data", data,
        "--model-dir", model_dir, "--memory", "2Gi", "--poll-interval", "2",
        "--termination-grace-seconds", "30",
    ]  # fmt: skip


def _describe(node: Node, ns: str, kinds: str = "pods,tfjobs") -> str:
    out = node.kubectl("get", kinds, "-n", ns, "-o", "wide", check=False)
    events = node.kubectl("get", "events", "-n", ns, check=False)
    return f"\n{out.stdout}{out.stderr}\n{events.stdout[-4000:]}"


def _assert_runs_our_image(pod: dict, node: Node, image: str) -> None:
    """The pod ran on the real node as a container of our image, as uid 10001 (the kubelet
    refuses to start a runAsNonRoot container whose user is root)."""
    assert pod["spec"]["nodeName"] == node.name
    status = pod["status"]["containerStatuses"][0]
    assert status["image"] == image, status
    assert status["containerID"].startswith("containerd://"), status
    assert pod["spec"]["securityContext"]["runAsUser"] == 10001


def _no_credentials(minio: MinioServer, text: str) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert minio.env[name] not in text, name


def _has_export(model_dir: str) -> bool:
    return any(
        p.endswith("saved_model.pb") for p in storage.walk_files(storage.join(model_dir, "export"))
    )


def test_tfjob_chief_worker_and_evaluator_train_on_minio(
    node: Node, image: str, node_minio: MinioServer, quest_data: str
) -> None:
    ns = job_namespace(node, node_minio)
    model_dir = node_minio.uri("tfjob-model")
    proc = _cli(
        node,
        "tfjob", "submit", *_common(ns, "quest", image, quest_data, model_dir),
        "--workers", "1", "--evaluator", "--gpus-per-worker", "0", "--cpu", "300m",
        "--wait-timeout", "600",
        "--", "--train-steps", "40", "--batch-size", "32", "--checkpoint-every", "20",
    )  # fmt: skip
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-5000:] + _describe(node, ns)
    assert f"TFJob {ns}/quest succeeded" in text
    # The chief's log, streamed by the submit command from the kubelet through the API server.
    assert "[Pod quest-chief-0]: chief: trained to step 40 (from 0)" in text, text[-3000:]
    # Chief and worker all-reduce together: they found each other by TF_CONFIG's DNS names.
    assert "group_size = 2" in text, text[-3000:]

    chief = node.get("pod", "quest-chief-0", ns)
    _assert_runs_our_image(chief, node, image)
    assert chief["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    logs = node.kubectl("logs", "quest-chief-0", "-n", ns).stdout
    assert "chief: trained to step 40 (from 0)" in logs, logs[-3000:]
    job = node.get("tfjob", "quest", ns)
    assert job["status"]["replicaStatuses"]["Chief"].get("succeeded") == 1, job["status"]

    metrics = storage.read_json(storage.join(model_dir, "eval", "metrics.json"))
    assert metrics["step"] == 40
    assert _has_export(model_dir)
    _no_credentials(node_minio, text + logs)


@pytest.fixture(scope="module")
def trainer_runtime(node: Node) -> str:
    """Our ClusterTrainingRuntime, installed as the README says."""
    node.kubectl("apply", "--server-side", "-k", str(REPO / "k8s" / "trainer-v2"))
    return "shardtrain-tensorflow"


def test_trainjob_of_two_nodes_on_our_runtime_trains_to_complete(
    node: Node, image: str, node_minio: MinioServer, quest_data: str, trainer_runtime: str
) -> None:
    ns = job_namespace(node, node_minio)
    model_dir = node_minio.uri("trainjob-model")
    proc = _cli(
        node,
        "trainjob", "submit", *_common(ns, "quest", image, quest_data, model_dir),
        "--nodes", "2", "--gpus-per-node", "0", "--cpu", "900m", "--runtime", trainer_runtime,
        "--wait-timeout", "600",
        "--", "--train-steps", "40", "--batch-size", "32", "--checkpoint-every", "20",
    )  # fmt: skip
    kinds = "pods,jobs,jobsets,trainjobs"
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-5000:] + _describe(node, ns, kinds)
    assert f"TrainJob {ns}/quest succeeded" in text
    # Node 0 is the chief; both nodes all-reduce together, peers by JobSet's DNS names.
    assert re.search(r"\[quest-node-0-0-\w+\]: chief: trained to step 40 \(from 0\)", text), text[
        -3000:
    ]
    assert "group_size = 2" in text, text[-3000:]

    trainjob = node.get("trainjob", "quest", ns)
    true = {c["type"] for c in trainjob["status"]["conditions"] if c["status"] == "True"}
    assert "Complete" in true, trainjob["status"]
    assert node.get("jobset", "quest", ns)["status"].get("restarts", 0) == 0
    pods = json.loads(node.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
    assert len(pods) == 2, _describe(node, ns, kinds)
    for pod in pods:
        _assert_runs_our_image(pod, node, image)
        assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    metrics = storage.read_json(storage.join(model_dir, "eval", "metrics.json"))
    assert metrics["step"] == 40
    assert _has_export(model_dir)
    _no_credentials(node_minio, text)


_KEEP = "shardtrain.test/keep"


def _start(node: Node, args: list[str], log_path: Path) -> subprocess.Popen:
    """``shardtrain ARGS`` in the background, its output into ``log_path``."""
    with open(log_path, "w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "shardtrain.cli", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **_env(node)},
        )


def _running_after_a_checkpoint(
    node: Node, ns: str, find, model_dir: str, submit: subprocess.Popen, log_path: Path
) -> dict:
    """The pod ``find()`` returns, once it runs and training has published a checkpoint."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        pod = find()
        running = pod and pod["status"].get("phase") == "Running"
        if running and storage.exists(storage.join(model_dir, "checkpoints")):
            return pod
        assert submit.poll() is None, log_path.read_text()[-3000:] + _describe(node, ns)
        time.sleep(0.3)
    raise AssertionError("training never reached a checkpoint" + _describe(node, ns))


def _preempt(node: Node, ns: str, pod: dict) -> tuple[dict, str]:
    """Delete the pod with a 30 s grace period, as a node drain or the scheduler's preemption
    does: the kubelet sends SIGTERM and waits. Returns the container's terminated state and its
    log. A finalizer keeps the pod object (with the status the kubelet writes last) until read;
    the log is followed as it goes (the kubelet removes a deleted pod's container, log and all).
    """
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    patch = {"metadata": {"finalizers": [_KEEP], "uid": uid}}
    node.kubectl("patch", "pod", name, "-n", ns, "--type=merge", "-p", json.dumps(patch))
    follow = subprocess.Popen(
        [node.kubectl_path, "--kubeconfig", node.kubeconfig, "logs", "-f", name, "-n", ns],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        node.kubectl("delete", "pod", name, "-n", ns, "--grace-period=30", "--wait=false")
        stopped = node.wait_pod(
            name,
            ns,
            lambda p: any("terminated" in s["state"] for s in p["status"]["containerStatuses"]),
            timeout=90,
        )
        log = follow.communicate(timeout=30)[0]
    finally:
        if follow.poll() is None:
            follow.kill()
        node.kubectl(
            "patch", "pod", name, "-n", ns, "--type=json",
            "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]',
        )  # fmt: skip
    return stopped["status"]["containerStatuses"][0]["state"]["terminated"], log


def _submit_then_preempt(
    node: Node, ns: str, args: list[str], find, model_dir: str, log_path: Path, wait: float
) -> tuple[dict, dict, str, int, str]:
    """``shardtrain ARGS`` (a submit) in the background; once the pod ``find()`` returns runs
    after a checkpoint, :func:`_preempt` it, then wait up to ``wait`` s for the submit. Returns
    the preempted pod, its terminated state and log, the submit's exit code and output."""
    submit = _start(node, args, log_path)
    try:
        first = _running_after_a_checkpoint(node, ns, find, model_dir, submit, log_path)
        terminated, worker_log = _preempt(node, ns, first)
        code = submit.wait(timeout=wait)
    finally:
        if submit.poll() is None:
            submit.kill()
    return first, terminated, worker_log, code, log_path.read_text()


def _assert_checkpointed_on_sigterm(terminated: dict, log: str) -> None:
    # Its own exit after the checkpoint, within the grace period (not the kubelet's 137).
    assert terminated["exitCode"] == 143, (terminated, log[-3000:])
    assert "received SIGTERM: checkpointing after the current step" in log, log[-3000:]
    assert re.search(r"stopped at step \d+ on a signal; checkpoint written", log), log[-3000:]


def test_a_trainjob_node_deleted_with_a_grace_period_checkpoints_exits_143_and_the_job_resumes(
    node: Node,
    image: str,
    node_minio: MinioServer,
    quest_data: str,
    trainer_runtime: str,
    tmp_path: Path,
) -> None:
    """Preemption as the kubelet does it: ``kubectl delete pod --grace-period`` -> SIGTERM to
    the container -> every node checkpoints and exits 143 -> JobSet's failure policy recreates
    the nodes -> they resume from the checkpoint to exactly --train-steps."""
    ns = job_namespace(node, node_minio)
    model_dir = node_minio.uri("trainjob-preempt")
    args = [
        "trainjob", "submit", *_common(ns, "pre", image, quest_data, model_dir),
        "--nodes", "2", "--gpus-per-node", "0", "--cpu", "900m", "--runtime", trainer_runtime,
        "--wait-timeout", "600",
        "--", "--train-steps", str(PREEMPT_STEPS), "--batch-size", "32", "--checkpoint-every", "20",
    ]  # fmt: skip
    kinds = "pods,jobs,jobsets,trainjobs"

    def worker() -> dict | None:
        selector = f"jobset.sigs.k8s.io/jobset-name=pre,{_INDEX}=1"
        out = node.kubectl("get", "pods", "-n", ns, "-l", selector, "-o", "json")
        return next(iter(json.loads(out.stdout)["items"]), None)

    first, terminated, worker_log, code, text = _submit_then_preempt(
        node, ns, args, worker, model_dir, tmp_path / "submit.log", wait=600
    )

    _assert_checkpointed_on_sigterm(terminated, worker_log)
    assert code == 0, text[-5000:] + _describe(node, ns, kinds)
    assert f"TrainJob {ns}/pre succeeded" in text
    jobset = node.get("jobset", "pre", ns)
    assert jobset["status"]["restarts"] >= 1, jobset["status"]
    pods = json.loads(node.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
    assert first["metadata"]["uid"] not in {p["metadata"]["uid"] for p in pods}
    assert pods and all(
        p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] != "0" for p in pods
    ), _describe(node, ns, kinds)
    for pod in pods:
        _assert_runs_our_image(pod, node, image)
    assert "restored checkpoint step" in text, text[-3000:]
    metrics = storage.read_json(storage.join(model_dir, "eval", "metrics.json"))
    assert metrics["step"] == PREEMPT_STEPS
    _no_credentials(node_minio, text + worker_log)


def test_a_tfjob_worker_deleted_with_a_grace_period_checkpoints_but_the_operator_fails_the_job(
    node: Node, image: str, node_minio: MinioServer, quest_data: str, tmp_path: Path
) -> None:
    """The same preemption of a TFJob's worker: it checkpoints and exits 143, but the training
    operator (v1.9) fails the job instead of recreating the pod: it counts a Running pod with a
    deletionTimestamp as failed (pkg/core/status.go UpdateJobReplicaStatuses) without the
    restart its ExitCode policy gives a Failed pod (kubeflow/trainer#1560, closed unfixed). The
    checkpoint is there: the job submitted again resumes from it to exactly --train-steps.
    (The node-agent twin, which signals the process without deleting the pod, never saw this.)
    When this fails because the job restarted, the operator has fixed it: assert the restart."""
    ns = job_namespace(node, node_minio)
    model_dir = node_minio.uri("tfjob-preempt")

    def submit_args(name: str) -> list[str]:
        return [
            "tfjob", "submit", *_common(ns, name, image, quest_data, model_dir),
            "--workers", "1", "--no-evaluator", "--gpus-per-worker", "0", "--cpu", "300m",
            "--wait-timeout", "600",
            "--", "--train-steps", str(PREEMPT_STEPS), "--batch-size", "32",
            "--checkpoint-every", "20",
        ]  # fmt: skip

    _, terminated, worker_log, code, text = _submit_then_preempt(
        node,
        ns,
        submit_args("pre"),
        lambda: node.get("pod", "pre-worker-0", ns),
        model_dir,
        tmp_path / "submit.log",
        wait=300,
    )

    _assert_checkpointed_on_sigterm(terminated, worker_log)
    assert code == 1, text[-5000:] + _describe(node, ns)
    job = node.get("tfjob", "pre", ns)
    failed = [c for c in job["status"]["conditions"] if c["type"] == "Failed"]
    assert failed and failed[0]["message"] == (
        f"TFJob {ns}/pre has failed because 1 Worker replica(s) failed."
    ), job["status"]
    assert "Restarting" not in {c["type"] for c in job["status"]["conditions"]}

    # Submitted again (another name: the failed job stays for its logs), from the checkpoint.
    again = _cli(node, *submit_args("pre-again"))
    text = again.stdout + again.stderr
    assert again.returncode == 0, text[-5000:] + _describe(node, ns)
    step = int(re.search(r"restored checkpoint step (\d+)", text).group(1))
    assert 20 <= step < PREEMPT_STEPS, text[-3000:]
    assert f"chief: trained to step {PREEMPT_STEPS} (from {step})" in text, text[-3000:]
    metrics = storage.read_json(storage.join(model_dir, "eval", "metrics.json"))
    assert metrics["step"] == PREEMPT_STEPS
    _no_credentials(node_minio, text + worker_log)
