"""What the Kueue tests of both tiers share (tests/integration/kubeflow/jobs/test_kueue.py on the
control plane alone, tests/cluster/test_kueue.py on a real node): k8s/kueue installed as
shipped, a LocalQueue per namespace, the Workload Kueue makes for a job, and conditions.

``cluster`` is either tier's handle (``kubectl`` and ``state_dir``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
#: k8s/kueue's LocalQueue (and the queue a job names).
QUEUE = "shardtrain"


def install_queues(cluster) -> str:
    """k8s/kueue applied (ResourceFlavor, ClusterQueue); LocalQueues come per namespace.
    Returns the queue's name, or "" when the control plane runs no Kueue (not as root)."""
    if "KUEUE=true" not in (cluster.state_dir / "env").read_text():
        return ""
    if cluster.kubectl("get", "namespace", "shardtrain", check=False).returncode != 0:
        cluster.kubectl("create", "namespace", "shardtrain")  # the LocalQueue's, as shipped
    cluster.kubectl("apply", "--server-side", "-k", str(REPO / "k8s" / "kueue"))
    return QUEUE


def local_queue(cluster, ns: str) -> None:
    """k8s/kueue's LocalQueue in namespace ``ns``."""
    docs = yaml.safe_load_all(cluster.kubectl("kustomize", str(REPO / "k8s/kueue")).stdout)
    (lq,) = [d for d in docs if d and d["kind"] == "LocalQueue"]
    lq["metadata"]["namespace"] = ns
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(lq))


def workload_of(cluster, ns: str, kind: str, name: str) -> dict | None:
    """The Workload Kueue made for the job (its owner), None before it exists."""
    out = json.loads(cluster.kubectl("get", "workloads", "-n", ns, "-o", "json").stdout)
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
