"""A real two-process MultiWorkerMirroredStrategy cluster on localhost, via the launcher."""

from __future__ import annotations

import io
import sys

import pytest

from shardtrain.kubeflow import launcher

pytestmark = pytest.mark.cluster

ALL_REDUCE = """
import tensorflow as tf
from shardtrain.train.cluster import make_strategy, resolve_role
role = resolve_role()
if role.is_evaluator:
    print("evaluator: no collective")
else:
    strategy = make_strategy(role)
    mine = float(role.task_index + 1 + (role.task_type == "worker"))
    per_replica = strategy.run(lambda: tf.constant(mine))
    value = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
    print(f"{role.task_type}-{role.task_index} replicas={strategy.num_replicas_in_sync} "
          f"sum={float(value)}")
"""


def test_chief_and_worker_all_reduce_and_the_evaluator_stays_out():
    out = io.StringIO()
    result = launcher.run_local(
        [
            launcher.Replica("chief", 1, (sys.executable, "-c", ALL_REDUCE)),
            launcher.Replica("worker", 1, (sys.executable, "-c", ALL_REDUCE)),
            launcher.Replica("evaluator", 1, (sys.executable, "-c", ALL_REDUCE)),
        ],
        out=out,
        timeout=240,
        grace=20,
    )
    text = out.getvalue()
    assert result.succeeded, f"{result.reason}\n{text[-3000:]}"
    # chief contributes 1, worker-0 contributes 2: both see the all-reduced 3.
    assert "[chief-0] chief-0 replicas=2 sum=3.0" in text
    assert "[worker-0] worker-0 replicas=2 sum=3.0" in text
    assert "[evaluator-0] evaluator: no collective" in text
