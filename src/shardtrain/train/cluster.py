"""Who am I in the job, and which ``tf.distribute`` strategy do I train with?

This module is the only place in shardtrain that reads ``TF_CONFIG`` (:func:`resolve_role`);
everything else asks it for a :class:`Role`. The Kubeflow training operator (v1.9) writes
``TF_CONFIG`` into every replica of a TFJob that has more than one replica::

    {"cluster": {"chief": ["job-chief-0.ns.svc:2222"],
                 "worker": ["job-worker-0.ns.svc:2222", "job-worker-1.ns.svc:2222"],
                 "evaluator": ["job-evaluator-0.ns.svc:2222"]},
     "task": {"type": "worker", "index": 0},
     "environment": "cloud"}

How ``TF_CONFIG`` maps to a role and a strategy (:func:`make_strategy`):

==========================================  ==================  ===========================
TF_CONFIG                                   role (is_chief)     strategy
==========================================  ==================  ===========================
absent or empty                             local (yes)         MirroredStrategy
one training replica, no evaluator          local (yes)         MirroredStrategy
one training replica + evaluator            chief/worker (yes)  MirroredStrategy
chief (or master) + workers                 chief (yes),        MultiWorkerMirrored
                                            worker (no)
workers only                                worker (index 0)    MultiWorkerMirrored
task type evaluator                         evaluator (no)      none: default strategy
cluster with ps                             ConfigError         (parameter servers: no)
==========================================  ==================  ===========================

``master`` is the old name of ``chief``: it is accepted and reported as ``chief``.

**Kubeflow Trainer v2 (TrainJob).** Trainer writes no ``TF_CONFIG`` (its plainML policy only
sets the pod count), so a TrainJob's pod derives it here, from what JobSet, the Job
controller and our runtime (``k8s/trainer-v2``) give it (:func:`tf_config_from_trainjob`):
``JOB_COMPLETION_INDEX`` (the Job controller, from the pod's completion-index annotation),
the JobSet's name, replicated job and job index (labels the runtime passes down through the
downward API) and the node count. Neither JobSet nor the Job controller tells a pod how many
pods its Job has, and Trainer's plainML policy writes nothing; our runtime therefore names
Trainer's JAX policy, whose only effect is three variables, one of them the count
(``JAX_NUM_PROCESSES`` = ``trainer.numNodes``), so a TrainJob needs nothing but
``numNodes``. ``SHARDTRAIN_NUM_NODES`` (``trainer.env``, written by ``shardtrain trainjob
render``) gives the count where a runtime does not. Node ``i`` is reachable at JobSet's
headless-service name ``<trainjob>-<replicated job>-<job index>-<i>.<trainjob>:2222``; node
0 is the chief (it evaluates every ``eval_every`` steps and the final checkpoint in process,
and exports), nodes 1..N-1 are workers 0..N-2. One node is a local run, as a one-replica TFJob is.
MirroredStrategy mirrors over all GPUs of the node, or runs on the CPU when there are none.

Why the evaluator stays out of the collective: it is TF Estimator's *sidecar evaluation*.
``train_and_evaluate`` ran the evaluator as a separate task that watches the model directory,
evaluates every new checkpoint the chief writes, and exits when training has finished. It
never joins the all-reduce, so evaluation cannot slow the workers down (and a slow or crashed
evaluator cannot stall them). Yet the operator lists it in ``cluster``; handing that cluster to
MultiWorkerMirroredStrategy would make TF wait for the evaluator to join the collective. The
collective therefore sees a ``TF_CONFIG`` without the evaluator, with ``master`` renamed to
``chief`` (:attr:`Role.tf_config_for_collective`), passed to TF through a cluster resolver
rather than through ``os.environ``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shardtrain.errors import ConfigError
from shardtrain.train.cpu_binding import keep_to_host_share

if TYPE_CHECKING:  # importing TensorFlow takes seconds: only make_strategy does it, lazily
    import tensorflow as tf

#: Replica types a job may list in ``cluster``, lower-case as the operator writes them, in
#: the order the TFJob API lists them (job APIs derive their own spelling from these).
REPLICA_TYPES = ("chief", "master", "worker", "ps", "evaluator")
#: Types of which TensorFlow allows a job at most one replica.
SINGLETON_TYPES = ("chief", "master", "evaluator")
_ROLE_TYPES = ("local", "chief", "worker", "evaluator")
_QUOTE_LIMIT = 160


@dataclass(frozen=True)
class Role:
    """This process's place in the job, as resolved from ``TF_CONFIG``.

    The defaults describe a local, single-replica run, so ``Role()`` is the local role.

    Attributes:
        task_type: ``"local"``, ``"chief"`` (a ``master`` is reported as chief), ``"worker"``
            or ``"evaluator"``.
        task_index: index of this replica within its type (0 for local, chief, evaluator).
        num_workers: replicas in the training collective: chief/master + workers (1 for
            local). The evaluator reports the size of the collective it evaluates for.
        is_chief: True for the one replica that publishes checkpoints, exports and
            summaries: the chief, or the master, or worker 0 when there is neither.
        is_evaluator: True for the sidecar evaluator, which never joins the collective.
        cluster: the training cluster spec, as TF wants it: no evaluator, ``master``
            renamed ``chief``; ``{}`` for local.
        tf_config_for_collective: the ``TF_CONFIG`` dict MultiWorkerMirroredStrategy must
            see (that cluster, the task as chief/worker), or None when this process is not
            part of a multi-worker collective (local, evaluator, a lone chief).
        has_evaluator: the job has a sidecar evaluator, so training replicas need not
            evaluate themselves.
    """

    task_type: str = "local"
    task_index: int = 0
    num_workers: int = 1
    is_chief: bool = True
    is_evaluator: bool = False
    cluster: dict[str, list[str]] = field(default_factory=dict)
    tf_config_for_collective: dict[str, Any] | None = None
    has_evaluator: bool = False

    def __post_init__(self) -> None:
        # A hand-built Role (tests, the trainer) must still be self-consistent: every consumer
        # branches on these fields and a contradiction would surface far from its cause.
        if self.task_type not in _ROLE_TYPES:
            raise ValueError(f"task_type must be one of {_ROLE_TYPES}, got {self.task_type!r}")
        if self.is_evaluator != (self.task_type == "evaluator"):
            raise ValueError("is_evaluator must be True exactly when task_type is 'evaluator'")
        if self.is_evaluator and self.is_chief:
            raise ValueError("the evaluator cannot be the chief")

    @property
    def has_peers(self) -> bool:
        """True for a chief or worker of a multi-worker collective: the replicas that can lose
        a peer (see :func:`shardtrain.errors.peer_lost`)."""
        return self.tf_config_for_collective is not None

    @property
    def is_local(self) -> bool:
        """True for a single-replica run (no TF_CONFIG, or a one-replica cluster)."""
        return self.task_type == "local"

    def describe(self) -> str:
        """A short line for logs, e.g. ``"worker 1 of 3 (chief: no)"``."""
        chief = "yes" if self.is_chief else "no"
        if self.is_local:
            return f"local, single replica (chief: {chief})"
        if self.is_evaluator:
            return f"evaluator (sidecar of {self.num_workers} training replicas, chief: no)"
        return f"{self.task_type} {self.task_index} of {self.num_workers} (chief: {chief})"


def _quote(value: Any) -> str:
    """The offending bit of TF_CONFIG as compact JSON, shortened to fit one log line."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(", ", ": "))
    return text if len(text) <= _QUOTE_LIMIT else text[: _QUOTE_LIMIT - 3] + "..."


