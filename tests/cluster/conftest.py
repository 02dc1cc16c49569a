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
import secrets
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.nodes import Node, NodeMinio

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"

#: Not the defaults of scripts/node-up, so a session runs beside your own node.
NODE_NAME = "shardtrain-test-node"
NODE_BRIDGE = "sttest0"
NODE_SUBNET = "10.87.0.0/16"


def _exports(text: str) -> dict[str, str]:
    env = {}
    for line in text.splitlines():
        if line.startswith("export "):
            name, _, value = line[len("export ") :].partition("=")
            env[name] = shlex.split(value)[0] if value else ""
    return env


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
            _exports(node_up.stdout)["KUBECONFIG"],
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


_AWS_VARS = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")


@pytest.fixture(scope="session")
def node_minio(node: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeMinio]:
    """MinIO (scripts/install-minio's server, fresh credentials and data dir) listening on the
    node's address, so that pods and this process reach it at one endpoint; AWS_* variables
    point at it for the session (the CLI and the storage helpers of the tests use them)."""
    binary = subprocess.run(
        [str(SCRIPTS / "install-minio")], capture_output=True, text=True, check=True, timeout=1200
    ).stdout.strip()
    state = tmp_path_factory.mktemp("node-minio")
    with socket.socket() as s:
        s.bind((node.gateway, 0))
        port = s.getsockname()[1]
    env = {
        "AWS_ENDPOINT_URL": f"http://{node.gateway}:{port}",
        "AWS_ACCESS_KEY_ID": f"st{secrets.token_hex(9)}",
        "AWS_SECRET_ACCESS_KEY": secrets.token_urlsafe(30),
        "AWS_REGION": "us-east-1",
    }
    server_env = {
        **os.environ,
        "MINIO_ROOT_USER": env["AWS_ACCESS_KEY_ID"],
        "MINIO_ROOT_PASSWORD": env["AWS_SECRET_ACCESS_KEY"],
        "MINIO_BROWSER": "off",
        "MINIO_UPDATE": "off",
        "MINIO_CI_CD": "1",
    }
    saved = {name: os.environ.get(name) for name in (*_AWS_VARS, "AWS_ENDPOINT_URL_S3")}
    with open(state / "minio.log", "w") as log:
        server = subprocess.Popen(
            [
                binary,
                "server",
                "--quiet",
                "--address",
                f"{node.gateway}:{port}",
                str(state / "data"),
            ],
            env=server_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{env['AWS_ENDPOINT_URL']}/minio/health/ready", timeout=2)
                break
            except OSError:
                assert server.poll() is None, (state / "minio.log").read_text()
                assert time.monotonic() < deadline, (state / "minio.log").read_text()
                time.sleep(0.3)
        os.environ.pop("AWS_ENDPOINT_URL_S3", None)
        os.environ.update(env)
        minio = NodeMinio(env=env, bucket="shardtrain-cluster")
        minio.s3_client().create_bucket(Bucket=minio.bucket)
        yield minio
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
