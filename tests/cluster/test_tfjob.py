"""TFJobs whose pods the real node runs: what the training operator (v1.9) writes into them,
what it does with their exit codes, and the pipeline's train step on it with the launcher's
Role only.

The pod-running half of tests/integration/kubeflow/jobs/test_tfjob.py (whose control plane has
no node: its pods stay Pending), moved here from the node agent that ran pods as host processes
with their DNS names rewritten to loopback ports. Here the kubelet runs containers of our image:
a process sees exactly the TF_CONFIG the operator wrote, a command that does not exist fails in
runc before the process starts, and a pod nobody can place is the scheduler's to explain.
End-to-end training (chief, worker, evaluator) and preemption: test_jobs.py.
"""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path

import pytest

from cluster.jobs import (
    assert_runs_our_image,
    cli,
    common_args,
    describe,
    has_export,
    no_credentials,
)
from cluster.nodes import Node
from cluster_jobs import job_namespace, run_pipeline_on_cluster
from servers import MinioServer
from shardtrain import storage
from shardtrain.kubeflow.jobs import tfjob
from shardtrain.kubeflow.local import processes

#: Arguments the manifests of these tests never use for data (their pods read nothing).
DATA, MODEL = "s3://shardtrain-data/quest", "s3://shardtrain-data/models/quest"

#: The probe every replica runs instead of the trainer: its TF_CONFIG as it sees it, and the
#: address its own entry resolves to. On the node, the chief also resolves every peer, retrying
#: until CoreDNS answers (a headless service's name resolves while its pod runs and is ready),
#: so the job cannot succeed before every pod ran; the others run until the chief's name has
#: resolved and then stopped resolving (it has ended), so that the chief finds them. Under
#: run-local every address is a loopback port: nothing to wait for.
PROBE = """
import json, os, socket, time
config = json.loads(os.environ["TF_CONFIG"])
print("TF_CONFIG=" + os.environ["TF_CONFIG"], flush=True)
task = config["task"]
def host(address):
    return address.rsplit(":", 1)[0]
def resolve(name):
    try:
        return socket.gethostbyname(name)
    except OSError:
        return None
def until(check, seconds=120):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(0.5)
mine = host(config["cluster"][task["type"]][task["index"]])
print("RESOLVED=" + str(until(lambda: resolve(mine))), flush=True)
if mine != "127.0.0.1" and task["type"] == "chief":
    for address in [a for group in config["cluster"].values() for a in group]:
        found = until(lambda: resolve(host(address)))
        print("PEER " + host(address) + "=" + str(found), flush=True)
    time.sleep(6)  # resolvable for longer than CoreDNS caches an answer (5 s)
elif mine != "127.0.0.1":
    chief = host(config["cluster"]["chief"][0])
    until(lambda: resolve(chief))
    until(lambda: resolve(chief) is None, 180)
"""

#: The probe job's replicas, by the operator's lower-case type.
PROBE_REPLICAS = {"chief": 1, "worker": 2, "evaluator": 1}


def _manifest(name: str, ns: str, image: str, command: list[str], **settings) -> dict:
    """Our TFJob (CPU only, no Secret, small requests: the node has 2 CPUs) with every
    replica's container running ``command`` instead of the trainer."""
    config = tfjob.JobConfig(
        data=DATA, model_dir=MODEL, name=name, namespace=ns, image=image, gpus_per_worker=0,
        secret=None, cpu="200m", memory="256Mi", termination_grace_seconds=30, **settings,
    )  # fmt: skip
    manifest = tfjob.to_manifest(tfjob.build_tfjob(config))
    for spec in manifest["spec"]["tfReplicaSpecs"].values():
        container = spec["template"]["spec"]["containers"][0]
        container["command"] = command
        container.pop("args", None)
    return manifest