def _fail(what: str, offending: Any) -> ConfigError:
    """One line: what is wrong, then the bit of TF_CONFIG that is wrong."""
    return ConfigError(f"TF_CONFIG: {what}: {_quote(offending)}")


def _parse(raw: str) -> dict[str, Any]:
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as exc:
        # Quote the text around the error rather than the whole (possibly long) value.
        start = max(exc.pos - 30, 0)
        raise _fail(
            f"not valid JSON ({exc.msg} at char {exc.pos})", raw[start : exc.pos + 30]
        ) from exc
    if not isinstance(config, dict):
        raise _fail("must be a JSON object", raw)
    return config


def _validate_cluster(cluster: Any) -> dict[str, list[str]]:
    if not isinstance(cluster, dict):
        raise _fail("'cluster' must be an object of replica type -> addresses", cluster)
    for kind, addresses in cluster.items():
        if kind not in REPLICA_TYPES:
            raise _fail(
                f"unknown replica type {kind!r} in cluster (use {', '.join(REPLICA_TYPES)})",
                {kind: addresses},
            )
        if (
            not isinstance(addresses, list)
            or not addresses
            or not all(isinstance(a, str) and a for a in addresses)
        ):
            raise _fail(
                f"cluster[{kind!r}] must be a non-empty list of host:port addresses",
                {kind: addresses},
            )
    if "ps" in cluster:
        raise _fail(
            "parameter-server training is not supported; give the TFJob Chief and Worker "
            "replicas instead of PS (shardtrain trains with MultiWorkerMirroredStrategy)",
            {"ps": cluster["ps"]},
        )
    if "chief" in cluster and "master" in cluster:
        raise _fail(
            "the cluster has both a chief and a master (master is the old name of chief; keep one)",
            {"chief": cluster["chief"], "master": cluster["master"]},
        )
    for kind in SINGLETON_TYPES:
        if len(cluster.get(kind, ())) > 1:
            raise _fail(
                f"at most one {kind} is allowed, the cluster lists {len(cluster[kind])}",
                {kind: cluster[kind]},
            )
    if not any(kind in cluster for kind in ("chief", "master", "worker")):
        raise _fail("no training replicas (chief, master or worker) in the cluster", cluster)
    return cluster


