"""One task: its pieces read, rows accounted for, shards written, the task committed.

A task commits by writing its manifest ``_tasks/task-NNNNN.json`` (counts, shard checksums,
partial statistics) after all its shards and its rejects are in place; until then a re-run
redoes it from scratch.
"""

from __future__ import annotations

import contextlib
import gc
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardtrain import storage
from shardtrain.data import column_blocks
from shardtrain.data.shard_config import ShardConfig
from shardtrain.data.sharding.plan import Plan, Task, needs_settling
from shardtrain.data.sharding.writer import BackgroundWriter, ShardWriter, write_batch
from shardtrain.data.sources.base import Batch, sparse_counts
from shardtrain.data.statistics import MANIFEST_TOP, LabelStats
from shardtrain.errors import DataError


@dataclass
class TaskResult:
    """What a task reports in its manifest."""

    task: int
    rows_read: int = 0
    rows_accepted: int = 0
    rows_rejected: int = 0
    rejects_by_reason: dict[str, int] = field(default_factory=dict)
    blank_lines: int = 0
    bytes_read: int = 0
    pieces: list[dict[str, Any]] = field(default_factory=list)
    shards: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    label: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def task_uri(output: str, index: int, suffix: str = ".json") -> str:
    return storage.join(output, "_tasks", f"task-{index:05d}{suffix}")


Progress = Callable[[int, int], None]  # (rows, bytes) done since the last call


def run_task(
    plan: Plan, task: Task, config: ShardConfig, progress: Progress | None = None
) -> TaskResult:
    """Shard one task's pieces into its shards and commit the task manifest.

    During the task, everything alive before it (modules, compiled kernels, the plan) is
    kept out of the cyclic garbage collector, whose full passes over those objects would
    otherwise cost a few percent of a run (a block makes hundreds of short-lived objects);
    it goes back to the collector afterwards, so a long-lived caller (a notebook) loses
    nothing.

    Raises:
        DataError: a source is malformed beyond repair, or this task alone already holds
            more rejected rows than the whole run may have.
    """
    gc.freeze()
    try:
        return _run_task(plan, task, config, progress)
    finally:
        gc.unfreeze()


