"""Our Trainer v2 runtime the way its users drive it: the Kubeflow SDK (PyPI ``kubeflow``,
``from kubeflow.trainer import TrainerClient``) against the control plane, its pods run by the
real node as containers of our image.

Nothing of shardtrain's own job code runs on this side: the SDK builds the TrainJob
(``num_nodes``, ``resources_per_node``, plain ``env``; the command through
``TrainerCommand``/``TrainerArgs``; the image is the ``image`` fixture's, as a user names
theirs), Trainer turns it into a JobSet of our ``shardtrain-tensorflow`` runtime (which gives
the node count and reads the namespace's ``shardtrain-storage`` Secret), and the SDK waits for
it and reads its logs through the kubelet. Storage credentials cannot come through the SDK:
its ``env`` is plain values, and Trainer's webhook refuses ``env`` for container ``node`` in a
runtime patch.

Progress in ``status.trainerStatus`` travels as in a cluster: the chief POSTs to the URL
Trainer gives it (``https://kubeflow-trainer-controller-manager.kubeflow-system.svc:<port>``),
which CoreDNS resolves to the node's gateway (scripts/node-up's headless Service), and verifies
the server with the CA Trainer mounts.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from cluster.jobs import assert_runs_our_image, cli, describe, no_credentials
from cluster.nodes import Node
from cluster_jobs import job_namespace
from servers import MinioServer
from shardtrain import storage
from shardtrain.kubeflow.pods import STORAGE_ENV

KINDS = "pods,jobs,jobsets,trainjobs"
STEPS = 40
TRAIN_ARGS = ("train", "--train-steps", str(STEPS), "--batch-size", "32",
              "--checkpoint-every", "20")  # fmt: skip
#: Per node: requests = limits (the SDK's). Small CPU (2 cores, shared); memory as the cluster
#: tier's CLI jobs have it (the kubelet enforces limits, unlike the node agent did).
CPU, MEMORY = "500m", "2Gi"
TRAINER_URL = "https://kubeflow-trainer-controller-manager.kubeflow-system.svc:"


def _client(node: Node, namespace: str):
    from kubeflow.trainer import KubernetesBackendConfig, TrainerClient

    # The SDK reads the kubeconfig (config_file, else $KUBECONFIG/~/.kube/config; in a pod,
    # the in-cluster account) and the namespace given, else the context's, else "default".
    return TrainerClient(KubernetesBackendConfig(namespace=namespace, config_file=node.kubeconfig))


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
    container = ContainerPatch(name="node", env=env)
    pod = PodTemplatePatch(spec=PodSpecPatch(containers=[container]))
    job = ReplicatedJobPatch(name="node", template=JobTemplatePatch(spec=JobSpecPatch(pod)))
    return RuntimePatch(
        training_runtime_spec=TrainingRuntimeSpecPatch(
            template=JobSetTemplatePatch(spec=JobSetSpecPatch(replicated_jobs=[job]))
        )
    )


def _train(client, runtime: str, image: str, name: str, data: str, model_dir: str, *more) -> str:
    """``client.train`` of a two-node CustomTrainerContainer of our image on our runtime."""
    from kubeflow.trainer import CustomTrainerContainer
    from kubeflow.trainer.options import Name, TrainerArgs, TrainerCommand

    return client.train(
        runtime=client.get_runtime(runtime),
        trainer=CustomTrainerContainer(
            image=image,
            num_nodes=2,
            resources_per_node={"cpu": CPU, "memory": MEMORY},
            env={"SHARDTRAIN_STORAGE_RETRIES": "8"},  # plain values only
        ),
        options=[
            Name(name),
            TrainerCommand(["shardtrain"]),
            TrainerArgs([*TRAIN_ARGS, "--data", data, "--model-dir", model_dir]),
            *more,
        ],
    )


def _json_stream(text: str) -> list[dict]:
    """The JSON documents of ``kubectl get --watch -o json``, one after another (a last one
    cut off by the end of the watch is left out)."""
    decoder, docs, at = json.JSONDecoder(), [], 0
    while at < len(text):
        if text[at].isspace():
            at += 1
            continue
        try:
            doc, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            break
        docs.append(doc)
    return docs


def _describe(node: Node, ns: str) -> str:
    """The namespace's pods, jobs and events, and the end of every pod's log (why it failed)."""
    text = describe(node, ns, KINDS)
    for pod in node.pods(ns):
        name = pod["metadata"]["name"]
        log = node.kubectl("logs", name, "-n", ns, "--tail", "30", check=False)
        text += f"\n--- {name}:\n{log.stdout}{log.stderr}"
    return text


def test_the_kubeflow_sdk_trains_our_runtime_on_two_cpu_nodes_to_complete(
    node: Node, image: str, node_minio: MinioServer, quest_data: str, trainer_runtime: str
) -> None:
    """The SDK's TrainJob of two CPU nodes runs to Complete on the real node; the SDK reads
    its steps' device from the cpu limit and both nodes' logs through the kubelet; the Secret
    by reference through the SDK's runtime patch is refused by Trainer's webhook."""
    ns = job_namespace(node, node_minio)
    model_dir = node_minio.uri("sdk-model")
    client = _client(node, ns)
    # The Secret by reference through the SDK's runtime patch: refused, in one API call.
    with pytest.raises(RuntimeError) as refused:
        _train(
            client, trainer_runtime, image, "sdk-patch", quest_data, model_dir,
            _storage_from_secret("x"),
        )  # fmt: skip
    assert "must not have envs for the dataset-initializer, model-initializer, node" in str(
        refused.value.__cause__
    )
    name = _train(client, trainer_runtime, image, "sdk-quest", quest_data, model_dir)
    assert name == "sdk-quest"

    # What the SDK wrote: no variable of ours; CPU-only resources (requests = limits).
    trainer = node.get("trainjob", name, ns)["spec"]["trainer"]
    assert trainer["image"] == image
    assert trainer["numNodes"] == 2
    assert trainer["env"] == [{"name": "SHARDTRAIN_STORAGE_RETRIES", "value": "8"}]
    assert trainer["resourcesPerNode"]["limits"] == {"cpu": CPU, "memory": MEMORY}

    seen: list[str] = []
    try:
        job = client.wait_for_job_status(
            name, timeout=900, polling_interval=2, callbacks=[lambda j: seen.append(j.status)]
        )
    except (RuntimeError, TimeoutError) as exc:
        raise AssertionError(f"{exc}{_describe(node, ns)}") from exc
    assert job.status == "Complete"
    assert "Running" in seen or "Created" in seen
    # Every SDK call reads the job: the nodes' device is the CPU (their cpu limit).
    job = client.get_job(name)
    assert job.num_nodes == 2
    steps = {s.name: s for s in job.steps}
    assert {"node-0", "node-1"} <= set(steps)
    assert {(s.device, s.device_count) for n, s in steps.items() if n.startswith("node")} == {
        ("cpu", CPU)
    }
    # Trainer's count reached the nodes: two of them trained together, node 0 the chief.
    chief = "\n".join(client.get_job_logs(name, step="node-0"))
    worker = "\n".join(client.get_job_logs(name, step="node-1"))
    assert f"chief: trained to step {STEPS} (from 0)" in chief, chief[-3000:]
    assert "group_size = 2" in chief + worker, (chief + worker)[-3000:]
    pods = node.pods(ns)
    assert len(pods) == 2, _describe(node, ns)
    for pod in pods:
        assert_runs_our_image(pod, node, image)
        assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    metrics = storage.read_json(storage.join(model_dir, "eval", "metrics.json"))
    assert metrics["step"] == STEPS
    no_credentials(node_minio, chief + worker)


def test_the_chief_reports_progress_and_metrics_into_the_trainjob_status(
    node: Node, image: str, node_minio: MinioServer, quest_data: str, trainer_runtime: str
) -> None:
    """With Trainer's TrainJobStatus gate on, ``status.trainerStatus`` shows the chief's
    progress while the job runs, and 100% with the last eval metrics at the end: the chief in
    its container reached Trainer's status server by the Service name Trainer put in its URL
    and trusted it with the CA Trainer mounted (any failure there and it stops reporting)."""
    ns = job_namespace(node, node_minio)
    client = _client(node, ns)
    name = _train(
        client, trainer_runtime, image, "sdk-progress", quest_data,
        node_minio.uri("sdk-progress-model"),
    )  # fmt: skip
    # Every change of the TrainJob, as the API server streams it: the chief reports at most
    # every 15 s and at the end, so its progress may stand for a second only.
    watch = subprocess.Popen(
        [node.kubectl_path, "--kubeconfig", node.kubeconfig, "get", "trainjob", name, "-n", ns,
         "-o", "json", "--watch", "--output-watch-events"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        client.wait_for_job_status(name, timeout=900, polling_interval=2)
    except (RuntimeError, TimeoutError) as exc:
        raise AssertionError(f"{exc}{_describe(node, ns)}") from exc
    finally:
        time.sleep(2)  # the last event on its way
        watch.terminate()
        stream = watch.communicate(timeout=30)[0]
    observed: list[dict] = []
    for event in _json_stream(stream):
        trainer_status = event["object"].get("status", {}).get("trainerStatus")
        if trainer_status and trainer_status not in observed:
            observed.append(trainer_status)
    chief = "\n".join(client.get_job_logs(name, step="node-0"))
    said = [line for line in chief.splitlines() if "TrainJob status" in line]

    # The URL the pods got names Trainer's Service (scripts/node-up resolves it to the node).
    pods = node.pods(ns)
    urls = {
        e.get("value", "")
        for p in pods
        for e in p["spec"]["containers"][0].get("env", [])
        if e["name"] == "KUBEFLOW_TRAINER_SERVER_URL"
    }
    assert len(urls) == 1 and urls.pop().startswith(TRAINER_URL), _describe(node, ns)
    assert said == [], said  # no failed or refused report, no "not reported"
    assert observed, "no status.trainerStatus was ever seen"
    assert any(0 < s.get("progressPercentage", 0) < 100 for s in observed), observed
    last = observed[-1]
    assert last["progressPercentage"] == 100 and last["estimatedRemainingSeconds"] == 0, last
    metrics = {m["name"]: m["value"] for m in last["metrics"]}
    assert metrics["step"] == f"{STEPS}/{STEPS}" and metrics["eval_step"] == str(STEPS), metrics
    assert 0 < float(metrics["eval_auc"]) <= 1, metrics


def test_the_kubeflow_sdk_reads_a_cpu_only_trainjob_our_cli_rendered(
    node: Node, image: str, node_minio: MinioServer, quest_data: str, trainer_runtime: str
) -> None:
    """`shardtrain trainjob render --gpus-per-node 0` applied with kubectl, then followed with
    the SDK: its device is read from the cpu limit the render writes (without one, every SDK
    job call raised "Unknown device type in the container resources")."""
    ns = job_namespace(node, node_minio)
    out = cli(
        node,
        "trainjob", "render", "--namespace", ns, "--name", "cli-quest", "--image", image,
        "--data", quest_data, "--model-dir", node_minio.uri("cli-model"), "--nodes", "1",
        "--gpus-per-node", "0", "--cpu", CPU, "--memory", MEMORY, "--runtime", trainer_runtime,
        "--", *TRAIN_ARGS[1:],
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    node.kubectl("apply", "-f", "-", input=out.stdout)
    client = _client(node, ns)
    try:
        job = client.wait_for_job_status("cli-quest", timeout=900, polling_interval=2)
    except (RuntimeError, TimeoutError) as exc:
        raise AssertionError(f"{exc}{_describe(node, ns)}") from exc
    assert [(s.name, s.device, s.device_count) for s in job.steps] == [("node-0", "cpu", CPU)]
    log = "\n".join(client.get_job_logs("cli-quest"))
    assert f"trained to step {STEPS} (from 0)" in log, log[-3000:]
    (pod,) = node.pods(ns)
    assert_runs_our_image(pod, node, image)
    no_credentials(node_minio, log)