def _validate_task(task: Any, cluster: Mapping[str, list[str]]) -> tuple[str, int]:
    if task is None or task == {}:
        raise _fail("the cluster is set but the task type is missing", {"task": task})
    if not isinstance(task, dict):
        raise _fail("'task' must be an object with 'type' and 'index'", {"task": task})
    task_type = task.get("type")
    if task_type in (None, ""):
        raise _fail("missing task type", {"task": task})
    if task_type not in REPLICA_TYPES:
        raise _fail(
            f"unknown task type {task_type!r} (use {', '.join(REPLICA_TYPES)})", {"task": task}
        )
    if task_type not in cluster:
        raise _fail(
            f"task type {task_type!r} is not in the cluster (it lists {', '.join(cluster)})",
            {"task": task},
        )
    # TF's own resolver defaults a missing index to 0; the operator always writes one.
    index = task.get("index", 0)
    if isinstance(index, bool) or not isinstance(index, int):
        raise _fail(f"task index must be an integer, got {index!r}", {"task": task})
    count = len(cluster[task_type])
    if not 0 <= index < count:
        raise _fail(
            f"task index {index} out of range for {task_type!r} "
            f"(the cluster lists {count}: indices 0-{count - 1})",
            {"task": task},
        )
    return task_type, index


#: The port every TrainJob node's TensorFlow server listens on (the runtime declares it).
TRAINJOB_PORT = 2222
#: The environment a TrainJob node's role comes from (see :func:`tf_config_from_trainjob`).
TRAINJOB_NAME_ENV = "SHARDTRAIN_TRAINJOB"
TRAINJOB_REPLICATED_JOB_ENV = "SHARDTRAIN_REPLICATED_JOB"
TRAINJOB_JOB_INDEX_ENV = "SHARDTRAIN_JOB_INDEX"
TRAINJOB_NUM_NODES_ENV = "SHARDTRAIN_NUM_NODES"
#: The node count Trainer itself writes into every node: its JAX policy (the runtime's
#: ``mlPolicy.jax``) sets it to ``trainer.numNodes``; plainML writes no count at all.
TRAINER_NUM_NODES_ENV = "JAX_NUM_PROCESSES"
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"


def _trainjob_int(env: Mapping[str, str], name: str, low: int) -> int:
    raw = (env.get(name) or "").strip()
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if value < low:
        raise ConfigError(
            f"TrainJob node: {name}={raw!r} is not an integer >= {low} (the runtime "
            "k8s/trainer-v2 and `shardtrain trainjob render` set it)"
        )
    return value


