"""Kubeflow TFJobs: the one manifest generator, its checks, submission, and local runs.

Every TFJob shardtrain trains with comes from :func:`build_tfjob`: ``shardtrain tfjob render``
prints it, ``shardtrain tfjob submit`` creates it, the pipeline's launcher step submits it, and
``k8s/base/tfjob.yaml`` is its output for the default :class:`JobConfig` (a unit test compares
the two, so they cannot drift). It is built from the kubeflow-training SDK's models
(``KubeflowOrgV1TFJob`` …) and Kubernetes' (``V1PodTemplateSpec`` …), so a misspelt field is
a Python error, not a pod that never starts.

What :func:`build_tfjob` writes, and why::

    apiVersion: kubeflow.org/v1
    kind: TFJob
    metadata: {name: shardtrain, namespace: shardtrain}
    spec:
      runPolicy: {cleanPodPolicy: Running, backoffLimit: 3, ttlSecondsAfterFinished: 86400}
      tfReplicaSpecs:
        Chief:     {replicas: 1, restartPolicy: ExitCode, template: ...}   # decides success
        Worker:    {replicas: N, ...}                                      # omitted when N = 0
        Evaluator: {replicas: 1, ...}                                      # optional, no GPU

* The container is named ``tensorflow`` (the operator only configures that container) and runs
  ``shardtrain train --data DATA --model-dir MODEL_DIR [TRAIN ARGS]``; its port ``tfjob-port``
  2222 is the one the operator puts in ``TF_CONFIG``.
* ``restartPolicy: ExitCode`` maps the trainer's exit codes to the operator's decisions:
  0 success; 1 (bad config or data), 2 (usage) and 3 (storage unreachable after retries) fail
  the job at once instead of burning GPU hours on retries; >= 128 (143 = SIGTERM after a
  checkpoint on preemption or node drain) recreates the pod, which resumes from the checkpoint.
* ``runPolicy``: ``cleanPodPolicy: Running`` stops whatever still runs (an evaluator) once the
  chief has finished; ``backoffLimit`` bounds pod restarts; ``ttlSecondsAfterFinished`` keeps
  the finished job (and its pods' logs) for a day.
* Pods run as the image's non-root user (uid 10001), without privilege escalation or Linux
  capabilities, under the runtime's default seccomp profile (the Pod Security "restricted"
  level), with a dedicated service account whose API token is not mounted (the trainer never
  calls the Kubernetes API), and with ``sidecar.istio.io/inject: "false"`` (an Istio sidecar
  never exits, so the pod would never complete, and it intercepts the workers' gRPC).
* Queues (off by default; see :class:`JobConfig` ``queue``, ``gang_scheduler``,
  ``priority_class``). **Kueue**: the label ``kueue.x-k8s.io/queue-name: QUEUE`` names the
  LocalQueue, and ``runPolicy.suspend: true`` creates the job suspended: no pod exists until
  Kueue admits the workload and unsuspends it (Kueue's webhook would set it anyway; writing it
  makes the manifest correct without relying on the webhook, and makes a job applied where
  Kueue does not manage it visibly wait instead of starting outside its quota). **Volcano**
  (``gang_scheduler="volcano"``): ``runPolicy.schedulingPolicy`` with ``minAvailable`` = every
  replica (MultiWorkerMirroredStrategy cannot start until all training replicas are up; a
  partly scheduled job would hold its GPUs and wait), ``queue`` (the Volcano queue) and
  ``priorityClass``, and ``schedulerName: volcano`` on every pod. The training operator turns
  that policy into a Volcano PodGroup only when it runs with ``--gang-scheduler-name=volcano``
  (it then also sets ``schedulerName`` itself; writing it makes a misconfigured operator show
  up as pods Volcano schedules one by one, not as a silent default-scheduler job).
  ``priority_class`` sets every pod's ``priorityClassName`` (Kueue reads the workload's
  priority from it; Volcano's PodGroup gets it through ``schedulingPolicy.priorityClass``).
* Storage credentials come only from a Secret, by reference (``valueFrom.secretKeyRef``):
  ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY``, plus optional ``AWS_ENDPOINT_URL`` and
  ``AWS_REGION``. No value is ever written. Without a Secret (GCS with Workload Identity) no
  storage variable is set at all.

Example::

    >>> job = build_tfjob(JobConfig(data="s3://data/quest", model_dir="s3://models/quest"))
    >>> to_manifest(job)["spec"]["tfReplicaSpecs"]["Worker"]["replicas"]
    2

:func:`validate` applies the training operator's admission rules to any manifest (a job name
that is a DNS-1035 label; every replica with a ``tensorflow`` container that has an image; not
both Chief and Master; known replica types) plus TensorFlow's own (at most one chief, master or
evaluator), so a bad manifest fails here with one line instead of at ``kubectl apply``.
:func:`submit_and_wait` creates a job with the SDK's ``TrainingClient`` and waits for it with a
real overall timeout. :func:`local_replicas` turns a manifest into
:mod:`shardtrain.kubeflow.launcher`
replicas, so ``shardtrain run-local job.yaml`` runs the very manifest a cluster would.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import re
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import yaml

from shardtrain import __version__
from shardtrain.errors import ConfigError, ShardtrainError
from shardtrain.kubeflow.launcher import Replica

if TYPE_CHECKING:  # the SDK pulls in the whole Kubernetes client: imported where it is used
    from kubeflow.training import KubeflowOrgV1TFJob, TrainingClient

log = logging.getLogger(__name__)

#: Below this grace period (Kubernetes' default) ``build_tfjob`` warns: after SIGTERM a replica
#: needs one training step plus a checkpoint write (plus TensorFlow's exit) before SIGKILL.
MIN_TERMINATION_GRACE_SECONDS = 30

API_VERSION = "kubeflow.org/v1"
KIND = "TFJob"
#: The operator configures (TF_CONFIG, port) only the container with this name.
CONTAINER_NAME = "tensorflow"
#: The container port the operator puts in TF_CONFIG (it falls back to 2222 without one).
PORT_NAME = "tfjob-port"
PORT = 2222
#: The image's user (``useradd --uid 10001`` in the Dockerfile).
RUN_AS_USER = 10001
IMAGE_REPOSITORY = "ghcr.io/shardtrain/shardtrain"
#: The project image of this version ('+' is not allowed in image tags).
DEFAULT_IMAGE = f"{IMAGE_REPOSITORY}:{__version__.replace('+', '-')}"
#: The image's entrypoint, i.e. the command of every replica.
ENTRYPOINT = "shardtrain"
#: Replica types in the order the operator lists them in TF_CONFIG.
REPLICA_TYPES = ("Chief", "Master", "Worker", "PS", "Evaluator")
#: Replica types TensorFlow allows at most one of.
_SINGLETON_TYPES = ("Chief", "Master", "Evaluator")
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
CLEAN_POD_POLICIES = ("None", "Running", "All")
#: Storage variables read from the Secret: (key, optional).
STORAGE_ENV = (
    ("AWS_ACCESS_KEY_ID", False),
    ("AWS_SECRET_ACCESS_KEY", False),
    ("AWS_ENDPOINT_URL", True),
    ("AWS_REGION", True),
)
LABELS = {"app.kubernetes.io/name": "shardtrain", "app.kubernetes.io/component": "trainer"}
#: The label naming a job's Kueue LocalQueue.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: Gang schedulers the generator can write a scheduling policy for (the operator's
#: ``--gang-scheduler-name`` values it supports with a PodGroup of that scheduler).
GANG_SCHEDULERS = ("volcano",)
POD_ANNOTATIONS = {"sidecar.istio.io/inject": "false"}

_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SUCCEEDED, _FAILED, _RUNNING = "Succeeded", "Failed", "Running"
#: The operator's condition of a job whose ``runPolicy.suspend`` is true.
_SUSPENDED = "Suspended"


class ClusterError(ShardtrainError):
    """The Kubernetes API could not be reached or refused a request."""


class JobFailedError(ShardtrainError):
    """The TFJob ended with the Failed condition."""


class JobTimeoutError(ShardtrainError):
    """The TFJob did not finish within the wait timeout (it may still be running)."""


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


def replicas_in_sync(workers: int, gpus_per_worker: int, train_args: Sequence[str] = ()) -> int:
    """Replicas a TFJob's global batch is split over: training pods (the chief and
    ``workers``) x devices per pod (their GPUs, at most ``--devices``; one CPU device without
    GPUs). The evaluator is not one."""
    per_pod = max(gpus_per_worker, 1)
    devices = _train_arg(tuple(train_args), "--devices")
    if devices is not None and _int_arg("--devices", devices) > 0:
        per_pod = min(per_pod, _int_arg("--devices", devices))
    return (workers + 1) * per_pod


def round_batch(batch: int, replicas: int) -> int:
    """``batch`` rounded to the nearest multiple of ``replicas`` (at least one per replica)."""
    return max(replicas, round(batch / replicas) * replicas)


@dataclass(frozen=True)
class JobConfig:
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
            :data:`MIN_TERMINATION_GRACE_SECONDS` :func:`build_tfjob` warns.
        queue: the queue the job waits in. Without a gang scheduler: a Kueue LocalQueue (the
            ``kueue.x-k8s.io/queue-name`` label, created suspended); with
            ``gang_scheduler="volcano"``: the Volcano queue (``schedulingPolicy.queue``;
            None: the operator's ``default``). None: no queue.
        gang_scheduler: ``"volcano"``: gang-schedule all replicas at once through Volcano
            (``schedulingPolicy``, ``schedulerName``); None: the cluster's default scheduler.
        priority_class: a PriorityClass for every pod (and the Volcano PodGroup).
    """

    data: str
    model_dir: str
    name: str = "shardtrain"
    namespace: str = "shardtrain"
    image: str = DEFAULT_IMAGE
    workers: int = 2
    gpus_per_worker: int = 1
    evaluator: bool = True
    secret: str | None = "shardtrain-storage"
    service_account: str = "shardtrain-trainer"
    train_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cpu: str = "4"
    memory: str = "16Gi"
    backoff_limit: int = 3
    ttl_seconds_after_finished: int | None = 86400
    clean_pod_policy: str = "Running"
    active_deadline_seconds: int | None = None
    termination_grace_seconds: int = 120
    queue: str | None = None
    gang_scheduler: str | None = None
    priority_class: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "train_args", tuple(str(a) for a in self.train_args))
        object.__setattr__(self, "env", {str(k): str(v) for k, v in dict(self.env).items()})
        for what, value in (("data", self.data), ("model_dir", self.model_dir)):
            if not value or not str(value).strip():
                raise ConfigError(f"a TFJob needs {what} (a dataset/model URI)")
        _check_job_name(self.name)
        if not _DNS1123_LABEL.match(self.namespace) or len(self.namespace) > 63:
            raise ConfigError(f"namespace '{self.namespace}' is not a DNS-1123 label")
        if not self.image or any(c.isspace() for c in self.image):
            raise ConfigError(f"image '{self.image}' is not an image reference")
        for what, name in (
            ("secret", self.secret),
            ("service_account", self.service_account),
        ):
            if name is not None and not _DNS1123_SUBDOMAIN.match(name):
                raise ConfigError(f"{what} '{name}' is not a valid Kubernetes name")
        for what, count, low in (
            ("workers", self.workers, 0),
            ("gpus_per_worker", self.gpus_per_worker, 0),
            ("backoff_limit", self.backoff_limit, 0),
            ("ttl_seconds_after_finished", self.ttl_seconds_after_finished, 0),
            ("active_deadline_seconds", self.active_deadline_seconds, 1),
            ("termination_grace_seconds", self.termination_grace_seconds, 0),
        ):
            if count is not None and (not isinstance(count, int) or count < low):
                raise ConfigError(f"{what} must be an integer >= {low}, not {count!r}")
        if self.queue is not None and (
            not _DNS1123_LABEL.match(self.queue) or len(self.queue) > 63
        ):
            raise ConfigError(
                f"queue '{self.queue}' is not a valid queue name (a DNS-1123 label: a-z, 0-9, "
                "'-', at most 63 characters)"
            )
        if self.gang_scheduler is not None and self.gang_scheduler not in GANG_SCHEDULERS:
            raise ConfigError(
                f"gang_scheduler '{self.gang_scheduler}' is not supported (use "
                f"{', '.join(GANG_SCHEDULERS)}, or none)"
            )
        if self.priority_class is not None and not _DNS1123_SUBDOMAIN.match(self.priority_class):
            raise ConfigError(f"priority_class '{self.priority_class}' is not a valid name")
        if self.clean_pod_policy not in CLEAN_POD_POLICIES:
            raise ConfigError(
                f"clean_pod_policy '{self.clean_pod_policy}' is not one of "
                f"{', '.join(CLEAN_POD_POLICIES)}"
            )
        reserved = {"TF_CONFIG", "PYTHONUNBUFFERED"} | {k for k, _ in STORAGE_ENV}
        for name in self.env:
            if not _ENV_NAME.match(name):
                raise ConfigError(f"env: '{name}' is not a valid variable name")
            if name in reserved:
                raise ConfigError(
                    f"env: {name} is set by shardtrain or the operator (storage credentials "
                    "come from the Secret)"
                )
        for arg in self.train_args:
            if arg.split("=", 1)[0] in ("--data", "--model-dir"):
                raise ConfigError(f"train args: give {arg.split('=', 1)[0]} as the job's own field")
        given = _train_arg(self.train_args, "--batch-size")
        if given is not None:
            batch = _int_arg("--batch-size", given)
            replicas = self.replicas_in_sync
            if batch % replicas:
                raise ConfigError(
                    f"train args: --batch-size {batch} is not divisible by the {replicas} "
                    f"replicas in sync ({self.workers + 1} training pods x "
                    f"{replicas // (self.workers + 1)} device(s)); use "
                    f"{_nearest_multiples(batch, replicas)}"
                )

    @property
    def replicas_in_sync(self) -> int:
        """Replicas the global batch is split over (see :func:`replicas_in_sync`)."""
        return replicas_in_sync(self.workers, self.gpus_per_worker, self.train_args)

    def container_train_args(self) -> tuple[str, ...]:
        """The train arguments the pods get: ``train_args``, and when they leave the batch size
        to the trainer's default (and to no ``--config`` file), that default rounded to the
        nearest multiple of :attr:`replicas_in_sync` so that it splits evenly. An explicit
        ``--batch-size`` is never changed (it is checked instead)."""
        if _train_arg(self.train_args, "--batch-size") is not None or any(
            a.split("=", 1)[0] == "--config" for a in self.train_args
        ):
            return self.train_args
        from shardtrain.train.config import TrainConfig

        default = TrainConfig.__dataclass_fields__["batch_size"].default
        assert isinstance(default, int)
        replicas = self.replicas_in_sync
        if default % replicas == 0:
            return self.train_args
        return (*self.train_args, "--batch-size", str(round_batch(default, replicas)))

    @classmethod
    def from_overrides(cls, **overrides: Any) -> JobConfig:
        """The defaults with every override that is not None applied (what the CLI passes).

        An empty ``secret``, ``queue``, ``gang_scheduler`` or ``priority_class`` means none.

        Raises:
            ConfigError: data or model_dir is missing, or a value is invalid.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(f"unknown TFJob settings: {', '.join(unknown)}")
        given = {k: v for k, v in overrides.items() if v is not None}
        for optional in ("secret", "queue", "gang_scheduler", "priority_class"):
            if given.get(optional) == "":
                given[optional] = None
        for required in ("data", "model_dir"):
            if required not in given:
                raise ConfigError(f"a TFJob needs {required} (--{required.replace('_', '-')})")
        return cls(**given)

    @classmethod
    def default(cls, name: str) -> Any:
        """The default value of field ``name`` (for ``--help`` texts)."""
        for f in fields(cls):
            if f.name == name:
                return f.default
        raise KeyError(name)


def _train_arg(args: tuple[str, ...], flag: str) -> str | None:
    """The value of the last ``flag VALUE`` or ``flag=VALUE`` in ``args`` (None: absent)."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def _int_arg(flag: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"train args: {flag} must be an integer, not {value!r}") from None


