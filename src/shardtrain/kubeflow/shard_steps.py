"""The sharding steps of the pipeline ``csv_to_model``: the fan-out (``plan_shards`` →
:func:`plan_step`), one shard worker (``shard`` → :func:`shard_step`), ``settle_shards``
(→ :func:`settle_step`) and ``finalize_shards`` (→ :func:`finalize_step`); the table of
every step is in :mod:`shardtrain.kubeflow.steps`.

A module of their own, light to import (the configuration, storage and the listing; the
sharder only inside the steps that shard, settle or commit), because these steps are on the
critical path of every run and a step pod pays for every module its body imports: the
fan-out only lists the sources, and the finalize step, when the settle step committed and
checked the dataset, only writes what it handed over. The other steps are in
:mod:`shardtrain.kubeflow.steps`, which re-exports these.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from shardtrain import documents, storage
from shardtrain.errors import ConfigError, DataError, ShardtrainError, one_line
from shardtrain.kubeflow import pods
from shardtrain.options import from_params
from shardtrain.progress import setup_logging

if TYPE_CHECKING:
    from shardtrain.data import sharding
    from shardtrain.data.metadata import DatasetMetadata

log = logging.getLogger(__name__)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Around a step's call in its component's body: a user error
    (:class:`~shardtrain.errors.ShardtrainError`: a bad parameter, missing data, a failed
    job) ends the step's process with one line on stderr and the error's exit code, as the
    ``shardtrain`` command does, instead of a traceback in the step's log; anything else (a
    bug) propagates with its traceback.

    Written to ``sys.stderr`` itself: ``kfp.local`` replaces ``print`` while a step runs.
    """
    try:
        yield
    except ShardtrainError as exc:
        sys.stderr.write(f"error: {one_line(exc)}\n")
        sys.stderr.flush()
        raise SystemExit(exc.exit_code) from None


def _setup_logging() -> None:
    """INFO logs on stderr in a step's process (a component body starts with no handler)."""
    setup_logging()


def cpu_count(quantity: str) -> int:
    """Whole CPUs in a Kubernetes CPU quantity (``"4"``, ``"3500m"``, ``"0.5"``), at least 1.

    A pod's ``os.cpu_count()`` is the node's, not its share; the shard step sizes its process
    pool from the CPU it requests instead.

    Raises:
        ConfigError: not a CPU quantity.
    """
    try:
        value = pods.quantity(quantity)
    except ConfigError:
        raise ConfigError(f"'{quantity}' is not a CPU quantity (e.g. 4, 3500m, 0.5)") from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"CPU quantity '{quantity}' must be positive")
    return max(1, int(value))


def shard_config(options: Mapping[str, Any], **run: Any) -> sharding.ShardConfig:
    """The sharder's configuration from the pipeline's sharding parameters, the same in every
    step (the plan and each worker must agree on the sources, schema and tasks).

    Args:
        options: pipeline parameters carrying :class:`~shardtrain.data.sharding.ShardConfig`
            fields, by the names and in the user form of the fields' specs
            (:func:`shardtrain.options.from_params`: ``task_mb`` → ``task_bytes``, ``''`` or
            ``0`` → not set); a field left out keeps its default.
        **run: how the run is spread, which the graph sets: ``worker_index``,
            ``num_workers``, ``processes``.

    A defaulted record format keeps a per-row dataset already at the dataset URI per row:
    :func:`~shardtrain.data.sharding.keep_stored_layout`, which the sharder's entry points
    (``shard``, ``settle``) apply themselves and :func:`plan_step` applies before it plans.

    Raises:
        ConfigError: an unknown parameter or an invalid value.
    """
    from shardtrain.data.shard_config import ShardConfig  # not the sharder: no numba

    return ShardConfig(**from_params(ShardConfig, options), **run)


def _spread(config: sharding.ShardConfig, num_workers: int) -> int:
    """The run's shard worker count: at most one per task the listing promises.

    :func:`~shardtrain.data.task_rule.listed_tasks` counts the tasks from the file sizes
    alone; :func:`plan_step`, every :func:`shard_step` and :func:`settle_step` compute it
    alike from the same listing, and the workers pick their tasks by it (task ``t`` runs on
    worker ``t % n``), so every task has a worker whatever the plan's own count turns out to
    be. For sources the listing cannot count (Parquet, images) it is ``num_workers``.

    Raises:
        ConfigError: ``num_workers`` is below 1, or an option is invalid.
        DataError, StorageError: listing the sources failed (no file matches...).
    """
    from shardtrain.data import task_rule

    if num_workers < 1:
        raise ConfigError(f"shard_workers must be at least 1, not {num_workers}")
    listed = task_rule.listed_tasks(config)
    # At least one, as the fan-out (plan_step): worker 0 runs whatever the plan holds.
    return num_workers if listed is None else max(1, min(num_workers, listed))


