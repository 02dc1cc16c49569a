"""TF_CONFIG → role → strategy: the table in shardtrain.train.cluster's docstring, case by case.

Role resolution is pure and tested without TensorFlow. Strategy tests build only local
strategies (one in this process, one in a fresh subprocess for the CPU split); the
multi-worker path is checked by capturing the cluster resolver handed to TF, because a real
MultiWorkerMirroredStrategy binds a port and waits for its peers (that is the integration
test's job, tests/integration/test_local_cluster.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shardtrain.errors import ConfigError
from shardtrain.train import cluster as cluster_module
from shardtrain.train.cluster import Role, make_strategy, resolve_role

CHIEF = ["job-chief-0.ns.svc:2222"]
WORKERS = ["job-worker-0.ns.svc:2222", "job-worker-1.ns.svc:2222"]
EVALUATOR = ["job-evaluator-0.ns.svc:2222"]
SRC = Path(cluster_module.__file__).parent


def _env(cluster: dict, task_type: str, index: int = 0) -> dict[str, str]:
    """The environment the training operator gives one replica."""
    config = {
        "cluster": cluster,
        "task": {"type": task_type, "index": index},
        "environment": "cloud",
    }
    return {"TF_CONFIG": json.dumps(config)}


def _raw(cluster: dict, task: dict | None) -> str:
    return json.dumps({"cluster": cluster, "task": task})


FULL = {"chief": CHIEF, "worker": WORKERS, "evaluator": EVALUATOR}
TRAINING = {"chief": CHIEF, "worker": WORKERS}

# (environment, (task_type, task_index, num_workers, is_chief, is_evaluator), collective?)
ROLE_TABLE = [
    pytest.param({}, ("local", 0, 1, True, False), False, id="no-tf-config"),
    pytest.param({"TF_CONFIG": ""}, ("local", 0, 1, True, False), False, id="empty-string"),
    pytest.param({"TF_CONFIG": "  \n"}, ("local", 0, 1, True, False), False, id="blank"),
    pytest.param(
        _env({"chief": CHIEF}, "chief"), ("local", 0, 1, True, False), False, id="chief-only"
    ),
    pytest.param(
        _env({"worker": WORKERS[:1]}, "worker"),
        ("local", 0, 1, True, False),
        False,
        id="one-worker-only",
    ),
    pytest.param(_env(TRAINING, "chief"), ("chief", 0, 3, True, False), True, id="chief+2w:chief"),
    pytest.param(
        _env(TRAINING, "worker", 0), ("worker", 0, 3, False, False), True, id="chief+2w:worker0"
    ),
    pytest.param(
        _env(TRAINING, "worker", 1), ("worker", 1, 3, False, False), True, id="chief+2w:worker1"
    ),
    pytest.param(
        _env({"master": CHIEF, "worker": WORKERS}, "master"),
        ("chief", 0, 3, True, False),
        True,
        id="master+2w:master-is-chief",
    ),
    pytest.param(
        _env({"master": CHIEF, "worker": WORKERS}, "worker", 0),
        ("worker", 0, 3, False, False),
        True,
        id="master+2w:worker0",
    ),
    pytest.param(
        _env({"worker": WORKERS}, "worker", 0),
        ("worker", 0, 2, True, False),
        True,
        id="workers-only:worker0-is-chief",
    ),
    pytest.param(
        _env({"worker": WORKERS}, "worker", 1),
        ("worker", 1, 2, False, False),
        True,
        id="workers-only:worker1",
    ),
    pytest.param(
        _env(FULL, "evaluator"), ("evaluator", 0, 3, False, True), False, id="full:evaluator"
    ),
    pytest.param(_env(FULL, "chief"), ("chief", 0, 3, True, False), True, id="full:chief"),
    pytest.param(_env(FULL, "worker", 1), ("worker", 1, 3, False, False), True, id="full:worker1"),
    pytest.param(
        _env({"chief": CHIEF, "evaluator": EVALUATOR}, "chief"),
        ("chief", 0, 1, True, False),
        False,
        id="lone-chief+evaluator",
    ),
    pytest.param(
        _env({"chief": CHIEF, "evaluator": EVALUATOR}, "evaluator"),
        ("evaluator", 0, 1, False, True),
        False,
        id="lone-chief+evaluator:evaluator",
    ),
]


@pytest.mark.parametrize(("env", "expected", "collective"), ROLE_TABLE)
def test_role_table(env, expected, collective):
    role = resolve_role(env)
    got = (role.task_type, role.task_index, role.num_workers, role.is_chief, role.is_evaluator)
    assert got == expected
    assert (role.tf_config_for_collective is not None) == collective
    if role.is_local:
        assert role.cluster == {}
    else:
        # Whatever the replica, TF sees the training cluster only: no evaluator, no master.
        assert "evaluator" not in role.cluster and "master" not in role.cluster
        assert role.num_workers == sum(len(v) for v in role.cluster.values())
    assert role.describe() and "\n" not in role.describe()


def test_the_collective_sees_the_training_cluster_and_task_as_chief_or_worker():
    worker = resolve_role(
        _env({"master": CHIEF, "worker": WORKERS, "evaluator": EVALUATOR}, "worker", 1)
    )
    assert worker.tf_config_for_collective == {
        "cluster": {"chief": CHIEF, "worker": WORKERS},
        "task": {"type": "worker", "index": 1},
    }
    master = resolve_role(_env({"master": CHIEF, "worker": WORKERS}, "master"))
    assert master.tf_config_for_collective == {
        "cluster": {"chief": CHIEF, "worker": WORKERS},
        "task": {"type": "chief", "index": 0},
    }
    assert worker.has_evaluator and not master.has_evaluator


def test_the_evaluator_knows_the_training_cluster_but_joins_no_collective():
    evaluator = resolve_role(_env(FULL, "evaluator"))
    assert evaluator.cluster == TRAINING
    assert evaluator.tf_config_for_collective is None
    assert evaluator.has_evaluator and not evaluator.is_chief


def test_describe():
    assert resolve_role(_env(TRAINING, "worker", 1)).describe() == "worker 1 of 3 (chief: no)"
    assert resolve_role(_env(TRAINING, "chief")).describe() == "chief 0 of 3 (chief: yes)"
    assert resolve_role({}).describe() == "local, single replica (chief: yes)"
    assert resolve_role(_env(FULL, "evaluator")).describe() == (
        "evaluator (sidecar of 3 training replicas, chief: no)"
    )


def test_reads_os_environ_by_default(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", _env(TRAINING, "worker", 1)["TF_CONFIG"])
    assert resolve_role().task_index == 1
    monkeypatch.delenv("TF_CONFIG")
    assert resolve_role().is_local


ERROR_TABLE = [
    pytest.param("{not json", r"not valid JSON .*: \{not json", id="invalid-json"),
    pytest.param("[1, 2]", r"must be a JSON object: \[1, 2\]", id="not-an-object"),
    pytest.param(
        _raw({"chief": CHIEF, "ps": ["p:1"]}, {"type": "chief", "index": 0}),
        r'parameter-server training is not supported.*Worker.*: \{"ps": \["p:1"\]\}',
        id="ps",
    ),
    pytest.param(
        _raw({"chief": CHIEF, "master": CHIEF}, {"type": "chief", "index": 0}),
        r'both a chief and a master.*: \{"chief": .*"master": ',
        id="chief-and-master",
    ),
    pytest.param(
        _raw({"chief": CHIEF * 2, "worker": WORKERS}, {"type": "chief", "index": 0}),
        r'at most one chief is allowed, the cluster lists 2: \{"chief": ',
        id="two-chiefs",
    ),
    pytest.param(
        _raw({"master": CHIEF * 2}, {"type": "master", "index": 0}),
        r"at most one master",
        id="two-masters",
    ),
    pytest.param(
        _raw({**TRAINING, "evaluator": EVALUATOR * 2}, {"type": "evaluator", "index": 0}),
        r"at most one evaluator",
        id="two-evaluators",
    ),
    pytest.param(
        _raw(TRAINING, {"index": 0}),
        r'missing task type: \{"task": \{"index": 0\}\}',
        id="missing-type",
    ),
    pytest.param(
        _raw(TRAINING, None), r"task type is missing: \{\"task\": null\}", id="missing-task"
    ),
    pytest.param(
        _raw(TRAINING, {"type": "boss", "index": 0}),
        r"unknown task type 'boss'.*: \{\"task\": \{\"type\": \"boss\"",
        id="unknown-task-type",
    ),
    pytest.param(
        _raw(TRAINING, {"type": "Worker", "index": 0}),
        r"unknown task type 'Worker'",
        id="types-are-lower-case",
    ),
    pytest.param(
        _raw({"boss": ["b:1"]}, {"type": "boss", "index": 0}),
        r"unknown replica type 'boss' in cluster.*: \{\"boss\": \[\"b:1\"\]\}",
        id="unknown-cluster-type",
    ),
    pytest.param(
        _raw(TRAINING, {"type": "evaluator", "index": 0}),
        r"task type 'evaluator' is not in the cluster \(it lists chief, worker\)",
        id="type-not-in-cluster",
    ),
    pytest.param(
        _raw(TRAINING, {"type": "worker", "index": 2}),
        r"task index 2 out of range for 'worker' \(the cluster lists 2: indices 0-1\)",
        id="index-too-big",
    ),
    pytest.param(
        _raw(TRAINING, {"type": "chief", "index": -1}),
        r"task index -1 out of range for 'chief'",
        id="negative-index",
    ),
    pytest.param(
        _raw(TRAINING, {"type": "worker", "index": "1"}),
        r"task index must be an integer, got '1'",
        id="string-index",
    ),
    pytest.param(
        _raw(TRAINING, {"type": "worker", "index": 1.0}),
        r"task index must be an integer, got 1.0",
        id="float-index",
    ),
    pytest.param(
        _raw({"chief": CHIEF, "worker": []}, {"type": "chief", "index": 0}),
        r'cluster\[\'worker\'\] must be a non-empty list .*: \{"worker": \[\]\}',
        id="empty-address-list",
    ),
    pytest.param(
        _raw({"chief": CHIEF, "worker": [""]}, {"type": "chief", "index": 0}),
        r"cluster\['worker'\] must be a non-empty list",
        id="empty-address",
    ),
    pytest.param(
        _raw({"evaluator": EVALUATOR}, {"type": "evaluator", "index": 0}),
        r"no training replicas",
        id="evaluator-only",
    ),
    pytest.param(
        _raw({}, {"type": "evaluator", "index": 0}),
        r"'task' names a replica but 'cluster' is empty",
        id="task-without-cluster",
    ),
]


@pytest.mark.parametrize(("tf_config", "message"), ERROR_TABLE)
def test_nonsense_is_one_clear_error(tf_config, message):
    with pytest.raises(ConfigError, match=message) as info:
        resolve_role({"TF_CONFIG": tf_config})
    text = str(info.value)
    assert text.startswith("TF_CONFIG: ") and "\n" not in text


def test_long_tf_config_is_quoted_shortened():
    workers = [f"job-worker-{i}.a-rather-long-namespace.svc:2222" for i in range(50)]
    with pytest.raises(ConfigError) as info:
        resolve_role({"TF_CONFIG": _raw({"worker": workers, "ps": ["p:1"]}, {"type": "worker"})})
    assert len(str(info.value)) < 400


def test_hand_built_roles_must_be_consistent():
    assert Role() == resolve_role({})
    with pytest.raises(ValueError, match="task_type"):
        Role(task_type="master")
    with pytest.raises(ValueError, match="is_evaluator"):
        Role(task_type="evaluator", is_chief=False)


def test_only_cluster_reads_tf_config():
    """'One function owns TF_CONFIG': no other module reads it (the launcher only writes it)."""
    reads = re.compile(
        r"""environ(\.get)?\s*[\[(]\s*["']TF_CONFIG"""  # os.environ["TF_CONFIG"], .get(...)
        r"""|getenv\(\s*["']TF_CONFIG"""
        r"|TFConfigClusterResolver"  # TF's own reader of the variable
    )
    offenders = [
        path.name
        for path in SRC.glob("*.py")
        if path.name != "cluster.py" and reads.search(path.read_text())
    ]
    assert offenders == []


def test_importing_the_module_does_not_import_tensorflow():
    code = "import sys, shardtrain.train.cluster; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---- strategies ------------------------------------------------------------------------------


def test_no_strategy_for_the_evaluator():
    with pytest.raises(ValueError, match="evaluator does not build a training strategy"):
        make_strategy(resolve_role(_env(FULL, "evaluator")))


@pytest.mark.parametrize("devices", [0, -1, True, 1.5])
def test_devices_must_be_a_positive_count(devices):
    with pytest.raises(ConfigError, match="devices must be a positive integer"):
        make_strategy(Role(), devices=devices)


def test_local_strategy_mirrors_over_the_cpu_and_splitting_it_later_is_a_clear_error():
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("CPU-only behaviour")
    strategy = make_strategy(Role())
    assert isinstance(strategy, tf.distribute.MirroredStrategy)
    assert strategy.num_replicas_in_sync == 1
    # It really runs: a replica step and a cross-replica reduce on the CPU.
    value = strategy.reduce(
        tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(2.0)), axis=None
    )
    assert float(value) == 2.0
    # The runtime is initialised now: the CPU can no longer be split.
    with pytest.raises(ConfigError, match=r"devices=3\) came too late"):
        make_strategy(Role(), devices=3)


def test_two_logical_cpus_stand_in_for_a_two_gpu_node():
    # A fresh interpreter: the split must happen before TF initialises its devices.
    code = """
import tensorflow as tf
from shardtrain.train.cluster import Role, make_strategy
strategy = make_strategy(Role(), devices=2)
again = make_strategy(Role(), devices=2)  # same split again: allowed
ctx = tf.distribute.get_replica_context
value = strategy.reduce(
    tf.distribute.ReduceOp.SUM,
    strategy.run(lambda: tf.cast(ctx().replica_id_in_sync_group, tf.float32) + 1.0),
    axis=None,
)
print(strategy.num_replicas_in_sync, again.num_replicas_in_sync, float(value))
"""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    # Two replicas (one per logical CPU) contribute 1 and 2.
    assert out.stdout.strip().splitlines()[-1] == "2 2 3.0"


class _CapturedStrategy:
    """Stands in for MultiWorkerMirroredStrategy, which would bind a port and wait for peers."""

    def __init__(self, cluster_resolver):
        self.cluster_resolver = cluster_resolver


def test_multi_worker_strategy_gets_the_collective_cluster_without_touching_os_environ(
    monkeypatch,
):
    import tensorflow as tf

    monkeypatch.setattr(tf.distribute, "MultiWorkerMirroredStrategy", _CapturedStrategy)
    monkeypatch.setenv("TF_CONFIG", _env(FULL, "worker", 1)["TF_CONFIG"])
    before = dict(os.environ)
    strategy = make_strategy(resolve_role())
    assert dict(os.environ) == before
    resolver = strategy.cluster_resolver
    assert isinstance(resolver, tf.distribute.cluster_resolver.SimpleClusterResolver)
    assert resolver.cluster_spec().as_dict() == TRAINING
    assert (resolver.task_type, resolver.task_id, resolver.rpc_layer) == ("worker", 1, "grpc")
    # SimpleClusterResolver detects no accelerators: make_strategy must count the GPUs.
    gpus = len(tf.config.get_visible_devices("GPU"))
    assert resolver.num_accelerators() == {"GPU": gpus}


def test_multi_worker_strategy_too_late_is_a_clear_error(monkeypatch):
    import tensorflow as tf

    def too_late(cluster_resolver):
        raise RuntimeError("Collective ops must be configured at program startup")

    monkeypatch.setattr(tf.distribute, "MultiWorkerMirroredStrategy", too_late)
    with pytest.raises(ConfigError, match="came too late"):
        make_strategy(resolve_role(_env(TRAINING, "chief")))


def test_multi_worker_on_cpu_cannot_split_the_cpu(monkeypatch):
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("CPU-only behaviour")
    monkeypatch.setattr(tf.distribute, "MultiWorkerMirroredStrategy", _CapturedStrategy)
    with pytest.raises(ConfigError, match="one CPU device per worker"):
        make_strategy(resolve_role(_env(TRAINING, "chief")), devices=2)
