"""Our training jobs as real pods of our image: a TFJob end to end on MinIO (a TrainJob's:
test_trainjob.py), and preemption as the kubelet does it (pod deletion with a grace period,
SIGTERM, checkpoint, exit 143, restart, resume) of both.

The kubelet runs the pods as containers of the image built from the Dockerfile (uid 10001, the
image's filesystem and environment), the storage Secret reaches them through ``secretKeyRef``,
peers find each other through CoreDNS, MinIO is at the node's address, and logs come through
``kubectl logs``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from cluster.jobs import (
    INDEX,
    assert_checkpointed_on_sigterm,
    assert_every_node_restarted,
    assert_runs_our_image,
    cli,
    common_args,
    describe,
    has_export,
    no_credentials,
    submit_then_preempt,
)
from cluster.nodes import Node
from cluster_jobs import job_namespace
from servers import MinioServer
from shardtrain import storage

#: Enough steps that a replica still trains well after the first checkpoint has been seen
#: (here 40-70 steps a second once started).
PREEMPT_STEPS = 600


def test_tfjob_chief_worker_and_evaluator_train_on_minio(
    node: Node, image: str, node_minio: MinioServer, quest_data: str
) -> None:
    ns = job_namespace(node, node_minio)
    model_dir = node_minio.uri("tfjob-model")
    proc = cli(
        node,
        "tfjob", "submit", *common_args(ns, "quest", image, quest_data, model_dir),
        "--workers", "1", "--evaluator", "--gpus-per-worker", "0", "--cpu", "300m",
        "--wait-timeout", "600",
        "--", "--train-steps", "40", "--batch-size", "32", "--checkpoint-every", "20",
    )  # fmt: skip
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-5000:] + describe(node, ns)
    assert f"TFJob {ns}/quest succeeded" in text
    # The chief's log, streamed by the submit command from the kubelet through the API server.
    assert "[Pod quest-chief-0]: chief: trained to step 40 (from 0)" in text, text[-3000:]
    # Chief and worker all-reduce together: they found each other by TF_CONFIG's DNS names.
    assert "group_size = 2" in text, text[-3000:]

    chief = node.get("pod", "quest-chief-0", ns)
    assert_runs_our_image(chief, node, image)
    assert chief["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    logs = node.kubectl("logs", "quest-chief-0", "-n", ns).stdout
    assert "chief: trained to step 40 (from 0)" in logs, logs[-3000:]
    job = node.get("tfjob", "quest", ns)
    assert job["status"]["replicaStatuses"]["Chief"].get("succeeded") == 1, job["status"]

    metrics = storage.read_json(storage.join(model_dir, "eval", "metrics.json"))
    assert metrics["step"] == 40
    assert has_export(model_dir)
    no_credentials(node_minio, text + logs)


def test_a_trainjob_node_deleted_with_a_grace_period_checkpoints_exits_143_and_the_job_resumes(
    node: Node,
    image: str,
    node_minio: MinioServer,
    quest_data: str,
    trainer_runtime: str,
    tmp_path: Path,
) -> None:
    """Preemption as the kubelet does it: ``kubectl delete pod --grace-period`` -> SIGTERM to
    the container -> every node checkpoints and exits 143 -> JobSet's failure policy recreates
    the nodes -> they resume from the checkpoint to exactly --train-steps."""
    ns = job_namespace(node, node_minio)
    model_dir = node_minio.uri("trainjob-preempt")
    args = [
        "trainjob", "submit", *common_args(ns, "pre", image, quest_data, model_dir),
        "--nodes", "2", "--gpus-per-node", "0", "--cpu", "900m", "--runtime", trainer_runtime,
        "--wait-timeout", "600",
        "--", "--train-steps", str(PREEMPT_STEPS), "--batch-size", "32", "--checkpoint-every", "20",
    ]  # fmt: skip
    kinds = "pods,jobs,jobsets,trainjobs"

    def worker() -> dict | None:
        selector = f"jobset.sigs.k8s.io/jobset-name=pre,{INDEX}=1"
        out = node.kubectl("get", "pods", "-n", ns, "-l", selector, "-o", "json")
        return next(iter(json.loads(out.stdout)["items"]), None)

    first, terminated, worker_log, code, text = submit_then_preempt(
        node, ns, args, worker, model_dir, tmp_path / "submit.log", wait=600
    )

    assert_checkpointed_on_sigterm(terminated, worker_log)
    assert code == 0, text[-5000:] + describe(node, ns, kinds)
    assert f"TrainJob {ns}/pre succeeded" in text
    assert_every_node_restarted(node, ns, "pre", first, image, kinds)
    assert "restored checkpoint step" in text, text[-3000:]
    metrics = storage.read_json(storage.join(model_dir, "eval", "metrics.json"))
    assert metrics["step"] == PREEMPT_STEPS
    no_credentials(node_minio, text + worker_log)


def test_a_tfjob_worker_deleted_with_a_grace_period_checkpoints_but_the_operator_fails_the_job(
    node: Node, image: str, node_minio: MinioServer, quest_data: str, tmp_path: Path
) -> None:
    """The same preemption of a TFJob's worker: it checkpoints and exits 143, but the training
    operator (v1.9) fails the job instead of recreating the pod: it counts a Running pod with a
    deletionTimestamp as failed (pkg/core/status.go UpdateJobReplicaStatuses) without the
    restart its ExitCode policy gives a Failed pod (kubeflow/trainer#1560, closed unfixed). The
    checkpoint is there: the job submitted again resumes from it to exactly --train-steps.
    (A node agent of ours that ran pods as host processes, and signalled the process without
    deleting the pod, never saw this: the real kubelet found it.)
    When this fails because the job restarted, the operator has fixed it: assert the restart."""
    ns = job_namespace(node, node_minio)
    model_dir = node_minio.uri("tfjob-preempt")

    def submit_args(name: str) -> list[str]:
        return [
            "tfjob", "submit", *common_args(ns, name, image, quest_data, model_dir),
            "--workers", "1", "--no-evaluator", "--gpus-per-worker", "0", "--cpu", "300m",
            "--wait-timeout", "600",
            "--", "--train-steps", str(PREEMPT_STEPS), "--batch-size", "32",
            "--checkpoint-every", "20",
        ]  # fmt: skip

    _, terminated, worker_log, code, text = submit_then_preempt(
        node,
        ns,
        submit_args("pre"),
        lambda: node.get("pod", "pre-worker-0", ns),
        model_dir,
        tmp_path / "submit.log",
        wait=300,
    )

    assert_checkpointed_on_sigterm(terminated, worker_log)
    assert code == 1, text[-5000:] + describe(node, ns)
    job = node.get("tfjob", "pre", ns)
    failed = [c for c in job["status"]["conditions"] if c["type"] == "Failed"]
    assert failed and failed[0]["message"] == (
        f"TFJob {ns}/pre has failed because 1 Worker replica(s) failed."
    ), job["status"]
    assert "Restarting" not in {c["type"] for c in job["status"]["conditions"]}

    # Submitted again (another name: the failed job stays for its logs), from the checkpoint.
    again = cli(node, *submit_args("pre-again"))
    text = again.stdout + again.stderr
    assert again.returncode == 0, text[-5000:] + describe(node, ns)
    step = int(re.search(r"restored checkpoint step (\d+)", text).group(1))
    assert 20 <= step < PREEMPT_STEPS, text[-3000:]
    assert f"chief: trained to step {PREEMPT_STEPS} (from {step})" in text, text[-3000:]
    metrics = storage.read_json(storage.join(model_dir, "eval", "metrics.json"))
    assert metrics["step"] == PREEMPT_STEPS
    no_credentials(node_minio, text + worker_log)
