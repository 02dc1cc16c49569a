"""Running one worker's share of a sharding job, and resuming it after a crash."""

from __future__ import annotations

import contextlib
import logging
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardtrain import documents, storage
from shardtrain.data.metadata import METADATA_NAME, DatasetMetadata
from shardtrain.data.shard_config import ShardConfig
from shardtrain.data.sharding.finalize import finalize
from shardtrain.data.sharding.lease import LEASES_DIR, take_lease
from shardtrain.data.sharding.plan import PLAN_NAME, Plan, Task, build_plan
from shardtrain.data.sharding.pool import WorkerPool, run_tasks
from shardtrain.data.sharding.settle import Settlement, settle
from shardtrain.data.sharding.stored_layout import keep_stored_layout
from shardtrain.data.sharding.summary import read_manifest, write_summary
from shardtrain.data.sharding.task import TaskResult, task_manifest, task_uri
from shardtrain.errors import DataError, StorageError
from shardtrain.options import options

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


class _Damaged(Exception):
    """A dataset document (``_plan.json``, ``metadata.json``) that cannot be read: not JSON,
    not an object, or not of its shape (:mod:`shardtrain.documents`)."""


def _read_document(uri: str, shape: documents.Shape | None = None) -> dict | None:
    """A dataset document, None when absent; :class:`_Damaged` when unreadable or, given a
    ``shape``, not of it."""
    try:
        doc = storage.read_json_if_exists(uri)
    except StorageError as exc:
        if "not valid JSON" not in str(exc):
            raise
        raise _Damaged(str(exc)) from exc
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise _Damaged(f"{uri}: not a JSON object")
    if shape is not None:
        try:
            documents.check(doc, shape, uri)
        except documents.DocumentError as exc:
            raise _Damaged(str(exc)) from exc
    return doc


def _read_metadata(uri: str) -> dict | None:
    """The dataset's ``metadata.json``, None when absent; :class:`_Damaged` when it does not
    read as a dataset's metadata (:meth:`DatasetMetadata.from_dict`)."""
    doc = _read_document(uri)
    if doc is not None:
        try:
            DatasetMetadata.from_dict(doc, uri)
        except DataError as exc:
            raise _Damaged(str(exc)) from exc
    return doc


def overwrite_command(config: ShardConfig) -> str:
    """This run's ``shardtrain shard`` command with ``--overwrite``: the options it was given
    (those that are not their defaults), as flags."""
    words = ["shardtrain", "shard"]
    flags: list[str] = []
    for opt in options(ShardConfig):
        value = getattr(config, opt.name)
        if opt.name in ("overwrite", "overwrite_foreign", "worker_index", "num_workers"):
            continue
        if opt.name in config.auto_resolved or value == opt.default:
            continue
        user = opt.to_user(value)
        if isinstance(user, float) and opt.spec.unit != 1:  # MiB: the shortest that reads back
            shortest = (f"{user:.{p}g}" for p in range(6, 18))
            user = next((t for t in shortest if int(float(t) * opt.spec.unit) == value), user)
        if opt.spec.argument:
            words += [str(v) for v in (user if isinstance(user, tuple) else (user,))]
        elif user is True:
            flags.append(opt.flag)
        elif user is not None and user is not False:
            for v in user if opt.spec.multiple else (user,):
                flags += [opt.flag, str(v)]
    flags += ["--overwrite", *(["--overwrite-foreign"] if config.overwrite_foreign else [])]
    return shlex.join(words + flags)


def _damaged_error(config: ShardConfig, why: _Damaged) -> DataError:
    return DataError(
        f"{why}; the dataset at {config.output} is damaged: shard it again with "
        f"`{overwrite_command(config)}` (it deletes the dataset; add --overwrite-foreign if "
        "other files share the folder)"
    )


def _check_existing(config: ShardConfig, plan: Plan) -> str | None:
    """Compare with what is already at the output (not with ``--overwrite``: it rewrites
    whatever is there); returns 'complete' if nothing is to be done."""
    try:
        return _compare_existing(config, plan)
    except _Damaged as why:
        raise _damaged_error(config, why) from None


