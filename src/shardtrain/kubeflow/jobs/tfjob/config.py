"""The settings of shardtrain's TFJobs (:class:`JobConfig`): everything that differs between
them; the rest is fixed by design (see :mod:`.render`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from shardtrain.errors import ConfigError
from shardtrain.kubeflow.jobs import settings
from shardtrain.kubeflow.jobs.settings import TrainingJobSettings
from shardtrain.kubeflow.jobs.tfjob.spec import CLEAN_POD_POLICIES, GANG_SCHEDULERS, KIND


def replicas_in_sync(workers: int, gpus_per_worker: int, train_args: Sequence[str] = ()) -> int:
    """Replicas a TFJob's global batch is split over: training pods (the chief and
    ``workers``) x devices per pod (their GPUs, at most ``--devices``; one CPU device without
    GPUs). The evaluator is not one."""
    return settings.replicas_in_sync(workers + 1, gpus_per_worker, train_args)


@dataclass(frozen=True)
class JobConfig(TrainingJobSettings):
    """Everything that differs between shardtrain's TFJobs; the rest is fixed by design.

    The defaults are the base manifest ``k8s/base/tfjob.yaml`` (with the data and model URIs
    given there); ``shardtrain tfjob render`` shows them in ``--help``.

    Attributes:
        data: URI of the sharded dataset the trainer reads (``s3://``, ``gs://``).
        model_dir: URI where checkpoints, TensorBoard logs and the export go.
        name: TFJob name: a DNS-1035 label (pods are ``<name>-worker-0`` …).
        namespace: namespace of the job, its service account and its Secret.
        image: the project image, pinned by tag or digest.
        workers: Worker replicas besides the chief (0: the chief trains alone).
        gpus_per_worker: ``nvidia.com/gpu`` limit of the chief and each worker (0: CPU only);
            the evaluator never gets a GPU.
        evaluator: add an Evaluator replica (sidecar evaluation of every checkpoint).
        secret: Secret holding the storage variables (``AWS_ACCESS_KEY_ID`` …); None for
            credential-less storage (GCS with Workload Identity).
        service_account: the pods' Kubernetes service account.
        train_args: extra ``shardtrain train`` arguments, e.g. ``("--train-steps", "1000")``.
        env: extra plain (non-secret) environment variables of every replica.
        cpu: CPU request per replica.
        memory: memory request (and limit) per replica.
        backoff_limit: pod restarts (exit codes >= 128) before the job is marked Failed.
        ttl_seconds_after_finished: seconds before a finished job and its pods are deleted;
            None keeps them.
        clean_pod_policy: which pods to delete when the job ends: None, Running or All.
        active_deadline_seconds: seconds the job may run before it is failed; None: no limit.
        termination_grace_seconds: time a replica gets between SIGTERM and SIGKILL (to finish
            its current step and write its checkpoint on preemption or node drain); below
            :data:`~shardtrain.kubeflow.pods.MIN_TERMINATION_GRACE_SECONDS` ``build_tfjob``
            warns.
        queue: the queue the job waits in. Without a gang scheduler: a Kueue LocalQueue (the
            ``kueue.x-k8s.io/queue-name`` label, created suspended); with
            ``gang_scheduler="volcano"``: the Volcano queue (``schedulingPolicy.queue``;
            None: the operator's ``default``). None: no queue.
        gang_scheduler: ``"volcano"``: gang-schedule all replicas at once through Volcano
            (``schedulingPolicy``, ``schedulerName``); None: the cluster's default scheduler.
        priority_class: a PriorityClass for every pod (and the Volcano PodGroup).
    """

    workers: int = 2
    gpus_per_worker: int = 1
    evaluator: bool = True
    backoff_limit: int = 3
    ttl_seconds_after_finished: int | None = 86400
    clean_pod_policy: str = "Running"

    KIND: ClassVar[str] = KIND
    OPTIONAL: ClassVar[tuple[str, ...]] = ("secret", "queue", "gang_scheduler", "priority_class")
    GANG_SCHEDULERS: ClassVar[tuple[str, ...]] = GANG_SCHEDULERS

    def __post_init__(self) -> None:
        self.normalise()
        settings.check_job_name(KIND, self.name)
        settings.check_counts(
            (
                ("workers", self.workers, 0),
                ("gpus_per_worker", self.gpus_per_worker, 0),
                ("backoff_limit", self.backoff_limit, 0),
                ("ttl_seconds_after_finished", self.ttl_seconds_after_finished, 0),
                ("active_deadline_seconds", self.active_deadline_seconds, 1),
                ("termination_grace_seconds", self.termination_grace_seconds, 0),
            )
        )
        self.check_pods()
        if self.priority_class is not None:
            try:
                settings.check_object_names(priority_class=self.priority_class)
            except ConfigError:
                raise ConfigError(
                    f"priority_class '{self.priority_class}' is not a valid name"
                ) from None
        if self.clean_pod_policy not in CLEAN_POD_POLICIES:
            raise ConfigError(
                f"clean_pod_policy '{self.clean_pod_policy}' is not one of "
                f"{', '.join(CLEAN_POD_POLICIES)}"
            )
        self.check_training(self.workers + 1)

    @property
    def replicas_in_sync(self) -> int:
        """Replicas the global batch is split over (see :func:`replicas_in_sync`)."""
        return replicas_in_sync(self.workers, self.gpus_per_worker, self.train_args)
