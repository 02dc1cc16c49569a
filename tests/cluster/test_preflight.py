"""What the submit's preflight prevents, as a real kubelet shows it: a TrainJob whose storage
Secret lacks a key the pods need is created, and its pods never start.

The kubelet resolves a container's ``secretKeyRef`` when it creates the container; a missing
key (not marked optional) leaves the container waiting with ``CreateContainerConfigError``
and the pod Pending, retried forever: nothing fails, so the job looks hung. The preflight
tests that need no pod (every fault named before any job exists) are in
tests/integration/kubeflow/test_preflight.py.
"""

from __future__ import annotations

import re

from cluster.jobs import cli, describe
from cluster.nodes import Node

DATA, MODEL = "s3://shardtrain-data/quest", "s3://shardtrain-data/models/quest"
KINDS = "pods,jobs,jobsets,trainjobs"


def test_without_the_preflight_a_missing_secret_key_leaves_a_trainjob_that_looks_hung(
    node: Node, image: str, trainer_runtime: str
) -> None:
    """The TrainJob is created, the kubelet cannot make its containers (the Secret has no
    AWS_SECRET_ACCESS_KEY: CreateContainerConfigError naming it) and the submit only ends at
    its wait timeout."""
    ns = node.namespace(service_accounts=("shardtrain-trainer",))
    # Placeholder value: nothing here reads storage; the second key is missing.
    node.kubectl(
        "create", "secret", "generic", "shardtrain-storage", "-n", ns,
        "--from-literal=AWS_ACCESS_KEY_ID=placeholder",
    )  # fmt: skip
    out = cli(
        node,
        "trainjob", "submit", "--namespace", ns, "--name", "pf", "--image", image,
        "--nodes", "2", "--gpus-per-node", "0", "--cpu", "100m", "--memory", "512Mi",
        "--runtime", trainer_runtime, "--data", DATA, "--model-dir", MODEL, "--no-logs",
        "--no-preflight", "--wait-timeout", "45",
    )  # fmt: skip
    try:
        assert out.returncode == 1, out.stderr + describe(node, ns, KINDS)
        assert f"created TrainJob {ns}/pf" in out.stdout
        assert f"TrainJob {ns}/pf did not end within 45s" in out.stderr
        trainjobs = node.kubectl("get", "trainjobs", "-n", ns, "-o", "name").stdout.split()
        assert trainjobs == ["trainjob.trainer.kubeflow.org/pf"]
        pods = node.pods(ns)
        assert len(pods) == 2, describe(node, ns, KINDS)
        for pod in pods:
            # On the real node, its image there: only the Secret stops it.
            assert pod["spec"]["nodeName"] == node.name
            assert pod["status"]["phase"] == "Pending", pod["status"]
            (state,) = (s["state"] for s in pod["status"]["containerStatuses"])
            waiting = state.get("waiting", {})
            assert waiting.get("reason") == "CreateContainerConfigError", state
            assert "AWS_SECRET_ACCESS_KEY" in waiting.get("message", ""), waiting
            # The submit said so while it waited, naming the pod and the key: it looked hung
            # only as long as no one read its output.
            said = re.search(
                rf"^TrainJob {ns}/pf: pod {pod['metadata']['name']} "
                r"CreateContainerConfigError: .*AWS_SECRET_ACCESS_KEY",
                out.stdout,
                re.M,
            )
            assert said, out.stdout
    finally:
        node.kubectl("delete", "trainjob", "pf", "-n", ns, "--wait=false", check=False)
