"""Who am I in the job, and which ``tf.distribute`` strategy do I train with?

This module is the only place in shardtrain that reads ``TF_CONFIG``. The Kubeflow training
operator writes it into every replica of a TFJob with more than one replica::

    {"cluster": {"chief": ["job-chief-0.ns.svc:2222"],
                 "worker": ["job-worker-0.ns.svc:2222", "job-worker-1.ns.svc:2222"],
                 "evaluator": ["job-evaluator-0.ns.svc:2222"]},
     "task": {"type": "worker", "index": 0},
     "environment": "cloud"}

================================================  ===================  ==========================
TF_CONFIG                                         role                 strategy
================================================  ===================  ==========================
absent or empty                                   local                MirroredStrategy
one training replica (chief, master or worker)    local                MirroredStrategy
chief/master + workers                            chief / worker       MultiWorkerMirrored
workers only                                      worker (0 is chief)  MultiWorkerMirrored
task evaluator                                    evaluator            none: evaluates checkpoints
cluster with ps                                   error                (parameter servers: no)
================================================  ===================  ==========================

MirroredStrategy mirrors over the node's GPUs, or runs on the CPU when there are none.

The evaluator is listed in ``cluster`` but must stay out of the training collective: it is
TF Estimator's *sidecar evaluation*. It watches the model directory, evaluates each new
checkpoint and stops when training has finished, so evaluation never slows the all-reduce of
the workers. The collective therefore sees a ``TF_CONFIG`` without the evaluator, with
``master`` renamed to ``chief``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shardtrain.errors import ConfigError

_TRAINING_TYPES = ("chief", "master", "worker")
_KNOWN_TYPES = (*_TRAINING_TYPES, "evaluator", "ps")


@dataclass(frozen=True)
class Role:
    """This process's place in the job.

    Attributes:
        task_type: ``local``, ``chief``, ``worker`` or ``evaluator`` (a master is a chief).
        task_index: index within its type.
        num_workers: replicas in the training collective (chief + workers; 1 for local).
        is_chief: the one replica that publishes checkpoints, summaries and exports.
        cluster: the training cluster (no evaluator; master renamed chief); {} for local.
        evaluator: address of the evaluator, if the job has one.
    """

    task_type: str
    task_index: int = 0
    num_workers: int = 1
    is_chief: bool = True
    cluster: dict[str, list[str]] = field(default_factory=dict)
    evaluator: str | None = None

    @property
    def is_evaluator(self) -> bool:
        return self.task_type == "evaluator"

    @property
    def is_local(self) -> bool:
        return self.task_type == "local"

    def collective_tf_config(self) -> dict[str, Any] | None:
        """The TF_CONFIG MultiWorkerMirroredStrategy must see; None outside the collective."""
        if self.is_local or self.is_evaluator:
            return None
        return {
            "cluster": {k: list(v) for k, v in self.cluster.items()},
            "task": {"type": self.task_type, "index": self.task_index},
        }

    def describe(self) -> str:
        """A short line for logs, e.g. 'worker 1 of 3 (not chief)'."""
        if self.is_local:
            return "single replica (local)"
        if self.is_evaluator:
            return f"evaluator (sidecar of {self.num_workers} training replicas)"
        position = self.task_index + (
            1 if "chief" in self.cluster and self.task_type == "worker" else 0
        )
        chief = "chief" if self.is_chief else "not chief"
        return f"{self.task_type} {self.task_index} ({position + 1} of {self.num_workers}, {chief})"


def _fail(what: str, tf_config: str) -> ConfigError:
    shown = tf_config if len(tf_config) <= 300 else tf_config[:297] + "..."
    return ConfigError(f"TF_CONFIG: {what}: {shown}")


def resolve_role(environ: Mapping[str, str] | None = None) -> Role:
    """Turn the environment (``TF_CONFIG``) into this process's :class:`Role`.

    Args:
        environ: the environment to read (default: ``os.environ``).

    Returns:
        The role.

    Raises:
        ConfigError: TF_CONFIG is not JSON, or describes a job that makes no sense.
    """
    env = os.environ if environ is None else environ
    raw = (env.get("TF_CONFIG") or "").strip()
    if not raw:
        return Role("local")
    try:
        config = json.loads(raw)
    except ValueError as exc:
        raise _fail(f"not valid JSON ({exc})", raw) from exc
    if not isinstance(config, dict):
        raise _fail("must be a JSON object", raw)
    cluster = config.get("cluster") or {}
    task = config.get("task") or {}
    if not isinstance(cluster, dict) or not isinstance(task, dict):
        raise _fail("'cluster' and 'task' must be objects", raw)
    if not cluster:
        return Role("local")
    for kind, addresses in cluster.items():
        if kind not in _KNOWN_TYPES:
            raise _fail(f"unknown replica type '{kind}' in cluster", raw)
        if not isinstance(addresses, list) or not addresses:
            raise _fail(f"cluster['{kind}'] must be a non-empty list of addresses", raw)
    if "ps" in cluster:
        raise _fail(
            "parameter servers ('ps') are not supported; use chief + workers "
            "(MultiWorkerMirroredStrategy)",
            raw,
        )
    if "chief" in cluster and "master" in cluster:
        raise _fail("a job cannot have both a chief and a master", raw)
    for single in ("chief", "master", "evaluator"):
        if len(cluster.get(single, [])) > 1:
            raise _fail(f"at most one {single} is allowed", raw)
    task_type = task.get("type")
    if task_type not in cluster:
        raise _fail(f"task type {task_type!r} is not in the cluster", raw)
    index = task.get("index", 0)
    if not isinstance(index, int) or isinstance(index, bool):
        raise _fail(f"task index must be an integer, got {index!r}", raw)
    if not 0 <= index < len(cluster[task_type]):
        raise _fail(
            f"task index {index} out of range for {len(cluster[task_type])} {task_type}(s)", raw
        )

    training = {}
    if "chief" in cluster or "master" in cluster:
        training["chief"] = list(cluster.get("chief") or cluster["master"])
    if "worker" in cluster:
        training["worker"] = list(cluster["worker"])
    if not training:
        raise _fail("no training replicas (chief, master or worker) in the cluster", raw)
    num_workers = sum(len(v) for v in training.values())
    evaluator = (cluster.get("evaluator") or [None])[0]
    has_chief = "chief" in training

    if task_type == "evaluator":
        return Role(
            "evaluator", index, num_workers, is_chief=False, cluster=training, evaluator=evaluator
        )
    kind = "chief" if task_type in ("chief", "master") else "worker"
    if num_workers == 1:
        return Role("local", evaluator=evaluator)
    is_chief = kind == "chief" or (not has_chief and index == 0)
    return Role(kind, index, num_workers, is_chief=is_chief, cluster=training, evaluator=evaluator)


def make_strategy(role: Role, *, devices: int | None = None):
    """The ``tf.distribute`` strategy for a training role.

    Args:
        role: from :func:`resolve_role`; not the evaluator's.
        devices: on a machine without GPUs, split the CPU into this many logical devices and
            mirror over them (stands in for a multi-GPU node in tests). Must be called before
            TensorFlow initialises its devices.

    Returns:
        MirroredStrategy (local) or MultiWorkerMirroredStrategy (chief/worker).

    Raises:
        ValueError: called for the evaluator, which evaluates without a strategy.
        ConfigError: ``devices`` was asked for after TensorFlow initialised its devices.
    """
    import tensorflow as tf

    if role.is_evaluator:
        raise ValueError("the evaluator does not train: it has no distribution strategy")
    if role.is_local:
        if devices and devices > 1 and not tf.config.list_physical_devices("GPU"):
            cpu = tf.config.list_physical_devices("CPU")[0]
            try:
                tf.config.set_logical_device_configuration(
                    cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(devices)]
                )
            except RuntimeError as exc:
                raise ConfigError(
                    "cannot split the CPU into logical devices after TensorFlow has "
                    "initialised them; ask for devices first"
                ) from exc
            names = [d.name for d in tf.config.list_logical_devices("CPU")]
            return tf.distribute.MirroredStrategy(devices=names)
        return tf.distribute.MirroredStrategy()
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(role.cluster),
        task_type=role.task_type,
        task_id=role.task_index,
        rpc_layer="grpc",
    )
    return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
