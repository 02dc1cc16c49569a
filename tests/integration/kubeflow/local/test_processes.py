"""A real two-process MultiWorkerMirroredStrategy cluster on localhost, via local processes
(shardtrain.kubeflow.local.processes)."""

from __future__ import annotations

import io
import os
import sys

import pytest

from shardtrain.kubeflow.local import processes

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
    result = processes.run_local(
        [
            processes.Replica("chief", 1, (sys.executable, "-c", ALL_REDUCE)),
            processes.Replica("worker", 1, (sys.executable, "-c", ALL_REDUCE)),
            processes.Replica("evaluator", 1, (sys.executable, "-c", ALL_REDUCE)),
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


TRAIN_STEPS = """
import os
import sys
import numpy as np
import tensorflow as tf
from shardtrain.train.cluster import make_strategy, resolve_role
role = resolve_role()
strategy = make_strategy(role)
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.train import loop
from shardtrain.train.config import InputConfig, ModelConfig, TrainConfig
from shardtrain.train.features import FeatureSpec
meta = DatasetMetadata.load(sys.argv[1])
spec = FeatureSpec.from_metadata(meta)
config = TrainConfig(
    data=sys.argv[1], model_dir=sys.argv[2], batch_size=32,
    model=ModelConfig(name="tabular", hidden_units=[8]),
    input=InputConfig(shuffle_buffer=64, cycle_length=1),
).validate()
state = loop.build_training_state(strategy, config, spec, mixed=False)
embeds = [v for v in state.model.trainable_variables if "embed" in v.path]
before = [v.numpy().copy() for v in embeds]
iterator, _ = loop.distributed_input(strategy, config, meta, spec, sys.argv[2], seed=0)
train_loop = loop.build_train_loop(
    strategy, state.model, state.optimizer, spec, config.batch_size, state.global_step,
    stop_requested=loop.stop_request_variable(),
)
steps = tf.constant(3, tf.int64)
graph = train_loop.get_concrete_function(iterator, steps).graph.as_graph_def()
ops = [n.op for n in graph.node] + [n.op for f in graph.library.function for n in f.node_def]
loss, _ = train_loop(iterator, steps)
moved = all(not np.array_equal(b, v.numpy()) for b, v in zip(before, embeds))
digest = sum(float(np.abs(v.numpy()).sum()) for v in state.model.trainable_variables)
print(f"{role.task_type}: embeddings={len(embeds)} moved={moved} "
      f"reduces={ops.count('CollectiveReduceV2')} gathers={ops.count('CollectiveGatherV2')} "
      f"loss_finite={bool(np.isfinite(float(loss)))} "
      f"cpus={','.join(map(str, sorted(os.sched_getaffinity(0))))} weights={digest:.6f}")
"""


def test_chief_and_worker_steps_all_reduce_embeddings_densely_and_stay_in_sync(tmp_path):
    """Sparse embedding gradients made dense: one all-reduce for every gradient, no gathers.

    The tabular model's embeddings give ``IndexedSlices`` gradients, which the strategy
    would add up with three all-gathers each per step (issue 17: 18 of a step's 20
    collectives, most of a chief + worker step). The traced step must hold one packed
    gradient all-reduce plus the loss/stop ones and no gather, the embeddings must still learn,
    and both replicas must end with the same weights.
    """
    import re

    from shardtrain.data import datagen, sharding

    csv = str(tmp_path / "quest.csv")
    datagen.generate_quest_logs(csv, 400, seed=4, numeric=3, categorical=3)
    sharding.shard(
        sharding.ShardConfig(
            sources=(csv,),
            output=str(tmp_path / "ds"),
            label="cleared",
            key="attempt_id",
            compression="none",
            num_shards=2,
            processes=1,
        )
    )
    out = io.StringIO()
    replicas = []
    for kind in ("chief", "worker"):
        scratch = tmp_path / kind
        scratch.mkdir()
        command = (sys.executable, "-c", TRAIN_STEPS, str(tmp_path / "ds"), str(scratch))
        replicas.append(processes.Replica(kind, 1, command))
    result = processes.run_local(replicas, out=out, timeout=300, grace=20)
    text = out.getvalue()
    assert result.succeeded, f"{result.reason}\n{text[-3000:]}"
    lines = {kind: re.search(rf"\[{kind}-0\] {kind}: (.*)", text) for kind in ("chief", "worker")}
    assert all(lines.values()), text[-3000:]
    chief, worker = (m.group(1) for m in lines.values())
    assert re.search(r"embeddings=[1-9]\d* moved=True", chief), chief
    assert "gathers=0" in chief and "loss_finite=True" in chief, chief
    # Sharing this host, the two replicas keep to disjoint CPUs (when there are 2 or more).
    if len(os.sched_getaffinity(0)) >= 2:
        cpus = [
            set(re.search(r"cpus=([\d,]+)", line).group(1).split(",")) for line in (chief, worker)
        ]
        assert cpus[0] and cpus[1] and not cpus[0] & cpus[1], (chief, worker)
    # Mirrored variables: both replicas applied the same all-reduced gradients.
    assert chief.split("weights=")[1] == worker.split("weights=")[1]
