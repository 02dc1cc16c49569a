"""The TensorFlow runtime for Kubeflow Trainer v2 (:func:`build_runtime`) and the one TrainJob
generator (:func:`build_trainjob`).

``k8s/trainer-v2/runtime.yaml`` is :func:`build_runtime`'s output and
``k8s/trainer-v2/job/trainjob.yaml`` :func:`build_trainjob`'s for the default settings (a unit
test compares them, so YAML and code cannot drift). Both are plain manifest dicts: Trainer's
Python SDK offers no model of a runtime, and the API server checks both against the CRDs'
schemas (the integration tests dry-run every shape we write).

The runtime (``ClusterTrainingRuntime`` ``shardtrain-tensorflow``, label
``trainer.kubeflow.org/framework: tensorflow``)::

    mlPolicy: {numNodes: 1, jax: {}}             # Trainer writes the node count (below)
    template.spec:                               # a JobSet
      failurePolicy: {maxRestarts: 3, restartStrategy: BlockingRecreate,
                      rules: [{action: FailJobSet, onJobFailureReasons: [PodFailurePolicy]}]}
      replicatedJobs:
      - name: node                               # Trainer's trainer step: numNodes pods
        template.spec:                           # an Indexed Job
          backoffLimit: 0
          podFailurePolicy: {rules: [{action: FailJob, onExitCodes: {In: [1, 2, 3]}}]}
          template.spec: {restartPolicy: Never, containers: [{name: node, port 2222, ...}]}

* **Roles.** Each node derives ``TF_CONFIG`` itself
  (:func:`shardtrain.train.cluster.tf_config_from_trainjob`) from its completion index
  (``JOB_COMPLETION_INDEX``), the JobSet labels the runtime passes down by the downward API,
  and the node count. No pod learns its Job's size from JobSet or the Job controller, and
  Trainer's plainML policy writes nothing, so the runtime names Trainer's JAX policy: in
  v2.3 it only sets ``JAX_NUM_PROCESSES`` (= ``numNodes``), ``JAX_PROCESS_ID`` and
  ``JAX_COORDINATOR_ADDRESS`` (and declares port 29500), none of which TensorFlow reads. A
  TrainJob thus needs nothing but ``numNodes`` (the Kubeflow SDK's ``num_nodes``).
  :func:`build_trainjob` also writes ``SHARDTRAIN_NUM_NODES`` (``trainer.env``, equal to
  ``numNodes``, checked by :func:`~.spec.validate`) for runtimes without that policy (one
  installed before it, a plainML runtime given by ``--runtime``). Node 0 is the chief: it
  evaluates every ``eval_every`` steps and the final checkpoint in process (the Estimator's
  evaluation without a separate evaluator task: same metrics files, same export) and exports;
  nodes 1..N-1 are workers. The peers are JobSet's host names
  ``<job>-node-0-<i>.<job>:2222``.
* **Restarts, as under a TFJob.** A pod exiting 1 (bad config or data), 2 (usage) or 3
  (storage unreachable) fails its Job through the Job's pod failure policy (reason
  ``PodFailurePolicy``), and the JobSet rule turns that into a failed JobSet, hence a Failed
  TrainJob, at once. Any other failure (143: SIGTERM after a checkpoint on preemption or
  drain; 200: a lost peer; 137: killed) fails the Job (``backoffLimit: 0``,
  ``BackoffLimitExceeded``) and JobSet recreates every node, which resume from the checkpoint,
  at most ``maxRestarts`` times. ``BlockingRecreate``: no new node starts before every old one
  is gone, so two generations never write checkpoints at once or hold a node's host name.
* **Storage credentials** come from the Secret ``shardtrain-storage`` of the job's namespace
  by reference, in the runtime itself (every key optional): a TrainJob submitted by the
  Kubeflow SDK cannot add them, since Trainer's webhook refuses ``env`` for container ``node``
  in runtime patches and the SDK's ``env`` takes plain values only. :func:`build_trainjob`
  names the job's own Secret in ``trainer.env``, which replaces these by name.
* **Pods** as the TFJob's: non-root uid 10001, no privilege escalation, no capabilities,
  seccomp ``RuntimeDefault``, no API token, no Istio sidecar, a dedicated service account,
  a 120 s grace period.

A TrainJob (:func:`build_trainjob`) sets what differs between jobs: ``trainer`` (image,
``shardtrain train --data … --model-dir …``, ``numNodes``, resources per node, the storage
Secret by ``secretKeyRef``), the service account and grace period through a runtime patch,
``suspend`` + the Kueue label for a queue, Volcano's queue annotation.
"""

