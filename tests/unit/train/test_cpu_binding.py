"""CPU binding of replicas that share a host: the shares, and binding every thread."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from shardtrain.train import cpu_binding


def _on(cluster: dict, kind: str, index: int) -> dict:
    return {"cluster": cluster, "task": {"type": kind, "index": index}}


def test_replicas_sharing_a_host_split_its_cpus_chief_first():
    local = {"chief": ["127.0.0.1:1000"], "worker": ["127.0.0.1:1001", "127.0.0.1:1002"]}
    cpus = [0, 1, 2, 3, 4, 5, 6]
    shares = [
        cpu_binding.host_cpu_share(_on(local, kind, i), cpus)
        for kind, i in (("chief", 0), ("worker", 0), ("worker", 1))
    ]
    # Disjoint, covering every CPU, the remainder to the first replica.
    assert shares == [[0, 1, 2], [3, 4], [5, 6]]
    two = {"chief": ["localhost:1"], "worker": ["localhost:2"]}
    assert cpu_binding.host_cpu_share(_on(two, "chief", 0), [3, 1]) == [1]
    assert cpu_binding.host_cpu_share(_on(two, "worker", 0), [3, 1]) == [3]


def test_replicas_on_their_own_hosts_or_too_few_cpus_keep_every_cpu():
    # A TFJob: one pod (service name) per replica.
    pods = {"chief": ["j-chief-0.ns.svc:2222"], "worker": ["j-worker-0.ns.svc:2222"]}
    assert cpu_binding.host_cpu_share(_on(pods, "worker", 0), [0, 1]) is None
    # Two of three replicas on one host: only those two split it.
    mixed = {"chief": ["a:1"], "worker": ["a:2", "b:3"]}
    assert cpu_binding.host_cpu_share(_on(mixed, "worker", 0), [0, 1]) == [1]
    assert cpu_binding.host_cpu_share(_on(mixed, "worker", 1), [0, 1]) is None
    # Three replicas, two CPUs: no even split, so no binding.
    three = {"chief": ["h:1"], "worker": ["h:2", "h:3"]}
    assert cpu_binding.host_cpu_share(_on(three, "chief", 0), [0, 1]) is None
    assert cpu_binding.host_cpu_share({"cluster": three}, [0, 1]) is None


def test_binding_covers_threads_started_before_it_and_can_be_turned_off(tmp_path):
    """Every thread of the process is bound (``sched_setaffinity(0)`` alone binds only the
    calling thread), and ``SHARDTRAIN_CPU_BINDING=0`` leaves the process alone. Run in a child
    process: binding this one would bind the rest of the test session."""
    script = """
import json, os, threading
from shardtrain.train import cpu_binding
seen = {}
started, done = threading.Event(), threading.Event()
def early():
    started.set(); done.wait(); seen["early"] = sorted(os.sched_getaffinity(0))
t = threading.Thread(target=early); t.start(); started.wait()
cpu_binding.keep_to_host_share({"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]},
                             "task": {"type": "worker", "index": 0}})
done.set(); t.join()
seen["main"] = sorted(os.sched_getaffinity(0))
print(json.dumps(seen))
"""
    cpus = sorted(os.sched_getaffinity(0))
    local = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}
    share = cpu_binding.host_cpu_share(_on(local, "worker", 0), cpus) or cpus
    for env, expected in (({}, share), ({cpu_binding.CPU_BINDING_ENV: "0"}, cpus)):
        out = subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert json.loads(out.splitlines()[-1]) == {"early": expected, "main": expected}
