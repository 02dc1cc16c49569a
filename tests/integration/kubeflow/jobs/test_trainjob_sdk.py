"""Our Trainer v2 runtime the way its users drive it: the Kubeflow SDK (PyPI ``kubeflow``,
``from kubeflow.trainer import TrainerClient``) against the live control plane.

Nothing of shardtrain's own job code runs here: the SDK builds the TrainJob (``num_nodes``,
``resources_per_node``, plain ``env``; the command through ``TrainerCommand``/``TrainerArgs``),
Trainer turns it into a JobSet of our ``shardtrain-tensorflow`` runtime (which gives the node
count and reads the namespace's ``shardtrain-storage`` Secret), and the SDK waits for it and
reads its logs. Storage credentials cannot come through the SDK: its ``env`` is plain values,
and Trainer's webhook refuses ``env`` for container ``node`` in a runtime patch.
The ``k8s`` fixture (tests/conftest.py) starts the control plane and the node agent that runs
the pods here.
"""

from __future__ import annotations

import json
import time

import pytest

from cluster_jobs import REPO, describe, job_namespace, shard_quest
from helpers import run_cli
from shardtrain import storage
from shardtrain.kubeflow.pods import DEFAULT_IMAGE, STORAGE_ENV

KINDS = "pods,jobs,jobsets,trainjobs"
RUNTIME = "shardtrain-tensorflow"
STEPS = 40
TRAIN_ARGS = (
    "train",
    "--train-steps",
    str(STEPS),
    "--batch-size",
    "32",
    "--checkpoint-every",
    "20",
)


@pytest.fixture(scope="module")
def runtime_installed(k8s) -> str:
    """Our ClusterTrainingRuntime, installed as the README says."""
    k8s.kubectl("apply", "--server-side", "-k", str(REPO / "k8s" / "trainer-v2"))
    return RUNTIME


@pytest.fixture(scope="module")
def sdk_data(minio, tmp_path_factory) -> str:
    return shard_quest(minio, tmp_path_factory.mktemp("quest"), "sdk-data", 2000)


def _client(k8s, namespace: str):
    from kubeflow.trainer import KubernetesBackendConfig, TrainerClient

    # The SDK reads the kubeconfig (config_file, else $KUBECONFIG/~/.kube/config; in a pod,
    # the in-cluster account) and the namespace given, else the context's, else "default".
    return TrainerClient(KubernetesBackendConfig(namespace=namespace, config_file=k8s.kubeconfig))


def _storage_from_secret(secret: str):
    """The storage variables from the Secret, by reference, as a patch of container
    ``node``: what Trainer v2.3's webhook refuses."""
    from kubeflow.trainer.options import (
        ContainerPatch,
        JobSetSpecPatch,
        JobSetTemplatePatch,
        JobSpecPatch,
        JobTemplatePatch,
        PodSpecPatch,
        PodTemplatePatch,
        ReplicatedJobPatch,
        RuntimePatch,
        TrainingRuntimeSpecPatch,
    )

    env = [
        {
            "name": key,
            "valueFrom": {
                "secretKeyRef": {"name": secret, "key": key} | ({"optional": True} if opt else {})
            },
        }
        for key, opt in STORAGE_ENV
    ]
    node = ContainerPatch(name="node", env=env)
    pod = PodTemplatePatch(spec=PodSpecPatch(containers=[node]))
    job = ReplicatedJobPatch(name="node", template=JobTemplatePatch(spec=JobSpecPatch(pod)))
    return RuntimePatch(
        training_runtime_spec=TrainingRuntimeSpecPatch(
            template=JobSetTemplatePatch(spec=JobSetSpecPatch(replicated_jobs=[job]))
        )
    )


def _train(k8s, client, name: str, data: str, model_dir: str, *more) -> str:
    from kubeflow.trainer import CustomTrainerContainer
    from kubeflow.trainer.options import Name, TrainerArgs, TrainerCommand

    runtime = client.get_runtime(RUNTIME)
    return client.train(
        runtime=runtime,
        trainer=CustomTrainerContainer(
            image=DEFAULT_IMAGE,
            num_nodes=2,
            resources_per_node={"cpu": "500m", "memory": "1Gi"},
            env={"SHARDTRAIN_STORAGE_RETRIES": "8"},  # plain values only
        ),
        options=[
            Name(name),
            TrainerCommand(["shardtrain"]),
            TrainerArgs([*TRAIN_ARGS, "--data", data, "--model-dir", model_dir]),
            *more,
        ],
    )


