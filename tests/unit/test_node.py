"""The node agent's own logic (no API server): service addresses, ``$(VAR)`` expansion,
quantities, withheld variables and log reading. The agent against a live control plane is
tested in tests/integration/test_k8s_operator.py."""

from __future__ import annotations

import json

import pytest

from shardtrain.kubeflow import node


def test_service_addresses_map_to_one_loopback_port_each_and_keep_it():
    ports = node.ServicePorts()
    tf_config = json.dumps(
        {
            "cluster": {
                "chief": ["j-chief-0.team.svc:2222"],
                "worker": ["j-worker-0.team.svc:2222", "j-worker-1.team.svc.cluster.local:2222"],
            },
            "task": {"type": "worker", "index": 1},
        }
    )
    first = json.loads(ports.localise(tf_config))
    again = json.loads(ports.localise(tf_config))
    assert first == again  # a recreated pod gets the same ports
    addresses = first["cluster"]["chief"] + first["cluster"]["worker"]
    assert all(a.startswith("127.0.0.1:") for a in addresses)
    assert len(set(addresses)) == 3
    # Another namespace or port is another service.
    other = ports.localise("j-chief-0.other.svc:2222 j-chief-0.team.svc:2223")
    assert first["cluster"]["chief"][0] not in other
    assert ports.localise("no address here: example.com:80") == "no address here: example.com:80"


def test_variable_references_expand_like_kubernetes():
    env = {"A": "1", "B": "x y"}
    assert node._expand("$(A)-$(B)", env) == "1-x y"
    assert node._expand("$(MISSING) $$(A) $$", env) == "$(MISSING) $(A) $"


def test_quantities():
    assert node._quantity("500m") == 0.5
    assert node._quantity("2") == 2
    assert node._quantity("16Gi") == 16 * 2**30
    assert node._quantity("1k") == 1000


def test_credentials_and_cluster_settings_are_withheld_from_pods():
    for name in (
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ENDPOINT_URL",
        "TF_CONFIG",
        "KUBECONFIG",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "KUBERNETES_SERVICE_HOST",
    ):
        assert node.WITHHELD_ENV.match(name), name
    for name in ("PATH", "PYTHONPATH", "HOME", "TF_DETERMINISTIC_OPS"):
        assert not node.WITHHELD_ENV.match(name), name


def test_log_reading_tails_and_follows_until_the_process_ended(tmp_path):
    path = tmp_path / "c.log"
    path.write_bytes(b"one\ntwo\nthree\n")
    assert b"".join(node._read_log(path, tail=2, follow=False, ended=lambda: True)) == (
        b"two\nthree\n"
    )
    assert b"".join(node._read_log(path, tail=0, follow=False, ended=lambda: True)) == b""
    calls = []

    def ended() -> bool:  # the process writes one more line, then ends
        calls.append(1)
        if len(calls) == 1:
            with open(path, "ab") as f:
                f.write(b"four\n")
        return len(calls) > 2

    out = b"".join(node._read_log(path, tail=None, follow=True, ended=ended))
    assert out == b"one\ntwo\nthree\nfour\n"


class _Core:
    """What the agent's loop calls of ``CoreV1Api``, answered from a list of pods and recorded
    (no API server in this tier); binding the pod named ``bind-fails`` fails with a 500."""

    def __init__(self, pods):
        self.pods = pods
        self.bound: list[str] = []
        self.statuses: dict[str, list] = {}
        self.deleted_nodes: list[str] = []

    def list_pod_for_all_namespaces(self, **kwargs):
        from kubernetes import client

        return client.V1PodList(items=self.pods)

    def create_namespaced_pod_binding(self, name, namespace, body, **kwargs):
        from kubernetes.client.rest import ApiException

        if name == "bind-fails":
            raise ApiException(status=500, reason="Internal Server Error")
        self.bound.append(name)

    def patch_namespaced_pod_status(self, name, namespace, body):
        status = body[0]["value"] if isinstance(body, list) else body["status"]
        self.statuses.setdefault(name, []).append(status)

    def create_node(self, body):
        pass

    def patch_node_status(self, name, body):
        pass

    def delete_node(self, name, **kwargs):
        self.deleted_nodes.append(name)


