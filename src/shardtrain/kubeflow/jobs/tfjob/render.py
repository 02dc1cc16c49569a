"""The one TFJob manifest generator (:func:`build_tfjob`), and TFJobs as manifests and models.

Every TFJob shardtrain trains with comes from :func:`build_tfjob`: ``shardtrain tfjob render``
prints it, ``shardtrain tfjob submit`` creates it, the pipeline's train step submits it, and
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
  the job at once instead of burning GPU hours on retries; >= 128 (137, 200 = a lost peer)
  recreates the pod, which resumes from the checkpoint. A pod *deleted* (preemption, node
  drain, eviction) is another matter: training-operator v1.9 counts a running pod with a
  deletion timestamp as failed and fails the TFJob at once, before the trainer's exit 143
  after its checkpoint (kubeflow/trainer#1560; seen on a real kubelet, tests/cluster): the
  checkpoint is there, and submitting the job again resumes from it. A TrainJob restarts.
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

:func:`validate` (:mod:`.spec`) holds any manifest to the operator's rules; :func:`from_manifest`
reads one back into the SDK's models, refusing fields they would drop.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from shardtrain.kubeflow.jobs import manifests
from shardtrain.kubeflow.jobs.tfjob.config import JobConfig
from shardtrain.kubeflow.jobs.tfjob.spec import (
    API_VERSION,
    CONTAINER_NAME,
    KIND,
    KUEUE_QUEUE_LABEL,
    PORT,
    PORT_NAME,
    validate,
)
from shardtrain.kubeflow.pods import (
    ENTRYPOINT,
    LABELS,
    MIN_TERMINATION_GRACE_SECONDS,
    POD_ANNOTATIONS,
    RUN_AS_USER,
    STORAGE_ENV,
)

if TYPE_CHECKING:  # the SDK pulls in the whole Kubernetes client: imported where it is used
    from kubeflow.training import KubeflowOrgV1TFJob

log = logging.getLogger(__name__)


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
    return manifests.to_manifest(job)


def from_manifest(manifest: Mapping[str, Any]) -> KubeflowOrgV1TFJob:
    """The SDK model of a TFJob manifest, after :func:`validate`.

    The SDK silently drops fields it does not know; here any dropped field is an error, so a
    misspelt ``restartPolcy`` is caught before a cluster ignores it.

    Raises:
        ConfigError: the manifest breaks a rule of :func:`validate`, or has unknown fields.
    """
    validate(manifest)
    return manifests.from_dict(manifest, "KubeflowOrgV1TFJob", KIND)