def plan_step(*, num_workers: int, **options: Any) -> list[int]:
    """Choose the shard workers of the run from the listing of its sources.

    Reads no data: the sources' sizes give the tasks (:func:`_spread`), and the workers get
    one each, up to ``num_workers``. Each worker plans the run itself (the plan is
    deterministic: every worker builds the same one and stores it as ``_plan.json``), so the
    sample's schema, the label and the output are checked by the workers, in parallel,
    instead of by one pod before them all: this step only keeps the fan-out from starting
    workers that would have nothing to do, and fails once on what the listing shows (an
    invalid option, a pattern that matches no file, a missing file). For Parquet and images,
    whose tasks the listing cannot count, it plans the run (as the workers will, without
    storing it) and returns one worker per task.

    Before that, it checks every parameter of the run
    (:func:`shardtrain.kubeflow.parameters.check_arguments`: thresholds, limits, quantities,
    the training job's settings, locations pods can read), so that a run a later step would
    refuse ends here, before sharding or training.

    Args:
        num_workers: shard workers asked for (the pipeline's ``shard_workers``).
        **options: the pipeline's sharding parameters (``sources``, ``dataset_uri``,
            ``label``, ``splits``, ``task_mb``...: see :func:`shard_config`), the same as
            every :func:`shard_step` gets, and the other pipeline parameters, by name, to
            check (:data:`~shardtrain.kubeflow.parameters.CHECKED`; one left out keeps the
            pipeline's default; ``local`` left out checks the locations as a local run's).

    Returns:
        The worker indices to fan out over, ``[0, 1, …]``: at least one.

    Raises:
        ConfigError, DataError, StorageError: the inputs cannot be sharded as asked, or a
            parameter is invalid.
    """
    from shardtrain.data import task_rule
    from shardtrain.kubeflow.parameters import CHECKED, check_arguments

    _setup_logging()
    checked = {p.name: options.pop(p.name) for p in CHECKED if p.name in options}
    # The run's parameters first: a bad one ends the run here, before anything costs.
    check_arguments(
        {**options, **checked, "shard_workers": num_workers},
        cluster=checked.get("local") is False,
    )
    config = shard_config(options)
    workers = _spread(config, int(num_workers))
    if not task_rule.counts_by_listing(config):
        from shardtrain.data import sharding

        plan = sharding.build_plan(sharding.keep_stored_layout(config))
        workers = min(workers, len(plan.tasks))
    # Never none: KFP's driver fails on dsl.Collected of a loop without iterations (a run of
    # no task still has one worker, which commits the empty dataset or says what is wrong).
    workers = max(1, workers)
    log.info(
        "%d shard worker(s)%s",
        workers,
        f" (of {num_workers} asked for: one per task)" if workers < num_workers else "",
    )
    return list(range(workers))


def check_inputs(options: Mapping[str, Any]) -> None:
    """Plan the run from its sources as a shard worker will, storing nothing: for a run
    started on this machine (``pipeline run-local``, ``demo``), whose sources it can read.

    A label or key column the sources lack, a pattern that matches no file, or a sample that
    cannot be read ends the run here, in the worker's own one line, before any step starts
    (and before anything is written at the dataset URI). On a cluster the plan step reads no
    data (:func:`plan_step`) and the shard workers find the same, seconds in, before training.

    Args:
        options: the pipeline's sharding parameters (:data:`parameters.SHARDING` names).

    Raises:
        ConfigError, DataError, StorageError: as a shard worker's plan.
    """
    from shardtrain.data import sharding

    sharding.build_plan(sharding.keep_stored_layout(shard_config(options)))


