"""What the cluster tier's job tests share: the submit command's environment and arguments,
what to print when a job misbehaves, what every pod of our image must show, and a preemption
as the kubelet does it (pod deletion with a grace period, followed to its exit)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from cluster.nodes import Node
from helpers import run_cli
from servers import MinioServer
from shardtrain import storage

#: The Job controller's pod label: a JobSet node's index.
INDEX = "batch.kubernetes.io/job-completion-index"


def submit_env(node: Node) -> dict[str, str]:
    """The submit command's: the cluster's kubeconfig and no storage credentials (the pods get
    theirs from the Secret only; the command needs none)."""
    return {"KUBECONFIG": node.kubeconfig, "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}


def cli(node: Node, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=submit_env(node), timeout=timeout)


def common_args(ns: str, name: str, image: str, data: str, model_dir: str) -> list[str]:
    return [
        "--namespace", ns, "--name", name, "--image", image, "--data", data,
        "--model-dir", model_dir, "--memory", "2Gi", "--poll-interval", "2",
        "--termination-grace-seconds", "30",
    ]  # fmt: skip


def describe(node: Node, ns: str, kinds: str = "pods,tfjobs") -> str:
    out = node.kubectl("get", kinds, "-n", ns, "-o", "wide", check=False)
    events = node.kubectl("get", "events", "-n", ns, check=False)
    return f"\n{out.stdout}{out.stderr}\n{events.stdout[-4000:]}"


def assert_runs_our_image(pod: dict, node: Node, image: str) -> None:
    """The pod ran on the real node as a container of our image, as uid 10001 (the kubelet
    refuses to start a runAsNonRoot container whose user is root)."""
    assert pod["spec"]["nodeName"] == node.name
    status = pod["status"]["containerStatuses"][0]
    assert status["image"] == image, status
    assert status["containerID"].startswith("containerd://"), status
    assert pod["spec"]["securityContext"]["runAsUser"] == 10001


def no_credentials(minio: MinioServer, text: str) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert minio.env[name] not in text, name


def has_export(model_dir: str) -> bool:
    return any(
        p.endswith("saved_model.pb") for p in storage.walk_files(storage.join(model_dir, "export"))
    )


_KEEP = "shardtrain.test/keep"


def keep_pod(node: Node, ns: str, pod: dict, keep: bool) -> None:
    """Add (or remove) a finalizer of ours that keeps the pod object, with the status the
    kubelet writes last, after JobSet deletes it (it deletes every node's pods when it
    recreates them). By JSON patch, beside the Job controller's ``batch.kubernetes.io/
    job-tracking`` finalizer: a merge patch replaces the whole list, and a pod that loses that
    finalizer before the Job counted it is never counted as failed (the Job then quietly
    replaces it instead of failing, and JobSet never restarts)."""
    name = pod["metadata"]["name"]
    for _ in range(10):
        current = node.get("pod", name, ns)
        if current is None or current["metadata"]["uid"] != pod["metadata"]["uid"]:
            assert not keep, f"pod {ns}/{name} is gone"
            return
        finalizers = current["metadata"].get("finalizers") or []
        if keep:
            ops = [{"op": "add", "path": "/metadata/finalizers", "value": [_KEEP]}]
            if finalizers:
                ops = [{"op": "add", "path": "/metadata/finalizers/-", "value": _KEEP}]
        elif _KEEP in finalizers:
            i = finalizers.index(_KEEP)
            ops = [
                {"op": "test", "path": f"/metadata/finalizers/{i}", "value": _KEEP},
                {"op": "remove", "path": f"/metadata/finalizers/{i}"},
            ]
        else:
            return
        ops.insert(0, {"op": "test", "path": "/metadata/uid", "value": pod["metadata"]["uid"]})
        patched = node.kubectl(
            "patch", "pod", name, "-n", ns, "--type=json", "-p", json.dumps(ops), check=False
        )
        if patched.returncode == 0:
            return
        time.sleep(0.2)  # another finalizer came or went in between: read again
    raise AssertionError(f"cannot patch the finalizers of {ns}/{name}: {patched.stderr}")


def start(node: Node, args: list[str], log_path: Path) -> subprocess.Popen:
    """``shardtrain ARGS`` in the background, its output into ``log_path``."""
    with open(log_path, "w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "shardtrain.cli", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **submit_env(node)},
        )


def running_after_a_checkpoint(
    node: Node, ns: str, find, model_dir: str, submit: subprocess.Popen, log_path: Path
) -> dict:
    """The pod ``find()`` returns, once it runs and training has published a checkpoint."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        pod = find()
        running = pod and pod["status"].get("phase") == "Running"
        if running and storage.exists(storage.join(model_dir, "checkpoints")):
            return pod
        assert submit.poll() is None, log_path.read_text()[-3000:] + describe(node, ns)
        time.sleep(0.3)
    raise AssertionError("training never reached a checkpoint" + describe(node, ns))


def preempt(node: Node, ns: str, pod: dict) -> tuple[dict, str]:
    """Delete the pod with a 30 s grace period, as a node drain or the scheduler's preemption
    does: the kubelet sends SIGTERM and waits. Returns the container's terminated state and its
    log. A finalizer keeps the pod object (with the status the kubelet writes last) until read;
    the log is followed as it goes (the kubelet removes a deleted pod's container, log and all).
    """
    name = pod["metadata"]["name"]
    keep_pod(node, ns, pod, True)
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
        keep_pod(node, ns, pod, False)
    return stopped["status"]["containerStatuses"][0]["state"]["terminated"], log


def submit_then_preempt(
    node: Node, ns: str, args: list[str], find, model_dir: str, log_path: Path, wait: float
) -> tuple[dict, dict, str, int, str]:
    """``shardtrain ARGS`` (a submit) in the background; once the pod ``find()`` returns runs
    after a checkpoint, :func:`preempt` it, then wait up to ``wait`` s for the submit. Returns
    the preempted pod, its terminated state and log, the submit's exit code and output."""
    submit = start(node, args, log_path)
    try:
        first = running_after_a_checkpoint(node, ns, find, model_dir, submit, log_path)
        terminated, worker_log = preempt(node, ns, first)
        code = submit.wait(timeout=wait)
    finally:
        if submit.poll() is None:
            submit.kill()
    return first, terminated, worker_log, code, log_path.read_text()


def assert_checkpointed_on_sigterm(terminated: dict, log: str) -> None:
    # Its own exit after the checkpoint, within the grace period (not the kubelet's 137).
    assert terminated["exitCode"] == 143, (terminated, log[-3000:])
    assert "received SIGTERM: checkpointing after the current step" in log, log[-3000:]
    assert re.search(r"stopped at step \d+ on a signal; checkpoint written", log), log[-3000:]


def assert_every_node_restarted(
    node: Node, ns: str, name: str, lost: dict, image: str, kinds: str
) -> list[dict]:
    """JobSet ``name`` restarted (its failure policy recreated every node after ``lost``'s
    failure): ``lost`` is gone and every pod now is of a later restart attempt, of our image.
    Returns the pods."""
    jobset = node.get("jobset", name, ns)
    assert jobset["status"]["restarts"] >= 1, jobset["status"]
    pods = node.pods(ns)
    assert lost["metadata"]["uid"] not in {p["metadata"]["uid"] for p in pods}
    assert pods and all(
        p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] != "0" for p in pods
    ), describe(node, ns, kinds)
    for pod in pods:
        assert_runs_our_image(pod, node, image)
    return pods