def _pod(name, command=None, *, node_name="n", gates=None):
    from kubernetes import client

    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, namespace="ns", uid=f"uid-{name}"),
        spec=client.V1PodSpec(
            containers=[client.V1Container(name="c", image="i", command=command)],
            node_name=node_name,
            restart_policy="Never",
            scheduling_gates=[client.V1PodSchedulingGate(name=g) for g in gates or []],
        ),
        status=client.V1PodStatus(phase="Pending"),
    )


def test_one_bad_pod_does_not_stall_the_others_and_fails_as_with_a_kubelet(tmp_path):
    pods = [
        _pod("bind-fails", node_name=None),
        _pod("gated", node_name=None, gates=["example.com/quota"]),
        _pod("no-such-command", ["/nonexistent/shardtrain-no-such-command"]),
        # Runs until the test lets it end (so the first sync sees it running on any machine).
        _pod(
            "runs", ["sh", "-c", f"while [ ! -e {tmp_path}/go ]; do sleep 0.02; done; echo hello"]
        ),
        _pod("pending", node_name=None),
    ]
    core = _Core(pods)
    log_dir = tmp_path / "logs"
    agent = node.NodeAgent(node.NodeConfig(name="n", log_dir=str(log_dir)), core=core)
    agent._sync()
    # The failed binding did not stop the pods after it; the gated pod is left alone.
    assert core.bound == ["pending"]
    failed = core.statuses["no-such-command"][-1]
    assert failed["phase"] == "Failed"
    terminated = failed["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 128 and terminated["reason"] == "StartError"
    assert "/nonexistent/shardtrain-no-such-command" in terminated["message"]
    assert core.statuses["runs"][-1]["phase"] == "Running"
    # Reported once, not again on the next sync; the good pod ends and is reported.
    (tmp_path / "go").touch()
    proc = agent._containers["uid-runs"].proc
    assert proc is not None and proc.wait(timeout=30) == 0
    agent._sync()
    assert len(core.statuses["no-such-command"]) == 1
    assert core.statuses["runs"][-1]["phase"] == "Succeeded"
    # Logs and working directories are the owner's only.
    assert log_dir.stat().st_mode & 0o777 == 0o700
    log_file = agent._containers["uid-runs"].log_path
    assert log_file.read_bytes() == b"hello\n"
    assert log_file.stat().st_mode & 0o777 == 0o600


def test_containers_are_stopped_together_and_the_stubborn_ones_killed(tmp_path):
    import subprocess
    import sys
    import time

    def start(script):
        proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
        return node._Container("u", "ns", "p", "c", tmp_path / "c.log", proc=proc)

    ready = tmp_path / "ready"
    stubborn = start(
        "import pathlib, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"pathlib.Path({str(ready)!r}).touch(); time.sleep(600)"
    )
    polite = start("import time; time.sleep(600)")
    while not ready.exists() and stubborn.poll() is None:
        time.sleep(0.01)
    node._stop_all([stubborn, polite], grace=1)
    assert polite.poll() == 128 + 15  # SIGTERM
    assert stubborn.poll() == 128 + 9  # SIGKILL after the grace period


def test_the_agent_stops_when_the_api_server_is_gone(tmp_path):
    class Gone(_Core):
        def list_pod_for_all_namespaces(self, **kwargs):
            raise ConnectionRefusedError("connection refused")

    core = Gone([])
    cfg = node.NodeConfig(name="n", log_dir=str(tmp_path), give_up_seconds=0, poll_seconds=0)
    agent = node.NodeAgent(cfg, core=core)
    agent._serve_logs = lambda: None  # no TLS log endpoint without the cluster's CA
    with pytest.raises(node.NodeError, match="has not answered"):
        agent.run()
    assert core.deleted_nodes == ["n", "n"]  # a stale one at the start; its own at the end