def _compare_existing(config: ShardConfig, plan: Plan) -> str | None:
    plan_uri = storage.join(config.output, PLAN_NAME)
    meta_uri = storage.join(config.output, METADATA_NAME)
    existing_plan = _read_document(plan_uri, documents.PLAN)
    if existing_plan is None:
        files = [u for u in storage.walk_files(config.output) if not _is_lease(config.output, u)]
        occupied = storage.exists(meta_uri) or bool(files)
        # Another worker of the same job wrote its plan (then files) since we looked, or is
        # writing it now: its temporary file is renamed into place within moments.
        in_flight = any(_PLAN_TEMPORARY.search(u) for u in files)
        deadline = time.monotonic() + (PLAN_IN_FLIGHT_WAIT if in_flight else 0.0)
        while occupied:
            existing_plan = _read_document(plan_uri, documents.PLAN)
            if existing_plan is not None or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
    if existing_plan is None:
        if occupied:
            _read_metadata(meta_uri)  # a damaged dataset says so, and what gets out
            raise DataError(
                f"{config.output}: not empty and not a shardtrain dataset in progress; "
                "choose an empty --output (--overwrite --overwrite-foreign would delete "
                "everything in it)"
            )
        return None
    if existing_plan.get("fingerprint") == plan.fingerprint:
        return "complete" if _read_metadata(meta_uri) is not None else "resume"
    earlier = plan.earlier_fingerprint()
    if earlier is not None and existing_plan.get("fingerprint") == earlier:
        # Written by a version that kept columnar rows in source order: complete, it is
        # read correctly (its rows are permuted as they are read); half-written, resuming
        # would mix both orders.
        if _read_metadata(meta_uri) is not None:
            log.info(
                "%s: complete, written before columnar blocks were hash-ordered: kept as it "
                "is (--overwrite re-shards it)",
                config.output,
            )
            return "complete"
        raise DataError(
            f"{config.output}: holds a partly written dataset of an earlier shardtrain "
            "version (columnar blocks in source order), which cannot be resumed; start it "
            f"again with `{overwrite_command(config)}`"
        )
    if plan.same_but_alignment(existing_plan):
        # Written by a version that cut CSV files at record starts while planning: complete,
        # it is the same dataset; half-written, its tasks are not this plan's.
        if _read_metadata(meta_uri) is not None:
            log.info(
                "%s: complete, its CSV files cut where an earlier version's planner found "
                "record starts: kept as it is (--overwrite re-shards it)",
                config.output,
            )
            return "complete"
        raise DataError(
            f"{config.output}: holds a partly written dataset of an earlier shardtrain "
            "version (CSV pieces cut while planning), which cannot be resumed; start it "
            f"again with `{overwrite_command(config)}`"
        )
    raise DataError(
        f"{config.output}: holds a dataset sharded from other inputs or options "
        f"(plan {existing_plan.get('fingerprint')} vs {plan.fingerprint}); "
        "use another --output or pass --overwrite"
    )


#: Another worker's plan being written (``storage.open``'s temporary file of a local write).
_PLAN_TEMPORARY = re.compile(rf"/{re.escape(PLAN_NAME)}\.tmp-[0-9a-f]{{12}}$")
#: How long a plan seen in flight is waited for before the output counts as foreign.
PLAN_IN_FLIGHT_WAIT = 10.0


def _is_lease(output: str, uri: str) -> bool:
    """Whether ``uri`` is a lease of a run on ``output`` (see :mod:`.lease`)."""
    base = storage.filesystem(output)[1].rstrip("/") + "/"
    return storage.filesystem(uri)[1].removeprefix(base).startswith(LEASES_DIR + "/")


def _foreign_files(output: str, splits_now: list[str]) -> list[str]:
    """Files under ``output`` (relative paths) that are not part of the shardtrain dataset
    there: all of them when there is none (neither ``_plan.json`` nor ``metadata.json``).
    The split names come from those documents, as far as they are readable (a mistyped
    ``metadata.json`` may still name them in its plan); from ``splits_now`` (the new plan's)
    when none names any."""
    base = storage.filesystem(output)[1].rstrip("/") + "/"
    files = [storage.filesystem(u)[1].removeprefix(base) for u in storage.walk_files(output)]
    splits: set[str] = set()
    kept = [storage.join(output, n) for n in (PLAN_NAME, METADATA_NAME)]
    present = [uri for uri in kept if storage.exists(uri)]
    lease = rf"{LEASES_DIR}/worker-\d{{5}}-of-\d{{5}}\.json"
    if not present:
        return [f for f in files if not re.fullmatch(lease, f)]
    for uri in present:
        try:
            doc = _read_document(uri)
        except _Damaged:
            continue
        splits |= _split_names(doc)
    if not splits:
        splits.update(splits_now)
    shards = "|".join(map(re.escape, sorted(splits))) or "(?!)"
    own = re.compile(
        rf"(?:_plan\.json|metadata\.json|data_checks\.json|rejects/rejects\.jsonl|{lease}"
        r"|_tasks/task-\d{5}(?:\.json|\.rejects\.jsonl)|_tasks/summary-\d{5}-of-\d{5}\.json"
        rf"|(?:{shards})/part-\d{{5}}-of-\d{{5}}\.tfrecord(?:\.gz)?)(?:\.tmp-[0-9a-f]{{12}})?"
    )
    return [f for f in files if not own.fullmatch(f)]


