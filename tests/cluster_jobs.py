"""What the training-job tests against a live control plane share, with a node (tests/cluster)
or without (tests/integration/kubeflow/jobs/): a namespace with the trainer's service account
and the storage Secret, a sharded quest dataset on MinIO, the pipeline with its train step on
the cluster, the launcher's kubeconfig, and what to print when a job misbehaves.

``k8s`` below is either tier's handle (tests/conftest.py's ``ControlPlane``, tests/cluster's
``Node``): what is used of it is ``kubectl``, ``namespace`` and ``kubeconfig``."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from shardtrain.data import datagen, sharding

REPO = Path(__file__).resolve().parents[1]


def job_namespace(k8s, minio) -> str:
    """A namespace with the trainer's service account and the storage Secret."""
    ns = k8s.namespace(service_accounts=("shardtrain-trainer",))
    env = minio.env
    k8s.kubectl(
        "create", "secret", "generic", "shardtrain-storage", "-n", ns,
        f"--from-literal=AWS_ACCESS_KEY_ID={env['AWS_ACCESS_KEY_ID']}",
        f"--from-literal=AWS_SECRET_ACCESS_KEY={env['AWS_SECRET_ACCESS_KEY']}",
        f"--from-literal=AWS_ENDPOINT_URL={env['AWS_ENDPOINT_URL']}",
        "--from-literal=AWS_REGION=us-east-1",
    )  # fmt: skip
    return ns


def shard_quest(minio, workdir: Path, bucket: str, rows: int, seed: int = 5) -> str:
    """``rows`` generated quest rows sharded into ``s3://<bucket>``; returns the dataset URI."""
    csv = str(workdir / "quest.csv")
    datagen.generate_quest_logs(csv, rows, seed=seed)
    out = minio.uri(bucket)
    sharding.shard(
        sharding.ShardConfig(
            sources=(csv,), output=out, label="cleared", key="attempt_id", processes=1
        )
    )
    return out


def run_pipeline_on_cluster(k8s, minio, tmp_path: Path, monkeypatch, bucket: str, **more):
    """The whole csv_to_model pipeline under kfp.local on generated quest data in ``bucket``,
    its train step in cluster mode (a small 2-replica job) with a token bound to k8s/rbac's
    Role only. ``more`` are pipeline arguments besides (or instead of) these: on a real node
    ``image`` (our image in its containerd; the default names a registry the node cannot
    reach), and ``minio`` must be one the pods reach. Returns the namespace and the run."""
    from shardtrain.kubeflow import client

    ns = job_namespace(k8s, minio)
    monkeypatch.setenv(
        "KUBECONFIG", str(launcher_kubeconfig(k8s, ns, tmp_path / "launcher.kubeconfig"))
    )
    source = minio.uri(bucket, "raw", "quest.csv")
    datagen.generate_quest_logs(source, 4000, seed=13)
    base = minio.uri(bucket)
    arguments = client.parse_arguments([f"sources={source}"]) | {
        "dataset_uri": f"{base}/dataset",
        "model_dir": f"{base}/model",
        "serving_uri": f"{base}/serving",
        "key": "attempt_id",
        "shard_workers": 1,
        "shard_cpu": "1",
        "namespace": ns,
        "tfjob_workers": 1,
        "gpus_per_worker": 0,
        "worker_cpu": "500m",
        "worker_memory": "1Gi",
        "train_steps": 40,
        "batch_size": 32,
        "checkpoint_every": 20,
        **more,
    }
    return ns, client.run_local(arguments, pipeline_root=str(tmp_path / "runs"), cluster=True)


def get(k8s, kind: str, ns: str, name: str) -> dict | None:
    """An object as JSON, None when it does not exist."""
    out = k8s.kubectl("get", kind, name, "-n", ns, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else None


def describe(k8s, namespace: str, kinds: str = "pods,tfjobs") -> str:
    """The namespace's pods and jobs and its events' tail, for assertion messages."""
    pods = k8s.kubectl("get", kinds, "-n", namespace, "-o", "wide", check=False)
    events = k8s.kubectl("get", "events", "-n", namespace, check=False)
    return f"\n{pods.stdout}{pods.stderr}\n{events.stdout[-4000:]}"


def launcher_kubeconfig(k8s, ns: str, path: Path) -> Path:
    """k8s/rbac applied in ``ns``; a kubeconfig with a token of its service account only."""
    rbac = k8s.kubectl("kustomize", str(REPO / "k8s" / "rbac")).stdout
    docs = [d for d in yaml.safe_load_all(rbac) if d]
    for doc in docs:
        doc["metadata"]["namespace"] = ns
        for subject in doc.get("subjects", ()):
            subject["namespace"] = ns
    k8s.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    token = k8s.kubectl(
        "create", "token", "shardtrain-launcher", "-n", ns, "--duration", "2h"
    ).stdout.strip()
    config = yaml.safe_load(Path(k8s.kubeconfig).read_text())
    config["users"] = [{"name": "launcher", "user": {"token": token}}]
    config["contexts"][0]["context"] = {
        "cluster": "shardtrain",
        "user": "launcher",
        "namespace": ns,
    }
    path.write_text(yaml.safe_dump(config))
    return path
