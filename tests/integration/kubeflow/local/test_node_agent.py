"""The node agent under the real controllers of scripts/k8s-up: JobSet → Indexed Jobs (the Job
controller of kube-controller-manager) → pods the agent runs as local processes.

The ``k8s`` fixture (tests/conftest.py) starts the control plane with ``scripts/k8s-up`` and a
node agent (``shardtrain node run``). Nothing here re-implements a controller: JobSet decides
restarts and the JobSet's end, the Job controller the pods, their completion indexes and the
pod failure policy, the garbage collector what goes with a deleted owner; the agent only runs
the pods and reports their exit codes.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid

import pytest
import yaml

pytestmark = pytest.mark.k8s

_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
_ATTEMPT = "metadata.labels['jobset.sigs.k8s.io/restart-attempt']"


def _jobset(
    name: str,
    code: str,
    *,
    pods: int = 2,
    backoff_limit: int = 0,
    pod_failure_policy: dict | None = None,
    failure_policy: dict | None = None,
) -> dict:
    """A JobSet of one replicated job ``node``: one Indexed Job of ``pods`` pods running
    ``python -c code`` with its completion index and restart attempt in the environment."""
    job: dict = {
        "parallelism": pods,
        "completions": pods,
        "backoffLimit": backoff_limit,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 5,
                "containers": [
                    {
                        "name": "node",
                        "image": "shardtrain:test",
                        "command": ["python", "-c", code],
                        "ports": [{"containerPort": 2222}],
                        "env": [
                            {"name": "ATTEMPT", "valueFrom": {"fieldRef": {"fieldPath": _ATTEMPT}}}
                        ],
                    }
                ],
            }
        },
    }
    if pod_failure_policy:
        job["podFailurePolicy"] = pod_failure_policy
    spec: dict = {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": job}}]}
    if failure_policy:
        spec["failurePolicy"] = failure_policy
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": spec,
    }


def _apply(k8s, ns: str, manifest: dict) -> None:
    k8s.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(manifest))


def _get(k8s, ns: str, *what: str) -> dict:
    return json.loads(k8s.kubectl("get", *what, "-n", ns, "-o", "json").stdout)


def _describe(k8s, ns: str) -> str:
    out = k8s.kubectl("get", "jobsets,jobs,pods", "-n", ns, "-o", "wide", check=False)
    tail = k8s.node_log.read_text()[-3000:] if k8s.node_log.exists() else ""
    return f"\n{out.stdout}{out.stderr}\nnode agent log:\n{tail}"


def _wait_for(k8s, ns: str, name: str, conditions: set[str], timeout: float = 180) -> dict:
    """The JobSet once one of ``conditions`` is True on it."""
    deadline = time.monotonic() + timeout
    while True:
        js = _get(k8s, ns, "jobset", name)
        true = {
            c["type"] for c in js.get("status", {}).get("conditions", []) if c["status"] == "True"
        }
        if true & conditions:
            return js
        assert time.monotonic() < deadline, (
            f"JobSet {name}: none of {conditions} within {timeout} s: {js.get('status')}"
            + _describe(k8s, ns)
        )
        time.sleep(0.5)


def _pods(k8s, ns: str) -> list[dict]:
    return _get(k8s, ns, "pods")["items"]


def test_k8s_up_serves_the_jobset_trainer_and_kserve_apis_with_their_webhooks(k8s):
    """The CRDs are established and each controller's own webhook answers the API server."""
    ns = k8s.namespace("cp")
    # JobSet's defaulting webhook: Indexed Jobs, pods restarting OnFailure unless told.
    js = _jobset("defaults", "pass")
    del js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["restartPolicy"]
    out = k8s.kubectl(
        "apply", "--dry-run=server", "-n", ns, "-f", "-", "-o", "json", input=yaml.safe_dump(js)
    )
    job = json.loads(out.stdout)["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["completionMode"] == "Indexed"
    assert job["template"]["spec"]["restartPolicy"] == "OnFailure"
    # Trainer's validating webhook (after its defaulting one): a TrainJob needs its runtime.
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj"},
        "spec": {"runtimeRef": {"name": "no-such-runtime"}},
    }
    out = k8s.kubectl(
        "apply",
        "--dry-run=server",
        "-n",
        ns,
        "-f",
        "-",
        input=yaml.safe_dump(trainjob),
        check=False,
    )
    assert out.returncode != 0
    # Trainer's webhook and Kueue's (which looks the runtime up too) both deny it; the API
    # server reports whichever answers first. Trainer's own webhook alone is seen refusing a
    # runtime patch in test_trainjob_sdk.py.
    assert re.search(
        r'admission webhook "(validator\.trainjob\.trainer\.kubeflow\.org|vtrainjob\.kb\.io)" '
        r"denied",
        out.stderr,
    ), out.stderr
    assert re.search(r"""["']no-such-runtime["'] not found""", out.stderr), out.stderr
    # KServe's CRDs (no controller): an InferenceService can be server-side dry-run.
    isvc = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "quest"},
        "spec": {"predictor": {"tensorflow": {"storageUri": "s3://bucket/model"}}},
    }
    k8s.kubectl("apply", "--dry-run=server", "-n", ns, "-f", "-", input=yaml.safe_dump(isvc))
    # The TFJob operator is still there.
    names = k8s.kubectl("get", "crd", "-o", "name").stdout.split()
    for crd in (
        "tfjobs.kubeflow.org",
        "jobsets.jobset.x-k8s.io",
        "trainjobs.trainer.kubeflow.org",
        "clustertrainingruntimes.trainer.kubeflow.org",
        "inferenceservices.serving.kserve.io",
    ):
        assert f"customresourcedefinition.apiextensions.k8s.io/{crd}" in names