def _probe_manifest(ns: str, image: str, workers: int = 2) -> dict:
    manifest = _manifest("probe", ns, image, ["python3", "-c", PROBE], workers=workers)
    # Keep every pod (and its log) when the chief is done: Running would delete workers still
    # running, None keeps them.
    manifest["spec"]["runPolicy"]["cleanPodPolicy"] = "None"
    return manifest


def _shape(tf_config: dict) -> dict:
    """TF_CONFIG with every address replaced by its position (hosts and ports differ)."""
    return {
        "cluster": {k: len(v) for k, v in tf_config["cluster"].items()},
        "task": tf_config["task"],
        "environment": tf_config.get("environment"),
    }


def _write(path: Path, manifest: dict) -> str:
    path.write_text(tfjob.to_yaml(manifest))
    return str(path)


def _terminated(pod: dict) -> bool:
    return any("terminated" in s["state"] for s in pod["status"].get("containerStatuses", ()))


def test_run_local_writes_the_tf_config_the_operator_writes(
    node: Node, image: str, tmp_path: Path
) -> None:
    """A TFJob of chief + 2 workers + evaluator whose replicas print their TF_CONFIG, through
    the operator on the node and through ``run-local``. On the node each process sees exactly
    what the operator wrote into its pod (no rewriting: the node agent mapped every host to a
    loopback port): the DNS names of the operator's headless services, which CoreDNS resolves
    to the pods themselves, for the replica and for the chief, which resolves every peer;
    ``run-local`` writes the same shape with localhost ports. Submitting it again attaches;
    another job under that name is refused in one line."""
    ns = node.namespace(service_accounts=("shardtrain-trainer",))
    manifest = _probe_manifest(ns, image)
    path = _write(tmp_path / "probe.yaml", manifest)
    submit = cli(node, "tfjob", "submit", "-f", path, "--poll-interval", "1", "--no-logs")
    assert submit.returncode == 0, submit.stdout + submit.stderr + describe(node, ns)
    assert f"TFJob {ns}/probe succeeded" in submit.stdout
    # Submitting it again (a retried step): it attaches to the finished job, nothing reruns.
    again = cli(node, "tfjob", "submit", "-f", path, "--no-logs")
    assert again.returncode == 0, again.stderr
    assert f"attached to TFJob {ns}/probe" in again.stdout
    assert f"TFJob {ns}/probe succeeded" in again.stdout
    # Another job under that name: refused in one line, nothing waits.
    smaller = _write(tmp_path / "other.yaml", _probe_manifest(ns, image, workers=1))
    other = cli(node, "tfjob", "submit", "-f", smaller)
    assert other.returncode == 1
    assert other.stderr.strip().splitlines() == [
        f"error: TFJob {ns}/probe already exists and runs something else (another image, "
        "data, model directory, train arguments, pods' settings or queue): delete it or "
        "choose another name"
    ], other.stderr

    expected = {
        rtype: [f"probe-{rtype}-{i}.{ns}.svc:2222" for i in range(count)]
        for rtype, count in PROBE_REPLICAS.items()
    }
    operator: dict[str, dict] = {}
    pod_ips: dict[str, str] = {}
    logs_of: dict[str, str] = {}
    for rtype, count in PROBE_REPLICAS.items():
        for i in range(count):
            name = f"probe-{rtype}-{i}"
            # The job succeeded with the chief; the others end once its name stops resolving.
            pod = node.wait_pod(name, ns, _terminated, timeout=120)
            assert_runs_our_image(pod, node, image)
            state = pod["status"]["containerStatuses"][0]["state"]
            assert state["terminated"]["exitCode"] == 0, state
            env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
            written = json.loads(env["TF_CONFIG"])
            assert written == {
                "cluster": expected,
                "task": {"type": rtype, "index": i},
                "environment": "cloud",
            }, written
            # What the process saw, through the kubelet's log: the very same.
            logs = node.kubectl("logs", name, "-n", ns).stdout
            seen = json.loads(re.search(r"^TF_CONFIG=(.*)$", logs, re.M).group(1))
            assert seen == written, logs
            # Its own host name, resolved in the pod by CoreDNS: this pod's address.
            resolved = re.search(r"^RESOLVED=(.*)$", logs, re.M)
            assert resolved and resolved.group(1) == pod["status"]["podIP"], logs
            operator[f"{rtype}-{i}"] = written
            pod_ips[name] = pod["status"]["podIP"]
            logs_of[name] = logs
    # The chief found every replica (itself too) at its pod's address.
    peers = dict(re.findall(r"^PEER (\S+)=(.*)$", logs_of["probe-chief-0"], re.M))
    assert peers == {f"{pod}.{ns}.svc": ip for pod, ip in pod_ips.items()}, logs_of

    # One headless service per replica, named as TF_CONFIG names its host, selecting its pod.
    services = json.loads(node.kubectl("get", "services", "-n", ns, "-o", "json").stdout)["items"]
    assert sorted(s["metadata"]["name"] for s in services) == sorted(
        a.split(".")[0] for hosts in expected.values() for a in hosts
    )
    for service in services:
        assert service["spec"]["clusterIP"] == "None", service["spec"]
        assert [p["port"] for p in service["spec"]["ports"]] == [2222], service["spec"]
        labels = node.get("pod", service["metadata"]["name"], ns)["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items(), service["spec"]

    out = io.StringIO()
    result = processes.run_local(tfjob.local_replicas(manifest), out=out, timeout=120, grace=5)
    assert result.succeeded, out.getvalue()
    local = {
        m.group(1): json.loads(m.group(2))
        for m in re.finditer(r"^\[(\S+)\] TF_CONFIG=(.*)$", out.getvalue(), re.M)
    }
    assert sorted(local) == sorted(operator)
    for replica, written in operator.items():
        assert _shape(local[replica]) == _shape(written), replica
        assert list(local[replica]["cluster"]) == list(written["cluster"]), replica
        addresses = [a for group in local[replica]["cluster"].values() for a in group]
        assert all(a.startswith("127.0.0.1:") for a in addresses), addresses
        assert len(set(addresses)) == len(addresses), addresses


def test_a_permanent_error_fails_the_job_and_the_submit_command(
    node: Node, image: str, node_minio: MinioServer
) -> None:
    """Our trainer exits 1 when there is no dataset at --data: under the ExitCode restart
    policy (1-127 permanent) the operator fails the job at once, with no restart, and the
    submit command exits 1 with one line: the operator's reason (for a failed Chief v1.9 says
    'job "bad" is failing because "Chief" replica(s) failed.', not the "has failed because 1
    Worker replica(s) failed." of a failed worker), the pod, its exit code and the trainer's
    error (its last log line, through the kubelet)."""
    ns = job_namespace(node, node_minio)
    missing = node_minio.uri("no-such-dataset")
    proc = cli(
        node,
        "tfjob", "submit", *common_args(ns, "bad", image, missing, node_minio.uri("bad-model")),
        "--workers", "0", "--no-evaluator", "--gpus-per-worker", "0", "--cpu", "200m",
        "--wait-timeout", "300",
        "--", "--train-steps", "10",
    )  # fmt: skip
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1, text[-3000:] + describe(node, ns)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert errors[0] == proc.stderr.strip().splitlines()[-1], proc.stderr[-3000:]
    prefix = (
        f'error: TFJob {ns}/bad failed: TFJobFailed: job "bad" is failing because "Chief" '
        "replica(s) failed.; pod bad-chief-0 exited 1: "
    )
    assert errors[0].startswith(prefix), errors[0]

    pod = node.get("pod", "bad-chief-0", ns)
    assert_runs_our_image(pod, node, image)
    status = pod["status"]["containerStatuses"][0]
    assert status["state"]["terminated"]["exitCode"] == 1, status
    assert status["restartCount"] == 0, status
    # The line's tail is the trainer's own last line, as the kubelet kept it.
    logs = node.kubectl("logs", "bad-chief-0", "-n", ns).stdout.strip().splitlines()
    assert errors[0] == prefix + logs[-1].strip(), (errors[0], logs[-5:])
    job = node.get("tfjob", "bad", ns)
    assert "Restarting" not in {c["type"] for c in job["status"]["conditions"]}, job["status"]
    # One pod only: the operator never recreated it.
    created = {
        e["involvedObject"]["uid"]
        for e in node.events(ns)
        if e["reason"] == "Scheduled" and e["involvedObject"]["name"] == "bad-chief-0"
    }
    assert len(created) == 1, describe(node, ns)
    no_credentials(node_minio, text)


def test_a_job_needing_a_gpu_the_node_lacks_outlasts_the_wait_and_the_scheduler_says_why(
    node: Node, image: str
) -> None:
    """A job whose pod asks for a GPU: the real scheduler leaves it Pending and says why
    (FailedScheduling: Insufficient nvidia.com/gpu); the submit command's wait ends in a
    timeout, and --delete removes the job and, by the garbage collector, its pod. (The
    timeout and --delete without a node: the integration twin.)"""
    ns = node.namespace(service_accounts=("shardtrain-trainer",))
    proc = cli(
        node,
        "tfjob", "submit", "--namespace", ns, "--name", "stuck", "--image", image,
        "--data", DATA, "--model-dir", MODEL, "--workers", "0", "--no-evaluator",
        "--gpus-per-worker", "1", "--cpu", "200m", "--memory", "256Mi", "--secret", "",
        "--poll-interval", "1", "--wait-timeout", "10", "--delete",
        timeout=120,
    )  # fmt: skip
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1, text
    assert f"TFJob {ns}/stuck did not end within 10s" in proc.stderr.strip().splitlines()[-1]
    assert f"deleted TFJob {ns}/stuck" in proc.stdout, text
    # Said while it waited: the scheduler's reason (not a silent wait until the timeout).
    assert (
        f"TFJob {ns}/stuck: pod stuck-chief-0 not scheduled: 0/1 nodes are available: "
        "1 Insufficient nvidia.com/gpu"
    ) in proc.stdout, text
    assert node.get("tfjob", "stuck", ns) is None
    said = [
        e["message"]
        for e in node.events(ns)
        if e["reason"] == "FailedScheduling" and e["involvedObject"]["name"] == "stuck-chief-0"
    ]
    assert said and "1 Insufficient nvidia.com/gpu" in said[0], said
    # Never placed, and gone with its job (the garbage collector's, within a minute).
    deadline = time.monotonic() + 60
    while (pod := node.get("pod", "stuck-chief-0", ns)) is not None:
        assert "nodeName" not in pod["spec"], pod["spec"]
        assert time.monotonic() < deadline, "the deleted TFJob's pod stayed" + describe(node, ns)
        time.sleep(0.5)


def test_a_command_that_does_not_exist_restarts_until_the_deadline_fails_the_job(
    node: Node, image: str, tmp_path: Path
) -> None:
    """A replica whose command is not in the image: runc fails to start it ("exec: ... no such
    file or directory"), the kubelet reports exit code 128, reason StartError. Under ExitCode
    128 counts as retryable, so the operator deletes and recreates the pod, again and again:
    training-operator v1.9 ignores backoffLimit under ExitCode (it counts container restarts,
    and a recreated pod has none: kubeflow/trainer#2045, closed unfixed), and the job would
    restart until deleted (seen: 140 pods in 5 min, the submit only timing out). What ends it
    is --active-deadline-seconds: the operator fails the job and the submit command exits 1
    with one line saying so (and the pod's 128 with the kubelet's reason and runc's message
    when a failed pod is still there; by then the operator may be creating the next one). The
    node agent of old reported 128/StartError and the pod Failed, but never the restart loop."""
    ns = node.namespace(service_accounts=("shardtrain-trainer",))
    missing = "/nonexistent/no-such-command"
    manifest = _manifest(
        "nocmd", ns, image, [missing], workers=0, evaluator=False, backoff_limit=1,
        active_deadline_seconds=30,
    )  # fmt: skip
    path = _write(tmp_path / "nocmd.yaml", manifest)
    proc = cli(node, "tfjob", "submit", "-f", path, "--poll-interval", "1", timeout=300)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1, text + describe(node, ns)
    line = proc.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        re.escape(
            f"error: TFJob {ns}/nocmd failed: TFJobFailed: Job nocmd has failed because it "
            "was active longer than specified deadline"
        )
        # The kubelet's reason and runc's message, when a failed pod is still there.
        + r"(; pod nocmd-chief-0 exited 128 \(StartError\): .*"
        + re.escape(f'exec: "{missing}"')
        + r".*)?",
        line,
    ), line

    job = node.get("tfjob", "nocmd", ns)
    conditions = {c["type"]: c for c in job["status"]["conditions"]}
    assert conditions["Restarting"]["reason"] == "TFJobRestarting", job["status"]
    events = node.events(ns)
    # The kubelet: runc could not start the process (every attempt).
    failed = [
        e["message"]
        for e in events
        if e["reason"] == "Failed" and e["involvedObject"]["name"] == "nocmd-chief-0"
    ]
    runc = f'runc create failed: unable to start container process: exec: "{missing}"'
    assert failed and all(runc in m for m in failed), failed
    # The operator read it from the pod's status: 128, StartError, runc's message.
    start_errors = [e["message"] for e in events if e["reason"] == "StartError"]
    assert start_errors, describe(node, ns)
    assert start_errors[0].startswith(
        "Error pod nocmd-chief-0 container tensorflow exitCode: 128 terminated message: "
    ), start_errors
    assert runc in start_errors[0], start_errors
    # More pods than backoffLimit 1 allows (2 tries): the limit did not apply.
    pods = {
        e["involvedObject"]["uid"]
        for e in events
        if e["reason"] == "Scheduled" and e["involvedObject"]["name"] == "nocmd-chief-0"
    }
    assert len(pods) > 2, describe(node, ns)