def _run_task(plan: Plan, task: Task, config: ShardConfig, progress: Progress | None) -> TaskResult:
    started = time.monotonic()
    schema = plan.schema
    result = TaskResult(task=task.index)
    source = config.source()
    layout = plan.layout
    column_stats = source.new_statistics(schema, plan.histograms)
    label_stats = LabelStats(bins=plan.histograms.get(schema.label))
    fractions = np.cumsum([f for _, f in plan.splits])
    fractions[-1] = 1.0
    # Writer slots: for split s, local shard j → slot base[s] + j.
    counts = [b - a for a, b in task.shard_ranges]
    base = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    counts_arr = np.asarray(counts, dtype=np.uint64)
    gzip_level = config.compression_level if plan.compression == "gzip" else None
    record_format = plan.options.get("record_format", column_blocks.EXAMPLE)
    reject_budget = max(1000, int(2 * config.max_bad_fraction * max(plan.estimated_rows, 1)))
    # With the types a guess (needs_settling), a value that does not fit its column's guessed
    # type may fit the type settling finds: such rejects do not count against the budget
    # here; finalize's limit counts what is left once the types are settled.
    guessed = needs_settling(plan)

    _remove_stale_temporaries(plan, task)
    with contextlib.ExitStack() as stack:
        writers: list[ShardWriter] = []
        for s, (first, end) in enumerate(task.shard_ranges):
            for shard in range(first, end):
                path = plan.shard_path(s, shard)
                writers.append(
                    ShardWriter(
                        storage.join(plan.output, path),
                        path,
                        gzip_level,
                        stack,
                        in_place=record_format == column_blocks.EXAMPLE,
                    )
                )
        rejects_file = stack.enter_context(
            storage.open(task_uri(plan.output, task.index, ".rejects.jsonl"), "w")
        )
        # Joined before the ExitStack commits (or discards) the shards.
        background = stack.enter_context(BackgroundWriter())
        for piece_no, piece in enumerate(task.pieces):
            piece_lines = source.header_lines if piece.start == 0 else 0
            type_counts: np.ndarray | None = None  # see settle.verify_plan_types
            for batch in source.read_piece(piece, layout, config.block_bytes):
                piece_lines += batch.lines
                if batch.type_counts is not None:
                    if type_counts is None:
                        type_counts = batch.type_counts
                    else:
                        type_counts += batch.type_counts
                _account(result, batch, piece_no, rejects_file)
                counted = result.rows_rejected
                if guessed:
                    counted -= result.rejects_by_reason.get("bad_value", 0)
                if counted > reject_budget:
                    raise DataError(
                        f"{piece.uri}: {result.rows_rejected} of the first {result.rows_read} "
                        f"rows were rejected, more than --max-bad-fraction "
                        f"{config.max_bad_fraction:g} of the ~{plan.estimated_rows} input rows "
                        f"allows; first rejects: {_describe_rejects(batch)}"
                    )
                table = batch.table
                n = table.num_rows
                if n:
                    background.submit(
                        write_batch(
                            table,
                            batch.row_hash,
                            schema,
                            fractions,
                            base,
                            counts_arr,
                            writers,
                            record_format,
                        )
                    )
                    for name, stats in column_stats.items():
                        stats.update_table(table, name)
                    label_stats.update(table.column(schema.label))
                if progress:
                    progress(batch.rows_read, batch.bytes_read)
            result.pieces.append(
                {
                    **piece.to_dict(),
                    **source.piece_extent(piece),
                    "lines": piece_lines,
                    **(
                        {"type_counts": sparse_counts(type_counts)}
                        if type_counts is not None
                        else {}
                    ),
                }
            )
        background.close()
        for w in writers:
            w.finish()
        shard_split = [
            (s, shard) for s, (a, b) in enumerate(task.shard_ranges) for shard in range(a, b)
        ]
    # Every shard and the rejects are committed (the ExitStack closed them): commit the task.
    result.shards = [
        w.manifest(plan.splits[s][0], shard)
        for w, (s, shard) in zip(writers, shard_split, strict=True)
    ]
    result.stats = {name: s.to_dict(MANIFEST_TOP) for name, s in column_stats.items()}
    result.label = label_stats.to_dict()
    result.seconds = round(time.monotonic() - started, 3)
    # Internal, and large (the top values of every categorical column): compact JSON.
    storage.write_json(
        task_uri(plan.output, task.index), task_manifest(plan, config, result), compact=True
    )
    return result


def task_manifest(plan: Plan, config: ShardConfig, result: TaskResult) -> dict[str, Any]:
    """What a task's manifest holds: its result, under the plan it ran."""
    return {
        "plan": plan.fingerprint,
        # Not part of the plan, but finalize applies what the workers were told.
        "max_bad_fraction": config.max_bad_fraction,
        "top_k": config.top_k,
        **result.__dict__,  # plain JSON values; asdict() would deep-copy large statistics
    }


def _describe_rejects(batch: Batch, limit: int = 3) -> str:
    return "; ".join(f"{r.where} {r.reason} ({r.detail})" for r in batch.rejects[:limit])


def _account(result: TaskResult, batch: Batch, piece_no: int, rejects_file) -> None:
    result.rows_read += batch.rows_read
    result.rows_accepted += batch.table.num_rows
    result.rows_rejected += len(batch.rejects)
    result.blank_lines += batch.blank_lines
    result.bytes_read += batch.bytes_read
    for r in batch.rejects:
        result.rejects_by_reason[r.reason] = result.rejects_by_reason.get(r.reason, 0) + 1
        rejects_file.write(
            json.dumps(
                {
                    "piece": piece_no,
                    "line": r.line,
                    "reason": r.reason,
                    "detail": r.detail,
                    "text": r.text,
                    **r.extra,  # images: the image's source URI and path
                },
                ensure_ascii=False,
            )
            + "\n"
        )
    if batch.rows_read != batch.table.num_rows + len(batch.rejects):
        raise AssertionError("row accounting broke: read != accepted + rejected")


def _remove_stale_temporaries(plan: Plan, task: Task) -> None:
    """Delete the temporary files a killed run left for this task's objects (its shards, its
    rejects and its manifest; local output only): no other process writes them."""
    shards = (
        storage.join(plan.output, plan.shard_path(s, shard))
        for s, (first, end) in enumerate(task.shard_ranges)
        for shard in range(first, end)
    )
    storage.remove_temporaries(
        [
            *shards,
            task_uri(plan.output, task.index),
            task_uri(plan.output, task.index, ".rejects.jsonl"),
        ]
    )