# Pod 0 listens on its own address-table entry, pod 1 connects to it by pod 0's JobSet host
# name: the agent's stand-in for cluster DNS.
_PEERS = """
import json, os, socket, time
table = json.loads(os.environ["SHARDTRAIN_LOCAL_ADDRESSES"])
index = os.environ["JOB_COMPLETION_INDEX"]
print("index", index, "host", os.environ["HOSTNAME"], "table", sorted(table), flush=True)
host, port = table[os.environ["PEER0"]].rsplit(":", 1)
if index == "0":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, int(port)))
    s.listen(1)
    s.settimeout(120)
    conn, _ = s.accept()
    print("received", conn.recv(64).decode(), flush=True)
else:
    for _ in range(600):
        try:
            conn = socket.create_connection((host, int(port)), timeout=2)
            break
        except OSError:
            time.sleep(0.2)
    conn.sendall(("hello from " + os.environ["HOSTNAME"]).encode())
"""


def test_a_jobset_runs_its_indexed_job_pods_to_completed_and_they_reach_each_other(k8s):
    ns = k8s.namespace("js")
    name = f"peers-{uuid.uuid4().hex[:4]}"
    js = _jobset(name, _PEERS)
    container = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"
    ][0]
    container["env"].append({"name": "PEER0", "value": f"{name}-node-0-0.{name}:2222"})
    started = time.monotonic()
    _apply(k8s, ns, js)
    js = _wait_for(k8s, ns, name, {"Completed", "Failed"})
    elapsed = time.monotonic() - started
    assert {c["type"] for c in js["status"]["conditions"] if c["status"] == "True"} == {
        "Completed"
    }, js["status"]
    pods = sorted(_pods(k8s, ns), key=lambda p: p["spec"]["hostname"])
    assert [p["spec"]["hostname"] for p in pods] == [f"{name}-node-0-0", f"{name}-node-0-1"]
    logs = [k8s.kubectl("logs", p["metadata"]["name"], "-n", ns).stdout for p in pods]
    hosts = [f"'{name}-node-0-{i}.{name}:2222'" for i in (0, 1)]
    for i, (pod, text) in enumerate(zip(pods, logs, strict=True)):
        assert pod["status"]["phase"] == "Succeeded"
        assert pod["spec"]["subdomain"] == name
        assert f"index {i} host {name}-node-0-{i} table [{', '.join(hosts)}]" in text, text
    assert f"received hello from {name}-node-0-1" in logs[0], logs
    print(f"JobSet {name}: 2 pods Completed {elapsed:.1f} s after kubectl apply")


