"""TF_CONFIG → role → strategy: the table in shardtrain.train.cluster's docstring, case by case.

Role resolution is pure and tested here without TensorFlow; the strategies built from roles
are tested in tests/integration/test_strategies.py.
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
from shardtrain.train.cluster import Role, make_strategy, peer_loss, resolve_role
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
        make_strategy(resolve_role(env_for(FULL, "evaluator")))


@pytest.mark.parametrize("devices", [0, -1, True, 1.5])
def test_devices_must_be_a_positive_count(devices):
    with pytest.raises(ConfigError, match="devices must be a positive integer"):
        make_strategy(Role(), devices=devices)


# --- peer loss: which errors of a collective make a replica exit retryably -----------------


def _error(class_name: str, message: str) -> Exception:
    """An exception whose class is named like TensorFlow's (no TensorFlow import needed)."""
    return type(class_name, (Exception,), {})(message)


_WORKER = resolve_role(
    {
        "TF_CONFIG": json.dumps(
            {
                "cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"]},
                "task": {"type": "worker", "index": 1},
            }
        )
    }
)


@pytest.mark.parametrize(
    "exc",
    [
        _error(
            "UnavailableError",
            "Graph execution error:\n\nCollective ops is aborted by: ... Connection reset by peer",
        ),
        _error("AbortedError", "The following tasks are unhealthy (stopped sending heartbeats)"),
        _error("DeadlineExceededError", "collective timed out"),
        _error("CancelledError", "RecvBuf cancelled"),
        _error("UnknownError", "Socket closed"),
    ],
    ids=["unavailable", "aborted", "deadline", "cancelled", "unknown-socket-closed"],
)
def test_a_lost_peer_is_a_retryable_error_for_a_collective_member(exc):
    from shardtrain.errors import PEER_LOST_EXIT_CODE

    lost = peer_loss(_WORKER, exc)
    assert lost is not None and lost.exit_code == PEER_LOST_EXIT_CODE >= 128
    assert "\n" not in str(lost) and "worker 1 of 3" in str(lost)
    assert "Graph execution error" not in str(lost)  # the telling line, not TF's first


@pytest.mark.parametrize(
    "exc",
    [
        _error("DataLossError", "corrupted record at 612008"),
        _error("InvalidArgumentError", "Key: label. Can't parse serialized Example."),
        _error("NotFoundError", "shard-00001.tfrecord; No such file or directory"),
        ValueError("bad value"),
    ],
)
def test_data_errors_are_not_peer_losses(exc):
    assert peer_loss(_WORKER, exc) is None


def test_without_a_collective_nothing_is_a_peer_loss():
    exc = _error("UnavailableError", "Connection reset by peer")
    assert peer_loss(resolve_role({}), exc) is None


def _on(cluster: dict, kind: str, index: int) -> dict:
    return {"cluster": cluster, "task": {"type": kind, "index": index}}


def test_replicas_sharing_a_host_split_its_cpus_chief_first():
    local = {"chief": ["127.0.0.1:1000"], "worker": ["127.0.0.1:1001", "127.0.0.1:1002"]}
    cpus = [0, 1, 2, 3, 4, 5, 6]
    shares = [
        cluster_module.host_cpu_share(_on(local, kind, i), cpus)
        for kind, i in (("chief", 0), ("worker", 0), ("worker", 1))
    ]
    # Disjoint, covering every CPU, the remainder to the first replica.
    assert shares == [[0, 1, 2], [3, 4], [5, 6]]
    two = {"chief": ["localhost:1"], "worker": ["localhost:2"]}
    assert cluster_module.host_cpu_share(_on(two, "chief", 0), [3, 1]) == [1]
    assert cluster_module.host_cpu_share(_on(two, "worker", 0), [3, 1]) == [3]


def test_replicas_on_their_own_hosts_or_too_few_cpus_keep_every_cpu():
    # A TFJob: one pod (service name) per replica.
    pods = {"chief": ["j-chief-0.ns.svc:2222"], "worker": ["j-worker-0.ns.svc:2222"]}
    assert cluster_module.host_cpu_share(_on(pods, "worker", 0), [0, 1]) is None
    # Two of three replicas on one host: only those two split it.
    mixed = {"chief": ["a:1"], "worker": ["a:2", "b:3"]}
    assert cluster_module.host_cpu_share(_on(mixed, "worker", 0), [0, 1]) == [1]
    assert cluster_module.host_cpu_share(_on(mixed, "worker", 1), [0, 1]) is None
    # Three replicas, two CPUs: no even split, so no binding.
    three = {"chief": ["h:1"], "worker": ["h:2", "h:3"]}
    assert cluster_module.host_cpu_share(_on(three, "chief", 0), [0, 1]) is None
    assert cluster_module.host_cpu_share({"cluster": three}, [0, 1]) is None


def test_binding_covers_threads_started_before_it_and_can_be_turned_off(tmp_path):
    """Every thread of the process is bound (``sched_setaffinity(0)`` alone binds only the
    calling thread), and ``SHARDTRAIN_CPU_BINDING=0`` leaves the process alone. Run in a child
    process: binding this one would bind the rest of the test session."""
    script = """
import json, os, threading
from shardtrain.train import cluster
seen = {}
started, done = threading.Event(), threading.Event()
def early():
    started.set(); done.wait(); seen["early"] = sorted(os.sched_getaffinity(0))
t = threading.Thread(target=early); t.start(); started.wait()
cluster._keep_to_host_share({"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]},
                             "task": {"type": "worker", "index": 0}})
done.set(); t.join()
seen["main"] = sorted(os.sched_getaffinity(0))
print(json.dumps(seen))
"""
    cpus = sorted(os.sched_getaffinity(0))
    local = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}
    share = cluster_module.host_cpu_share(_on(local, "worker", 0), cpus) or cpus
    for env, expected in (({}, share), ({cluster_module.CPU_BINDING_ENV: "0"}, cpus)):
        out = subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert json.loads(out.splitlines()[-1]) == {"early": expected, "main": expected}
