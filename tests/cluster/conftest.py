"""The cluster tier: a real node (kubelet, containerd + runc, CNI bridge, CoreDNS,
kube-scheduler; ``scripts/node-up``) next to the control plane of ``scripts/k8s-up``.

Pods here are containers of images in containerd's store (no registry: ``scripts/install-node``
makes ``shardtrain.local/busybox:1``), with their own addresses on the node's bridge, cluster
DNS and the kubelet's own signals, logs and exit codes. Needs root; skipped otherwise.

``image`` is our image built from the Dockerfile (``scripts/build-image``) and imported into the
node's containerd; ``node_minio`` a MinIO server of this tier on the node's address, where pods
reach it (the suite's ``minio`` listens on 127.0.0.1, which in a pod is the pod itself).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.nodes import Node
from cluster_jobs import shard_quest
from servers import MinioServer, parse_exports, running_minio

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"

#: Not the defaults of scripts/node-up, so a session runs beside your own node; two sessions at
#: once (two checkouts on one machine) each take their own bridge and subnet from the
#: environment.
NODE_BRIDGE = os.environ.get("SHARDTRAIN_TEST_NODE_BRIDGE", "sttest0")
NODE_NAME = f"shardtrain-test-{NODE_BRIDGE}"
NODE_SUBNET = os.environ.get("SHARDTRAIN_TEST_NODE_SUBNET", "10.87.0.0/16")
#: Rows of the quest dataset the job tests train on.
QUEST_ROWS = 2000


def _run(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPTS / script)], env=env, capture_output=True, text=True, timeout=3600
    )


@pytest.fixture(scope="session")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """The control plane (scripts/k8s-up) and a real node (scripts/node-up) for the session;
    both stopped and cleaned up (scripts/node-down, scripts/k8s-down) at its end."""
    if os.geteuid() != 0:
        pytest.skip("a real node needs root (cgroups, network namespaces, mounts, a bridge)")
    state = tmp_path_factory.mktemp("node-state")
    env = {
        **os.environ,
        "SHARDTRAIN_K8S_STATE": str(state),
        "SHARDTRAIN_NODE_NAME": NODE_NAME,
        "SHARDTRAIN_NODE_BRIDGE": NODE_BRIDGE,
        "SHARDTRAIN_NODE_SUBNET": NODE_SUBNET,
    }
    try:
        up = _run("k8s-up", env)
        if up.returncode != 0:
            pytest.fail(f"scripts/k8s-up failed:\n{up.stderr}")
        sys.stderr.write(up.stderr)
        node_up = _run("node-up", env)
        if node_up.returncode != 0:
            pytest.fail(f"scripts/node-up failed:\n{node_up.stderr}")
        sys.stderr.write(node_up.stderr)
        node_env = dict(
            line.split("=", 1) for line in (state / "node" / "env").read_text().splitlines()
        )
        yield Node(
            state,
            parse_exports(node_up.stdout)["KUBECONFIG"],
            NODE_NAME,
            node_env["GATEWAY"],
            node_env["TEST_IMAGE"],
        )
    finally:
        down = _run("node-down", env)
        sys.stderr.write(down.stderr)
        _run("k8s-down", env)
        assert down.returncode == 0, f"scripts/node-down failed:\n{down.stderr}"


def _build_image() -> dict[str, str]:
    """scripts/build-image's IMAGE= and ARCHIVE= (a no-op when the tree is unchanged). Tried
    twice a minute apart: a build under way in another session can fail a call."""
    for attempt in (1, 2):
        out = subprocess.run(
            [str(SCRIPTS / "build-image")], capture_output=True, text=True, timeout=3600
        )
        if out.returncode == 0:
            return dict(re.findall(r"^(IMAGE|ARCHIVE)=(.*)$", out.stdout, re.M))
        if attempt == 1:
            time.sleep(60)
    pytest.fail(f"scripts/build-image failed:\n{out.stderr[-5000:]}")


@pytest.fixture(scope="session")
def image(node: Node) -> str:
    """Our image (the repository's Dockerfile, scripts/build-image) in the node's containerd:
    pods run it with imagePullPolicy IfNotPresent (a tag not ``latest``) or Never."""
    built = _build_image()
    node.import_image(built["ARCHIVE"], built["IMAGE"])
    return built["IMAGE"]


@pytest.fixture(scope="session")
def node_minio(node: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MinioServer]:
    """MinIO (scripts/minio-up) listening on the node's address, so that pods and this process
    reach it at one endpoint; AWS_* variables point at it for the session (the CLI and the
    storage helpers of the tests use them)."""
    state = tmp_path_factory.mktemp("node-minio")
    with running_minio(state, "shardtrain-cluster", host=node.gateway) as server:
        yield server


@pytest.fixture(scope="session")
def quest_data(node_minio: MinioServer, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Generated quest logs sharded into the session bucket: the dataset the jobs train on."""
    return shard_quest(node_minio, tmp_path_factory.mktemp("quest"), "quest-data", QUEST_ROWS)


@pytest.fixture(scope="session")
def trainer_runtime(node: Node) -> str:
    """Our ClusterTrainingRuntime, installed as the README says."""
    node.kubectl("apply", "--server-side", "-k", str(REPO / "k8s" / "trainer-v2"))
    return "shardtrain-tensorflow"
