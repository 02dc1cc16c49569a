"""``train_and_evaluate``: the TF Estimator contract on ``tf.distribute`` and Keras 3 layers.

What a TF Estimator user relied on, and where it lives here:

* **Driven by TF_CONFIG.** Every replica of a TFJob runs the same command;
  :func:`shardtrain.train.cluster.resolve_role` tells it whether it is the chief, a worker or the
  evaluator, and :func:`shardtrain.train.cluster.make_strategy` gives the training replicas
  ``MirroredStrategy`` (one node, all its GPUs) or ``MultiWorkerMirroredStrategy``.
* **Step-based training** with a custom loop: ``strategy.run`` inside a ``tf.function`` that
  runs ``steps_per_loop`` steps per call, the loss scaled by the *global* batch, input from
  ``distribute_datasets_from_function`` (each worker reads its own shard files). Keras 3's
  ``fit`` is not used: it fails under MultiWorkerMirroredStrategy.
* **Checkpoints that make any restart resume.** Every ``checkpoint_every`` steps and at the
  end, every replica writes a checkpoint; the chief's is published to
  ``MODEL_DIR/checkpoints`` (:mod:`shardtrain.train.checkpoints`). On start every replica restores
  the latest published one by itself, so a pod that is recreated, or the whole job run again,
  continues from there and stops at ``train_steps``.
* **Preemption.** SIGTERM (eviction, preemption, ``kubectl delete pod``) sets a flag; at the
  end of the current loop the replicas agree (a one-number all-reduce), all write a
  checkpoint, and exit with ``128 + signal`` (143) — retryable for ``restartPolicy: ExitCode``.
* **Sidecar evaluation.** The evaluator replica never joins the collective: it evaluates every
  new checkpoint on the eval split and exits after the final one. Without an evaluator the
  chief evaluates every ``eval_every`` steps itself.
* **Outputs** in the model directory: ``train_config.yaml``; ``logs/train`` and ``logs/eval``
  TensorBoard summaries (loss, accuracy, AUC, examples/s, learning rate);
  ``export/<version>/`` SavedModel taking raw features (:mod:`shardtrain.train.export`);
  ``eval/metrics.json`` (:mod:`shardtrain.train.evaluation`) and ``eval/sample_predictions.jsonl``.

Exit codes (see :mod:`shardtrain.errors`): 0 done (or nothing left to do); 1 bad
configuration or data (permanent: do not restart); 3 storage unreachable; 128 + signal after
a checkpoint on SIGTERM/SIGINT (restart to resume).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from shardtrain import storage
from shardtrain.data import sharding
from shardtrain.errors import ConfigError, ShardtrainError, TrainingInterrupted
from shardtrain.train import cluster, dataset, loop
from shardtrain.train.checkpoints import CheckpointStore
from shardtrain.train.config import TrainConfig
from shardtrain.train.controller import Controller, StopFlag
from shardtrain.train.evaluation import MetricsAccumulator
from shardtrain.train.features import FeatureSpec
from shardtrain.train.loop import build_train_loop
from shardtrain.train.models import model_inputs

log = logging.getLogger(__name__)

METRICS_NAME = "metrics.json"
SAMPLE_PREDICTIONS = "sample_predictions.jsonl"
#: Eval rows whose predictions are written beside the metrics (to check serving against).
SAMPLE_SIZE = 200


@dataclass
class TrainResult:
    """What a replica did.

    Attributes:
        role: ``local``, ``chief``, ``worker`` or ``evaluator``.
        step: the global step reached (the last evaluated one for the evaluator).
        start_step: the step training resumed from (0 for a fresh start).
        metrics: the final evaluation metrics, when this replica has them.
        export_uri: the exported SavedModel, when this replica exported it.
        status: ``trained``, ``already-complete`` or ``evaluated``.
    """

    role: str
    step: int
    start_step: int = 0
    metrics: dict[str, Any] | None = None
    export_uri: str | None = None
    status: str = "trained"


# --------------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------------


class _Summaries:
    """TensorBoard writers under ``MODEL_DIR/logs/<name>``, staged locally for ``s3://``."""

    def __init__(self, model_dir: str, scratch: str, name: str, enabled: bool = True):
        import tensorflow as tf

        self.enabled = enabled
        self.remote = storage.join(model_dir, "logs", name)
        native = storage.tf_can_open(model_dir)
        self.local = self.remote if native else os.path.join(scratch, "logs", name)
        self._sync_needed = not native
        self.writer = (
            tf.summary.create_file_writer(self.local)
            if enabled
            else tf.summary.create_noop_writer()
        )

    def scalars(self, step: int, values: dict[str, float]) -> None:
        import tensorflow as tf

        if not self.enabled:
            return
        with self.writer.as_default(step=step):
            for name, value in values.items():
                if value is not None and math.isfinite(value):
                    tf.summary.scalar(name, value)

    def sync(self) -> None:
        """Flush, and upload the event files when TensorFlow cannot write the model dir."""
        if not self.enabled:
            return
        self.writer.flush()
        if self._sync_needed and os.path.isdir(self.local):
            storage.upload_dir(self.local, self.remote)


