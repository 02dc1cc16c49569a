"""TFJobs against a real Kubernetes control plane and the real Kubeflow training operator.

The ``k8s`` fixture (tests/conftest.py) starts the control plane with ``scripts/k8s-up``
(etcd, kube-apiserver, kube-controller-manager, the training operator, JobSet, Trainer) and a
node agent (``shardtrain node run``) that runs the pods the operator creates as local
processes. Nothing here re-implements the operator: it decides TF_CONFIG, restarts, success
and failure; its webhook and the CRD's schema decide what is accepted.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from cluster_jobs import (
    describe,
    get,
    job_namespace,
    launcher_kubeconfig,
    pid_of,
    run_pipeline_on_cluster,
    shard_quest,
)
from helpers import run_cli
from shardtrain import storage
from shardtrain.kubeflow.jobs import tfjob
from shardtrain.kubeflow.local import processes
from tfjob_examples import example_manifests

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[4]
OVERLAYS = sorted(p.parent for p in (REPO / "k8s" / "overlays").glob("*/kustomization.yaml"))
DATA, MODEL = "s3://shardtrain-data/quest", "s3://shardtrain-data/models/quest"


def _render(*args: str) -> Callable[..., list[dict]]:
    def make(k8s=None) -> list[dict]:
        out = run_cli("tfjob", "render", "--data", DATA, "--model-dir", MODEL, *args, check=True)
        return [d for d in yaml.safe_load_all(out.stdout) if d]

    return make


def _overlay(path: Path) -> Callable[..., list[dict]]:
    def make(k8s) -> list[dict]:
        out = k8s.kubectl("kustomize", str(path))
        return [d for d in yaml.safe_load_all(out.stdout) if d and d.get("kind") == "TFJob"]

    return make


def _example(name: str) -> Callable[..., list[dict]]:
    def make(k8s=None) -> list[dict]:
        return [example_manifests()[name]]

    return make


#: Every TFJob we ship or generate, by name: each must be accepted by the CRD's schema and by
#: the operator's webhook. Add a render (e.g. with queue options) here to have it checked.
MANIFESTS: dict[str, Callable[..., list[dict]]] = {
    "render-default": _render(),
    "render-cpu-chief-only": _render(
        "--workers", "0", "--no-evaluator", "--gpus-per-worker", "0", "--secret", ""
    ),
    "render-all-options": _render(
        "--name",
        "quest-7",
        "--workers",
        "4",
        "--gpus-per-worker",
        "2",
        "--cpu",
        "8",
        "--memory",
        "32Gi",
        "--backoff-limit",
        "5",
        "--ttl-seconds-after-finished",
        "600",
        "--clean-pod-policy",
        "All",
        "--termination-grace-seconds",
        "300",
        "--active-deadline-seconds",
        "7200",
        "--",
        "--train-steps",
        "1000",
    ),
    **{f"overlay-{p.name}": _overlay(p) for p in OVERLAYS},
    # Every shape tests/tfjob_examples.py lists: queues (Kueue, Volcano), priority, gs://.
    **{f"example-{n}": _example(n) for n in example_manifests()},
}


@pytest.fixture(scope="module")
def shardtrain_ns(k8s):
    """The namespace the shipped manifests name."""
    if k8s.kubectl("get", "namespace", "shardtrain", check=False).returncode != 0:
        k8s.kubectl("create", "namespace", "shardtrain")
    return "shardtrain"


def _server_dry_run(k8s, docs: list[dict]) -> subprocess.CompletedProcess[str]:
    text = yaml.safe_dump_all(docs)
    return k8s.kubectl("apply", "--dry-run=server", "-f", "-", input=text, check=False)


@pytest.mark.parametrize("name", sorted(MANIFESTS))
def test_shipped_and_rendered_tfjobs_are_accepted_by_the_crd_and_the_operator(
    k8s, shardtrain_ns, name
):
    docs = MANIFESTS[name](k8s)
    assert [d["kind"] for d in docs] == ["TFJob"], name
    out = _server_dry_run(k8s, docs)
    assert out.returncode == 0, out.stderr
    assert "created (server dry run)" in out.stdout


def _broken(mutate: Callable[[dict], None]) -> list[dict]:
    docs = _render("--workers", "1")()
    mutate(docs[0])
    return docs


def _rename_container(job: dict) -> None:
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "main"


def _chief_and_master(job: dict) -> None:
    job["spec"]["tfReplicaSpecs"]["Master"] = job["spec"]["tfReplicaSpecs"]["Chief"]


def test_the_operator_webhook_denies_a_tfjob_it_cannot_run(k8s, shardtrain_ns):
    """The denial comes from the operator's own webhook, not from our validation."""
    for mutate, words in (
        (_rename_container, "tensorflow"),
        (_chief_and_master, "Chief"),
    ):
        out = _server_dry_run(k8s, _broken(mutate))
        assert out.returncode != 0, mutate.__name__
        assert 'admission webhook "validator.tfjob.training-operator.kubeflow.org" denied' in (
            out.stderr
        ), out.stderr
        assert words in out.stderr, out.stderr


