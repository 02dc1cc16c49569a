"""``train_and_evaluate``: the TF Estimator contract on ``tf.distribute`` and Keras 3 layers.

What a TF Estimator user relied on, and where it lives here:

* **Driven by TF_CONFIG.** Every replica of a TFJob runs the same command;
  :func:`shardtrain.train.cluster.resolve_role` tells it whether it is the chief, a worker or the
  evaluator, and :func:`shardtrain.train.cluster.make_strategy` gives the training replicas
  ``MirroredStrategy`` (one node, all its GPUs) or ``MultiWorkerMirroredStrategy``.
* **Step-based training** with a custom loop (:mod:`shardtrain.train.loop`): ``strategy.run``
  inside a ``tf.function`` that runs ``steps_per_loop`` steps per call, the loss scaled by the
  *global* batch, input from ``distribute_datasets_from_function`` (each worker reads its own
  shard files). Keras 3's ``fit`` is not used: it fails under MultiWorkerMirroredStrategy.
* **Checkpoints that make any restart resume.** Every ``checkpoint_every`` steps and at the
  end, every replica writes a checkpoint; the chief's is published to
  ``MODEL_DIR/checkpoints`` (:mod:`shardtrain.train.checkpoints`). On start every replica restores
  the latest published one by itself, so a pod that is recreated, or the whole job run again,
  continues from there and stops at ``train_steps``.
* **Preemption.** SIGTERM (eviction, preemption, ``kubectl delete pod``) to any replica sets
  its flag, which the running loop reads every step and adds to that step's all-reduce: all
  replicas leave the loop after the same step (about one step after the signal, however long
  ``steps_per_loop`` is), agree once more (a one-number all-reduce, which also covers a
  signal between loops), all write a checkpoint at that step, and exit with
  ``128 + signal`` (143) — retryable for
  ``restartPolicy: ExitCode``. Under ``MultiWorkerMirroredStrategy`` TensorFlow's preemption
  notifier takes SIGTERM when the strategy is created; the flag takes it back right after
  (:meth:`shardtrain.train.controller.StopFlag.reclaim`).
* **Lost peers are retryable.** When a chief or worker dies, the survivors' collective fails
  (a connection reset, or the coordination service's missed heartbeats abort it, so nobody
  waits forever); they exit with 200 (:class:`shardtrain.errors.PeerLostError`), retryable,
  and every recreated replica resumes from the last published checkpoint.
* **Sidecar evaluation** (:mod:`shardtrain.train.evaluator`). The evaluator replica never joins
  the collective: it evaluates every new checkpoint on the eval split and exits after the
  final one. Without an evaluator the chief evaluates every ``eval_every`` steps itself.
* **Outputs** in the model directory: ``train_config.yaml``; ``logs/train`` and ``logs/eval``
  TensorBoard summaries (loss, accuracy and AUC, or a regression's RMSE, MAE and R²;
  examples/s, learning rate);
  ``export/<version>/`` SavedModel taking raw features (:mod:`shardtrain.train.export`);
  ``eval/metrics.json`` (:mod:`shardtrain.train.evaluation`) and ``eval/sample_predictions.jsonl``.

The intervals (checkpoints, evaluation, summaries, the stop vote, NaN checks) belong to
:class:`shardtrain.train.controller.Controller`, which drives the step function of
:mod:`shardtrain.train.loop`; this module wires them for each role.

Exit codes (see :mod:`shardtrain.errors`): 0 done (or nothing left to do); 1 bad
configuration or data (permanent: do not restart); 3 storage unreachable; 128 + signal after
a checkpoint on SIGTERM/SIGINT (restart to resume); 200 a peer of the collective was lost
(restart every replica to resume).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

from shardtrain import storage
from shardtrain.data import verify
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.errors import ConfigError, ShardtrainError, peer_lost
from shardtrain.train import cluster, dataset, loop
from shardtrain.train.checkpoints import CheckpointStore
from shardtrain.train.config import CONFIG_NAME, TrainConfig
from shardtrain.train.controller import Controller, StopFlag
from shardtrain.train.evaluator import (
    METRICS_NAME,
    CheckpointEvaluator,
    final_metrics,
    run_evaluator,
)
from shardtrain.train.features import FeatureSpec
from shardtrain.train.image_size import image_size_from_stats
from shardtrain.train.loop import build_train_loop
from shardtrain.train.status_report import StatusReport
from shardtrain.train.summaries import Summaries

__all__ = [
    "TrainResult",
    "finished_step",
    "log_features",
    "resolve_image_size",
    "train_and_evaluate",
]

log = logging.getLogger(__name__)


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


def _train(
    config: TrainConfig,
    role: cluster.Role,
    metadata: DatasetMetadata,
    spec: FeatureSpec,
    scratch: str,
    stop: StopFlag,
) -> TrainResult:
    """A training replica (local, chief or worker): restore, train, and on the chief export."""
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
    if latest is None and role.is_chief:
        _check_model_dir(config.model_dir)
    # The strategy next: it must exist before anything initialises the TF runtime.
    strategy, mixed = _start_strategy(
        config, role, spec, resume_step=latest.step if latest else None
    )
    # MultiWorkerMirroredStrategy has just let TensorFlow's preemption notifier take SIGTERM
    # from the flag; take it back, or a signal would be logged by TF and otherwise ignored.
    stop.reclaim()
    state = loop.build_training_state(strategy, config, spec, mixed=mixed)
    if latest:
        local = store.fetch(latest)
        try:
            state.checkpoint.read(local).assert_existing_objects_matched()
        except Exception as exc:
            raise _mismatch(store.uri, latest.step, spec) from exc
        log.info("restored checkpoint step %d from %s", latest.step, store.uri)

    # A restart reads the shards in a new order rather than replaying the first batches.
    iterator, caches = loop.distributed_input(
        strategy, config, metadata, spec, scratch, seed=config.seed + start_step
    )
    # A signal reaches the running loop at its next step, not at the end of the loop.
    stop_requested = loop.stop_request_variable()
    stop.on_stop(lambda _signum: stop_requested.assign(1))
    train_loop = build_train_loop(
        strategy,
        state.model,
        state.optimizer,
        spec,
        config.batch_size,
        state.global_step,
        stop_requested=stop_requested,
    )
    vote = loop.build_stop_vote(strategy)
    # Every replica at the same point: a collective.
    collective = loop.measure_all_reduce(strategy, state.model)
    if collective:
        size = loop.gradient_bytes(state.model)
        log.info(
            "all-reduces of the gradients (%.2f MB) and the loss between %d replicas: "
            "%.2f ms a step",
            size / 1e6,
            strategy.num_replicas_in_sync,
            collective * 1e3,
        )
    summaries = Summaries(config.model_dir, scratch, "train", enabled=role.is_chief)
    evaluator = None
    if role.is_chief:
        evaluator = CheckpointEvaluator(config, metadata, spec, scratch)
        evaluator.summaries = Summaries(config.model_dir, scratch, "eval")

    def save(step: int) -> None:
        state.checkpoint.write(store.local_prefix(step))  # every replica (may be collective)
        if role.is_chief:
            store.publish(step, final=step >= config.train_steps)
        else:
            store.discard_local(step)

    def evaluate(step: int, final: bool) -> dict[str, Any]:
        assert evaluator is not None  # only the chief evaluates in process
        evaluator.restore(store.local_prefix(step))
        return evaluator.evaluate(step, sample=final)

    controller = Controller(
        loop.DistributedSteps(train_loop, iterator, state, spec),
        train_steps=config.train_steps,
        steps_per_loop=config.loop_steps,
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
        collective_seconds=collective,
        status=StatusReport.from_environ() if role.is_chief else None,
    )
    try:
        step = controller.run(int(state.global_step.numpy()))
    except Exception as exc:  # a corrupt shard: TensorFlow's error does not name the file
        splits = (config.input.train_split, config.input.eval_split)
        if (error := dataset.input_error(exc, config.data, metadata, splits, caches)) is None:
            raise
        raise error from exc
    finally:
        for cache in caches:
            cache.close()

    result = TrainResult(role.task_type, step, start_step)
    if evaluator is None:
        return result
    result.export_uri, result.metrics = _export(config, role, spec, store, evaluator, step)
    summaries.sync()
    return result


#: What training writes in a model directory (relative paths); anything else is foreign.
_MODEL_DIR_LAYOUT = re.compile(r"(?:train_config\.yaml|(?:checkpoints|logs|eval|export)/.+)")


def _check_model_dir(model_dir: str) -> None:
    """Refuse to start a model in a directory holding files that training did not write:
    it would overwrite a user's own ``train_config.yaml`` or ``eval/metrics.json`` among
    them (the sharder refuses a foreign ``--output`` the same way)."""
    base = storage.filesystem(model_dir)[1].rstrip("/") + "/"
    files = [storage.filesystem(u)[1].removeprefix(base) for u in storage.walk_files(model_dir)]
    foreign = [f for f in files if not _MODEL_DIR_LAYOUT.fullmatch(f)]
    if foreign:
        shown = ", ".join(foreign[:3]) + (
            f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        )
        raise ConfigError(
            f"{model_dir}: holds files that are not part of a shardtrain model ({shown}); "
            "training writes train_config.yaml, checkpoints/, logs/, eval/ and export/ there: "
            "choose another --model-dir or move them away"
        )


def _mismatch(uri: str, step: int, spec: FeatureSpec) -> ConfigError:
    """The one line for a checkpoint whose variables do not fit the model built now."""
    auto = [o.column for o in spec.left_out if o.automatic]
    hint = (
        "; a model directory trained by a shardtrain that kept the columns now left out "
        f"as carrying no signal resumes with {' '.join(f'--include {c!r}' for c in auto)}"
        if auto
        else ""
    )
    if spec.dates:
        named = ", ".join(repr(d.name) for d in spec.dates)
        hint += f"; {named} now read as time (earlier versions: a vocabulary) cannot resume"
    return ConfigError(
        f"{uri}: checkpoint step {step} does not fit the model built for these "
        f"{len(spec.feature_names)} features (other features, model or settings){hint}; "
        "or train into a new --model-dir"
    )


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
        below = config.batch_size // replicas * replicas
        choices = f"{below} or {below + replicas}" if below else f"{replicas}"
        raise ConfigError(
            f"train: batch_size {config.batch_size} is not divisible by the {replicas} "
            f"replicas in sync (training workers x devices per worker; the evaluator is not "
            f"one): the global batch must split evenly, use --batch-size {choices}"
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


def _export(
    config: TrainConfig,
    role: cluster.Role,
    spec: FeatureSpec,
    store: CheckpointStore,
    evaluator: CheckpointEvaluator,
    step: int,
) -> tuple[str, dict[str, Any]]:
    """The chief's hand-off after the final checkpoint: export its weights, final metrics."""
    from shardtrain.train.export import export_saved_model

    evaluator.restore(store.local_prefix(step))
    export_uri = export_saved_model(
        evaluator.model,
        spec,
        config.model_dir,
        step=step,
        extra={"train_config": config.to_dict(), "data": config.data},
        dataset=config.data,
    )
    return export_uri, final_metrics(config, evaluator, step, sidecar=role.has_evaluator)


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


