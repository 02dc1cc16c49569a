"""The node agent's own logic (no API server): binding, starting and reporting pods, and giving
up when the API server is gone. Its parts have their own tests (test_pod_env.py,
test_pod_logs.py, test_containers.py); the agent against a live control plane is tested in
tests/integration/kubeflow/jobs/test_tfjob.py."""

from __future__ import annotations

import pytest

from shardtrain.kubeflow.local import node_agent


class _Core:
    """What the agent's loop calls of ``CoreV1Api``, answered from a list of pods and recorded
    (no API server in this tier); binding the pod named ``bind-fails`` fails with a 500."""

    def __init__(self, pods):
        from kubernetes import client

        self.api_client = client.ApiClient()
        self.pods = pods
        self.bound: list[str] = []
        self.statuses: dict[str, list] = {}
        self.deleted_nodes: list[str] = []
        self.deleted_pods: list[str] = []

    def list_pod_for_all_namespaces(self, **kwargs):
        """As the API's reply, raw (the agent deserialises only what changed)."""
        import json
        import types

        from kubernetes import client

        assert kwargs.get("_preload_content") is False
        body = self.api_client.sanitize_for_serialization(client.V1PodList(items=self.pods))
        return types.SimpleNamespace(data=json.dumps(body).encode())

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

    def delete_namespaced_pod(self, name, namespace, **kwargs):
        assert kwargs["grace_period_seconds"] == 0
        self.deleted_pods.append(name)


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
    agent = node_agent.NodeAgent(node_agent.NodeConfig(name="n", log_dir=str(log_dir)), core=core)
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


def test_the_agent_stops_when_the_api_server_is_gone(tmp_path):
    class Gone(_Core):
        def list_pod_for_all_namespaces(self, **kwargs):
            raise ConnectionRefusedError("connection refused")

    core = Gone([])
    cfg = node_agent.NodeConfig(name="n", log_dir=str(tmp_path), give_up_seconds=0, poll_seconds=0)
    agent = node_agent.NodeAgent(cfg, core=core)
    agent._serve_logs = lambda: None  # no TLS log endpoint without the cluster's CA
    with pytest.raises(node_agent.NodeError, match="has not answered"):
        agent.run()
    assert core.deleted_nodes == ["n", "n"]  # a stale one at the start; its own at the end


def test_a_deleted_pod_is_finalised_once_and_a_finalizer_is_left_to_its_controller(tmp_path):
    """A pod being deleted (its process not running here) is deleted with grace period 0; once
    that is done, a pod still held by the Job controller's tracking finalizer is not deleted
    again on every sync: the Job controller removes the finalizer when it has counted it."""
    import datetime

    stamp = datetime.datetime.now(datetime.UTC)
    plain = _pod("plain")
    plain.metadata.deletion_timestamp = stamp
    plain.metadata.deletion_grace_period_seconds = 30
    held = _pod("held")
    held.metadata.deletion_timestamp = stamp
    held.metadata.deletion_grace_period_seconds = 0  # finalised already
    held.metadata.finalizers = ["batch.kubernetes.io/job-tracking"]
    core = _Core([plain, held])
    agent = node_agent.NodeAgent(node_agent.NodeConfig(name="n", log_dir=str(tmp_path)), core=core)
    agent._sync()
    agent._sync()
    assert core.deleted_pods == ["plain", "plain"]  # as often as it is seen; "held" never
