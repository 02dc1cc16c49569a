"""The handles tests get on the real node of tests/cluster and its MinIO (see conftest.py)."""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from servers import run_kubectl


@dataclass
class Node:
    """A live control plane and real node for this test session."""

    state_dir: Path
    kubeconfig: str
    name: str
    gateway: str  # the node's address: its InternalIP, the bridge's, CoreDNS's
    image: str  # the busybox test image in containerd's store

    def _env(self, name: str, file: str = "env") -> str:
        text = (self.state_dir / file).read_text()
        return re.search(rf"^{name}=(.*)$", text, re.M).group(1)

    @property
    def subnet(self) -> str:
        """The pods' addresses' network (SHARDTRAIN_NODE_SUBNET of node-up)."""
        return self._env("SUBNET", "node/env")

    @property
    def kubectl_path(self) -> str:
        """The kubectl scripts/install-k8s built (the same release as the API server)."""
        return self._env("KUBECTL")

    def ctr(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """containerd's ``ctr ARGS`` on the node's socket, namespace k8s.io (the kubelet's)."""
        return subprocess.run(
            [
                self._env("CTR", "node/env"),
                "--address",
                str(self.state_dir / "node" / "containerd" / "containerd.sock"),
                "--namespace",
                "k8s.io",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )

    def import_image(self, archive: str, name: str) -> None:
        """Import an OCI archive into the node's containerd (namespace k8s.io, the kubelet's),
        unless the image is there already; fail unless ``name`` is there afterwards."""
        if name in self.ctr("images", "ls", "-q").stdout.split():
            return
        snapshotter = self._env("SNAPSHOTTER", "node/env")
        self.ctr("images", "import", "--snapshotter", snapshotter, archive, timeout=1200)
        listed = self.ctr("images", "ls", "-q").stdout.split()
        assert name in listed, f"{name} not in containerd after importing {archive}"

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against the control plane (as its admin)."""
        return run_kubectl(
            self.kubectl_path, self.kubeconfig, *args, input=input, check=check, timeout=timeout
        )

    def apply(self, ns: str, *objects: dict) -> None:
        """Create the objects in the namespace."""
        items = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
        self.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(items))

    def get(self, kind: str, name: str, ns: str) -> dict | None:
        """The object as JSON, or None if it does not exist."""
        out = self.kubectl("get", kind, name, "-n", ns, "-o", "json", check=False)
        if out.returncode:
            if "NotFound" in out.stderr:
                return None
            raise AssertionError(out.stderr)
        return json.loads(out.stdout)

    def pods(self, ns: str, selector: str | None = None) -> list[dict]:
        """The namespace's pods (those of the label ``selector``), as JSON."""
        args = ["get", "pods", "-n", ns, "-o", "json", *(["-l", selector] if selector else [])]
        return json.loads(self.kubectl(*args).stdout)["items"]

    def events(self, ns: str) -> list[dict]:
        """The namespace's events, as JSON."""
        return json.loads(self.kubectl("get", "events", "-n", ns, "-o", "json").stdout)["items"]

    def wait_pod(self, name: str, ns: str, until, timeout: float = 120) -> dict:
        """Poll the pod until ``until(pod)`` is true; fail with its status and events if not."""
        deadline = time.monotonic() + timeout
        while True:
            pod = self.get("pod", name, ns)
            if pod is not None and until(pod):
                return pod
            if time.monotonic() > deadline:
                events = self.kubectl("get", "events", "-n", ns, check=False).stdout
                raise AssertionError(
                    f"pod {ns}/{name} not as expected after {timeout} s:\n"
                    f"{json.dumps((pod or {}).get('status'), indent=1)}\n{events}"
                )
            time.sleep(0.5)

    def namespace(self, service_accounts: tuple[str, ...] = ()) -> str:
        """A fresh namespace (its ``default`` ServiceAccount and ``kube-root-ca.crt``, which
        kube-controller-manager makes and every pod mounts, waited for) with these service
        accounts besides."""
        ns = f"n-{uuid.uuid4().hex[:8]}"
        self.kubectl("create", "namespace", ns)
        for account in service_accounts:
            self.kubectl("create", "serviceaccount", account, "-n", ns)
        deadline = time.monotonic() + 30
        while any(
            self.kubectl("get", kind, name, "-n", ns, check=False).returncode
            for kind, name in (("serviceaccount", "default"), ("configmap", "kube-root-ca.crt"))
        ):
            assert time.monotonic() < deadline, f"namespace {ns} not ready after 30 s"
            time.sleep(0.2)
        return ns