@pytest.mark.minio
def test_the_pipeline_trains_on_the_operator_with_the_launcher_role_only(
    node: Node,
    image: str,
    node_minio: MinioServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The whole csv_to_model pipeline under kfp.local on this machine; its train step in
    cluster mode submits a real TFJob (chief, worker, evaluator) of our image (the pipeline's
    ``image`` parameter) with a token bound to k8s/rbac's Role only, and the node runs it on
    the data in MinIO at the node's address."""
    ns, run = run_pipeline_on_cluster(
        node, node_minio, tmp_path, monkeypatch, "pipeline", job_api="tfjob", evaluator=True,
        image=image, worker_cpu="300m",
    )  # fmt: skip
    logs = capfd.readouterr()
    text = logs.out + logs.err
    jobs = json.loads(node.kubectl("get", "tfjobs", "-n", ns, "-o", "json").stdout)["items"]
    assert len(jobs) == 1, text[-3000:] + describe(node, ns)
    job = jobs[0]
    name = job["metadata"]["name"]
    true = {c["type"] for c in job["status"]["conditions"] if c["status"] == "True"}
    assert "Succeeded" in true, job["status"]
    assert f"TFJob {ns}/{name} succeeded" in text
    assert "chief: trained to step 40 (from 0)" in text, text[-3000:]
    assert set(job["spec"]["tfReplicaSpecs"]) == {"Chief", "Worker", "Evaluator"}
    chief = node.get("pod", f"{name}-chief-0", ns)
    assert_runs_our_image(chief, node, image)
    assert chief["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert run.metrics["step"] == 40
    assert storage.exists(f"{run.served}/saved_model.pb")
    assert has_export(run.model_dir)
    no_credentials(node_minio, text)