def _split_names(doc: dict | None) -> set[str]:
    """The split names a ``_plan.json`` (``[[name, fraction], ...]``) or ``metadata.json``
    (``{name: ...}``) gives, those that are names (the document may be damaged)."""
    found = (doc or {}).get("splits")
    if isinstance(found, dict):
        return {n for n in found if _SPLIT_DIR.fullmatch(n)}
    if isinstance(found, list):
        names = (s[0] for s in found if isinstance(s, list) and s and isinstance(s[0], str))
        return {n for n in names if _SPLIT_DIR.fullmatch(n)}
    return set()


#: What a split's folder may be called (:func:`~shardtrain.data.shard_config.validate_splits`).
_SPLIT_DIR = re.compile(r"[A-Za-z0-9_-]+")


def _delete_previous(config: ShardConfig, plan: Plan) -> None:
    """--overwrite: delete the dataset at the output, and nothing else unless told so; the
    leases of live runs (this one's among them) stay."""
    foreign = _foreign_files(config.output, [name for name, _ in plan.splits])
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
    for uri in storage.ls(config.output):
        if storage.basename(uri.rstrip("/")) != LEASES_DIR:
            storage.delete(uri, recursive=True)


def publish_plan(config: ShardConfig) -> tuple[Plan, bool]:
    """Plan the run and store the plan at the output as ``_plan.json``, as every worker does
    before its tasks; returns the plan and whether the dataset there is already complete
    (then nothing is written).

    An output holding another plan, or a damaged dataset (a ``_plan.json`` or
    ``metadata.json`` that does not read), is an error unless ``--overwrite``, which first
    deletes whatever dataset is there, in whatever state: complete (its shards intact or
    not), half-written, damaged; the same plan without ``--overwrite`` is a resume and is
    kept. The plan is written atomically, after any deletion. Run once before the workers
    start (the pipeline's plan step does), it lets each worker take what is costly to find
    (CSV record starts, types by all rows) from the stored plan
    (:meth:`~shardtrain.data.sources.base.Source.recall`) instead of reading the data again.
    """
    plan = build_plan(config)
    if config.overwrite:
        # Whatever is there: --overwrite rewrites it (only a single worker may pass it, and
        # this one holds the lease of every task).
        _delete_previous(config, plan)
    elif _check_existing(config, plan) == "complete":
        return plan, True
    storage.write_json(storage.join(config.output, PLAN_NAME), plan.to_dict())
    return plan, False


def shard(
    config: ShardConfig,
    progress_factory: Callable[[int], Any] | None = None,
    pool: WorkerPool | None = None,
) -> ShardOutcome:
    """Run this worker's share of a sharding job; finalize when it is the only worker.

    Args:
        config: the run's configuration.
        progress_factory: called with the worker's input bytes; returns a context manager
            with an ``advance(rows, bytes)`` method (the CLI passes a rich progress bar).
        pool: the processes to run the tasks in, made by the caller before its first storage
            call (:meth:`WorkerPool.before_storage`); None: made here, first thing, where it
            can still fork, else later for the tasks there are. The caller shuts its pool.

    Returns:
        What happened: ``complete`` (finalized), ``already-complete`` (nothing to do) or
        ``worker-done`` (this worker's tasks are committed; run finalize after all workers).
    """
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        if pool is None and (pool := WorkerPool.before_storage(config)) is not None:
            stack.enter_context(pool)
        config = keep_stored_layout(config)  # a per-row dataset of a defaulted command stays so
        # The lease of this worker's tasks first: nothing is deleted, planned or written while
        # another live run writes any of them (see .lease).
        with take_lease(config.output, config.worker_index, config.num_workers) as lease:
            return _shard(config, progress_factory, started, lease.uri, pool)


