"""The settings of shardtrain's TrainJobs (:class:`TrainJobConfig`): everything that differs
between them; the rest lives in the runtime (``k8s/trainer-v2``, see :mod:`.render`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from shardtrain.errors import ConfigError
from shardtrain.kubeflow.jobs import settings
from shardtrain.kubeflow.jobs.settings import TrainingJobSettings
from shardtrain.kubeflow.jobs.trainjob.spec import KIND, check_name, runtime_name
from shardtrain.train import cluster

#: Gang schedulers a TrainJob can ask for (through the runtime's podGroupPolicy).
GANG_SCHEDULERS = ("volcano", "coscheduling")


def replicas_in_sync(nodes: int, gpus_per_node: int, train_args: Sequence[str] = ()) -> int:
    """Replicas a TrainJob's global batch is split over: nodes x devices per node (their GPUs,
    at most ``--devices``; one CPU device without GPUs). Every node trains."""
    return settings.replicas_in_sync(nodes, gpus_per_node, train_args)


@dataclass(frozen=True)
class TrainJobConfig(TrainingJobSettings):
    """Everything that differs between shardtrain's TrainJobs.

    Attributes:
        data: URI of the sharded dataset the trainer reads (``s3://``, ``gs://``).
        model_dir: URI where checkpoints, TensorBoard logs and the export go.
        name: TrainJob name: a DNS-1035 label (pods are ``<name>-node-0-<i>``).
        namespace: namespace of the job, its service account and its Secret.
        image: the project image, pinned by tag or digest.
        nodes: training nodes (``trainer.numNodes``): node 0 is the chief, which also
            evaluates and exports; the others are workers.
        gpus_per_node: ``nvidia.com/gpu`` limit of each node (0: CPU only).
        runtime: the ClusterTrainingRuntime (``k8s/trainer-v2``); with
            ``gang_scheduler`` its gang-scheduled variant (``<runtime>-<scheduler>``).
        secret: Secret holding the storage variables (``AWS_ACCESS_KEY_ID`` …); None for
            credential-less storage (GCS with Workload Identity).
        service_account: the pods' Kubernetes service account.
        train_args: extra ``shardtrain train`` arguments, e.g. ``("--train-steps", "1000")``.
        env: extra plain (non-secret) environment variables of every node.
        cpu: CPU request per node; also its limit without GPUs (see
            :func:`shardtrain.kubeflow.pods.resources`).
        memory: memory request (and limit) per node.
        active_deadline_seconds: seconds the job may run before it is failed; None: no limit.
        termination_grace_seconds: time a node gets between SIGTERM and SIGKILL to finish its
            step and write its checkpoint.
        queue: the queue the job waits in: a Kueue LocalQueue (``kueue.x-k8s.io/queue-name``,
            created suspended), or with ``gang_scheduler="volcano"`` the Volcano queue.
        gang_scheduler: ``"volcano"`` or ``"coscheduling"`` (the scheduler-plugins'): all
            nodes start together or none (the runtime's ``podGroupPolicy``); None: the
            cluster's default scheduler.
        priority_class: with a Kueue queue, the WorkloadPriorityClass of the job
            (``kueue.x-k8s.io/priority-class``); pods' own PriorityClass belongs in the
            runtime, which a TrainJob cannot patch.
    """

    nodes: int = 3
    gpus_per_node: int = 1
    runtime: str | None = None

    KIND: ClassVar[str] = KIND
    OPTIONAL: ClassVar[tuple[str, ...]] = (
        "secret", "queue", "gang_scheduler", "priority_class", "runtime",
    )  # fmt: skip
    GANG_SCHEDULERS: ClassVar[tuple[str, ...]] = GANG_SCHEDULERS
    RESERVED_ENV: ClassVar[frozenset[str]] = frozenset({cluster.TRAINJOB_NUM_NODES_ENV})

    def __post_init__(self) -> None:
        self.normalise()
        settings.check_counts(
            (
                ("nodes", self.nodes, 1),
                ("gpus_per_node", self.gpus_per_node, 0),
                ("active_deadline_seconds", self.active_deadline_seconds, 1),
                ("termination_grace_seconds", self.termination_grace_seconds, 0),
            )
        )
        check_name(self.name, self.nodes)
        self.check_pods(runtime=self.runtime)
        if self.priority_class is not None:
            if self.queue is None or self.gang_scheduler is not None:
                raise ConfigError(
                    f"priority_class '{self.priority_class}': a {KIND}'s pods get their "
                    "PriorityClass from the runtime; here it names the Kueue "
                    "WorkloadPriorityClass, so it needs a Kueue queue (--queue)"
                )
            settings.check_object_names(priority_class=self.priority_class)
        self.check_training(self.nodes)

    @property
    def runtime_name(self) -> str:
        """The runtime the job references: ``runtime``, else ours (its Volcano variant for
        ``gang_scheduler``)."""
        if self.runtime:
            return self.runtime
        return runtime_name(self.gang_scheduler)

    @property
    def replicas_in_sync(self) -> int:
        """Replicas the global batch is split over (see :func:`replicas_in_sync`)."""
        return replicas_in_sync(self.nodes, self.gpus_per_node, self.train_args)