def test_the_crd_schema_denies_a_malformed_tfjob(k8s, shardtrain_ns):
    def bad_replicas(job: dict) -> None:
        job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "two"

    out = _server_dry_run(k8s, _broken(bad_replicas))
    assert out.returncode != 0
    # The CRD schema says "integer"; Kueue's TFJob webhook, which the API server calls first
    # when Kueue runs, fails to decode the job and says "int32": either way, denied by name.
    assert "replicas" in out.stderr, out.stderr
    assert "integer" in out.stderr or "of type int32" in out.stderr, out.stderr


# ------------------------------------------------------------------------------------------
# Jobs that run: TF_CONFIG from the operator
# ------------------------------------------------------------------------------------------

PRINT_TF_CONFIG = "import os; print('TF_CONFIG=' + os.environ['TF_CONFIG'])"


def _probe_manifest(name: str, namespace: str) -> dict:
    """A TFJob of chief + 2 workers + evaluator whose replicas print their TF_CONFIG."""
    config = tfjob.JobConfig(
        data=DATA,
        model_dir=MODEL,
        name=name,
        namespace=namespace,
        gpus_per_worker=0,
        secret=None,
    )
    manifest = tfjob.to_manifest(tfjob.build_tfjob(config))
    # Keep every pod when the chief is done (Running would delete workers still running).
    manifest["spec"]["runPolicy"]["cleanPodPolicy"] = "None"
    for spec in manifest["spec"]["tfReplicaSpecs"].values():
        container = spec["template"]["spec"]["containers"][0]
        container["command"] = ["python", "-c", PRINT_TF_CONFIG]
        container.pop("args", None)
    return manifest


def _shape(tf_config: dict) -> dict:
    """TF_CONFIG with every address replaced by its position (hosts and ports differ)."""
    return {
        "cluster": {k: len(v) for k, v in tf_config["cluster"].items()},
        "task": tf_config["task"],
        "environment": tf_config.get("environment"),
    }