from __future__ import annotations

from typing import Any

from shardtrain.kubeflow.jobs.trainjob import spec as api
from shardtrain.kubeflow.jobs.trainjob.config import TrainJobConfig
from shardtrain.kubeflow.pods import (
    DEFAULT_IMAGE,
    ENTRYPOINT,
    LABELS,
    POD_ANNOTATIONS,
    RUN_AS_USER,
    STORAGE_ENV,
    resources,
)
from shardtrain.train import cluster

#: The runtime's pod defaults a TrainJob can patch (service account, grace period).
DEFAULT_SERVICE_ACCOUNT = "shardtrain-trainer"
DEFAULT_GRACE_SECONDS = 120
#: The Secret the runtime reads the storage variables from, in the job's namespace (optional:
#: a job without it, e.g. GCS with Workload Identity, starts without them).
DEFAULT_SECRET = "shardtrain-storage"


def _downward(name: str, label: str) -> dict[str, Any]:
    path = f"metadata.labels['{label}']"
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def build_runtime(
    gang_scheduler: str | None = None, *, image: str = DEFAULT_IMAGE
) -> dict[str, Any]:
    """Our ClusterTrainingRuntime (see the module docstring); with ``gang_scheduler``
    (``volcano``, ``coscheduling``) its variant of that name whose ``podGroupPolicy`` has every
    node scheduled together or none (one PodGroup of ``numNodes``)."""
    name = api.runtime_name(gang_scheduler)
    container = {
        "name": api.CONTAINER_NAME,
        "image": image,
        "command": [ENTRYPOINT],
        "args": ["train"],
        "env": [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            _downward(cluster.TRAINJOB_NAME_ENV, api.JOBSET_NAME_LABEL),
            _downward(cluster.TRAINJOB_REPLICATED_JOB_ENV, api.REPLICATED_JOB_LABEL),
            _downward(cluster.TRAINJOB_JOB_INDEX_ENV, api.JOB_INDEX_LABEL),
            *(
                {
                    "name": key,
                    "valueFrom": {
                        "secretKeyRef": {"name": DEFAULT_SECRET, "key": key, "optional": True}
                    },
                }
                for key, _ in STORAGE_ENV
            ),
        ],
        "ports": [{"name": api.PORT_NAME, "containerPort": api.PORT}],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    job = {
        "backoffLimit": 0,
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "FailJob",
                    "onExitCodes": {
                        "containerName": api.CONTAINER_NAME,
                        "operator": "In",
                        "values": list(api.FATAL_EXIT_CODES),
                    },
                }
            ]
        },
        "template": {
            "metadata": {"labels": dict(LABELS), "annotations": dict(POD_ANNOTATIONS)},
            "spec": {
                "restartPolicy": "Never",
                "serviceAccountName": DEFAULT_SERVICE_ACCOUNT,
                "automountServiceAccountToken": False,
                "terminationGracePeriodSeconds": DEFAULT_GRACE_SECONDS,
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": RUN_AS_USER,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "containers": [container],
            },
        },
    }
    # The JAX policy for its node count alone (JAX_NUM_PROCESSES; see the module docstring).
    runtime_spec: dict[str, Any] = {"mlPolicy": {"numNodes": 1, "jax": {}}}
    if gang_scheduler == "volcano":
        runtime_spec["podGroupPolicy"] = {"volcano": {}}
    elif gang_scheduler == "coscheduling":
        # Pods not all scheduled within this time are released (and retried by the plugin).
        runtime_spec["podGroupPolicy"] = {"coscheduling": {"scheduleTimeoutSeconds": 300}}
    runtime_spec["template"] = {
        "spec": {
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "failurePolicy": {
                "maxRestarts": api.MAX_RESTARTS,
                "restartStrategy": "BlockingRecreate",
                "rules": [
                    {
                        "name": "fatalExitCode",
                        "action": "FailJobSet",
                        "onJobFailureReasons": ["PodFailurePolicy"],
                    }
                ],
            },
            "replicatedJobs": [
                {
                    "name": api.REPLICATED_JOB,
                    "replicas": 1,
                    "template": {
                        "metadata": {"labels": {api.ANCESTOR_LABEL: "trainer"}},
                        "spec": job,
                    },
                }
            ],
        }
    }
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.RUNTIME_KIND,
        "metadata": {
            "name": name,
            "labels": {api.FRAMEWORK_LABEL: api.FRAMEWORK, **LABELS},
        },
        "spec": runtime_spec,
    }


