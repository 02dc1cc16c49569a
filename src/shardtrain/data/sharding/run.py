"""Running one worker's share of a sharding job, and resuming it after a crash."""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardtrain import storage
from shardtrain.data.metadata import METADATA_NAME, DatasetMetadata
from shardtrain.data.shard_config import ShardConfig
from shardtrain.data.sharding.finalize import finalize
from shardtrain.data.sharding.plan import PLAN_NAME, Plan, build_plan
from shardtrain.data.sharding.pool import WorkerPool, run_tasks
from shardtrain.data.sharding.task import task_uri
from shardtrain.errors import DataError

log = logging.getLogger(__name__)


@dataclass
class ShardOutcome:
    """What :func:`shard` did."""

    status: str  # "complete" | "already-complete" | "worker-done"
    output: str
    tasks_run: int = 0
    tasks_skipped: int = 0
    rows_read: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    metadata: DatasetMetadata | None = None


def _check_existing(config: ShardConfig, plan: Plan) -> str | None:
    """Compare with what is already at the output; returns 'complete' if nothing to do."""
    plan_uri = storage.join(config.output, PLAN_NAME)
    meta_uri = storage.join(config.output, METADATA_NAME)
    existing_plan = storage.read_json(plan_uri) if storage.exists(plan_uri) else None
    if existing_plan is None:
        occupied = storage.exists(meta_uri) or storage.walk_files(config.output)
        if occupied and storage.exists(plan_uri):
            # Another worker of the same job wrote its plan (then files) since we looked.
            existing_plan = storage.read_json(plan_uri)
    if existing_plan is None:
        if occupied and not config.overwrite:
            raise DataError(
                f"{config.output}: not empty and not a shardtrain dataset in progress; "
                "choose an empty --output (--overwrite --overwrite-foreign would delete "
                "everything in it)"
            )
        return None
    if existing_plan.get("fingerprint") == plan.fingerprint:
        return "complete" if storage.exists(meta_uri) else "resume"
    earlier = plan.earlier_fingerprint()
    if earlier is not None and existing_plan.get("fingerprint") == earlier:
        # Written by a version that kept columnar rows in source order: complete, it is
        # read correctly (its rows are permuted as they are read); half-written, resuming
        # would mix both orders.
        if storage.exists(meta_uri):
            log.info(
                "%s: complete, written before columnar blocks were hash-ordered: kept as it "
                "is (--overwrite re-shards it)",
                config.output,
            )
            return "complete"
        if not config.overwrite:
            raise DataError(
                f"{config.output}: holds a partly written dataset of an earlier shardtrain "
                "version (columnar blocks in source order), which cannot be resumed; pass "
                "--overwrite to start it again"
            )
    if not config.overwrite:
        raise DataError(
            f"{config.output}: holds a dataset sharded from other inputs or options "
            f"(plan {existing_plan.get('fingerprint')} vs {plan.fingerprint}); "
            "use another --output or pass --overwrite"
        )
    return None


def _foreign_files(output: str) -> list[str]:
    """Files under ``output`` (relative paths) that are not part of the shardtrain dataset
    there: all of them when there is none (neither ``_plan.json`` nor ``metadata.json``)."""
    base = storage.filesystem(output)[1].rstrip("/") + "/"
    files = [storage.filesystem(u)[1].removeprefix(base) for u in storage.walk_files(output)]
    splits: set[str] = set()
    documents = [storage.join(output, n) for n in (PLAN_NAME, METADATA_NAME)]
    present = [uri for uri in documents if storage.exists(uri)]
    if not present:
        return files
    for uri in present:
        doc = storage.read_json(uri)
        for split in doc.get("splits", ()) if isinstance(doc, dict) else ():
            splits.add(split[0] if isinstance(split, list) else str(split))
    shards = "|".join(map(re.escape, sorted(splits))) or "(?!)"
    own = re.compile(
        r"(?:_plan\.json|metadata\.json|rejects/rejects\.jsonl"
        r"|_tasks/task-\d{5}(?:\.json|\.rejects\.jsonl)"
        rf"|(?:{shards})/part-\d{{5}}-of-\d{{5}}\.tfrecord(?:\.gz)?)(?:\.tmp-[0-9a-f]{{12}})?"
    )
    return [f for f in files if not own.fullmatch(f)]


