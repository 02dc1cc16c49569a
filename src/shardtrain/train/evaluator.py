"""Evaluation of published checkpoints: the sidecar evaluator, and the chief without one.

A :class:`CheckpointEvaluator` builds its own model outside any distribution strategy and
restores only the weights of a checkpoint into it, so the sidecar evaluator replica, the
chief's in-process evaluation and the export all see exactly the published weights.
Every evaluation writes to ``MODEL_DIR/eval``:

* ``metrics-<step>.json``: the metrics of that step (:mod:`shardtrain.train.evaluation`);
* ``metrics.json``: the latest of them; the final step's is the model's result;
* ``sample_predictions.jsonl``: at the final step, the predictions of the first eval records
  keyed by the split key (class probabilities, or a regression's ``prediction`` in the
  label's units), to check the exported SavedModel's serving against.

:func:`run_evaluator` is the evaluator replica's whole life: it never joins the training
collective, evaluates every new checkpoint as it is published and exits after the final one.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from typing import Any

from shardtrain import documents, storage
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.errors import ShardtrainError, TrainingInterrupted
from shardtrain.train import dataset
from shardtrain.train.checkpoints import CheckpointStore
from shardtrain.train.config import TrainConfig
from shardtrain.train.controller import StopFlag
from shardtrain.train.evaluation import MetricsAccumulator, RegressionAccumulator, headline_keys
from shardtrain.train.features import FeatureSpec
from shardtrain.train.models import model_inputs
from shardtrain.train.summaries import Summaries

#: The trainer's log lines keep one logger name, whichever of its modules they come from.
log = logging.getLogger("shardtrain.train.trainer")

METRICS_NAME = "metrics.json"
SAMPLE_PREDICTIONS = "sample_predictions.jsonl"
#: Eval rows whose predictions are written beside the metrics (to check serving against).
SAMPLE_SIZE = 200


class CheckpointEvaluator:
    """Restores checkpoints into its own model (outside any strategy) and evaluates them.

    Used by the sidecar evaluator for every new checkpoint, and by the chief for in-process
    evaluation and for the export, so all three see exactly the published weights.
    """

    def __init__(
        self, config: TrainConfig, metadata: DatasetMetadata, spec: FeatureSpec, scratch: str
    ):
        import tensorflow as tf

        from shardtrain.train.models import build_model

        self.config, self.metadata, self.spec = config, metadata, spec
        self.model = build_model(config.model.name, spec, config.model.hparams())
        self._checkpoint = tf.train.Checkpoint(model=self.model)
        self._cache_dir = os.path.join(scratch, "eval-cache")
        self.summaries: Summaries | None = None

        @tf.function
        def predict(features):
            logits = self.model(model_inputs(self.model, features), training=False)
            if spec.is_regression:
                return spec.destandardize(logits, tf.float64)
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
            The metrics (see :mod:`shardtrain.train.evaluation`) plus ``task``, ``step``,
            ``split``, ``data``.
        """
        cfg = self.config
        started = time.monotonic()
        acc: MetricsAccumulator | RegressionAccumulator = (
            RegressionAccumulator()
            if self.spec.is_regression
            else MetricsAccumulator(self.spec.classes)
        )
        samples: list[dict[str, Any]] = []
        split = cfg.input.eval_split
        with dataset.reading_split(
            cfg.data, self.metadata, split, self._cache_dir, max_bytes=cfg.input.cache_mb << 20
        ) as cache:
            ds = dataset.eval_dataset(
                cfg.data,
                self.metadata,
                self.spec,
                split=split,
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
        if sample:
            samples = self._sample_predictions()
        result = acc.result()
        result.update(
            task=self.spec.task,
            step=step,
            split=cfg.input.eval_split,
            data=cfg.data,
            data_plan=self.metadata.plan,
            seconds=round(time.monotonic() - started, 3),
        )
        shown = headline_keys(result)
        log.info(
            "eval at step %d: %s on %d examples",
            step,
            " ".join(f"{k}={result[k]:.4g}" for k in shown),
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
            self.summaries.scalars(step, {k: result[k] for k in shown})
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
            comp = "GZIP" if self.metadata.compression == "GZIP" else ""
            chunk = sample_chunk_records(self.metadata.record_format, self.spec.image is not None)
            raw = tf.data.TFRecordDataset(local, compression_type=comp).take(SAMPLE_SIZE)
            parse = dataset.record_parser(self.metadata, self.spec)
            rows: list[tuple[Any, Any, Any]] = []  # (key, label, probabilities or value)
            for serialized in raw.batch(chunk):  # a columnar record holds many rows
                features, labels, keys = parse(serialized, with_key=True)
                probs = self._predict(features).numpy()
                rows += zip(keys.numpy(), labels.numpy(), probs, strict=True)
                if len(rows) >= SAMPLE_SIZE:
                    rows = rows[:SAMPLE_SIZE]
                    break
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
        out = []
        for key, label, p in rows:
            if self.spec.is_regression:
                out.append({"key": key.decode(), "label": float(label), "prediction": float(p)})
                continue
            full = [1.0 - float(p), float(p)] if self.spec.is_binary else [float(v) for v in p]
            out.append(
                {"key": key.decode(), "label": self.spec.classes[int(label)], "probabilities": full}
            )
        return out


def sample_chunk_records(record_format: str, is_image: bool) -> int:
    """Records parsed and predicted together for the sample predictions.

    About :data:`SAMPLE_SIZE` rows per call: a columnar record holds up to
    :data:`~shardtrain.data.column_blocks.BLOCK_ROWS` rows, so 200 of them would be ~51,200
    rows in one prediction; images go in small batches, as 200 decoded 224 px images at once
    would need gigabytes of activations.
    """
    if is_image:
        return 32
    if record_format == "columnar":
        from shardtrain.data.column_blocks import BLOCK_ROWS

        return -(-SAMPLE_SIZE // BLOCK_ROWS)
    return SAMPLE_SIZE


def run_evaluator(
    config: TrainConfig,
    metadata: DatasetMetadata,
    spec: FeatureSpec,
    scratch: str,
    stop: StopFlag,
) -> tuple[int, dict[str, Any] | None]:
    """Evaluate every new published checkpoint until the one at ``train_steps``.

    Returns:
        The last evaluated step (``train_steps`` or beyond) and the metrics this process
        computed for it (None when an earlier run had already evaluated it).

    Raises:
        ShardtrainError: no new checkpoint for ``evaluator_timeout_secs``.
        TrainingInterrupted: SIGTERM/SIGINT (nothing to save: exits retryably).
    """
    store = CheckpointStore(config.model_dir, os.path.join(scratch, "ckpt"), max_to_keep=1 << 30)
    evaluator = CheckpointEvaluator(config, metadata, spec, scratch)
    evaluator.summaries = Summaries(config.model_dir, scratch, "eval")
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
            return last_step, result
        if time.monotonic() - last_seen > config.evaluator_timeout_secs:
            raise ShardtrainError(
                f"evaluator: no new checkpoint in {store.uri} for "
                f"{config.evaluator_timeout_secs:g}s (last evaluated step: {last_step})"
            )
        time.sleep(config.evaluator_poll_secs)


def _evaluated_step(model_dir: str) -> int | None:
    """The step of ``model_dir``'s latest metrics (None: none yet); a restarted evaluator
    does not evaluate that checkpoint again."""
    target = storage.join(model_dir, "eval", METRICS_NAME)
    if not storage.exists(target):
        return None
    metrics = documents.check(storage.read_json(target), documents.METRICS, target)
    return int(metrics.get("step", -1))


def final_metrics(
    config: TrainConfig, evaluator: CheckpointEvaluator, step: int, *, sidecar: bool
) -> dict[str, Any]:
    """The metrics of the final ``step``: the sidecar evaluator's, or evaluated here.

    With a ``sidecar`` evaluator replica the chief waits up to ``final_eval_wait_secs`` for
    its ``metrics.json`` of ``step``, then evaluates by itself. Without one, the in-process
    evaluation at ``step`` has normally written it already. ``evaluator`` must hold the
    weights of ``step``.
    """
    target = storage.join(config.model_dir, "eval", METRICS_NAME)
    if sidecar:
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