def test_run_local_writes_the_tf_config_the_operator_writes(k8s, tmp_path):
    """The same manifest through the operator and through ``run-local``: same TF_CONFIG."""
    ns = k8s.namespace(service_accounts=("shardtrain-trainer",))
    manifest = _probe_manifest("probe", ns)
    path = tmp_path / "probe.yaml"
    path.write_text(tfjob.to_yaml(manifest))
    submit = run_cli("tfjob", "submit", "-f", str(path), "--poll-interval", "1", "--no-logs")
    assert submit.returncode == 0, submit.stdout + submit.stderr + describe(k8s, ns)
    assert f"TFJob {ns}/probe succeeded" in submit.stdout
    # Submitting it again (a retried step): it attaches to the finished job, nothing reruns.
    again = run_cli("tfjob", "submit", "-f", str(path), "--no-logs")
    assert again.returncode == 0, again.stderr
    assert f"attached to TFJob {ns}/probe" in again.stdout
    assert f"TFJob {ns}/probe succeeded" in again.stdout
    # Another job under that name: refused in one line, nothing waits.
    smaller = _probe_manifest("probe", ns)
    smaller["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 1
    (tmp_path / "other.yaml").write_text(tfjob.to_yaml(smaller))
    other = run_cli("tfjob", "submit", "-f", str(tmp_path / "other.yaml"), "--no-logs")
    assert other.returncode == 1
    assert other.stderr.strip().splitlines() == [
        f"error: TFJob {ns}/probe already exists and runs something else (another image, "
        "data, model directory, train arguments, pods' settings or queue): delete it or "
        "choose another name"
    ], other.stderr

    # What the operator wrote into the pods (their spec) and what the processes saw (their
    # logs through the API server and the node agent).
    operator: dict[str, dict] = {}
    for rtype, count in (("chief", 1), ("worker", 2), ("evaluator", 1)):
        for i in range(count):
            pod = f"probe-{rtype}-{i}"
            spec = json.loads(k8s.kubectl("get", "pod", pod, "-n", ns, "-o", "json").stdout)
            env = {e["name"]: e.get("value") for e in spec["spec"]["containers"][0]["env"]}
            written = json.loads(env["TF_CONFIG"])
            assert written["cluster"]["worker"] == [
                f"probe-worker-{j}.{ns}.svc:2222" for j in range(2)
            ]
            logs = k8s.kubectl("logs", pod, "-n", ns).stdout
            seen = json.loads(re.search(r"TF_CONFIG=(.*)", logs).group(1))
            assert _shape(seen) == _shape(written)
            # The node agent mapped each service to its own loopback port.
            addresses = [a for group in seen["cluster"].values() for a in group]
            assert all(a.startswith("127.0.0.1:") for a in addresses), addresses
            assert len(set(addresses)) == len(addresses), addresses
            operator[f"{rtype}-{i}"] = written

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


# ------------------------------------------------------------------------------------------
# shardtrain tfjob submit: training on MinIO data
# ------------------------------------------------------------------------------------------

ROWS = 4000


@pytest.fixture(scope="module")
def quest_data(minio, tmp_path_factory) -> str:
    return shard_quest(minio, tmp_path_factory.mktemp("quest"), "k8s-data", ROWS)


def _submit_args(ns: str, name: str, data: str, model_dir: str, *more: str) -> list[str]:
    return [
        "tfjob",
        "submit",
        "--namespace",
        ns,
        "--name",
        name,
        "--data",
        data,
        "--model-dir",
        model_dir,
        "--gpus-per-worker",
        "0",
        "--cpu",
        "500m",
        "--memory",
        "1Gi",
        "--poll-interval",
        "2",
        *more,
    ]


#: Storage credentials reach the pods only through the Secret: the node agent withholds its own
#: AWS_* variables from pods, and the submit command needs none.
NO_AWS = {name: "" for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}


@pytest.mark.minio
@pytest.mark.slow
@pytest.mark.cluster
def test_submit_trains_chief_two_workers_and_evaluator_on_the_operator(k8s, minio, quest_data):
    ns = job_namespace(k8s, minio)
    model_dir = minio.uri("k8s-model")
    args = _submit_args(
        ns,
        "quest",
        quest_data,
        model_dir,
        "--workers",
        "2",
        "--evaluator",
        "--wait-timeout",
        "900",
        "--",
        "--train-steps",
        "60",
        "--batch-size",
        "48",
        "--checkpoint-every",
        "30",
    )
    proc = run_cli(*args, timeout=1000)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-5000:] + describe(k8s, ns)
    assert f"TFJob {ns}/quest succeeded" in text
    # The chief's log streamed through the API server from the node agent.
    assert "[Pod quest-chief-0]: chief: trained to step 60 (from 0)" in text, text[-3000:]

    # The operator made the headless services: one per replica, named as TF_CONFIG names its
    # hosts. (A worker's may already be gone: with cleanPodPolicy Running the operator deletes
    # a worker still tearing TensorFlow down when the chief succeeds, and its service with it
    # -- seen once for worker-1 in a full run. That every replica trained is asserted below.)
    services = k8s.kubectl("get", "services", "-n", ns, "-o", "name").stdout.split()
    expected = [f"service/quest-{r}" for r in ("chief-0", "evaluator-0", "worker-0", "worker-1")]
    assert "service/quest-chief-0" in services and set(services) <= set(expected), services
    job = json.loads(k8s.kubectl("get", "tfjob", "quest", "-n", ns, "-o", "json").stdout)
    replicas = job["status"]["replicaStatuses"]
    assert replicas["Chief"].get("succeeded") == 1, replicas
    # All three trained together: the chief's all-reduce spans chief + 2 workers. (Not the
    # workers' pod phases: the job succeeds when the chief does, and the operator then deletes
    # a worker still tearing TensorFlow down -- seen on a loaded machine.)
    assert "group_size = 3" in text, text[-3000:]

    metrics = storage.read_json(storage.join(model_dir, "eval", "metrics.json"))
    assert metrics["step"] == 60
    exports = storage.join(model_dir, "export")
    assert any(p.endswith("saved_model.pb") for p in storage.walk_files(exports))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert minio.env[name] not in text, name