def _nearest_multiples(batch: int, replicas: int) -> str:
    below = batch // replicas * replicas
    above = below + replicas
    return f"--batch-size {above}" if below == 0 else f"--batch-size {below} or {above}"


def _check_job_name(name: str) -> None:
    if not isinstance(name, str) or not _DNS1035_LABEL.match(name) or len(name) > 63:
        raise ConfigError(
            f"TFJob name '{name}' is not a DNS-1035 label (lower-case letters, digits and '-', "
            "starting with a letter, at most 63 characters)"
        )


# --------------------------------------------------------------------------------------------
# The generator
# --------------------------------------------------------------------------------------------


def build_tfjob(cfg: JobConfig) -> KubeflowOrgV1TFJob:
    """The TFJob for ``cfg``: Chief x1, Worker x ``cfg.workers`` (if any), Evaluator x1 (opt.).

    Args:
        cfg: the job's settings.

    Returns:
        The SDK model, ready for ``TrainingClient.create_job`` or :func:`to_manifest`.

    Raises:
        ConfigError: the job would break a rule of :func:`validate` (e.g. a name so long that
            ``<name>-evaluator-0`` is no valid Service name).
    """
    from kubeflow.training import models

    if cfg.termination_grace_seconds < MIN_TERMINATION_GRACE_SECONDS:
        log.warning(
            "termination_grace_seconds %d: on SIGTERM a replica stops after its current step and "
            "writes a checkpoint; below %d s (Kubernetes' default) a slow step or checkpoint "
            "write is SIGKILLed first and the restart loses the steps since the last checkpoint",
            cfg.termination_grace_seconds,
            MIN_TERMINATION_GRACE_SECONDS,
        )
    layout = [("Chief", 1, cfg.gpus_per_worker)]
    if cfg.workers:
        layout.append(("Worker", cfg.workers, cfg.gpus_per_worker))
    if cfg.evaluator:
        layout.append(("Evaluator", 1, 0))
    labels = dict(LABELS)
    kueue = cfg.queue is not None and cfg.gang_scheduler is None
    if kueue:
        labels[KUEUE_QUEUE_LABEL] = str(cfg.queue)
    scheduling = None
    if cfg.gang_scheduler == "volcano":
        scheduling = models.KubeflowOrgV1SchedulingPolicy(
            min_available=sum(count for _, count, _ in layout),
            queue=cfg.queue,
            priority_class=cfg.priority_class,
        )
    job = models.KubeflowOrgV1TFJob(
        api_version=API_VERSION,
        kind=KIND,
        metadata=models.V1ObjectMeta(name=cfg.name, namespace=cfg.namespace, labels=labels),
        spec=models.KubeflowOrgV1TFJobSpec(
            run_policy=models.KubeflowOrgV1RunPolicy(
                clean_pod_policy=cfg.clean_pod_policy,
                backoff_limit=cfg.backoff_limit,
                ttl_seconds_after_finished=cfg.ttl_seconds_after_finished,
                active_deadline_seconds=cfg.active_deadline_seconds,
                suspend=True if kueue else None,
                scheduling_policy=scheduling,
            ),
            tf_replica_specs={
                rtype: models.KubeflowOrgV1ReplicaSpec(
                    replicas=count,
                    restart_policy="ExitCode",
                    template=_pod_template(cfg, gpus),
                )
                for rtype, count, gpus in layout
            },
        ),
    )
    validate(to_manifest(job))
    return job