# --------------------------------------------------------------------------------------------
# Evaluation of checkpoints (sidecar evaluator, and the chief when there is none)
# --------------------------------------------------------------------------------------------


class CheckpointEvaluator:
    """Restores checkpoints into its own model (outside any strategy) and evaluates them.

    Used by the sidecar evaluator for every new checkpoint, and by the chief for in-process
    evaluation and for the export, so all three see exactly the published weights.
    """

    def __init__(self, config: TrainConfig, metadata: dict, spec: FeatureSpec, scratch: str):
        import tensorflow as tf

        from shardtrain.train.models import build_model

        self.config, self.metadata, self.spec = config, metadata, spec
        self.model = build_model(config.model.name, spec, config.model.hparams())
        self._checkpoint = tf.train.Checkpoint(model=self.model)
        self._cache_dir = os.path.join(scratch, "eval-cache")
        self.summaries: _Summaries | None = None

        @tf.function
        def predict(features):
            logits = self.model(model_inputs(self.model, features), training=False)
            if spec.is_binary:
                return tf.sigmoid(tf.reshape(logits, [-1]))
            return tf.nn.softmax(logits, axis=-1)

        self._predict = predict

    def restore(self, local_prefix: str) -> None:
        """Load the model weights of a (local) checkpoint; optimizer state is ignored."""
        self._checkpoint.read(local_prefix).expect_partial()

    def evaluate(self, step: int, *, sample: bool = False) -> dict[str, Any]:
        """Evaluate the restored weights on the eval split; publish metrics and summaries.

        Returns:
            The metrics (see :mod:`shardtrain.train.evaluation`) plus ``step``, ``split``, ``data``.
        """
        cfg = self.config
        cache = None
        if not storage.tf_can_open(cfg.data):
            cache = dataset.ShardCache(self._cache_dir, max_bytes=cfg.input.cache_mb << 20)
        started = time.monotonic()
        acc = MetricsAccumulator(self.spec.classes)
        samples: list[dict[str, Any]] = []
        try:
            ds = dataset.eval_dataset(
                cfg.data,
                self.metadata,
                self.spec,
                split=cfg.input.eval_split,
                # Decoded images are large (224x224x3 float32 = 0.6 MB): evaluate them in
                # training-sized batches, not 1024 at a time.
                batch_size=(
                    min(cfg.eval_batch_size, cfg.batch_size)
                    if self.spec.image is not None
                    else cfg.eval_batch_size
                ),
                cycle_length=cfg.input.cycle_length,
                cache=cache,
            )
            for i, batch in enumerate(ds):
                if cfg.eval_steps and i >= cfg.eval_steps:
                    break
                features, labels = batch
                probs = self._predict(features).numpy()
                acc.update(probs, labels.numpy())
        finally:
            if cache is not None:
                cache.close()
        if sample:
            samples = self._sample_predictions()
        result = acc.result()
        result.update(
            step=step,
            split=cfg.input.eval_split,
            data=cfg.data,
            seconds=round(time.monotonic() - started, 3),
        )
        log.info(
            "eval at step %d: auc=%.4f accuracy=%.4f log_loss=%.4f on %d examples",
            step,
            result["auc"],
            result["accuracy"],
            result["log_loss"],
            result["num_examples"],
        )
        eval_dir = storage.join(cfg.model_dir, "eval")
        storage.write_json(storage.join(eval_dir, f"metrics-{step:08d}.json"), result)
        if samples:
            storage.write_text(
                storage.join(eval_dir, SAMPLE_PREDICTIONS),
                "".join(json.dumps(s) + "\n" for s in samples),
            )
        storage.write_json(storage.join(eval_dir, METRICS_NAME), result)
        if self.summaries is not None:
            self.summaries.scalars(
                step,
                {
                    "auc": result["auc"],
                    "accuracy": result["accuracy"],
                    "log_loss": result["log_loss"],
                },
            )
            self.summaries.sync()
        return result

    def _sample_predictions(self) -> list[dict[str, Any]]:
        """Predictions of the first eval records, keyed by the split key (for serving checks)."""
        import tensorflow as tf

        cfg = self.config
        shards = [
            s
            for s in dataset.split_shards(cfg.data, self.metadata, cfg.input.eval_split)
            if s.num_records
        ][:1]
        local = shards[0].uri
        tmp = None
        if not storage.tf_can_open(local):
            tmp = tempfile.mkdtemp(prefix="shardtrain-sample-")
            local = os.path.join(tmp, storage.basename(shards[0].uri))
            storage.download_file(shards[0].uri, local)
        try:
            comp = "GZIP" if self.metadata.get("compression") == "GZIP" else ""
            # In small batches: 200 decoded 224 px images at once would need gigabytes of
            # activations.
            chunk = 32 if self.spec.image is not None else SAMPLE_SIZE
            raw = tf.data.TFRecordDataset(local, compression_type=comp).take(SAMPLE_SIZE)
            rows = []
            for serialized in raw.batch(chunk):
                features, labels, keys = self.spec.parse_examples(serialized, with_key=True)
                probs = self._predict(features).numpy()
                rows += zip(keys.numpy(), labels.numpy(), probs, strict=True)
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
        out = []
        for key, label, p in rows:
            full = [1.0 - float(p), float(p)] if self.spec.is_binary else [float(v) for v in p]
            out.append(
                {"key": key.decode(), "label": self.spec.classes[int(label)], "probabilities": full}
            )
        return out