def test_exit_1_under_a_fail_job_rule_fails_the_jobset_without_a_restart(k8s):
    ns = k8s.namespace("js")
    code = "import os, sys; sys.exit(1 if os.environ['JOB_COMPLETION_INDEX'] == '1' else 0)"
    js = _jobset(
        "permanent",
        code,
        backoff_limit=4,
        pod_failure_policy={
            "rules": [
                {
                    "action": "FailJob",
                    "onExitCodes": {"containerName": "node", "operator": "In", "values": [1]},
                }
            ]
        },
        failure_policy={
            "maxRestarts": 3,
            "rules": [{"action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}],
        },
    )
    _apply(k8s, ns, js)
    js = _wait_for(k8s, ns, "permanent", {"Completed", "Failed"})
    failed = [c for c in js["status"]["conditions"] if c["type"] == "Failed"]
    assert failed and failed[0]["status"] == "True", js["status"]
    assert "FailJobSet" in failed[0]["message"], failed
    assert js["status"].get("restarts", 0) == 0
    job = _get(k8s, ns, "job", "permanent-node-0")
    job_failed = [c for c in job["status"]["conditions"] if c["type"] == "Failed"]
    assert job_failed[0]["reason"] == "PodFailurePolicy", job["status"]
    exits = {
        p["spec"]["hostname"]: p["status"]["containerStatuses"][0]["state"]["terminated"][
            "exitCode"
        ]
        for p in _pods(k8s, ns)
        if p["status"].get("containerStatuses")
        and "terminated" in p["status"]["containerStatuses"][0]["state"]
    }
    assert exits.get("permanent-node-0-1") == 1, exits


def test_exit_143_restarts_the_jobset_whose_deleted_pods_are_stopped_and_it_completes(k8s):
    """Pod 0 of the first attempt exits 143 while pod 1 still runs: the Job fails
    (backoffLimit 0), JobSet restarts the whole set (maxRestarts 1): the garbage collector
    deletes the first attempt's pods and the agent stops pod 1's process; attempt 1 completes."""
    ns = k8s.namespace("js")
    code = (
        "import os, sys, time\n"
        "first = os.environ['ATTEMPT'] == '0'\n"
        "print('pid', os.getpid(), flush=True)\n"
        "if first and os.environ['JOB_COMPLETION_INDEX'] == '0':\n"
        "    time.sleep(1)\n"
        "    sys.exit(143)\n"
        "time.sleep(300 if first else 0.5)\n"
    )
    _apply(k8s, ns, _jobset("preempted", code, failure_policy={"maxRestarts": 1}))
    # The first attempt's pod 1, running: its process is what the deletion must stop.
    deadline = time.monotonic() + 120
    pid = None
    while pid is None:
        for pod in _pods(k8s, ns):
            labels = pod["metadata"].get("labels", {})
            statuses = pod["status"].get("containerStatuses") or [{}]
            if (
                labels.get("jobset.sigs.k8s.io/restart-attempt") == "0"
                and pod["spec"].get("hostname") == "preempted-node-0-1"
                and "running" in statuses[0].get("state", {})
            ):
                pid = int(statuses[0]["containerID"].rsplit("/", 1)[1])
        assert time.monotonic() < deadline, "attempt 0's pod 1 never ran" + _describe(k8s, ns)
        time.sleep(0.2)
    js = _wait_for(k8s, ns, "preempted", {"Completed", "Failed"})
    true = {c["type"] for c in js["status"]["conditions"] if c["status"] == "True"}
    assert "Completed" in true and "Failed" not in true, js["status"]
    assert js["status"]["restarts"] == 1
    pods = _pods(k8s, ns)
    attempts = {p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] for p in pods}
    assert attempts == {"1"}, attempts  # the first attempt's pods are gone
    assert all(p["status"]["phase"] == "Succeeded" for p in pods)
    with pytest.raises(ProcessLookupError):  # stopped (it would sleep for 300 s)
        os.kill(pid, 0)