def _pod_template(cfg: JobConfig, gpus: int) -> Any:
    from kubeflow.training import models

    limits = {"memory": cfg.memory}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    env = [models.V1EnvVar(name="PYTHONUNBUFFERED", value="1")]  # logs reach kubectl at once
    env += [models.V1EnvVar(name=k, value=v) for k, v in cfg.env.items()]
    if cfg.secret:
        env += [
            models.V1EnvVar(
                name=key,
                value_from=models.V1EnvVarSource(
                    secret_key_ref=models.V1SecretKeySelector(
                        name=cfg.secret, key=key, optional=True if optional else None
                    )
                ),
            )
            for key, optional in STORAGE_ENV
        ]
    container = models.V1Container(
        name=CONTAINER_NAME,
        image=cfg.image,
        command=[ENTRYPOINT],
        args=[
            "train",
            "--data",
            cfg.data,
            "--model-dir",
            cfg.model_dir,
            *cfg.container_train_args(),
        ],
        env=env,
        ports=[models.V1ContainerPort(name=PORT_NAME, container_port=PORT)],
        resources=models.V1ResourceRequirements(
            requests={"cpu": cfg.cpu, "memory": cfg.memory}, limits=limits
        ),
        security_context=models.V1SecurityContext(
            allow_privilege_escalation=False,
            capabilities=models.V1Capabilities(drop=["ALL"]),
        ),
    )
    return models.V1PodTemplateSpec(
        metadata=models.V1ObjectMeta(labels=dict(LABELS), annotations=dict(POD_ANNOTATIONS)),
        spec=models.V1PodSpec(
            scheduler_name=cfg.gang_scheduler,
            priority_class_name=cfg.priority_class,
            service_account_name=cfg.service_account,
            automount_service_account_token=False,
            termination_grace_period_seconds=cfg.termination_grace_seconds,
            security_context=models.V1PodSecurityContext(
                run_as_non_root=True,
                run_as_user=RUN_AS_USER,
                seccomp_profile=models.V1SeccompProfile(type="RuntimeDefault"),
            ),
            containers=[container],
        ),
    )


