"""TF_CONFIG → role → strategy: the table in shardtrain.train.cluster's docstring, case by case.

Role resolution is pure and tested here without TensorFlow; the strategies built from roles
are tested in tests/integration/train/test_cluster.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shardtrain.errors import ConfigError
from shardtrain.train import cluster as cluster_module
from shardtrain.train.cluster import Role, make_strategy, resolve_role
from tf_configs import CHIEF, EVALUATOR, FULL, TRAINING, WORKERS, env_for

SRC = Path(cluster_module.__file__).parent


def _raw(cluster: dict, task: dict | None) -> str:
    return json.dumps({"cluster": cluster, "task": task})


# (environment, (task_type, task_index, num_workers, is_chief, is_evaluator), collective?)
ROLE_TABLE = [
    pytest.param({}, ("local", 0, 1, True, False), False, id="no-tf-config"),
    pytest.param({"TF_CONFIG": ""}, ("local", 0, 1, True, False), False, id="empty-string"),
    pytest.param({"TF_CONFIG": "  \n"}, ("local", 0, 1, True, False), False, id="blank"),
    pytest.param(
        env_for({"chief": CHIEF}, "chief"),
        ("local", 0, 1, True, False),
        False,
        id="chief-only",
    ),
    pytest.param(
        env_for({"worker": WORKERS[:1]}, "worker"),
        ("local", 0, 1, True, False),
        False,
        id="one-worker-only",
    ),
    pytest.param(
        env_for(TRAINING, "chief"), ("chief", 0, 3, True, False), True, id="chief+2w:chief"
    ),
    pytest.param(
        env_for(TRAINING, "worker", 0),
        ("worker", 0, 3, False, False),
        True,
        id="chief+2w:worker0",
    ),
    pytest.param(
        env_for(TRAINING, "worker", 1),
        ("worker", 1, 3, False, False),
        True,
        id="chief+2w:worker1",
    ),
    pytest.param(
        env_for({"master": CHIEF, "worker": WORKERS}, "master"),
        ("chief", 0, 3, True, False),
        True,
        id="master+2w:master-is-chief",
    ),
    pytest.param(
        env_for({"master": CHIEF, "worker": WORKERS}, "worker", 0),
        ("worker", 0, 3, False, False),
        True,
        id="master+2w:worker0",
    ),
    pytest.param(
        env_for({"worker": WORKERS}, "worker", 0),
        ("worker", 0, 2, True, False),
        True,
        id="workers-only:worker0-is-chief",
    ),
    pytest.param(
        env_for({"worker": WORKERS}, "worker", 1),
        ("worker", 1, 2, False, False),
        True,
        id="workers-only:worker1",
    ),
    pytest.param(
        env_for(FULL, "evaluator"),
        ("evaluator", 0, 3, False, True),
        False,
        id="full:evaluator",
    ),
    pytest.param(env_for(FULL, "chief"), ("chief", 0, 3, True, False), True, id="full:chief"),
    pytest.param(
        env_for(FULL, "worker", 1), ("worker", 1, 3, False, False), True, id="full:worker1"
    ),
    pytest.param(
        env_for({"chief": CHIEF, "evaluator": EVALUATOR}, "chief"),
        ("chief", 0, 1, True, False),
        False,
        id="lone-chief+evaluator",
    ),
    pytest.param(
        env_for({"chief": CHIEF, "evaluator": EVALUATOR}, "evaluator"),
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
        env_for({"master": CHIEF, "worker": WORKERS, "evaluator": EVALUATOR}, "worker", 1)
    )
    assert worker.tf_config_for_collective == {
        "cluster": {"chief": CHIEF, "worker": WORKERS},
        "task": {"type": "worker", "index": 1},
    }
    master = resolve_role(env_for({"master": CHIEF, "worker": WORKERS}, "master"))
    assert master.tf_config_for_collective == {
        "cluster": {"chief": CHIEF, "worker": WORKERS},
        "task": {"type": "chief", "index": 0},
    }
    assert worker.has_evaluator and not master.has_evaluator


def test_the_evaluator_knows_the_training_cluster_but_joins_no_collective():
    evaluator = resolve_role(env_for(FULL, "evaluator"))
    assert evaluator.cluster == TRAINING
    assert evaluator.tf_config_for_collective is None
    assert evaluator.has_evaluator and not evaluator.is_chief


def test_describe():
    assert resolve_role(env_for(TRAINING, "worker", 1)).describe() == "worker 1 of 3 (chief: no)"
    assert resolve_role(env_for(TRAINING, "chief")).describe() == "chief 0 of 3 (chief: yes)"
    assert resolve_role({}).describe() == "local, single replica (chief: yes)"
    assert resolve_role(env_for(FULL, "evaluator")).describe() == (
        "evaluator (sidecar of 3 training replicas, chief: no)"
    )


def test_reads_os_environ_by_default(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", env_for(TRAINING, "worker", 1)["TF_CONFIG"])
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
    """'One function owns TF_CONFIG': no other module reads it (local runs only write it)."""
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
        make_strategy(resolve_role(env_for(FULL, "evaluator")))


@pytest.mark.parametrize("devices", [0, -1, True, 1.5])
def test_devices_must_be_a_positive_count(devices):
    with pytest.raises(ConfigError, match="devices must be a positive integer"):
        make_strategy(Role(), devices=devices)


# --- peer loss: which replicas can lose a peer (the errors that mean it: tests/unit/test_errors.py)


def test_without_a_collective_nothing_is_a_peer_loss():
    assert not resolve_role({}).has_peers
    assert not resolve_role(env_for(FULL, "evaluator")).has_peers
    assert resolve_role(env_for(TRAINING, "worker", 1)).has_peers


# --------------------------------------------------------------------------------------------
# Kubeflow Trainer v2: a TrainJob node's TF_CONFIG from its environment
# --------------------------------------------------------------------------------------------

_NODE = {
    "SHARDTRAIN_TRAINJOB": "quest",
    "SHARDTRAIN_REPLICATED_JOB": "node",
    "SHARDTRAIN_JOB_INDEX": "0",
    "SHARDTRAIN_NUM_NODES": "2",
    "JOB_COMPLETION_INDEX": "0",
}


def test_outside_a_trainjob_nothing_is_derived():
    assert cluster_module.tf_config_from_trainjob({}) is None
    assert cluster_module.tf_config_from_trainjob({"JOB_COMPLETION_INDEX": "1"}) is None


def test_a_one_node_trainjob_is_a_local_run():
    env = {**_NODE, "SHARDTRAIN_NUM_NODES": "1"}
    assert cluster_module.tf_config_from_trainjob(env) is None
    assert resolve_role(env).is_local


def test_an_explicit_tf_config_wins_over_the_trainjob_variables():
    tf_config = json.dumps(
        {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}
    )
    role = resolve_role({**_NODE, "TF_CONFIG": tf_config})
    assert (role.task_type, role.task_index) == ("worker", 1)


def test_the_node_count_comes_from_trainer_without_any_variable_of_ours():
    """A TrainJob built by the Kubeflow SDK (``num_nodes`` only): the count is the
    ``JAX_NUM_PROCESSES`` Trainer's JAX policy writes from ``trainer.numNodes``; an equal
    ``SHARDTRAIN_NUM_NODES`` (what ``trainjob render`` writes) is accepted beside it."""
    sdk_node = {k: v for k, v in _NODE.items() if k != "SHARDTRAIN_NUM_NODES"}
    for env in ({**sdk_node, "JAX_NUM_PROCESSES": "2"}, {**_NODE, "JAX_NUM_PROCESSES": "2"}):
        for index in (0, 1):
            role = resolve_role({**env, "JOB_COMPLETION_INDEX": str(index)})
            assert (role.num_workers, role.is_chief) == (2, index == 0)
    one = resolve_role({**sdk_node, "JAX_NUM_PROCESSES": "1"})
    assert one.is_local
    # Our own variable alone still works (a runtime without the JAX policy: plainML).
    assert resolve_role({**_NODE, "JOB_COMPLETION_INDEX": "1"}).num_workers == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"SHARDTRAIN_NUM_NODES": "x"}, "SHARDTRAIN_NUM_NODES='x' is not an integer >= 1"),
        ({"SHARDTRAIN_NUM_NODES": ""}, "neither SHARDTRAIN_NUM_NODES nor JAX_NUM_PROCESSES"),
        ({"JAX_NUM_PROCESSES": "3"}, "SHARDTRAIN_NUM_NODES=2 but JAX_NUM_PROCESSES=3"),
        ({"JOB_COMPLETION_INDEX": "x"}, "JOB_COMPLETION_INDEX='x'"),
        ({"JOB_COMPLETION_INDEX": "2"}, "JOB_COMPLETION_INDEX=2 but SHARDTRAIN_NUM_NODES=2"),
        ({"SHARDTRAIN_REPLICATED_JOB": ""}, "SHARDTRAIN_REPLICATED_JOB is not set"),
    ],
)
def test_a_broken_trainjob_environment_is_one_line(change, message):
    with pytest.raises(ConfigError, match=message):
        resolve_role({**_NODE, **change})