def shard_step(*, worker_index: int, num_workers: int, cpu: str, **options: Any) -> str:
    """Run shard worker ``worker_index`` of ``num_workers`` (its tasks, in ``cpu`` processes).

    Re-running resumes: committed tasks are skipped, and a complete dataset is left alone.

    Args:
        worker_index: this worker.
        num_workers: the shard workers asked for (the pipeline's ``shard_workers``); the
            run's count is at most one per task (:func:`_spread`, the same in every step).
        cpu: the CPU the step requests (a Kubernetes quantity): its process count.
        **options: the pipeline's sharding parameters, as :func:`plan_step`.

    Returns:
        A JSON report of what this worker did (collected by :func:`finalize_step`).
    """
    from shardtrain.data import sharding
    from shardtrain.data.sharding.pool import WorkerPool
    from shardtrain.data.sharding.signals import stop_on_sigterm

    _setup_logging()
    base = dataclasses.replace(shard_config(options), processes=cpu_count(cpu))
    sharding.tune_process_memory()  # this step's process only shards
    # A pod stopped (SIGTERM) releases its lease: the pod replacing it starts at once.
    # The pool before the listing: after an object store's first call it could only spawn.
    with stop_on_sigterm(), contextlib.ExitStack() as stack:
        if (pool := WorkerPool.before_storage(base)) is not None:
            stack.enter_context(pool)
        spread = _spread(base, int(num_workers))
        if int(worker_index) >= spread:  # the fan-out does not start it: a task-less worker
            log.info(
                "shard worker %d: the run has %d worker(s); nothing to do", worker_index, spread
            )
            return json.dumps({"worker": int(worker_index), "status": "no-tasks", "tasks_run": 0})
        config = dataclasses.replace(base, worker_index=int(worker_index), num_workers=spread)
        outcome = sharding.shard(config, pool=pool)
    report = {
        "worker": config.worker_index,
        "status": outcome.status,
        "tasks_run": outcome.tasks_run,
        "tasks_skipped": outcome.tasks_skipped,
        "rows_read": outcome.rows_read,
        "bytes_read": outcome.bytes_read,
        "seconds": round(outcome.seconds, 3),
    }
    log.info("shard worker %d/%d: %s", config.worker_index, config.num_workers, report)
    return json.dumps(report)


def settle_step(
    *,
    num_workers: int,
    worker_reports: list[str],
    serving_uri: str = "",
    data_checks: str = "fail",
    data_check_limits: str = "",
    settled: str | None = None,
    **options: Any,
) -> list[int]:
    """Once every shard worker is done: decide what planning guessed and the workers checked
    as they read (CSV column types from the first 4 MB, see :mod:`shardtrain.data.sharding.settle`)
    and return the shard workers that must run again -- none when every guess held, every
    worker when a column's type changed (the plan with the types by all rows is then stored,
    and the workers run their tasks again with it, in parallel, as the first time), those
    whose pieces began at a wrongly guessed record start.

    When none runs again, this step also ends the sharding: it commits the dataset from the
    tasks settling read (one pass over the workers' summaries, not two), checks it against
    the served model's training data as :func:`finalize_step` would, and hands the outcome
    to the finalize step through ``settled``, so that the finalize pod -- on the critical
    path of every run -- only writes its artifacts and touches no storage.

    Args:
        num_workers: the shard workers asked for (the pipeline's ``shard_workers``; the
            run's count is :func:`_spread`'s, as the workers').
        worker_reports: their JSON reports (:func:`shard_step`'s outputs).
        serving_uri, data_checks, data_check_limits: the data checks, as :func:`finalize_step`.
        settled: where to write what the finalize step takes over (``dsl.OutputPath``):
            the dataset's URI, its pointer's facts and the data checks' Markdown report as
            JSON when this step committed the dataset, else ``""``. None: not written.
        **options: the pipeline's sharding parameters, as :func:`plan_step`.

    Returns:
        The indices of the workers to run again, ``[]`` when none.

    Raises:
        DataChecksFailed: the dataset committed here failed a data check with
            ``data_checks='fail'`` (the run stops before training, as it would in the
            finalize step).
    """
    from shardtrain.data import sharding
    from shardtrain.data.sharding.lease import take_lease
    from shardtrain.data.sharding.signals import stop_on_sigterm

    _setup_logging()
    for r in sorted(_worker_reports(worker_reports), key=lambda r: r["worker"]):
        log.info("shard worker %s: %s", r.get("worker"), r)
    config = shard_config(options)
    handed = ""  # what the finalize step takes over: nothing unless committed here
    if storage.exists(storage.join(config.output, "metadata.json")):
        _write_output(settled, handed)
        return []  # complete already (a re-run of a finished pipeline): finalize reads it
    # Every task's lease (no worker still writes), released when the pod is stopped.
    with stop_on_sigterm(), take_lease(config.output, 0, 1) as lease:
        outcome = sharding.settle(config)
        meta = None
        if not outcome.redo and outcome.committed is not None:
            meta = sharding.finalize(
                config.output, held_lease=lease.uri, settled=(outcome.plan, outcome.committed)
            )
    if meta is not None:
        report = _checks_report(config.output, serving_uri, data_checks, data_check_limits)
        handed = json.dumps(
            {"dataset_uri": config.output, "facts": dataset_facts(meta), "report": report}
        )
    _write_output(settled, handed)
    # The workers' count (a listing) only to name the ones to run again.
    again = outcome.workers(_spread(config, int(num_workers))) if outcome.redo else []
    log.info(
        "settled %s: %s",
        config.output,
        f"{len(outcome.redo)} task(s) to run again on worker(s) {again}"
        if again
        else "nothing to run again",
    )
    return again


