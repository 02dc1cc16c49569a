"""TF_CONFIG → role → strategy: the table in shardtrain.cluster's docstring, case by case."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from shardtrain.cluster import Role, make_strategy, resolve_role
from shardtrain.errors import ConfigError

CHIEF = ["job-chief-0.ns.svc:2222"]
WORKERS = ["job-worker-0.ns.svc:2222", "job-worker-1.ns.svc:2222"]
EVALUATOR = ["job-evaluator-0.ns.svc:2222"]


def _env(cluster: dict, task_type: str, index: int = 0) -> dict[str, str]:
    config = {
        "cluster": cluster,
        "task": {"type": task_type, "index": index},
        "environment": "cloud",
    }
    return {"TF_CONFIG": json.dumps(config)}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, ("local", 0, 1, True)),
        ({"TF_CONFIG": ""}, ("local", 0, 1, True)),
        (_env({"chief": CHIEF}, "chief"), ("local", 0, 1, True)),
        (_env({"worker": WORKERS[:1]}, "worker"), ("local", 0, 1, True)),
        (_env({"chief": CHIEF, "worker": WORKERS}, "chief"), ("chief", 0, 3, True)),
        (_env({"chief": CHIEF, "worker": WORKERS}, "worker", 0), ("worker", 0, 3, False)),
        (_env({"chief": CHIEF, "worker": WORKERS}, "worker", 1), ("worker", 1, 3, False)),
        (_env({"master": CHIEF, "worker": WORKERS}, "master"), ("chief", 0, 3, True)),
        (_env({"worker": WORKERS}, "worker", 0), ("worker", 0, 2, True)),
        (_env({"worker": WORKERS}, "worker", 1), ("worker", 1, 2, False)),
        (
            _env({"chief": CHIEF, "worker": WORKERS, "evaluator": EVALUATOR}, "evaluator"),
            ("evaluator", 0, 3, False),
        ),
        (_env({"chief": CHIEF, "evaluator": EVALUATOR}, "chief"), ("local", 0, 1, True)),
    ],
)
def test_role_table(env, expected):
    role = resolve_role(env)
    assert (role.task_type, role.task_index, role.num_workers, role.is_chief) == expected
    assert role.describe()


def test_the_collective_never_sees_the_evaluator_and_master_becomes_chief():
    env = _env({"master": CHIEF, "worker": WORKERS, "evaluator": EVALUATOR}, "worker", 1)
    role = resolve_role(env)
    assert role.collective_tf_config() == {
        "cluster": {"chief": CHIEF, "worker": WORKERS},
        "task": {"type": "worker", "index": 1},
    }
    assert role.evaluator == EVALUATOR[0]
    evaluator = resolve_role(
        _env({"chief": CHIEF, "worker": WORKERS, "evaluator": EVALUATOR}, "evaluator")
    )
    assert evaluator.is_evaluator and evaluator.collective_tf_config() is None
    assert evaluator.cluster == {"chief": CHIEF, "worker": WORKERS}


@pytest.mark.parametrize(
    ("tf_config", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        (
            json.dumps({"cluster": {"chief": CHIEF, "ps": ["p:1"]}, "task": {"type": "chief"}}),
            "parameter servers",
        ),
        (
            json.dumps({"cluster": {"chief": CHIEF, "master": CHIEF}, "task": {"type": "chief"}}),
            "both a chief and a master",
        ),
        (
            json.dumps({"cluster": {"chief": CHIEF * 2}, "task": {"type": "chief"}}),
            "at most one chief",
        ),
        (
            json.dumps(
                {"cluster": {"chief": CHIEF, "worker": WORKERS}, "task": {"type": "evaluator"}}
            ),
            "task type 'evaluator' is not in",
        ),
        (
            json.dumps(
                {
                    "cluster": {"chief": CHIEF, "worker": WORKERS},
                    "task": {"type": "worker", "index": 2},
                }
            ),
            "task index 2 out of range",
        ),
        (
            json.dumps(
                {
                    "cluster": {"chief": CHIEF, "worker": WORKERS},
                    "task": {"type": "worker", "index": "1"},
                }
            ),
            "must be an integer",
        ),
        (json.dumps({"cluster": {"worker": []}, "task": {"type": "worker"}}), "non-empty list"),
        (
            json.dumps({"cluster": {"boss": ["b:1"]}, "task": {"type": "boss"}}),
            "unknown replica type 'boss'",
        ),
        (
            json.dumps({"cluster": {"evaluator": EVALUATOR}, "task": {"type": "evaluator"}}),
            "no training replicas",
        ),
    ],
)
def test_nonsense_is_one_clear_error(tf_config, message):
    with pytest.raises(ConfigError, match=message) as info:
        resolve_role({"TF_CONFIG": tf_config})
    assert str(info.value).startswith("TF_CONFIG: ") and "\n" not in str(info.value)


def test_local_strategy_on_cpu_and_no_strategy_for_the_evaluator():
    strategy = make_strategy(Role("local"))
    assert strategy.num_replicas_in_sync == 1
    with pytest.raises(ValueError, match="evaluator does not train"):
        make_strategy(Role("evaluator", is_chief=False))


def test_two_logical_cpus_stand_in_for_a_two_gpu_node():
    code = (
        "from shardtrain.cluster import Role, make_strategy; "
        "print(make_strategy(Role('local'), devices=2).num_replicas_in_sync)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "2"
