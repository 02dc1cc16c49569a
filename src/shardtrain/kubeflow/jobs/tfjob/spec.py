"""The TFJob API (``kubeflow.org/v1``) as the training operator defines it: its names, and the
rules it and TensorFlow hold a job to (:func:`validate`).

:func:`validate` applies the training operator's admission rules to any manifest (a job name
that is a DNS-1035 label; every replica with a ``tensorflow`` container that has an image; not
both Chief and Master; known replica types) plus TensorFlow's own (at most one chief, master or
evaluator), so a bad manifest fails here with one line instead of at ``kubectl apply``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from shardtrain.errors import ConfigError
from shardtrain.kubeflow.jobs.manifests import name_of, pod_containers
from shardtrain.kubeflow.jobs.settings import is_dns1035_label
from shardtrain.train import cluster

API_VERSION = "kubeflow.org/v1"
KIND = "TFJob"
#: The operator configures (TF_CONFIG, port) only the container with this name.
CONTAINER_NAME = "tensorflow"
#: The container port the operator puts in TF_CONFIG (it falls back to 2222 without one).
PORT_NAME = "tfjob-port"
PORT = 2222
#: How ``tfReplicaSpecs`` spells the replica types of :data:`shardtrain.train.cluster.REPLICA_TYPES`
#: (TF_CONFIG has them in lower case) where capitalising is not enough.
_SPELLING = {"ps": "PS"}


def tfjob_type(replica_type: str) -> str:
    """``tfReplicaSpecs`` key of a replica type: ``chief`` → ``Chief``, ``ps`` → ``PS``."""
    return _SPELLING.get(replica_type, replica_type.capitalize())


#: Replica types in the order the operator lists them in TF_CONFIG.
REPLICA_TYPES = tuple(tfjob_type(t) for t in cluster.REPLICA_TYPES)
#: Replica types TensorFlow allows at most one of.
SINGLETON_TYPES = tuple(tfjob_type(t) for t in cluster.SINGLETON_TYPES)
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
CLEAN_POD_POLICIES = ("None", "Running", "All")
#: The label naming a job's Kueue LocalQueue.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: Gang schedulers the generator can write a scheduling policy for (the operator's
#: ``--gang-scheduler-name`` values it supports with a PodGroup of that scheduler).
GANG_SCHEDULERS = ("volcano",)
#: The operator's condition of a job whose ``runPolicy.suspend`` is true.
SUSPENDED = "Suspended"


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
    name = name_of(manifest)
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
    if not is_dns1035_label(name):
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
        elif rtype in SINGLETON_TYPES and count > 1:
            yield f"{where}.replicas is {count}; TensorFlow allows one {rtype.lower()}"
        elif name and count and len(f"{name}-{rtype.lower()}-{count - 1}") > 63:
            yield (
                f"{where}: pod/service name {name}-{rtype.lower()}-{count - 1} is longer than "
                "63 characters (shorten the job name)"
            )
        policy = rspec.get("restartPolicy")
        if policy is not None and policy not in RESTART_POLICIES:
            yield f"{where}.restartPolicy '{policy}' is not one of {', '.join(RESTART_POLICIES)}"
        containers = pod_containers(rspec)
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