@pytest.mark.minio
@pytest.mark.slow
@pytest.mark.cluster
def test_a_preempted_worker_is_recreated_by_the_operator_and_the_job_resumes(
    k8s, minio, quest_data, tmp_path
):
    """SIGTERM to a worker's process: it checkpoints and exits 143, the operator recreates
    the pod (restartPolicy ExitCode), training resumes and ends at exactly --train-steps."""
    ns = job_namespace(k8s, minio)
    model_dir = minio.uri("k8s-preempt")
    steps = 400
    args = _submit_args(
        ns,
        "pre",
        quest_data,
        model_dir,
        "--workers",
        "1",
        "--no-evaluator",
        "--wait-timeout",
        "900",
        "--",
        "--train-steps",
        str(steps),
        "--batch-size",
        "32",
        "--checkpoint-every",
        "20",
    )
    log_path = tmp_path / "submit.log"
    with open(log_path, "w") as log:
        submit = subprocess.Popen(
            [sys.executable, "-m", "shardtrain.cli", *args], stdout=log, stderr=subprocess.STDOUT
        )
    try:
        # Wait until training has written its first checkpoint, then preempt worker 0.
        deadline = time.monotonic() + 600
        first_uid = None
        while time.monotonic() < deadline:
            pod = get(k8s, "pod", ns, "pre-worker-0")
            pid = pid_of(pod)
            if pid and storage.exists(storage.join(model_dir, "checkpoints")):
                first_uid = pod["metadata"]["uid"]
                subprocess.run(["kill", "-TERM", str(pid)], check=True)
                break
            assert submit.poll() is None, log_path.read_text()[-3000:]
            time.sleep(0.5)
        assert first_uid, "training never reached a checkpoint" + describe(k8s, ns)
        # The recreated pod, seen while the job runs (once it has Succeeded, the operator may
        # clean its pods up before they can be read).
        recreated_uid = None
        deadline = time.monotonic() + 900
        while submit.poll() is None and time.monotonic() < deadline:
            pod = get(k8s, "pod", ns, "pre-worker-0")
            if pod and pod["metadata"]["uid"] != first_uid:
                recreated_uid = pod["metadata"]["uid"]
                break
            time.sleep(0.5)
        code = submit.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if submit.poll() is None:
            submit.kill()
    text = log_path.read_text()
    assert code == 0, text[-5000:] + describe(k8s, ns)
    job = json.loads(k8s.kubectl("get", "tfjob", "pre", "-n", ns, "-o", "json").stdout)
    assert job["status"]["conditions"][-1]["type"] == "Succeeded", job["status"]
    # The operator saw the worker exit with 143 and recreated its pod.
    events = json.loads(k8s.kubectl("get", "events", "-n", ns, "-o", "json").stdout)["items"]
    said = {(e["reason"], e["message"]) for e in events}
    assert ("ExitedWithCode", f"Pod: {ns}.pre-worker-0 exited with code 143") in said, said
    assert any(reason == "TFJobRestarting" for reason, _ in said), said
    assert recreated_uid, "no pre-worker-0 with a new uid while the job ran" + describe(k8s, ns)
    assert "restored checkpoint step" in text, text[-3000:]
    metrics = storage.read_json(storage.join(model_dir, "eval", "metrics.json"))
    assert metrics["step"] == steps