@pytest.mark.k8s
@pytest.mark.minio
@pytest.mark.slow
def test_the_kubeflow_sdk_trains_our_runtime_on_two_cpu_nodes_to_complete(
    k8s, minio, runtime_installed, sdk_data
):
    ns = job_namespace(k8s, minio)
    model_dir = minio.uri("sdk-model")
    client = _client(k8s, ns)
    # The Secret by reference through the SDK's runtime patch: refused, in one API call.
    with pytest.raises(RuntimeError) as refused:
        _train(k8s, client, "sdk-patch", sdk_data, model_dir, _storage_from_secret("x"))
    assert "must not have envs for the dataset-initializer, model-initializer, node" in str(
        refused.value.__cause__
    )
    name = _train(k8s, client, "sdk-quest", sdk_data, model_dir)
    assert name == "sdk-quest"

    # What the SDK wrote: no variable of ours; CPU-only resources (requests = limits).
    manifest = json.loads(k8s.kubectl("get", "trainjob", name, "-n", ns, "-o", "json").stdout)
    trainer = manifest["spec"]["trainer"]
    assert trainer["numNodes"] == 2
    assert trainer["env"] == [{"name": "SHARDTRAIN_STORAGE_RETRIES", "value": "8"}]
    assert trainer["resourcesPerNode"]["limits"] == {"cpu": "500m", "memory": "1Gi"}

    seen: list[str] = []
    try:
        job = client.wait_for_job_status(
            name,
            timeout=900,
            polling_interval=2,
            callbacks=[lambda j: seen.append(j.status)],
        )
    except (RuntimeError, TimeoutError) as exc:
        raise AssertionError(f"{exc}{describe(k8s, ns, KINDS)}") from exc
    assert job.status == "Complete"
    assert "Running" in seen or "Created" in seen
    # Every SDK call reads the job: the nodes' device is the CPU (their cpu limit).
    job = client.get_job(name)
    assert job.num_nodes == 2
    steps = {s.name: s for s in job.steps}
    assert {"node-0", "node-1"} <= set(steps)
    assert {(s.device, s.device_count) for n, s in steps.items() if n.startswith("node")} == {
        ("cpu", "500m")
    }
    # Trainer's count reached the nodes: two of them trained together, node 0 the chief.
    chief = "\n".join(client.get_job_logs(name, step="node-0"))
    worker = "\n".join(client.get_job_logs(name, step="node-1"))
    assert f"chief: trained to step {STEPS} (from 0)" in chief, chief[-3000:]
    assert "group_size = 2" in chief + worker, (chief + worker)[-3000:]
    metrics = storage.read_json(storage.join(model_dir, "eval", "metrics.json"))
    assert metrics["step"] == STEPS
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert minio.env[key] not in chief + worker


@pytest.mark.k8s
@pytest.mark.minio
@pytest.mark.slow
def test_the_chief_reports_progress_and_metrics_into_the_trainjob_status(
    k8s, minio, runtime_installed, sdk_data
):
    """With Trainer's TrainJobStatus gate on, ``status.trainerStatus`` shows the chief's
    progress while the job runs, and 100% with the last eval metrics at the end."""
    ns = job_namespace(k8s, minio)
    client = _client(k8s, ns)
    name = _train(k8s, client, "sdk-progress", sdk_data, minio.uri("sdk-progress-model"))
    observed: list[dict] = []

    def status(_job) -> None:
        out = k8s.kubectl("get", "trainjob", name, "-n", ns, "-o", "json", check=False)
        if out.returncode == 0:
            trainer_status = json.loads(out.stdout).get("status", {}).get("trainerStatus")
            if trainer_status:
                observed.append(trainer_status)

    client.wait_for_job_status(name, timeout=900, polling_interval=1, callbacks=[status])
    time.sleep(1)
    status(None)
    chief = "\n".join(client.get_job_logs(name, step="node-0"))
    said = [line for line in chief.splitlines() if "TrainJob status" in line]
    assert observed, f"no status.trainerStatus was ever seen; the chief said: {said}"
    assert any(0 < s.get("progressPercentage", 0) < 100 for s in observed), observed
    last = observed[-1]
    assert last["progressPercentage"] == 100 and last["estimatedRemainingSeconds"] == 0
    metrics = {m["name"]: m["value"] for m in last["metrics"]}
    assert metrics["step"] == f"{STEPS}/{STEPS}" and metrics["eval_step"] == str(STEPS)
    assert 0 < float(metrics["eval_auc"]) <= 1


@pytest.mark.k8s
@pytest.mark.minio
@pytest.mark.slow
def test_the_kubeflow_sdk_reads_a_cpu_only_trainjob_our_cli_rendered(
    k8s, minio, runtime_installed, sdk_data
):
    """`shardtrain trainjob render --gpus-per-node 0` applied with kubectl, then followed with
    the SDK: its device is read from the cpu limit the render writes (without one, every SDK
    job call raised "Unknown device type in the container resources")."""
    ns = job_namespace(k8s, minio)
    out = run_cli(
        "trainjob", "render", "--namespace", ns, "--name", "cli-quest", "--data", sdk_data,
        "--model-dir", minio.uri("cli-model"), "--nodes", "1", "--gpus-per-node", "0",
        "--cpu", "500m", "--memory", "1Gi", "--", *TRAIN_ARGS[1:], check=True,
    )  # fmt: skip
    k8s.kubectl("apply", "-f", "-", input=out.stdout)
    client = _client(k8s, ns)
    try:
        job = client.wait_for_job_status("cli-quest", timeout=900, polling_interval=2)
    except (RuntimeError, TimeoutError) as exc:
        raise AssertionError(f"{exc}{describe(k8s, ns, KINDS)}") from exc
    assert [(s.name, s.device, s.device_count) for s in job.steps] == [("node-0", "cpu", "500m")]
    log = "\n".join(client.get_job_logs("cli-quest"))
    assert f"trained to step {STEPS} (from 0)" in log, log[-3000:]