def _delete_previous(config: ShardConfig) -> None:
    """--overwrite: delete the dataset at the output, and nothing else unless told so."""
    foreign = _foreign_files(config.output)
    if foreign and not config.overwrite_foreign:
        shown = ", ".join(foreign[:3]) + (
            f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        )
        raise DataError(
            f"{config.output}: holds files that are not part of a shardtrain dataset "
            f"({shown}); --overwrite deletes only a dataset: move them away, choose another "
            "--output, or add --overwrite-foreign to delete everything under it"
        )
    log.info(
        "--overwrite: deleting the previous %s at %s",
        "content" if foreign else "dataset",
        config.output,
    )
    # metadata.json first: a deletion cut short never leaves a "complete" dataset behind.
    storage.delete(storage.join(config.output, METADATA_NAME))
    storage.delete(config.output, recursive=True)


def publish_plan(config: ShardConfig) -> tuple[Plan, bool]:
    """Plan the run and store the plan at the output as ``_plan.json``, as every worker does
    before its tasks; returns the plan and whether the dataset there is already complete
    (then nothing is written).

    An output holding another plan is an error unless ``--overwrite``, which first deletes the
    dataset there; the same plan is a resume and is kept. The plan is written atomically,
    after any deletion. Run once before the workers start (the pipeline's plan step does), it
    lets each worker take what is costly to find (CSV record starts, types by all rows) from
    the stored plan (:meth:`~shardtrain.data.sources.base.Source.recall`) instead of reading
    the data again.
    """
    plan = build_plan(config)
    state = _check_existing(config, plan)
    if state == "complete":
        return plan, True
    if state is None and config.overwrite:
        _delete_previous(config)
    storage.write_json(storage.join(config.output, PLAN_NAME), plan.to_dict())
    return plan, False


def shard(
    config: ShardConfig, progress_factory: Callable[[int], Any] | None = None
) -> ShardOutcome:
    """Run this worker's share of a sharding job; finalize when it is the only worker.

    Args:
        config: the run's configuration.
        progress_factory: called with the worker's input bytes; returns a context manager
            with an ``advance(rows, bytes)`` method (the CLI passes a rich progress bar).

    Returns:
        What happened: ``complete`` (finalized), ``already-complete`` (nothing to do) or
        ``worker-done`` (this worker's tasks are committed; run finalize after all workers).
    """
    started = time.monotonic()
    plan, complete = publish_plan(config)
    if complete:
        meta = DatasetMetadata.load(config.output)
        log.info("%s is already complete (metadata.json present); nothing to do", config.output)
        return ShardOutcome("already-complete", config.output, metadata=meta)

    mine = [t for t in plan.tasks if t.index % config.num_workers == config.worker_index]
    done = {t.index for t in mine if _task_committed(plan, t.index)}
    todo = [t for t in mine if t.index not in done]
    log.info(
        "plan %s: %d source file(s), %d task(s), shards per split: %s; worker %d/%d runs %d "
        "task(s) (%d already committed)",
        plan.fingerprint[:8],
        len(plan.sources),
        len(plan.tasks),
        ", ".join(f"{n}={m}" for (n, _), m in zip(plan.splits, plan.num_shards, strict=True)),
        config.worker_index,
        config.num_workers,
        len(todo),
        len(done),
    )
    outcome = ShardOutcome("worker-done", config.output, tasks_skipped=len(done))
    total_bytes = sum(t.input_bytes for t in todo)
    # The pool first: forking is only safe before the progress bar starts its thread.
    with WorkerPool(config, len(todo)) as pool:
        bar = progress_factory(total_bytes) if progress_factory else contextlib.nullcontext()
        with bar as reporter:
            advance = reporter.advance if reporter is not None else None
            results = run_tasks(plan, todo, config, advance, pool)
    outcome.tasks_run = len(results)
    outcome.rows_read = sum(r.rows_read for r in results)
    outcome.bytes_read = sum(r.bytes_read for r in results)
    if config.num_workers == 1:
        outcome.metadata = finalize(
            config.output, max_bad_fraction=config.max_bad_fraction, top_k=config.top_k
        )
        outcome.status = "complete"
    outcome.seconds = time.monotonic() - started
    return outcome


def _task_committed(plan: Plan, index: int) -> bool:
    uri = task_uri(plan.output, index)
    if not storage.exists(uri):
        return False
    return storage.read_json(uri).get("plan") == plan.fingerprint