def resolve_image_size(config: TrainConfig, metadata: DatasetMetadata) -> TrainConfig:
    """``config`` with ``model.image_size`` set for an image dataset, and the choice logged.

    An explicit size (``--image-size``, a config file) wins. Otherwise the size saved in
    ``MODEL_DIR/train_config.yaml`` by an earlier run of this model (a resumed run keeps
    its size), else the size the dataset's statistics suggest
    (:func:`~shardtrain.train.image_size.image_size_from_stats`). Every replica resolves the
    same size, and the chief saves it in ``train_config.yaml``, so a restart, the evaluator
    and the export all use it. Tabular datasets: ``config`` unchanged.
    """
    images = [c.name for c in metadata.schema.columns if c.type == "image"]
    if not images:
        return config
    size = config.model.image_size
    saved_size = _saved_image_size(config.model_dir)
    if size is not None:
        reason = "--image-size"
        if saved_size is not None and saved_size != size:
            log.warning(
                "image size %d (--image-size) differs from the %d this model directory was "
                "trained at (train_config.yaml): restored weights see a new input size",
                size,
                saved_size,
            )
    elif saved_size is not None:
        size, reason = saved_size, f"as saved in {config.model_dir}'s train_config.yaml"
    else:
        size, why = image_size_from_stats(metadata.stats.columns.get(images[0]))
        reason = f"from the data: {why}"
    batch_mb = config.batch_size * size * size * 3 * 4 / (1 << 20)
    log.info(
        "image size %d %s (--image-size to override); a decoded batch of %d takes %.0f MB",
        size,
        reason,
        config.batch_size,
        batch_mb,
    )
    return dataclasses.replace(config, model=dataclasses.replace(config.model, image_size=size))