# --------------------------------------------------------------------------------------------
# The sidecar evaluator
# --------------------------------------------------------------------------------------------


def run_evaluator(
    config: TrainConfig, metadata: dict, spec: FeatureSpec, scratch: str, stop: StopFlag
) -> TrainResult:
    """Evaluate every new published checkpoint until the one at ``train_steps``.

    Raises:
        ShardtrainError: no new checkpoint for ``evaluator_timeout_secs``.
        TrainingInterrupted: SIGTERM/SIGINT (nothing to save: exits retryably).
    """
    store = CheckpointStore(config.model_dir, os.path.join(scratch, "ckpt"), max_to_keep=1 << 30)
    evaluator = CheckpointEvaluator(config, metadata, spec, scratch)
    evaluator.summaries = _Summaries(config.model_dir, scratch, "eval")
    last_step = _evaluated_step(config.model_dir)
    last_seen = time.monotonic()
    result: dict[str, Any] | None = None
    log.info("evaluator: watching %s for checkpoints", store.uri)
    while True:
        if stop.signum:
            raise TrainingInterrupted("evaluator interrupted", stop.signum)
        info = store.latest()
        if info is not None and info.step != last_step:
            try:
                prefix = store.fetch(info)
            except ShardtrainError as exc:  # pruned between pointer read and download: retry
                log.warning("evaluator: checkpoint %d vanished (%s); retrying", info.step, exc)
                time.sleep(config.evaluator_poll_secs)
                continue
            evaluator.restore(prefix)
            final = info.step >= config.train_steps
            result = evaluator.evaluate(info.step, sample=final)
            store.discard_local(info.step)
            last_step = info.step
            last_seen = time.monotonic()
        if last_step is not None and last_step >= config.train_steps:
            log.info("evaluator: final checkpoint (step %d) evaluated; done", last_step)
            return TrainResult("evaluator", last_step, metrics=result, status="evaluated")
        if time.monotonic() - last_seen > config.evaluator_timeout_secs:
            raise ShardtrainError(
                f"evaluator: no new checkpoint in {store.uri} for "
                f"{config.evaluator_timeout_secs:g}s (last evaluated step: {last_step})"
            )
        time.sleep(config.evaluator_poll_secs)


