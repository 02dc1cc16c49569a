"""The TrainJob API of Kubeflow Trainer v2 (``trainer.kubeflow.org/v1alpha1``) as shardtrain
uses it: its names, the runtime's, and the rules a TrainJob of ours is held to
(:func:`validate`), so a bad manifest fails here with one line instead of at ``kubectl apply``.

Trainer turns a TrainJob into a JobSet from its runtime (a ``ClusterTrainingRuntime``: ours is
``k8s/trainer-v2``); the JobSet controller makes one Indexed Job per replicated job, and the
Job controller its pods. The names below are those Trainer v2.3 and JobSet v0.12 use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardtrain.errors import ConfigError
from shardtrain.kubeflow.jobs.manifests import name_of
from shardtrain.kubeflow.jobs.settings import is_dns1035_label
from shardtrain.train import cluster

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TrainJob"
PLURAL = "trainjobs"
RUNTIME_KIND = "ClusterTrainingRuntime"
#: Our TensorFlow runtime (``k8s/trainer-v2``); its gang-scheduled variants add the scheduler.
RUNTIME_NAME = "shardtrain-tensorflow"
VOLCANO_RUNTIME_NAME = f"{RUNTIME_NAME}-volcano"


def runtime_name(gang_scheduler: str | None = None) -> str:
    """Our runtime, or its variant for ``gang_scheduler`` (``shardtrain-tensorflow-volcano``)."""
    return f"{RUNTIME_NAME}-{gang_scheduler}" if gang_scheduler else RUNTIME_NAME


#: The label Trainer's UI and SDK group runtimes by.
FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"
FRAMEWORK = "tensorflow"
#: The replicated job and container Trainer puts the TrainJob's trainer settings into.
REPLICATED_JOB = "node"
CONTAINER_NAME = "node"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
PORT_NAME = "tf"
PORT = cluster.TRAINJOB_PORT
#: TrainJob conditions (Trainer copies JobSet's Completed/Failed as Complete/Failed).
COMPLETE = "Complete"
FAILED = "Failed"
SUSPENDED = "Suspended"
#: Labels JobSet puts on its pods (and the Job controller's completion index annotation).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
RESTART_LABEL = "jobset.sigs.k8s.io/restart-attempt"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
#: Queues: Kueue's LocalQueue label and workload priority, Volcano's queue annotation.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
#: The manager our runtime patches are filed under (Trainer keys patches by manager).
PATCH_MANAGER = "shardtrain.dev/trainjob"
#: Exit codes that fail the job at once (the trainer's 1 bad config/data, 2 usage, 3 storage
#: unreachable); any other failure (143 SIGTERM, 200 a lost peer, 137 killed) restarts it.
FATAL_EXIT_CODES = (1, 2, 3)
#: JobSet restarts (all nodes recreated, resuming from the checkpoint) before it fails.
MAX_RESTARTS = 3
#: A pod's host name (``<name>-node-0-<i>``) is a DNS label: at most 63 characters.
_HOST_SUFFIX = len(f"-{REPLICATED_JOB}-0-")


def node_count(manifest: Mapping[str, Any]) -> int:
    """``spec.trainer.numNodes`` (1 when absent, as in the runtime)."""
    trainer = (manifest.get("spec") or {}).get("trainer") or {}
    return int(trainer.get("numNodes") or 1)


def check_name(name: str, nodes: int) -> None:
    """A TrainJob name is a DNS-1035 label short enough for its pods' host names."""
    if not is_dns1035_label(name):
        raise ConfigError(
            f"{KIND} name '{name}' is not a DNS-1035 label (lower-case letters, digits and '-', "
            "starting with a letter, at most 63 characters)"
        )
    longest = len(name) + _HOST_SUFFIX + len(str(max(nodes - 1, 0)))
    if longest > 63:
        raise ConfigError(
            f"{KIND} name '{name}' is too long: its last pod's host name "
            f"'{name}-{REPLICATED_JOB}-0-{nodes - 1}' would have {longest} characters (max 63)"
        )


def _env_value(trainer: Mapping[str, Any], name: str) -> str | None:
    for var in trainer.get("env") or ():
        if isinstance(var, Mapping) and var.get("name") == name:
            return str(var.get("value")) if "value" in var else None
    return None


def validate(manifest: Mapping[str, Any]) -> None:
    """Hold a TrainJob manifest to the rules our runtime needs.

    * ``apiVersion``/``kind`` of a TrainJob; a name that is a DNS-1035 label short enough for
      its pods' host names; a ``runtimeRef``.
    * ``trainer.numNodes`` >= 1 and, when that runtime is ours, equal to the
      ``SHARDTRAIN_NUM_NODES`` of ``trainer.env`` if set (each node builds its cluster from
      it: a mismatch would leave nodes waiting for peers that never come; without it, the
      runtime has Trainer give every node ``numNodes``).

    Raises:
        ConfigError: one line naming the job and the broken rule.
    """
    name = name_of(manifest)
    if manifest.get("apiVersion") != API_VERSION or manifest.get("kind") != KIND:
        raise ConfigError(
            f"{name}: not a {KIND} ({API_VERSION}): apiVersion {manifest.get('apiVersion')!r}, "
            f"kind {manifest.get('kind')!r}"
        )
    spec = manifest.get("spec")
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{KIND} {name}: no spec")
    ref = spec.get("runtimeRef")
    if not isinstance(ref, Mapping) or not ref.get("name"):
        raise ConfigError(f"{KIND} {name}: spec.runtimeRef.name is required")
    trainer = spec.get("trainer") or {}
    nodes = trainer.get("numNodes", 1)
    if not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(f"{KIND} {name}: spec.trainer.numNodes must be an integer >= 1")
    check_name(name, nodes)
    declared = _env_value(trainer, cluster.TRAINJOB_NUM_NODES_ENV)
    ours = str(ref.get("name")).startswith(RUNTIME_NAME)
    if ours and declared is not None and declared != str(nodes):
        raise ConfigError(
            f"{KIND} {name}: trainer.env {cluster.TRAINJOB_NUM_NODES_ENV}={declared} but "
            f"trainer.numNodes={nodes}: the runtime {ref.get('name')} needs both equal (each "
            "node builds its cluster from it)"
        )