def _trainjob_nodes(env: Mapping[str, str]) -> tuple[str, int]:
    """The node count and the variable it came from: :data:`TRAINER_NUM_NODES_ENV`
    (Trainer's, from ``trainer.numNodes``) or :data:`TRAINJOB_NUM_NODES_ENV` (ours: a runtime
    without the JAX policy); both set must agree."""
    ours = (env.get(TRAINJOB_NUM_NODES_ENV) or "").strip()
    trainers = (env.get(TRAINER_NUM_NODES_ENV) or "").strip()
    if not ours and not trainers:
        raise ConfigError(
            f"TrainJob node: neither {TRAINJOB_NUM_NODES_ENV} nor {TRAINER_NUM_NODES_ENV} is "
            "set (our runtime k8s/trainer-v2 has Trainer write the latter: reinstall it, or "
            f"set {TRAINJOB_NUM_NODES_ENV} = trainer.numNodes in trainer.env)"
        )
    nodes = {
        name: _trainjob_int(env, name, 1)
        for name, raw in ((TRAINJOB_NUM_NODES_ENV, ours), (TRAINER_NUM_NODES_ENV, trainers))
        if raw
    }
    if len(set(nodes.values())) > 1:
        raise ConfigError(
            f"TrainJob node: {TRAINJOB_NUM_NODES_ENV}={nodes[TRAINJOB_NUM_NODES_ENV]} but "
            f"{TRAINER_NUM_NODES_ENV}={nodes[TRAINER_NUM_NODES_ENV]} (Trainer's, = "
            "trainer.numNodes): the nodes would wait for peers that never come"
        )
    source, count = next(iter(nodes.items()))
    return source, count


def trainjob_node_addresses(
    name: str, replicated_job: str, job_index: int, nodes: int
) -> list[str]:
    """The addresses of a TrainJob's nodes, in completion-index order: JobSet's pod host names
    under its headless service (``<jobset>-<rjob>-<job>-<pod>.<subdomain>``; the JobSet, and
    its default subdomain, are named after the TrainJob) and :data:`TRAINJOB_PORT`."""
    return [f"{name}-{replicated_job}-{job_index}-{i}.{name}:{TRAINJOB_PORT}" for i in range(nodes)]


def tf_config_from_trainjob(environ: Mapping[str, str]) -> str | None:
    """The ``TF_CONFIG`` of a Kubeflow Trainer v2 node, or None outside a TrainJob.

    A pure function of ``environ``: :data:`TRAINJOB_NAME_ENV` marks a TrainJob pod; with it,
    :data:`COMPLETION_INDEX_ENV`, :data:`TRAINJOB_REPLICATED_JOB_ENV`,
    :data:`TRAINJOB_JOB_INDEX_ENV` and the node count must describe a node of the job. The
    count is Trainer's :data:`TRAINER_NUM_NODES_ENV` (our runtime's JAX policy: every
    TrainJob, however submitted, e.g. by the Kubeflow SDK's ``num_nodes`` alone), or
    :data:`TRAINJOB_NUM_NODES_ENV` for a runtime that gives none; both set must agree.
    Node 0 is the chief, node ``i`` worker ``i - 1``; a one-node job is local (None).

    Raises:
        ConfigError: a variable is missing or out of range (one line naming it).

    Example:
        >>> env = {"SHARDTRAIN_TRAINJOB": "quest", "SHARDTRAIN_REPLICATED_JOB": "node",
        ...        "SHARDTRAIN_JOB_INDEX": "0", "SHARDTRAIN_NUM_NODES": "2",
        ...        "JOB_COMPLETION_INDEX": "1"}
        >>> json.loads(tf_config_from_trainjob(env))["task"]
        {'type': 'worker', 'index': 0}
    """
    name = (environ.get(TRAINJOB_NAME_ENV) or "").strip()
    if not name:
        return None
    source, nodes = _trainjob_nodes(environ)
    index = _trainjob_int(environ, COMPLETION_INDEX_ENV, 0)
    job_index = _trainjob_int(environ, TRAINJOB_JOB_INDEX_ENV, 0)
    replicated_job = (environ.get(TRAINJOB_REPLICATED_JOB_ENV) or "").strip()
    if not replicated_job:
        raise ConfigError(f"TrainJob node: {TRAINJOB_REPLICATED_JOB_ENV} is not set")
    if index >= nodes:
        raise ConfigError(
            f"TrainJob node: {COMPLETION_INDEX_ENV}={index} but {source}={nodes}: "
            "trainer.numNodes and the node count disagree"
        )
    if nodes == 1:
        return None
    addresses = trainjob_node_addresses(name, replicated_job, job_index, nodes)
    task = {"type": "chief", "index": 0} if index == 0 else {"type": "worker", "index": index - 1}
    cluster = {"chief": addresses[:1], "worker": addresses[1:]}
    return json.dumps({"cluster": cluster, "task": task})


