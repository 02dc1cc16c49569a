"""The distributed step function: model and optimizer, input, and the ``strategy.run`` loop.

Everything TensorFlow that :class:`shardtrain.train.controller.Controller` drives without
knowing about it:

* :func:`build_training_state`: the model, the optimizer and the global step, created in the
  strategy's scope, and the ``tf.train.Checkpoint`` that saves and restores them;
* :func:`distributed_input`: every input pipeline reads its own part of the shard files
  (``distribute_datasets_from_function``);
* :func:`build_train_loop`: ``steps_per_loop`` steps of ``strategy.run`` in one
  ``tf.function``, the loss scaled by the *global* batch;
* :func:`dense_small_gradients`: embedding gradients made dense, so that a step all-reduces
  every gradient in one collective rather than three all-gathers per embedding;
* :class:`DistributedSteps`: that loop as the controller's step function;
* :func:`stop_request_variable`: the flag a signal sets, read by the loop every step;
* :func:`build_stop_vote`: the one-number all-reduce by which replicas agree to stop.

Keras 3's ``fit`` is not used: it fails under ``MultiWorkerMirroredStrategy``.
TensorFlow is imported inside the functions: the strategy must exist before anything
initialises the TensorFlow runtime, and importing this module must stay cheap.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardtrain import storage
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.train import dataset
from shardtrain.train.config import TrainConfig
from shardtrain.train.controller import LoopOutput
from shardtrain.train.features import FeatureSpec
from shardtrain.train.models import model_inputs


@dataclass
class TrainState:
    """What a checkpoint holds, created in the strategy's scope.

    Attributes:
        model: the Keras model being trained.
        optimizer: Adam, wrapped in a ``LossScaleOptimizer`` under mixed precision.
        global_step: an int64 ``tf.Variable`` counting optimizer steps.
        checkpoint: ``tf.train.Checkpoint(model=, optimizer=, step=)`` over the three.
    """

    model: Any
    optimizer: Any
    global_step: Any
    checkpoint: Any


def use_mixed_precision(config: TrainConfig, spec: FeatureSpec) -> bool:
    """``on``; or ``auto`` for image models on GPUs (where float16 is fast and safe)."""
    import tensorflow as tf

    setting = config.model.mixed_precision
    if setting != "auto":
        return setting == "on"
    return spec.image is not None and bool(tf.config.get_visible_devices("GPU"))


def build_training_state(
    strategy, config: TrainConfig, spec: FeatureSpec, *, mixed: bool
) -> TrainState:
    """The model, its (built) optimizer and the global step in ``strategy``'s scope.

    With ``lr_schedule: cosine`` the learning rate decays to zero over ``train_steps``; it is
    a function of the optimizer's step count, which the checkpoint restores. ``mixed``
    (the ``mixed_float16`` policy already set) wraps the optimizer in a
    ``LossScaleOptimizer`` for dynamic loss scaling.
    """
    import keras
    import tensorflow as tf

    from shardtrain.train.models import build_model

    with strategy.scope():
        model = build_model(config.model.name, spec, config.model.hparams())
        learning_rate: Any = config.learning_rate
        if config.lr_schedule == "cosine":
            learning_rate = keras.optimizers.schedules.CosineDecay(
                config.learning_rate, decay_steps=config.train_steps
            )
        optimizer = keras.optimizers.Adam(learning_rate=learning_rate)
        if mixed:
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        optimizer.build(model.trainable_variables)
        global_step = tf.Variable(
            0,
            dtype=tf.int64,
            trainable=False,
            name="global_step",
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=global_step)
    return TrainState(model, optimizer, global_step, checkpoint)


def distributed_input(
    strategy,
    config: TrainConfig,
    metadata: DatasetMetadata,
    spec: FeatureSpec,
    scratch: str,
    *,
    seed: int,
) -> tuple[Any, list[dataset.ShardCache]]:
    """An iterator over the train split's distributed batches, and the shard caches it uses.

    Every input pipeline (one per worker) reads its own subset of the shard files, in
    per-replica batches of the global ``batch_size``. A single CPU replica
    (:func:`single_cpu_replica`) gets a plain ``tf.data`` iterator instead of a distributed
    one: the same batches, for less CPU. Shards that TensorFlow cannot open
    (``s3://``) are staged through a bounded :class:`~shardtrain.train.dataset.ShardCache`
    in ``scratch``; the caller closes the returned caches when training ends (the list fills
    as the pipelines are created).
    """
    import tensorflow as tf

    caches: list[dataset.ShardCache] = []

    def input_fn(ctx: tf.distribute.InputContext):
        cache = None
        if not storage.tf_can_open(config.data):
            cache = dataset.ShardCache(
                os.path.join(scratch, f"cache-{ctx.input_pipeline_id}"),
                max_bytes=config.input.cache_mb << 20,
            )
            caches.append(cache)
        return dataset.train_dataset(
            config.data,
            metadata,
            spec,
            split=config.input.train_split,
            batch_size=ctx.get_per_replica_batch_size(config.batch_size),
            pipeline_id=ctx.input_pipeline_id,
            num_pipelines=ctx.num_input_pipelines,
            shuffle_buffer=config.input.shuffle_buffer,
            cycle_length=config.input.cycle_length,
            seed=seed,
            cache=cache,
            global_batch_size=config.batch_size,
            permute_rows=config.input.permute_rows,
        )

    if single_cpu_replica(strategy):
        # One replica on the CPU: strategy.run takes the batches as they are, and skipping
        # the distributed iterator saves much of the input's CPU per row (figures in
        # benchmarks/RESULTS.md). With a GPU the distributed iterator prefetches to it.
        return iter(input_fn(tf.distribute.InputContext())), caches
    return iter(strategy.distribute_datasets_from_function(input_fn)), caches


def single_cpu_replica(strategy) -> bool:
    """True when ``strategy`` trains one replica, on a CPU device of this process.

    Its input can then be a plain ``tf.data`` iterator: ``strategy.run`` hands a single
    replica its arguments as they are, so the distributed iterator (a per-replica copy and
    prefetch to the device) only costs CPU time.
    """
    import tensorflow as tf

    try:
        devices = strategy.extended.worker_devices
    except RuntimeError:  # the default strategy: ops run on the process's default device
        devices = ("/device:GPU:0" if tf.config.list_logical_devices("GPU") else "/device:CPU:0",)
    return (
        strategy.num_replicas_in_sync == 1
        and len(devices) == 1
        and tf.DeviceSpec.from_string(devices[0]).device_type == "CPU"
    )


def _loss_fn(spec: FeatureSpec):
    """``(per_example_loss(labels, logits), step_metric(labels, logits))`` for the spec's
    label.

    Classification: cross-entropy, and the number of correct predictions. Regression: the
    squared error of the *standardised* target (mean squared error, so every label scale
    trains with the same learning rate), and the sum of squared errors in the label's own
    units (the training RMSE). Sums, not means: the all-reduce adds them over replicas
    exactly.
    """
    import tensorflow as tf

    def per_example(labels, logits):
        if spec.is_regression:
            error = tf.reshape(logits, [-1]) - spec.standardize(labels)
            return tf.square(tf.cast(error, tf.float32))
        if spec.is_binary:
            return tf.nn.sigmoid_cross_entropy_with_logits(
                tf.cast(labels, tf.float32), tf.reshape(logits, [-1])
            )
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)

    def step_metric(labels, logits):
        if spec.is_regression:
            error = spec.destandardize(logits, tf.float64) - labels
            return tf.cast(tf.reduce_sum(tf.square(error)), tf.float32)
        if spec.is_binary:
            predicted = tf.cast(tf.reshape(logits, [-1]) > 0, tf.int64)
        else:
            predicted = tf.argmax(logits, axis=-1)
        return tf.reduce_sum(tf.cast(tf.equal(predicted, labels), tf.float32))

    return per_example, step_metric


def build_train_loop(
    strategy,
    model,
    optimizer,
    spec: FeatureSpec,
    global_batch: int,
    step_var,
    stop_requested=None,
):
    """The distributed training loop: ``train_loop(iterator, steps) -> (loss_sum, metric_sum)``.

    One call runs ``steps`` optimizer steps inside a single ``tf.function`` (a ``tf.range``
    loop: no Python round trip between steps). Each step runs on every replica with
    ``strategy.run``; the loss is averaged over the *global* batch, so gradients summed by the
    all-reduce are the gradients of the global mean loss whatever the number of replicas.
    With several replicas, small sparse (embedding) gradients are made dense first
    (:func:`dense_small_gradients`): the gradients then take one all-reduce per step.
    The summed per-example loss and the summed step metric (correct predictions; for a
    regression the squared errors in label units) come back for summaries (one extra small
    all-reduce per step), and ``step_var`` is incremented once per step.
    Under mixed precision ``optimizer`` is a ``LossScaleOptimizer`` (dynamic loss scaling).

    ``stop_requested`` (from :func:`stop_request_variable`, set to 1 when this process
    receives SIGTERM/SIGINT) ends the call early, at a step every replica agrees on: each
    replica adds the flag, read at the end of its step, to the numbers of that step's
    all-reduce, so every replica sees the same sum after the same step and all of them leave
    the loop after it. No extra collective; a replica never leaves a loop its peers continue
    (which would deadlock the next collective). The steps actually run show in ``step_var``.
    """
    import tensorflow as tf

    per_example_loss, step_metric = _loss_fn(spec)
    # One replica all-reduces nothing: its sparse embedding gradients stay sparse.
    densify = strategy.num_replicas_in_sync > 1

    def step_fn(features, labels):
        with tf.GradientTape() as tape:
            logits = model(model_inputs(model, features), training=True)
            per_example = per_example_loss(labels, logits)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            if model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
            # Under mixed precision a keras.optimizers.LossScaleOptimizer scales the loss up
            # (float16 gradients of a small loss would underflow to zero), and its
            # apply_gradients scales them back, skipping steps that overflowed and adapting
            # the scale. Otherwise scale_loss is the identity. It must be on the tape.
            scaled_loss = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        if densify:
            grads = dense_small_gradients(grads)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        correct = step_metric(labels, logits)
        if stop_requested is None:
            return tf.stack([tf.reduce_sum(per_example), correct])
        # Read after the forward pass, not at the step's start: a signal during most of the
        # step stops after it. Not after the gradients: that would hold back the all-reduce
        # below until the backward pass ends (slower per step on the tabular model).
        with tf.control_dependencies([correct]):
            stopping = tf.cast(stop_requested.read_value(), tf.float32)
        return tf.stack([tf.reduce_sum(per_example), correct, stopping])

    @tf.function
    def train_loop(iterator, steps):
        totals = tf.zeros([2])
        for _ in tf.range(steps):
            per_replica = strategy.run(step_fn, args=next(iterator))
            reduced = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
            totals += reduced[:2]
            step_var.assign_add(1)
            # The same all-reduced number on every replica: all leave after this step.
            if stop_requested is not None and reduced[2] > 0:
                break
        return totals[0], totals[1]

    return train_loop


#: Sparse gradients of variables up to this size are made dense before the all-reduce.
DENSE_GRADIENT_MAX_BYTES = 1 << 20


def dense_small_gradients(grads: list, max_bytes: int = DENSE_GRADIENT_MAX_BYTES) -> list:
    """``grads`` with every ``tf.IndexedSlices`` of a variable up to ``max_bytes`` made dense.

    An ``Embedding`` layer's gradient is an ``IndexedSlices`` (the rows the batch looked up).
    ``MultiWorkerMirroredStrategy`` cannot add those up in one collective: it all-gathers each
    one's row count, then its rows and its indices (three collectives, one after another, per
    embedding per step), while dense gradients go together in a single packed all-reduce.
    With the tabular model's 6 embeddings (5 categorical columns, the player id) that was 18 of
    a step's 20 collectives, each a network round trip: most of a chief + worker step
    (benchmarks/RESULTS.md, "Multi-worker"). A small vocabulary table (the default
    top-100 words x 8 wide is 3 KB) costs nothing to send dense, and the sum, hence the
    update, is the same: the dense form of an ``IndexedSlices`` adds up its duplicate rows,
    which is what the sparse all-reduce and Adam's dense moment updates do too. Tables over
    ``max_bytes`` stay sparse, where sending the whole table would cost more than the round trips.
    """
    import math

    import tensorflow as tf

    out = []
    for grad in grads:
        if isinstance(grad, tf.IndexedSlices) and grad.dense_shape is not None:
            shape = tf.get_static_value(grad.dense_shape)
            if shape is not None and math.prod(shape) * grad.dtype.size <= max_bytes:
                grad = tf.convert_to_tensor(grad)
        out.append(grad)
    return out


class DistributedSteps:
    """The controller's step function: ``steps(n)`` runs ``n`` steps of ``train_loop``.

    Args:
        train_loop: from :func:`build_train_loop`.
        iterator: the distributed input (:func:`distributed_input`).
        state: the model, optimizer and global step ``train_loop`` updates.
        spec: the features and label ``train_loop`` was built for (what its metric sums).
    """

    def __init__(self, train_loop, iterator, state: TrainState, spec: FeatureSpec | None = None):
        self.train_loop = train_loop
        self.iterator = iterator
        self.state = state
        self.spec = spec

    def __call__(self, steps: int) -> LoopOutput:
        import tensorflow as tf

        loss_sum, metric = self.train_loop(self.iterator, tf.constant(steps, dtype=tf.int64))
        regression = self.spec is not None and self.spec.is_regression
        return LoopOutput(
            step=int(self.state.global_step.numpy()),
            loss_sum=float(loss_sum),
            correct=None if regression else float(metric),
            learning_rate=current_learning_rate(self.state.optimizer),
            squared_error=float(metric) if regression else None,
        )


def current_learning_rate(optimizer) -> float:
    """The optimizer's learning rate now (a schedule's current value), as a Python float."""
    import tensorflow as tf

    value = optimizer.learning_rate
    # A constant rate is a Keras variable around a (possibly mirrored) tf.Variable.
    return float(tf.convert_to_tensor(getattr(value, "value", value)))


def measure_all_reduce(strategy, model, repeats: int = 20) -> float:
    """Seconds a step's all-reduces between the replicas take.

    What every training step pays on top of its computation under a multi-replica
    strategy (over gRPC between workers): the gradients' all-reduce (one packed collective:
    the step makes small sparse gradients dense, :func:`dense_small_gradients`), then the
    3-number one of loss, correct predictions and the stop flag; ``repeats`` times in one
    ``tf.function`` loop, after one warm-up. A collective: every replica must call it at the
    same point. 0.0 with a single replica.
    """
    import tensorflow as tf

    if strategy.num_replicas_in_sync < 2:
        return 0.0
    shapes = [(v.shape, v.dtype) for v in model.trainable_variables]

    def all_reduce():
        ctx = tf.distribute.get_replica_context()
        grads = [tf.zeros(shape, dtype) for shape, dtype in shapes]
        first = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)[0]
        with tf.control_dependencies([first]):  # after it, as in the step
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.zeros([3]))

    @tf.function
    def run(n):
        for _ in tf.range(n):
            strategy.run(all_reduce)

    run(tf.constant(2))  # trace and warm up
    started = time.monotonic()
    run(tf.constant(repeats))
    return (time.monotonic() - started) / repeats


def gradient_bytes(model) -> int:
    """Bytes of ``model``'s gradients (what each step all-reduces)."""
    import math

    import numpy as np

    return sum(
        math.prod(v.shape) * np.dtype(str(v.dtype)).itemsize for v in model.trainable_variables
    )


def stop_request_variable():
    """A local int32 flag (not a checkpointed or mirrored variable) that :func:`build_train_loop`
    reads every step; setting it to 1 (from any thread) ends the running loop early."""
    import tensorflow as tf

    return tf.Variable(0, dtype=tf.int32, trainable=False, name="stop_requested")


def build_stop_vote(strategy) -> Callable[[bool], bool]:
    """``vote(stopping) -> any replica stopping``: a one-number all-reduce over replicas.

    Every replica must call it at the same point of the loop (it is a collective), so a
    signal received by one pod stops all of them at the same step.
    """
    import tensorflow as tf

    sum_op = tf.distribute.ReduceOp.SUM

    @tf.function
    def any_replica_stopping(flag):
        votes = strategy.run(tf.identity, args=(flag,))
        return strategy.reduce(sum_op, votes, axis=None)

    def vote(stopping: bool) -> bool:
        flag = tf.constant(1 if stopping else 0, dtype=tf.int32)
        return int(any_replica_stopping(flag)) > 0

    return vote