def _tasks_pool(config: ShardConfig, tasks: int, pool: WorkerPool | None) -> Any:
    """``pool`` to run ``tasks`` tasks in, left open; without one, a pool made for them."""
    return contextlib.nullcontext(pool) if pool is not None else WorkerPool(config, tasks)


def _shard(
    config: ShardConfig,
    progress_factory: Callable[[int], Any] | None,
    started: float,
    lease: str,
    pool: WorkerPool | None,
) -> ShardOutcome:
    plan, complete = publish_plan(config)
    if complete:
        from shardtrain.data.verify import require_shards

        meta = DatasetMetadata.load(config.output)
        # Complete is not intact: a shard deleted or cut short since is named, with the
        # --overwrite that rebuilds it (listings only; `inspect --verify` reads the bytes).
        require_shards(config.output, meta, tuple(meta.splits))
        log.info("%s is already complete (metadata.json present); nothing to do", config.output)
        return ShardOutcome("already-complete", config.output, metadata=meta)

    mine = [t for t in plan.tasks if t.index % config.num_workers == config.worker_index]
    # The manifests an earlier run committed: skipped now, and summarized with the rest.
    done = {t.index: m for t in mine if (m := _committed_manifest(plan, t.index)) is not None}
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
    with _tasks_pool(config, len(todo), pool) as tasks_pool:
        bar = progress_factory(total_bytes) if progress_factory else contextlib.nullcontext()
        with bar as reporter:
            advance = reporter.advance if reporter is not None else None
            results = run_tasks(plan, todo, config, advance, tasks_pool)
    _summarize_worker(plan, config, mine, results, done)
    settled = None
    if config.num_workers == 1:
        again, settled = settle_and_redo(config, pool)
        results += again
    latest = {r.task: r for r in results}.values()  # a task run again: its last run's rows
    outcome.tasks_run = len(results)  # every run of a task
    outcome.rows_read = sum(r.rows_read for r in latest)
    outcome.bytes_read = sum(r.bytes_read for r in latest)
    if config.num_workers == 1:
        outcome.metadata = finalize(
            config.output,
            max_bad_fraction=config.max_bad_fraction,
            top_k=config.top_k,
            held_lease=lease,
            settled=(settled.plan, settled.committed) if settled and settled.committed else None,
        )
        outcome.status = "complete"
    outcome.seconds = time.monotonic() - started
    return outcome


def settle_and_redo(
    config: ShardConfig, pool: WorkerPool | None = None
) -> tuple[list[TaskResult], Settlement]:
    """Settle the run at ``config.output`` (:func:`~.settle.settle`) and run here, in
    ``config.processes`` processes (``pool``'s when given), the tasks it says to run again,
    until nothing is left to run; returns the results of the tasks run and the last
    settlement (with the tasks finalize needs). Every task must have committed."""
    results: list[TaskResult] = []
    for _ in range(MAX_SETTLE_ROUNDS):
        settled = settle(config)
        if not settled.redo:
            return results, settled
        todo = [t for t in settled.plan.tasks if t.index in set(settled.redo)]
        with _tasks_pool(config, len(todo), pool) as tasks_pool:
            results += run_tasks(settled.plan, todo, config, None, tasks_pool)
    raise DataError(
        f"{config.output}: still not settled after {MAX_SETTLE_ROUNDS} rounds of running tasks "
        "again; shard it again with --overwrite"
    )


#: At most this many rounds of settling and running tasks again: a wrong guess of the types
#: needs one; a piece start guessed wrong one per wrong guess that follows it in its file.
MAX_SETTLE_ROUNDS = 64


def _summarize_worker(
    plan: Plan,
    config: ShardConfig,
    mine: list[Task],
    results: list[TaskResult],
    done: dict[int, dict[str, Any]],
) -> None:
    """Write this worker's summary of its tasks (:mod:`.summary`): from the results of the
    tasks it ran, and the manifests of those an earlier run committed (``done``)."""
    if not mine:
        return
    ran = {r.task: task_manifest(plan, config, r) for r in results}
    manifests = [ran[t.index] if t.index in ran else done[t.index] for t in mine]
    write_summary(plan, config.worker_index, config.num_workers, manifests)


def _committed_manifest(plan: Plan, index: int) -> dict[str, Any] | None:
    """Task ``index``'s manifest when it is committed under ``plan``, else None."""
    manifest = read_manifest(task_uri(plan.output, index))
    return manifest if manifest is not None and manifest["plan"] == plan.fingerprint else None