def to_manifest(job: KubeflowOrgV1TFJob) -> dict[str, Any]:
    """The job as a plain manifest dict (camelCase keys, unset fields left out)."""
    from kubeflow.training import ApiClient

    return ApiClient().sanitize_for_serialization(job)


def to_yaml(job: KubeflowOrgV1TFJob | Mapping[str, Any]) -> str:
    """The job (model or manifest dict) as a YAML document, keys in the SDK's order."""
    manifest = dict(job) if isinstance(job, Mapping) else to_manifest(job)
    return yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False)


class _Response:
    """What ``ApiClient.deserialize`` reads: an object with the JSON body in ``data``."""

    def __init__(self, obj: Any) -> None:
        self.data = json.dumps(obj)


def from_manifest(manifest: Mapping[str, Any]) -> KubeflowOrgV1TFJob:
    """The SDK model of a TFJob manifest, after :func:`validate`.

    The SDK silently drops fields it does not know; here any dropped field is an error, so a
    misspelt ``restartPolcy`` is caught before a cluster ignores it.

    Raises:
        ConfigError: the manifest breaks a rule of :func:`validate`, or has unknown fields.
    """
    from kubeflow.training import ApiClient

    validate(manifest)
    try:
        job = ApiClient().deserialize(_Response(manifest), "KubeflowOrgV1TFJob")
    except (ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(f"TFJob {_name_of(manifest)}: {_one_line(exc)}") from exc
    dropped = list(_missing_paths(manifest, to_manifest(job)))
    if dropped:
        raise ConfigError(
            f"TFJob {_name_of(manifest)}: unknown field(s) {', '.join(dropped[:5])}"
            + (" …" if len(dropped) > 5 else "")
        )
    return job


def _missing_paths(original: Any, kept: Any, path: str = "") -> Iterator[str]:
    """Paths of keys present in ``original`` but not in ``kept`` (values are not compared)."""
    if isinstance(original, Mapping):
        kept = kept if isinstance(kept, Mapping) else {}
        for key, value in original.items():
            sub = f"{path}.{key}" if path else str(key)
            if key not in kept:
                if value is not None:
                    yield sub
            else:
                yield from _missing_paths(value, kept[key], sub)
    elif isinstance(original, list) and isinstance(kept, list):
        for i, (a, b) in enumerate(zip(original, kept, strict=False)):
            yield from _missing_paths(a, b, f"{path}[{i}]")


def _name_of(manifest: Mapping[str, Any]) -> str:
    meta = manifest.get("metadata") or {}
    return str(meta.get("name", "<unnamed>")) if isinstance(meta, Mapping) else "<unnamed>"


# --------------------------------------------------------------------------------------------
# Validation: the operator's admission webhook, and TensorFlow's own rules
# --------------------------------------------------------------------------------------------


def validate(manifest: Mapping[str, Any]) -> None:
    """Check a TFJob manifest against the rules the training operator and TF enforce.

    The operator's validating webhook (v1.9): the name is a DNS-1035 label; every replica has
    a container named ``tensorflow`` and every container an image; not both Chief and Master.
    Also checked, because they fail later and more expensively: replica types are the known
    ones (Chief, Master, Worker, PS, Evaluator); at most one chief, master or evaluator
    replica; counts, restart and clean-pod policies valid; a gang's ``minAvailable`` within the
    job's replicas (more would never schedule); every ``<name>-<type>-<index>`` pod name short
    enough for the Service the operator creates per replica.

    Args:
        manifest: the TFJob as a dict (as read from YAML).

    Raises:
        ConfigError: one line naming the job and every rule it breaks.
    """
    name = _name_of(manifest)
    problems = list(_problems(manifest))
    if problems:
        raise ConfigError(f"TFJob {name}: {'; '.join(problems)}")


def _problems(manifest: Mapping[str, Any]) -> Iterator[str]:
    if not isinstance(manifest, Mapping):
        yield "not a mapping"
        return
    if manifest.get("apiVersion") != API_VERSION or manifest.get("kind") != KIND:
        yield f"apiVersion/kind must be {API_VERSION}/{KIND}"
    meta = manifest.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not _DNS1035_LABEL.match(name) or len(name) > 63:
        yield "metadata.name must be a DNS-1035 label (a-z, 0-9, '-'; a letter first; <= 63)"
        name = None
    spec = manifest.get("spec")
    specs = spec.get("tfReplicaSpecs") if isinstance(spec, Mapping) else None
    if not isinstance(specs, Mapping) or not specs:
        yield "spec.tfReplicaSpecs is required"
        return
    if "Chief" in specs and "Master" in specs:
        yield "has both Chief and Master (at most one of them)"
    for rtype, rspec in specs.items():
        where = f"tfReplicaSpecs.{rtype}"
        if rtype not in REPLICA_TYPES:
            yield f"{where}: unknown replica type (use {', '.join(REPLICA_TYPES)})"
        if not isinstance(rspec, Mapping):
            yield f"{where}: not a mapping"
            continue
        count = rspec.get("replicas", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            yield f"{where}.replicas must be an integer >= 0"
        elif rtype in _SINGLETON_TYPES and count > 1:
            yield f"{where}.replicas is {count}; TensorFlow allows one {rtype.lower()}"
        elif name and count and len(f"{name}-{rtype.lower()}-{count - 1}") > 63:
            yield (
                f"{where}: pod/service name {name}-{rtype.lower()}-{count - 1} is longer than "
                "63 characters (shorten the job name)"
            )
        policy = rspec.get("restartPolicy")
        if policy is not None and policy not in RESTART_POLICIES:
            yield f"{where}.restartPolicy '{policy}' is not one of {', '.join(RESTART_POLICIES)}"
        containers = _containers(rspec)
        if not containers:
            yield f"{where}.template.spec.containers must be specified"
            continue
        for i, container in enumerate(containers):
            if not isinstance(container, Mapping) or not container.get("image"):
                yield f"{where}.template.spec.containers[{i}].image is required"
        if not any(isinstance(c, Mapping) and c.get("name") == CONTAINER_NAME for c in containers):
            yield f"{where}: needs a container named '{CONTAINER_NAME}'"
    assert isinstance(spec, Mapping)  # checked with tfReplicaSpecs above
    run_policy = spec.get("runPolicy") or {}
    if isinstance(run_policy, Mapping):
        clean = run_policy.get("cleanPodPolicy")
        if clean is not None and clean not in CLEAN_POD_POLICIES:
            allowed = ", ".join(CLEAN_POD_POLICIES)
            yield f"runPolicy.cleanPodPolicy '{clean}' is not one of {allowed}"
        for key in ("backoffLimit", "ttlSecondsAfterFinished", "activeDeadlineSeconds"):
            value = run_policy.get(key)
            if value is not None and (not isinstance(value, int) or value < 0):
                yield f"runPolicy.{key} must be an integer >= 0"
        suspend = run_policy.get("suspend")
        if suspend is not None and not isinstance(suspend, bool):
            yield "runPolicy.suspend must be true or false"
        gang = run_policy.get("schedulingPolicy")
        if isinstance(gang, Mapping) and gang.get("minAvailable") is not None:
            total = sum(r.get("replicas", 1) for r in specs.values() if isinstance(r, Mapping))
            least = gang["minAvailable"]
            if not isinstance(least, int) or isinstance(least, bool) or not 1 <= least <= total:
                yield (
                    f"runPolicy.schedulingPolicy.minAvailable must be between 1 and the job's "
                    f"{total} replicas"
                )


def _containers(rspec: Mapping[str, Any]) -> list[Any]:
    template = rspec.get("template")
    pod = template.get("spec") if isinstance(template, Mapping) else None
    containers = pod.get("containers") if isinstance(pod, Mapping) else None
    return list(containers) if isinstance(containers, list) else []


# --------------------------------------------------------------------------------------------
# Manifest files and local runs
# --------------------------------------------------------------------------------------------


def is_manifest_path(args: Iterable[str]) -> bool:
    """True when ``args`` is a single ``.yaml``/``.yml``/``.json`` path (a TFJob manifest).

    ``shardtrain run-local job.yaml`` runs a manifest; ``shardtrain run-local -- train …`` a
    command. No shardtrain command ends in ``.yaml``, so the two cannot be confused.
    """
    args = list(args)
    return len(args) == 1 and Path(args[0]).suffix.lower() in (".yaml", ".yml", ".json")


def load_manifest(path: str | Path) -> dict[str, Any]:
    """The one TFJob in a YAML/JSON file (other documents, e.g. a ServiceAccount, are skipped).

    Raises:
        ConfigError: the file is missing or unreadable, or holds no TFJob or several.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the TFJob manifest ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({_one_line(exc)})") from exc
    jobs = [d for d in docs if isinstance(d, Mapping) and d.get("kind") == KIND]
    if len(jobs) != 1:
        raise ConfigError(f"{path}: expected one TFJob, found {len(jobs)}")
    others = [d.get("kind", "?") for d in docs if isinstance(d, Mapping) and d is not jobs[0]]
    if others:
        log.info("%s: using the TFJob; skipping %s", path, ", ".join(map(str, others)))
    return dict(jobs[0])


def local_argv(command: Iterable[str]) -> tuple[str, ...]:
    """A container command as a local command line.

    The image's ``shardtrain`` entrypoint becomes ``python -m shardtrain.cli`` of this
    interpreter, and ``python``/``python3`` become this interpreter (the one shardtrain is
    installed in); anything else runs as written.
    """
    argv = list(command)
    if not argv:
        return ()
    head = Path(argv[0]).name
    if head == ENTRYPOINT:
        return (sys.executable, "-m", "shardtrain.cli", *argv[1:])
    if head in ("python", "python3"):
        return (sys.executable, *argv[1:])
    return tuple(argv)


def local_replicas(manifest: Mapping[str, Any]) -> list[Replica]:
    """The replicas of a TFJob manifest for :func:`shardtrain.kubeflow.launcher.run_local`.

    Each replica runs its ``tensorflow`` container's command and args (the image entrypoint
    ``shardtrain`` when there is no command; see :func:`local_argv`) with the container's plain
    ``env`` values. Variables the cluster would fill from Secrets or field references
    (``valueFrom``) cannot be resolved here: they come from this process's environment, and
    their names (never their values) are logged. The launcher adds TF_CONFIG of the operator's
    shape, with localhost ports in place of the ``<job>-<type>-<i>.<ns>.svc:2222`` hosts.

    Raises:
        ConfigError: the manifest breaks a rule of :func:`validate`.
    """
    import os

    validate(manifest)
    run_policy = manifest["spec"].get("runPolicy") or {}
    if run_policy.get("suspend") or run_policy.get("schedulingPolicy"):
        log.info("queue and gang-scheduling settings apply on a cluster; here all replicas start")
    specs = manifest["spec"]["tfReplicaSpecs"]
    replicas = []
    from_here: dict[str, bool] = {}  # name -> required (a Secret key without optional: true)
    for rtype in REPLICA_TYPES:
        if rtype not in specs:
            continue
        rspec = specs[rtype]
        count = rspec.get("replicas", 1)
        if count == 0:
            continue
        container = next(c for c in _containers(rspec) if c.get("name") == CONTAINER_NAME)
        argv = local_argv(container.get("command") or [ENTRYPOINT])
        argv += tuple(str(a) for a in container.get("args") or ())
        env = {}
        for var in container.get("env") or ():
            if "valueFrom" in var:
                ref = var["valueFrom"].get("secretKeyRef") or {}
                required = bool(ref) and not ref.get("optional", False)
                from_here[var["name"]] = from_here.get(var["name"], False) or required
            else:
                env[var["name"]] = str(var.get("value", ""))
        if container.get("envFrom"):
            log.warning("%s: envFrom is not resolved locally; set those variables here", rtype)
        replicas.append(Replica(rtype.lower(), count, argv, env))
    if from_here:
        names = list(from_here)
        missing = [n for n, required in from_here.items() if required and n not in os.environ]
        log.info(
            "from this environment (Secrets and field references are not resolved locally): %s",
            ", ".join(names),
        )
        if missing:
            log.warning("not set in this environment: %s", ", ".join(missing))
    return replicas


# --------------------------------------------------------------------------------------------
# Submission
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Condition:
    """One TFJob status condition (Created, Running, Restarting, Succeeded, Failed)."""

    type: str
    status: str
    reason: str = ""
    message: str = ""

    @property
    def true(self) -> bool:
        return self.status == "True"


@dataclass(frozen=True)
class SubmitResult:
    """A TFJob that ran to success."""

    name: str
    namespace: str
    conditions: tuple[Condition, ...]


def _conditions(job: Any) -> tuple[Condition, ...]:
    status = getattr(job, "status", None)
    return tuple(
        Condition(c.type or "", c.status or "", c.reason or "", c.message or "")
        for c in (getattr(status, "conditions", None) or ())
    )


def _one_line(exc: BaseException) -> str:
    """A readable single line for an SDK error (HTTP status and API message when there is one)."""
    from kubernetes.client.rest import ApiException

    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ApiException):
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, ApiException):
        detail = cause.reason or ""
        with contextlib.suppress(TypeError, ValueError, AttributeError):
            detail = json.loads(cause.body).get("message") or detail
        return f"HTTP {cause.status}: {' '.join(str(detail).split())}"[:400]
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:400]


def _training_client(namespace: str) -> TrainingClient:
    """The SDK client for TFJobs, configured from kubeconfig or the in-cluster service account."""
    from kubeflow.training import TrainingClient
    from kubernetes.config import ConfigException

    try:
        return TrainingClient(namespace=namespace, job_kind=KIND)
    except (ConfigException, OSError) as exc:
        raise ClusterError(
            f"no Kubernetes configuration (kubeconfig or in-cluster): {exc}"
        ) from exc


class _ChiefLogs:
    """Streams the chief's log while the main thread waits for the job.

    A daemon thread polls the chief's pod (``training.kubeflow.org/job-role=master``: the
    Chief, or worker 0 without one) and follows its log through the SDK (which prints each
    line as ``[Pod name]: line``) once per pod: a pod recreated after exit code 143 is followed
    again. Logs of a chief pod that ran between two polls are printed at the end.
    """

    def __init__(
        self, client: TrainingClient, name: str, namespace: str, poll: float, out: TextIO
    ) -> None:
        self._client, self._name, self._namespace = client, name, namespace
        self._poll, self._out = poll, out
        self._followed: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"logs-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _pods(self) -> list[Any]:
        return self._client.get_job_pods(name=self._name, namespace=self._namespace, is_master=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                running = [
                    p
                    for p in self._pods()
                    if p.status is not None
                    and p.status.phase == _RUNNING
                    and p.metadata.uid not in self._followed
                ]
                if running:
                    self._followed.update(p.metadata.uid for p in running)
                    # Blocks until the chief's container exits; the SDK prints every line.
                    self._client.get_job_logs(
                        name=self._name,
                        namespace=self._namespace,
                        job_kind=KIND,
                        is_master=True,
                        follow=True,
                    )
            except Exception as exc:  # a log hiccup must never fail the job's outcome
                log.warning("cannot follow the chief's log: %s", _one_line(exc))
            self._stop.wait(self._poll)

    def finish(self, *, wait: float) -> None:
        """Stop polling; give an open stream ``wait`` seconds; print logs never streamed."""
        self._stop.set()
        self._thread.join(timeout=wait)
        if self._thread.is_alive():
            return  # still streaming a running chief (timeout): nothing more to print
        try:
            unseen = {
                p.metadata.name
                for p in self._pods()
                if p.metadata.uid not in self._followed
                and p.status is not None
                and p.status.phase != "Pending"
            }
            if not unseen:
                return
            logs, _ = self._client.get_job_logs(
                name=self._name, namespace=self._namespace, job_kind=KIND, is_master=True
            )
        except Exception as exc:
            log.warning("cannot read the chief's log: %s", _one_line(exc))
            return
        for pod, text in logs.items():
            if pod in unseen:
                for line in str(text).splitlines():
                    self._out.write(f"[{pod}] {line}\n")
        self._out.flush()


def is_queued(job: Any) -> bool:
    """True while a TFJob waits in a queue: ``runPolicy.suspend`` is true (Kueue has not
    admitted it yet, or preempted it) or the operator reports the ``Suspended`` condition.

    A queued job has no pods and is neither running nor failed.
    """
    spec = getattr(job, "spec", None)
    run_policy = getattr(spec, "run_policy", None)
    if getattr(run_policy, "suspend", None):
        return True
    return any(c.type == _SUSPENDED and c.true for c in _conditions(job))


class _QueueWatch:
    """Reports a job's passage through its queue: called by the SDK's wait loop after each
    poll with the job; says once when it is queued and once when it is admitted (again after
    a preemption re-queued it)."""

    def __init__(self, name: str, namespace: str, out: TextIO) -> None:
        self._what = f"TFJob {namespace}/{name}"
        self._out = out
        self.queued = False
        self.ever_queued = False

    def __call__(self, job: Any) -> None:
        queued = is_queued(job)
        if queued and not self.queued:
            _say(self._out, f"{self._what} is queued: suspended until its queue admits it")
        elif self.queued and not queued:
            _say(self._out, f"{self._what} was admitted: its pods are being created")
        self.queued = queued
        self.ever_queued = self.ever_queued or queued


def submit_and_wait(
    job: KubeflowOrgV1TFJob,
    *,
    wait_timeout: float = 86400,
    poll_interval: float = 15,
    stream_logs: bool = True,
    delete_after: bool = False,
    client: TrainingClient | None = None,
    request_timeout: int = 120,
    out: TextIO | None = None,
) -> SubmitResult:
    """Create a TFJob, wait until it Succeeded or Failed, and report how it ended.

    ``wait_timeout`` is the overall bound: it goes to the SDK's
    ``wait_for_job_conditions(wait_timeout=...)``, while ``request_timeout`` bounds each API
    request (the SDK's ``timeout``). "Failed" is among the awaited conditions, so a failed
    job ends the wait at once and is reported as a failure, never as success.

    A job created in a queue (Kueue: ``runPolicy.suspend``) is reported as queued, and as
    admitted when its queue lets it start; being queued is neither running nor failing. The
    timeout counts from creation, **queue time included**: it bounds how long the caller (a
    pipeline step) waits, whatever the job waits for. A job still queued at the timeout is a
    :class:`JobTimeoutError` saying so, and stays on the cluster (in its queue) unless
    ``delete_after``.

    Args:
        job: the TFJob (e.g. from :func:`build_tfjob` or :func:`from_manifest`).
        wait_timeout: seconds to wait for the job to finish, in total.
        poll_interval: seconds between status polls.
        stream_logs: print the chief's log while the job runs.
        delete_after: delete the job once it has ended, failed or timed out.
        client: a ``TrainingClient(job_kind="TFJob")`` (the kind matters: ``create_job`` takes
            it from the client); by default one from kubeconfig or the in-cluster account.
        request_timeout: seconds per Kubernetes API request.
        out: where status and final conditions are written (default: stdout).

    Returns:
        The job's name, namespace and final conditions, when it Succeeded.

    Raises:
        ConfigError: the job breaks a rule of :func:`validate` or has no namespace.
        ClusterError: the API could not be reached or refused the job (e.g. it exists).
        JobFailedError: the job ended Failed (the message carries the operator's reason).
        JobTimeoutError: the job had not finished after ``wait_timeout`` seconds.
    """
    out = out or sys.stdout
    manifest = to_manifest(job)
    validate(manifest)
    name, namespace = job.metadata.name, job.metadata.namespace
    if not namespace:
        raise ConfigError(f"TFJob {name}: metadata.namespace is required to submit it")
    if wait_timeout <= 0 or poll_interval <= 0:
        raise ConfigError("wait_timeout and poll_interval must be positive")
    _warn_about_local_paths(manifest)
    client = client or _training_client(namespace)
    try:
        # With a job object the SDK takes the kind from the client (job_kind must be None).
        client.create_job(job=job, namespace=namespace)
    except (RuntimeError, TimeoutError, ValueError) as exc:
        raise ClusterError(f"cannot create TFJob {namespace}/{name}: {_one_line(exc)}") from exc
    _say(
        out,
        f"created TFJob {namespace}/{name}; waiting up to {wait_timeout:g}s for it to end"
        + (" (queue time included)" if is_queued(job) else ""),
    )
    watch = _QueueWatch(name, namespace, out)

    logs = _ChiefLogs(client, name, namespace, poll_interval, out) if stream_logs else None
    if logs:
        logs.start()
    final: Any = None
    error: ShardtrainError | None = None
    try:
        final = client.wait_for_job_conditions(
            name=name,
            namespace=namespace,
            job_kind=KIND,
            expected_conditions={_SUCCEEDED, _FAILED},
            wait_timeout=wait_timeout,
            # The SDK polls round(wait_timeout / polling_interval) times: at least once.
            polling_interval=min(poll_interval, wait_timeout),
            callback=watch,
            timeout=request_timeout,
        )
    except TimeoutError as exc:
        state = (
            "it is still queued (suspended, never admitted by its queue) and"
            if watch.queued
            else "it"
        )
        error = JobTimeoutError(
            f"TFJob {namespace}/{name} did not end within {wait_timeout:g}s; {state} is still "
            f"on the cluster ({_one_line(exc)})"
        )
        error.__cause__ = exc
    except RuntimeError as exc:
        error = ClusterError(f"lost track of TFJob {namespace}/{name}: {_one_line(exc)}")
        error.__cause__ = exc
    except KeyboardInterrupt:
        if logs:
            logs.finish(wait=0)
        if delete_after:
            _delete(client, name, namespace, out)
        raise
    if logs:
        logs.finish(wait=30 if final is not None else 0)

    conditions = _conditions(final) if final is not None else _latest(client, name, namespace)
    _print_conditions(out, name, namespace, conditions)
    if error is None:
        failed = next((c for c in conditions if c.type == _FAILED and c.true), None)
        if failed is not None:
            why = ": ".join(x for x in (failed.reason, failed.message) if x) or "no reason given"
            error = JobFailedError(f"TFJob {namespace}/{name} failed: {why}")
        elif not any(c.type == _SUCCEEDED and c.true for c in conditions):
            error = ClusterError(f"TFJob {namespace}/{name} ended without Succeeded or Failed")
    if delete_after:
        _delete(client, name, namespace, out)
    if error is not None:
        raise error
    _say(out, f"TFJob {namespace}/{name} succeeded")
    return SubmitResult(name=name, namespace=namespace, conditions=conditions)


def _latest(client: TrainingClient, name: str, namespace: str) -> tuple[Condition, ...]:
    try:
        job = client.get_job(name=name, namespace=namespace, job_kind=KIND)
    except Exception as exc:
        log.warning(
            "cannot read the conditions of TFJob %s/%s: %s", namespace, name, _one_line(exc)
        )
        return ()
    return _conditions(job)


def _print_conditions(
    out: TextIO, name: str, namespace: str, conditions: tuple[Condition, ...]
) -> None:
    _say(out, f"conditions of TFJob {namespace}/{name}:")
    if not conditions:
        _say(out, "  (none reported)")
    for c in conditions:
        _say(out, f"  {c.type:<11} {c.status:<6} {c.reason}: {c.message}".rstrip(": "))


def _delete(client: TrainingClient, name: str, namespace: str, out: TextIO) -> None:
    try:
        client.delete_job(name=name, namespace=namespace, job_kind=KIND)
    except Exception as exc:  # the outcome is already known; do not hide it behind this
        log.warning("cannot delete TFJob %s/%s: %s", namespace, name, _one_line(exc))
        return
    _say(out, f"deleted TFJob {namespace}/{name}")


def _say(out: TextIO, text: str) -> None:
    out.write(text + "\n")
    out.flush()


def _warn_about_local_paths(manifest: Mapping[str, Any]) -> None:
    """Pods cannot read this machine's files: warn when --data/--model-dir are plain paths."""
    seen = set()
    for rspec in manifest["spec"]["tfReplicaSpecs"].values():
        for container in _containers(rspec):
            args = [str(a) for a in container.get("args") or ()]
            for flag, value in itertools.pairwise(args):
                if flag in ("--data", "--model-dir") and "://" not in value:
                    seen.add((flag, value))
    for flag, value in sorted(seen):
        log.warning(
            "%s %s is a local path: pods can only read it from a mounted volume", flag, value
        )