@pytest.mark.minio
@pytest.mark.slow
def test_a_permanent_error_fails_the_job_and_the_submit_command(k8s, minio):
    """Exit code 1 (no dataset there): the operator marks the job Failed, no restart."""
    ns = job_namespace(k8s, minio)
    missing = minio.uri("no-such-dataset")
    args = _submit_args(
        ns,
        "bad",
        missing,
        minio.uri("k8s-bad-model"),
        "--workers",
        "0",
        "--no-evaluator",
        "--wait-timeout",
        "600",
        "--",
        "--train-steps",
        "10",
    )
    proc = run_cli(*args, timeout=700)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1, text[-3000:]
    # One line with the operator's reason.
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: TFJob {ns}/bad failed: TFJobFailed: "), text[-3000:]
    assert "Chief" in line, line
    pod = get(k8s, "pod", ns, "bad-chief-0")
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert state["exitCode"] == 1
    job = json.loads(k8s.kubectl("get", "tfjob", "bad", "-n", ns, "-o", "json").stdout)
    assert "Restarting" not in {c["type"] for c in job["status"]["conditions"]}


def test_a_job_outlasting_the_wait_timeout_fails_the_submit_command(k8s):
    """A job whose pods can never be scheduled (a GPU this node lacks) outlasts the wait."""
    ns = k8s.namespace(service_accounts=("shardtrain-trainer",))
    args = [
        "tfjob",
        "submit",
        "--namespace",
        ns,
        "--name",
        "stuck",
        "--data",
        DATA,
        "--model-dir",
        MODEL,
        "--workers",
        "0",
        "--no-evaluator",
        "--gpus-per-worker",
        "1",
        "--secret",
        "",
        "--poll-interval",
        "1",
        "--wait-timeout",
        "4",
        "--delete",
    ]
    proc = run_cli(*args, timeout=120)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    assert f"TFJob {ns}/stuck did not end within 4s" in text, text
    # --delete: the job is gone once the wait ended, and the garbage collector takes its pod.
    assert "NotFound" in k8s.kubectl("get", "tfjob", "stuck", "-n", ns, check=False).stderr
    deadline = time.monotonic() + 60
    while get(k8s, "pod", ns, "stuck-chief-0") is not None:
        assert time.monotonic() < deadline, "the deleted TFJob's pod stayed" + describe(k8s, ns)
        time.sleep(0.5)
    # It never ran: the node has no GPU (the node agent, as a scheduler, said so on the pod).
    said = f"pod {ns}/stuck-chief-0: not scheduled: node {k8s.node_name} has no 1 nvidia.com/gpu"
    assert said in k8s.node_log.read_text()


def test_a_pod_whose_command_does_not_exist_fails_and_the_node_runs_the_others(k8s):
    """As with containerd: exit code 128, reason StartError; the node agent goes on."""
    ns = k8s.namespace()

    def pod(name: str, command: list[str]) -> dict:
        container = {"name": "main", "image": "busybox", "command": command}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"restartPolicy": "Never", "containers": [container]},
        }

    manifests = [pod("missing", ["/nonexistent/no-such-command"]), pod("sleeper", ["sleep", "600"])]
    k8s.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(manifests))
    for name, phase in (("missing", "Failed"), ("sleeper", "Running")):
        k8s.kubectl(
            "wait",
            f"pod/{name}",
            "-n",
            ns,
            f"--for=jsonpath={{.status.phase}}={phase}",
            "--timeout=120s",
            timeout=180,
        )
    terminated = get(k8s, "pod", ns, "missing")["status"]["containerStatuses"][0]["state"][
        "terminated"
    ]
    assert terminated["exitCode"] == 128 and terminated["reason"] == "StartError", terminated
    assert "/nonexistent/no-such-command" in terminated["message"]
    k8s.kubectl("delete", "pod", "sleeper", "missing", "-n", ns, "--timeout=120s", timeout=180)