def finalize_step(
    *,
    dataset_uri: str,
    worker_reports: list[str],
    dataset: Any,
    serving_uri: str = "",
    data_checks: str = "fail",
    data_check_limits: str = "",
    data_checks_report: Any = None,
    settled: str = "",
) -> DatasetMetadata | None:
    """Commit the dataset once every shard worker is done, point ``dataset`` at it, and
    check it against the data the served model was trained on
    (:func:`~shardtrain.kubeflow.data_checks.data_checks_step`) -- or, when the settle step
    did all of that (``settled``), only write what it handed over: the pointer and the
    report, with no storage call (the pod then imports neither the object store's client
    nor the sharder).

    Args:
        dataset_uri: the dataset's URI.
        worker_reports: the JSON reports of :func:`shard_step` (``dsl.Collected``).
        dataset: the ``dsl.Dataset`` output.
        serving_uri: the serving location whose model the data is compared with.
        data_checks: ``fail``, ``warn`` or ``off`` (see
            :func:`~shardtrain.kubeflow.data_checks.data_checks_step`).
        data_check_limits: the checks' limits (:meth:`~shardtrain.data.validation.Limits.parse`).
        data_checks_report: the ``dsl.Markdown`` output for the checks' report (None: none).
        settled: :func:`settle_step`'s hand-over (``""``: it committed nothing).

    Returns:
        The dataset's metadata; None when the settle step had committed and checked it.

    Raises:
        DataError: a task is missing, or too many rows were rejected.
        DataChecksFailed: a data check failed with ``data_checks='fail'``.
    """
    from shardtrain.kubeflow.pointers import write_pointer

    _setup_logging()
    for r in sorted(_worker_reports(worker_reports), key=lambda r: r["worker"]):
        log.info("shard worker %s: %s", r.get("worker"), r)
    handed = _document(settled, documents.SETTLED_HANDOVER, "settle_shards' settled output") or None
    if handed is not None and handed["dataset_uri"] == dataset_uri:
        log.info("%s: committed and checked by the settle step", dataset_uri)
        write_pointer(dataset, dataset_uri, **handed["facts"])
        _write_output(getattr(data_checks_report, "path", None), handed["report"])
        return None
    from shardtrain.data.metadata import METADATA_NAME, DatasetMetadata
    from shardtrain.kubeflow.data_checks import data_checks_step

    if storage.exists(storage.join(dataset_uri, METADATA_NAME)):
        # Committed already: by a single worker, or by an earlier run.
        meta = DatasetMetadata.load(dataset_uri)
    else:
        from shardtrain.data import sharding

        meta = sharding.finalize(dataset_uri)
    write_pointer(dataset, dataset_uri, **dataset_facts(meta))
    data_checks_step(
        dataset_uri,
        serving_uri,
        mode=data_checks,
        limits=data_check_limits,
        report_path=getattr(data_checks_report, "path", None),
    )
    return meta


def _worker_reports(reports: list[str]) -> list[dict[str, Any]]:
    """The shard workers' JSON reports (:func:`shard_step`'s outputs), each checked
    (:data:`~shardtrain.documents.WORKER_REPORT`)."""
    return [
        _document(r, documents.WORKER_REPORT, f"shard worker report {i}")
        for i, r in enumerate(reports)
    ]


def _document(text: str, shape: documents.Shape, where: str) -> Any:
    """A step's JSON input (``""``: none, returned as ``{}``), of ``shape``.

    Raises:
        DataError: not JSON, or not of its shape; the message names ``where`` and the field.
    """
    if not text:
        return {}
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise DataError(f"{where}: not valid JSON ({exc}): {text[:80]!r}") from exc
    return documents.check(doc, shape, where)


def dataset_facts(meta: DatasetMetadata) -> dict[str, Any]:
    """What the dataset pointer shows in the UI besides its URI: row counts, label, splits."""
    return {
        "rows_read": meta.rows_read,
        "rows_accepted": meta.rows_accepted,
        "rows_rejected": meta.rows_rejected,
        "label": meta.label,
        "splits": {name: s.num_records for name, s in meta.splits.items()},
    }


def _checks_report(dataset_uri: str, serving_uri: str, mode: str, limits: str) -> str:
    """Run the data checks of the dataset the settle step committed; returns their Markdown
    report, for the finalize step to write (the checks write reports to a path)."""
    import tempfile

    from shardtrain.kubeflow.data_checks import data_checks_step

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data_checks.md")
        data_checks_step(dataset_uri, serving_uri, mode=mode, limits=limits, report_path=path)
        with open(path, encoding="utf-8") as f:
            return f.read()


def _write_output(path: str | None, text: str) -> None:
    """``text`` at a step output's local ``path`` (an artifact's, or a ``dsl.OutputPath``
    parameter's); None: not written."""
    if path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