def _saved_image_size(model_dir: str) -> int | None:
    """``model.image_size`` of the ``train_config.yaml`` in ``model_dir``; None when there is
    none (read alone: a file of another version, with settings since renamed, still counts)."""
    import yaml

    target = storage.join(model_dir, CONFIG_NAME)
    if not storage.exists(target):
        return None
    try:
        saved = yaml.safe_load(storage.read_text(target))
    except yaml.YAMLError:
        return None
    size = ((saved or {}).get("model") or {}).get("image_size")
    return size if type(size) is int else None


def log_features(spec: FeatureSpec) -> None:
    """Log the features, one line per column left out (with the flag that keeps it), and
    the input names of the columns TensorFlow knows by another name."""
    if spec.image is not None:
        log.info("features: image input '%s'", spec.image.name)
        return
    log.info(
        "features: %d numeric, %d categorical; label '%s'; %d column(s) left out",
        len(spec.numeric),
        len(spec.categorical),
        spec.label,
        len(spec.left_out),
    )
    for out in spec.left_out:
        keep = f"; --include '{out.column}' keeps it" if out.automatic else ""
        log.info("column '%s' left out of the features: %s%s", out.column, out.describe(), keep)
    if spec.renamed_inputs:
        log.info(
            "TensorFlow names of the columns it does not take as they are (export inputs): %s",
            ", ".join(f"'{k}' → {v}" for k, v in spec.renamed_inputs.items()),
        )


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
        PeerLostError: another replica of the collective went away (exit 200, retryable).
    """
    config.validate()
    role = cluster.resolve_role(environ)
    log.info("role: %s", role.describe())
    metadata = DatasetMetadata.load(config.data)
    config = resolve_image_size(config, metadata)
    spec = FeatureSpec.from_metadata(
        metadata,
        exclude=config.input.exclude_columns,
        include=config.input.include_columns,
        where=config.data,
        image_size=config.model.image_size,
        task=config.task,
    )
    log_features(spec)
    splits = (config.input.train_split, config.input.eval_split)
    for split in splits:
        dataset.split_shards(config.data, metadata, split)  # fail early on a missing split
    # A deleted or cut-short shard: one line now, not a traceback when the reader gets there.
    verify.require_shards(config.data, metadata, splits)
    scratch = tempfile.mkdtemp(prefix=f"shardtrain-{role.task_type}-{role.task_index}-")
    stop = StopFlag()
    try:
        with stop.installed():
            if role.is_evaluator:
                step, metrics = run_evaluator(config, metadata, spec, scratch, stop)
                return TrainResult("evaluator", step, metrics=metrics, status="evaluated")
            try:
                return _train(config, role, metadata, spec, scratch, stop)
            except ShardtrainError:
                raise
            except Exception as exc:
                lost = peer_lost(exc, role.describe()) if role.has_peers else None
                if lost is None:
                    raise
                raise lost from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