def resolve_role(environ: Mapping[str, str] | None = None) -> Role:
    """Turn the environment (its ``TF_CONFIG``, or a TrainJob node's variables) into this
    process's :class:`Role`.

    A pure function: it reads ``environ`` and nothing else, imports no TensorFlow and changes
    nothing, so the CLI can validate ``TF_CONFIG`` and log the role before TF starts.

    Args:
        environ: the environment to read; ``os.environ`` when None.

    Returns:
        The role; see the table in this module's docstring.

    Raises:
        ConfigError: ``TF_CONFIG`` is not JSON or describes a job that makes no sense (unknown
            or missing task type, index out of range, parameter servers, both chief and
            master, two chiefs, empty address lists, ...). The message is one line naming
            the problem and quoting the offending part of ``TF_CONFIG``.

    Example:
        >>> resolve_role({}).describe()
        'local, single replica (chief: yes)'
    """
    env = os.environ if environ is None else environ
    # An explicit TF_CONFIG wins; a TrainJob node derives its own.
    raw = (env.get("TF_CONFIG") or "").strip() or tf_config_from_trainjob(env) or ""
    if not raw:
        return Role()
    config = _parse(raw)
    cluster = config.get("cluster")
    task = config.get("task")
    if not cluster:
        # A TF_CONFIG without a cluster describes a single process, as in TF itself; but a
        # task that names anything other than the first training replica would then be
        # silently ignored (an evaluator would start training), so refuse that.
        if task not in (None, {}) and not (
            isinstance(task, dict)
            and task.get("type") in ("chief", "master", "worker")
            and task.get("index", 0) == 0
        ):
            raise _fail("'task' names a replica but 'cluster' is empty", {"task": task})
        return Role()
    cluster = _validate_cluster(cluster)
    task_type, index = _validate_task(task, cluster)

    # The training cluster, as TF wants it: chief (formerly master) + workers, no evaluator.
    training: dict[str, list[str]] = {}
    if "chief" in cluster or "master" in cluster:
        training["chief"] = list(cluster.get("chief") or cluster["master"])
    if "worker" in cluster:
        training["worker"] = list(cluster["worker"])
    num_workers = sum(len(addresses) for addresses in training.values())
    has_chief = "chief" in training
    has_evaluator = "evaluator" in cluster

    if task_type == "evaluator":
        return Role(
            task_type="evaluator",
            task_index=index,
            num_workers=num_workers,
            is_chief=False,
            is_evaluator=True,
            cluster=training,
            has_evaluator=True,
        )
    kind = "chief" if task_type in ("chief", "master") else "worker"
    is_chief = kind == "chief" or (not has_chief and index == 0)
    if num_workers == 1:
        if not has_evaluator:
            return Role()
        # One training replica beside an evaluator: it is still "the chief" the evaluator
        # follows, but there is no collective to join; it mirrors over its own devices.
        return Role(
            task_type=kind,
            task_index=index,
            cluster=training,
            has_evaluator=True,
        )
    return Role(
        task_type=kind,
        task_index=index,
        num_workers=num_workers,
        is_chief=is_chief,
        cluster=training,
        tf_config_for_collective={
            "cluster": {k: list(v) for k, v in training.items()},
            "task": {"type": kind, "index": index},
        },
        has_evaluator=has_evaluator,
    )