def build_trainjob(cfg: TrainJobConfig) -> dict[str, Any]:
    """The TrainJob manifest for ``cfg`` (see the module docstring).

    Raises:
        ConfigError: the job would break a rule of :func:`~.spec.validate`.
    """
    env: list[dict[str, Any]] = [
        {"name": cluster.TRAINJOB_NUM_NODES_ENV, "value": str(cfg.nodes)},
        *({"name": k, "value": v} for k, v in cfg.env.items()),
    ]
    if cfg.secret:
        env += [
            {
                "name": key,
                "valueFrom": {
                    "secretKeyRef": {"name": cfg.secret, "key": key}
                    | ({"optional": True} if optional else {})
                },
            }
            for key, optional in STORAGE_ENV
        ]
    labels = dict(LABELS)
    annotations: dict[str, str] = {}
    kueue = cfg.queue is not None and cfg.gang_scheduler is None
    if kueue:
        labels[api.KUEUE_QUEUE_LABEL] = str(cfg.queue)
        if cfg.priority_class:
            labels[api.KUEUE_PRIORITY_LABEL] = cfg.priority_class
    elif cfg.queue is not None:
        annotations[api.VOLCANO_QUEUE_ANNOTATION] = cfg.queue
    metadata: dict[str, Any] = {"name": cfg.name, "namespace": cfg.namespace, "labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    spec: dict[str, Any] = {
        "runtimeRef": {"apiGroup": api.GROUP, "kind": api.RUNTIME_KIND, "name": cfg.runtime_name},
        "trainer": {
            "image": cfg.image,
            "command": [ENTRYPOINT],
            "args": [
                "train",
                "--data",
                cfg.data,
                "--model-dir",
                cfg.model_dir,
                *cfg.container_train_args(),
            ],
            "numNodes": cfg.nodes,
            "resourcesPerNode": resources(cfg.cpu, cfg.memory, cfg.gpus_per_node),
            "env": env,
        },
    }
    pod_patch: dict[str, Any] = {}
    if cfg.service_account != DEFAULT_SERVICE_ACCOUNT:
        pod_patch["serviceAccountName"] = cfg.service_account
    if cfg.termination_grace_seconds != DEFAULT_GRACE_SECONDS:
        pod_patch["terminationGracePeriodSeconds"] = cfg.termination_grace_seconds
    if pod_patch:
        spec["runtimePatches"] = [
            {
                "manager": api.PATCH_MANAGER,
                "trainingRuntimeSpec": {
                    "template": {
                        "spec": {
                            "replicatedJobs": [
                                {
                                    "name": api.REPLICATED_JOB,
                                    "template": {"spec": {"template": {"spec": pod_patch}}},
                                }
                            ]
                        }
                    }
                },
            }
        ]
    if kueue:
        spec["suspend"] = True
    if cfg.active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = cfg.active_deadline_seconds
    job = {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": metadata, "spec": spec}
    api.validate(job)
    return job