def _evaluated_step(model_dir: str) -> int | None:
    target = storage.join(model_dir, "eval", METRICS_NAME)
    if not storage.exists(target):
        return None
    return int(storage.read_json(target).get("step", -1))


# --------------------------------------------------------------------------------------------
# Training replicas (local, chief, workers)
# --------------------------------------------------------------------------------------------


def _train(
    config: TrainConfig,
    role: cluster.Role,
    metadata: dict,
    spec: FeatureSpec,
    scratch: str,
    stop: StopFlag,
) -> TrainResult:
    """A training replica (local, chief or worker): restore, train, and on the chief export."""
    from shardtrain.train.export import export_saved_model

    store = CheckpointStore(
        config.model_dir, os.path.join(scratch, "ckpt"), max_to_keep=config.max_checkpoints
    )
    latest = store.latest()
    start_step = latest.step if latest else 0
    # Every replica decides "already done" by itself, before joining any collective: a chief
    # that left while workers waited for it would fail the whole job.
    if latest and latest.step >= config.train_steps and _complete(config):
        log.info(
            "%s already holds step %d, its export and metrics: nothing to do",
            config.model_dir,
            latest.step,
        )
        return TrainResult(role.task_type, latest.step, latest.step, status="already-complete")
    # The strategy next: it must exist before anything initialises the TF runtime.
    strategy, mixed = _start_strategy(
        config, role, spec, resume_step=latest.step if latest else None
    )
    state = loop.build_training_state(strategy, config, spec, mixed=mixed)
    if latest:
        state.checkpoint.read(store.fetch(latest)).assert_existing_objects_matched()
        log.info("restored checkpoint step %d from %s", latest.step, store.uri)

    # A restart reads the shards in a new order rather than replaying the first batches.
    iterator, caches = loop.distributed_input(
        strategy, config, metadata, spec, scratch, seed=config.seed + start_step
    )
    train_loop = build_train_loop(
        strategy, state.model, state.optimizer, spec, config.batch_size, state.global_step
    )
    vote = loop.build_stop_vote(strategy)
    summaries = _Summaries(config.model_dir, scratch, "train", enabled=role.is_chief)
    evaluator = None
    if role.is_chief:
        evaluator = CheckpointEvaluator(config, metadata, spec, scratch)
        evaluator.summaries = _Summaries(config.model_dir, scratch, "eval")

    def save(step: int) -> None:
        state.checkpoint.write(store.local_prefix(step))  # every replica (may be collective)
        if role.is_chief:
            store.publish(step, final=step >= config.train_steps)
        else:
            store.discard_local(step)

    def evaluate(step: int, final: bool) -> None:
        evaluator.restore(store.local_prefix(step))
        evaluator.evaluate(step, sample=final)

    controller = Controller(
        loop.DistributedSteps(train_loop, iterator, state),
        train_steps=config.train_steps,
        steps_per_loop=config.steps_per_loop,
        checkpoint_every=config.checkpoint_every,
        eval_every=config.eval_every,
        global_batch=config.batch_size,
        save=save,
        vote=vote,
        stop=stop,
        # The chief evaluates in process only when no evaluator replica does.
        evaluate=evaluate if evaluator is not None and not role.has_evaluator else None,
        summaries=summaries,
        checkpoint_uri=store.uri,
    )
    try:
        step = controller.run(int(state.global_step.numpy()))
    finally:
        for cache in caches:
            cache.close()

    result = TrainResult(role.task_type, step, start_step)
    if evaluator is None:
        return result
    evaluator.restore(store.local_prefix(step))
    result.export_uri = export_saved_model(
        evaluator.model,
        spec,
        config.model_dir,
        step=step,
        extra={"train_config": config.to_dict(), "data": config.data},
    )
    result.metrics = _final_metrics(config, role, evaluator, step)
    summaries.sync()
    return result