# ------------------------------------------------------------------------------------------
# The pipeline's train step on the cluster, with the launcher's Role only
# ------------------------------------------------------------------------------------------


def test_the_launcher_role_allows_launching_and_nothing_more(k8s, tmp_path):
    ns = k8s.namespace(service_accounts=("shardtrain-trainer",))
    kubeconfig = launcher_kubeconfig(k8s, ns, tmp_path / "launcher.kubeconfig")

    def can(*what: str) -> bool:
        out = k8s.kubectl("--kubeconfig", str(kubeconfig), "auth", "can-i", *what, check=False)
        return out.stdout.strip() == "yes"

    assert can("create", "tfjobs.kubeflow.org", "-n", ns)
    assert can("get", "pods", "--subresource=log", "-n", ns)
    assert not can("get", "secrets", "-n", ns)
    assert not can("create", "pods", "-n", ns)
    assert not can("create", "tfjobs.kubeflow.org", "-n", "default")


@pytest.mark.minio
@pytest.mark.slow
@pytest.mark.cluster
def test_the_pipeline_trains_on_the_operator_with_the_launcher_role_only(
    k8s, minio, tmp_path, monkeypatch, capfd
):
    """The whole csv_to_model pipeline under kfp.local; its train step in cluster mode submits
    a real TFJob (chief, worker, evaluator) with a token bound to k8s/rbac's Role only."""
    # The TrainJob twin: tests/integration/kubeflow/jobs/test_trainjob.py.
    ns, run = run_pipeline_on_cluster(
        k8s, minio, tmp_path, monkeypatch, "k8s-pipeline", job_api="tfjob", evaluator=True
    )
    logs = capfd.readouterr()
    text = logs.out + logs.err
    jobs = json.loads(k8s.kubectl("get", "tfjobs", "-n", ns, "-o", "json").stdout)["items"]
    assert len(jobs) == 1, text[-3000:]
    job = jobs[0]
    assert {c["type"] for c in job["status"]["conditions"] if c["status"] == "True"} >= {
        "Succeeded"
    }
    assert f"TFJob {ns}/{job['metadata']['name']} succeeded" in text
    assert run.metrics["step"] == 40
    assert storage.exists(f"{run.served}/saved_model.pb")


def test_a_queued_job_waits_suspended_and_a_timeout_says_it_is_still_queued(k8s):
    """``--queue`` creates the job suspended, as Kueue expects: the real operator then creates no
    pods and reports Suspended until Kueue admits it (clears ``runPolicy.suspend``); ``submit``
    says the job is queued, and a wait that ends first is a timeout naming the queue state, not
    a failure. (Admission and preemption sequences:
    tests/unit/kubeflow/jobs/tfjob/test_submit.py.)"""
    ns = k8s.namespace(service_accounts=("shardtrain-trainer",))
    args = _submit_args(ns, "queued", DATA, MODEL, "--queue", "gpu-team", "--secret", "")
    args += ["--wait-timeout", "8", "--poll-interval", "1"]
    proc = run_cli(*args, timeout=120)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    assert "is queued: suspended until its queue admits it" in text, text
    assert "did not end within 8s; it is still queued (suspended" in text, text
    job = json.loads(k8s.kubectl("get", "tfjob", "queued", "-n", ns, "-o", "json").stdout)
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-team"
    assert job["spec"]["runPolicy"]["suspend"] is True
    conditions = {c["type"]: c["status"] for c in job["status"]["conditions"]}
    assert conditions.get("Suspended") == "True", conditions
    assert k8s.kubectl("get", "pods", "-n", ns, "-o", "name").stdout.strip() == ""
