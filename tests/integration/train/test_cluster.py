"""Role → ``tf.distribute`` strategy (shardtrain.train.cluster.make_strategy), with TensorFlow.

Only local strategies are built (one in this process, one in a fresh subprocess for the CPU
split); the multi-worker path is checked by capturing the cluster resolver handed to TF,
because a real MultiWorkerMirroredStrategy binds a port and waits for its peers (that is
tests/integration/kubeflow/local/test_processes.py's job).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shardtrain.errors import ConfigError
from shardtrain.train.cluster import Role, make_strategy, resolve_role
from tf_configs import FULL, TRAINING, env_for


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
    monkeypatch.setenv("TF_CONFIG", env_for(FULL, "worker", 1)["TF_CONFIG"])
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
        make_strategy(resolve_role(env_for(TRAINING, "chief")))


def test_multi_worker_on_cpu_cannot_split_the_cpu(monkeypatch):
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("CPU-only behaviour")
    monkeypatch.setattr(tf.distribute, "MultiWorkerMirroredStrategy", _CapturedStrategy)
    with pytest.raises(ConfigError, match="one CPU device per worker"):
        make_strategy(resolve_role(env_for(TRAINING, "chief")), devices=2)