def make_strategy(role: Role, *, devices: int | None = None) -> tf.distribute.Strategy:
    """The ``tf.distribute`` strategy a training role trains with.

    * No collective (local role, or a lone chief beside an evaluator):
      ``MirroredStrategy`` over all GPUs of the node, or over the CPU when there are none.
    * Chief or worker of a multi-worker job: ``MultiWorkerMirroredStrategy`` built from
      :attr:`Role.tf_config_for_collective` through a ``SimpleClusterResolver`` (gRPC), so
      the process's own ``TF_CONFIG`` (which lists the evaluator) is neither read nor changed.

    Call it once, at start-up, before anything creates a tensor, a model or a ``tf.data``
    pipeline: both splitting the CPU and configuring collective ops are only possible before
    TensorFlow initialises its runtime.

    Args:
        role: from :func:`resolve_role`; not the evaluator's.
        devices: how many devices of this node to use. With GPUs, the first ``devices`` GPUs.
            Without GPUs, the physical CPU is split into ``devices`` logical CPUs and the
            strategy mirrors over them: the stand-in for a multi-GPU node in tests. None: all
            GPUs, or the one CPU.

    Returns:
        A ``tf.distribute.MirroredStrategy`` or ``tf.distribute.MultiWorkerMirroredStrategy``.

    Raises:
        ValueError: called for the evaluator, which evaluates checkpoints with the default
            strategy and never builds a training strategy.
        ConfigError: ``devices`` is not a positive count or exceeds the GPUs, or the call came
            after TensorFlow initialised its runtime.
    """
    if role.is_evaluator:
        raise ValueError(
            "the evaluator does not build a training strategy: it stays out of the collective "
            "and evaluates checkpoints with the default strategy (tf.distribute.get_strategy())"
        )
    if devices is not None and (isinstance(devices, bool) or not isinstance(devices, int)):
        raise ConfigError(f"devices must be a positive integer, got {devices!r}")
    if devices is not None and devices < 1:
        raise ConfigError(f"devices must be a positive integer, got {devices}")

    import tensorflow as tf

    # Visible *physical* GPUs: listing them does not initialise the runtime, listing logical
    # devices would (and would make the CPU split and collective set-up below impossible).
    num_gpus = len(tf.config.get_visible_devices("GPU"))
    if role.tf_config_for_collective is None:
        return tf.distribute.MirroredStrategy(devices=_local_devices(num_gpus, devices))
    return _multi_worker_strategy(role.tf_config_for_collective, num_gpus, devices)


def _local_devices(num_gpus: int, devices: int | None) -> list[str] | None:
    """Device names for MirroredStrategy, or None to let it take every GPU (or the CPU)."""
    if devices is None:
        return None
    if num_gpus:
        if devices > num_gpus:
            raise ConfigError(f"devices={devices} but this node has only {num_gpus} GPU(s)")
        return [f"/device:GPU:{i}" for i in range(devices)]
    if devices > 1:
        _split_cpu(devices)
    return [f"/device:CPU:{i}" for i in range(devices)]


def _split_cpu(count: int) -> None:
    """Split the physical CPU into ``count`` logical CPUs (a no-op when already so split)."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu)
    if current is not None and len(current) == count:
        return  # a second make_strategy(devices=count) in the same process
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
        )
    except RuntimeError as exc:  # "Virtual devices cannot be modified after being initialized"
        raise ConfigError(
            f"make_strategy(devices={count}) came too late: TensorFlow has already "
            "initialised its devices, so the CPU can no longer be split; call it at start-up, "
            "before creating any tensor, model or dataset"
        ) from exc


def _multi_worker_strategy(
    tf_config: Mapping[str, Any], num_gpus: int, devices: int | None
) -> tf.distribute.Strategy:
    import tensorflow as tf

    if devices is not None:
        if not num_gpus and devices > 1:
            raise ConfigError(
                f"devices={devices}: MultiWorkerMirroredStrategy uses one CPU device per "
                "worker; splitting the CPU is only for single-replica runs"
            )
        if num_gpus and devices > num_gpus:
            raise ConfigError(f"devices={devices} but this node has only {num_gpus} GPU(s)")
        num_gpus = min(num_gpus, devices)
    task = tf_config["task"]
    keep_to_host_share(tf_config)
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(tf_config["cluster"]),
        task_type=task["type"],
        task_id=task["index"],
        rpc_layer="grpc",
        # SimpleClusterResolver does not detect accelerators: without this it reports none
        # and MultiWorkerMirroredStrategy would train on the CPU of a GPU node.
        num_accelerators={"GPU": num_gpus},
    )
    try:
        return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    except RuntimeError as exc:
        if "program startup" not in str(exc):
            raise
        # "Collective ops must be configured at program startup"
        raise ConfigError(
            "make_strategy came too late: TensorFlow has already initialised its runtime, so "
            "collective ops can no longer be configured; call it at start-up, before creating "
            "any tensor, model or dataset"
        ) from exc