def _start_strategy(
    config: TrainConfig, role: cluster.Role, spec: FeatureSpec, *, resume_step: int | None
):
    """The replica's strategy, then the global random seed and precision policy.

    The strategy comes first: it must exist before anything initialises the TF runtime.
    The chief saves the resolved configuration once the batch is known to split evenly.

    Returns:
        The strategy, and whether to train in mixed precision.
    """
    strategy = cluster.make_strategy(role, devices=config.devices or None)
    import keras

    replicas = strategy.num_replicas_in_sync
    if config.batch_size % replicas:
        raise ConfigError(
            f"train: batch_size {config.batch_size} is not divisible by the {replicas} "
            "replicas in sync (workers x devices)"
        )
    if role.is_chief:
        config.save()
    log.info(
        "%s: %d replica(s) in sync, global batch %d, %s",
        role.describe(),
        replicas,
        config.batch_size,
        f"resuming from step {resume_step}" if resume_step is not None else "starting from scratch",
    )

    keras.utils.set_random_seed(config.seed)
    mixed = loop.use_mixed_precision(config, spec)
    if mixed:
        keras.mixed_precision.set_global_policy("mixed_float16")
        log.info("mixed precision: float16 compute, float32 variables, dynamic loss scaling")
    return strategy, mixed


def _final_metrics(
    config: TrainConfig, role: cluster.Role, evaluator: CheckpointEvaluator, step: int
) -> dict[str, Any]:
    """The metrics of the final step: the sidecar evaluator's, or evaluated here."""
    target = storage.join(config.model_dir, "eval", METRICS_NAME)
    if role.has_evaluator:
        deadline = time.monotonic() + config.final_eval_wait_secs
        while time.monotonic() < deadline:
            if storage.exists(target):
                metrics = storage.read_json(target)
                if metrics.get("step") == step:
                    return metrics
            time.sleep(1.0)
        log.warning(
            "the evaluator did not report step %d within %.0fs: evaluating here",
            step,
            config.final_eval_wait_secs,
        )
    elif storage.exists(target):
        metrics = storage.read_json(target)
        if metrics.get("step") == step:
            return metrics
    return evaluator.evaluate(step, sample=True)


def finished_step(model_dir: str) -> int | None:
    """The step a finished training left in ``model_dir``: the lower of its export's and its
    final metrics' steps; None when either is missing."""
    from shardtrain.train.export import EXPORT_POINTER

    pointer = storage.join(model_dir, "export", EXPORT_POINTER)
    metrics = storage.join(model_dir, "eval", METRICS_NAME)
    if not (storage.exists(pointer) and storage.exists(metrics)):
        return None
    steps = [storage.read_json(uri).get("step") for uri in (pointer, metrics)]
    if not all(isinstance(s, int) for s in steps):
        return None
    return min(steps)


def _complete(config: TrainConfig) -> bool:
    """The model dir has the final export and final metrics (a finished job)."""
    done = finished_step(config.model_dir)
    return done is not None and done >= config.train_steps


def train_and_evaluate(config: TrainConfig, environ: dict[str, str] | None = None) -> TrainResult:
    """Run this replica's part of the job described by ``TF_CONFIG``.

    Every replica of a job calls this with the same configuration: the chief and workers
    train together, the evaluator evaluates checkpoints, a single process does both.

    Args:
        config: the resolved configuration (:func:`shardtrain.train.config.resolve_config`).
        environ: the environment holding ``TF_CONFIG`` (default: ``os.environ``).

    Returns:
        What this replica did.

    Raises:
        ConfigError: a ``TF_CONFIG`` or configuration that makes no sense (exit 1).
        DataError: the dataset is not committed, lacks the splits, or cannot be trained on.
        TrainingInterrupted: SIGTERM/SIGINT; a checkpoint was written (exit 128 + signal).
    """
    config.validate()
    role = cluster.resolve_role(environ)
    log.info("role: %s", role.describe())
    metadata = sharding.load_metadata(config.data)
    spec = FeatureSpec.from_metadata(
        metadata,
        exclude=config.input.exclude_columns,
        where=config.data,
        image_size=config.model.image_size,
    )
    for split in (config.input.train_split, config.input.eval_split):
        dataset.split_shards(config.data, metadata, split)  # fail early on a missing split
    scratch = tempfile.mkdtemp(prefix=f"shardtrain-{role.task_type}-{role.task_index}-")
    stop = StopFlag()
    try:
        with stop.installed():
            if role.is_evaluator:
                return run_evaluator(config, metadata, spec, scratch, stop)
            return _train(config, role, metadata, spec, scratch, stop)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
