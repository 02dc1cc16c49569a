"""Settling a run: what planning only guessed, decided once every task is done.

Planning reads the file listing and a sample, nothing more, so that one pod plans a run of
any size in about the same time. What it cannot know from the sample, it guesses, and the
tasks check the guess as they read (they read every byte anyway):

* **CSV record starts**: a piece that begins inside a file guesses where its first record
  begins (quotes may span lines), and reports where it began and stopped
  (:func:`~.alignment.settle_alignment` checks that the pieces of every file chain);
* **CSV types by all rows** (``--infer-types all``): the plan's types are the sample's, and
  every task counts the kinds of its fields as the type pass does
  (:func:`verify_plan_types`).
* **JSON-lines types** (always): likewise, the kinds of the values of every column
  (:func:`~shardtrain.data.sources.jsonl.verify_types`).

:func:`settle` runs once every task has committed and before :func:`.finalize.finalize`:
in the CLI's single-worker run, as the pipeline's ``settle_shards`` step and as
``shardtrain settle`` after workers on several machines. When every guess held -- the usual
case -- it records what it found in the stored plan (:attr:`~.plan.Plan.settled`, which
``metadata.json`` takes over) and nothing runs again. A piece start guessed wrong: the true
one is stored with the plan and that task runs again. A wrong type (a zip code column that
turns ``98115-4820`` after the sample): it stores the plan built on what the tasks found,
uncommits the tasks of the old one and returns the tasks to run: every one, since a column's
type shapes every shard. Settling again after they ran finds nothing left.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from shardtrain import documents, storage
from shardtrain.data.repair import repair_hint
from shardtrain.data.schema import Schema
from shardtrain.data.shard_config import ShardConfig
from shardtrain.data.sharding.alignment import settle_alignment
from shardtrain.data.sharding.plan import (
    GUESS_OPTIONS,
    PLAN_NAME,
    Plan,
    build_plan,
    needs_settling,
)
from shardtrain.data.sharding.stored_layout import keep_stored_layout
from shardtrain.data.sharding.summary import Committed, delete_summaries, read_committed
from shardtrain.data.sharding.task import task_uri
from shardtrain.data.sources.base import FinalSchema, Piece, SourceLayout
from shardtrain.data.sources.csv.plan_options import VERIFY_TYPES_OPTION
from shardtrain.data.sources.csv.source import verify_types as verify_csv_types
from shardtrain.data.sources.jsonl import VERIFY_TYPES_OPTION as VERIFY_JSONL_TYPES_OPTION
from shardtrain.data.sources.jsonl import verify_types as verify_jsonl_types
from shardtrain.errors import DataError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settlement:
    """What :func:`settle` decided.

    Attributes:
        plan: the run's plan from now on (stored as ``_plan.json``).
        redo: the tasks to run (again) before the dataset can be finalized; empty when every
            guess held.
    """

    plan: Plan
    redo: tuple[int, ...] = ()
    #: With nothing to run again: every task's manifest (and the worker summaries), as read
    #: to settle (finalize takes them instead of reading them again).
    committed: Committed | None = None

    def workers(self, num_workers: int) -> list[int]:
        """The workers of ``num_workers`` that own a task to run (task t: worker t % n)."""
        return sorted({t % num_workers for t in self.redo})


def stored_plan(output: str) -> Plan:
    """The plan stored at ``output``.

    Raises:
        DataError: there is none, or it does not read as a plan (a field missing or
            mistyped: :class:`~shardtrain.documents.DocumentError`).
    """
    uri = storage.join(output, PLAN_NAME)
    if not storage.exists(uri):
        raise DataError(f"{output}: no sharding run found ({PLAN_NAME} is missing)")
    doc = storage.read_json(uri)
    return Plan.from_dict(output, documents.check(doc, documents.PLAN, uri, repair_hint(output)))


def settle(config: ShardConfig) -> Settlement:
    """Decide the stored plan's guesses from the tasks' findings (see the module docstring).

    ``config`` is the run's (the same options the plan and the workers were given): with a
    guess that was wrong, the run is planned again from it.

    Tasks without a manifest of the stored plan (reset by an earlier settling whose runs did
    not all finish: a crash, a retried settle step) are returned to run first.

    Raises:
        DataError: ``config`` is not the options of the run stored at its output.
    """
    plan = stored_plan(config.output)
    config = keep_stored_layout(config, stored_options=plan.options)  # as the workers planned
    committed, missing = read_committed(plan)
    manifests = committed.manifests
    if missing:
        # Reset by an earlier settling whose runs did not all finish (a crash, a retried
        # settle step): they run now, then settling goes on.
        log.info("%s: %d task(s) to run before settling", config.output, len(missing))
        return Settlement(plan, tuple(missing))
    redo = settle_alignment(plan, manifests)
    if redo:  # the types are decided once every piece was read from where it begins
        settled = stored_plan(config.output)
        log.warning(
            "%s: %d piece start(s) were guessed wrong (%s): read again",
            config.output,
            len(redo),
            "; ".join(_wrong_starts(plan, settled)),
        )
        return Settlement(settled, tuple(redo))
    verdict = _verify(plan, manifests, config.max_bad_fraction)
    if verdict is None or verdict.schema == plan.schema:
        return Settlement(_record(plan, verdict), committed=committed)

    again = build_plan(config, stored=plan.to_dict())
    if again.fingerprint != plan.fingerprint:
        raise DataError(
            f"{config.output}: the options given differ from those of the run stored there "
            f"(plan {again.fingerprint[:8]} vs {plan.fingerprint[:8]}); settle with the "
            "run's own options"
        )
    # The plan's options with what was found, the guess no longer one.
    options = {k: v for k, v in plan.options.items() if k not in GUESS_OPTIONS}
    new = build_plan(config, stored={**plan.to_dict(), "options": {**options, **verdict.options}})
    # The record starts found hold whatever the types: the pieces are the same byte ranges.
    new = dataclasses.replace(new, record_starts=plan.record_starts)
    if new.fingerprint == plan.fingerprint or needs_settling(new):
        raise DataError(
            f"{config.output}: the types by all rows were found but the run could not be "
            "planned with them; give the column types with --schema"
        )
    log.warning(
        "%s: the column types of the first rows do not hold for every row (%s): every task "
        "runs again with the types by all rows (a --schema file with these types skips this)",
        config.output,
        _changes(plan, new.schema),
    )
    _uncommit(plan, new)
    storage.write_json(storage.join(new.output, PLAN_NAME), new.to_dict())
    return Settlement(new, tuple(t.index for t in new.tasks))


def settle_stored(plan: Plan, manifests: list[dict[str, Any]], max_bad_fraction: float) -> Plan:
    """Settle ``plan`` (stored; ``manifests``: its committed tasks') without the run's
    options, as ``finalize`` does: nothing to do when it was settled already; possible when
    every guess held.

    Raises:
        DataError: a guess was wrong: tasks must run again (reset for it), which takes the
            run's options (``shardtrain settle``) or its workers.
    """
    redo = settle_alignment(plan, manifests)
    if redo:
        shown = ", ".join(map(str, redo[:10])) + (" ..." if len(redo) > 10 else "")
        raise DataError(
            f"{plan.output}: {len(redo)} task(s) began a piece of a CSV file at a wrongly "
            f"guessed record start (tasks {shown}); their start is now in {PLAN_NAME}: run "
            "`shardtrain settle` with the run's arguments (it runs them), or those workers "
            "again (task t belongs to worker t % n), then finalize"
        )
    if not needs_settling(plan):
        return plan
    verdict = _verify(plan, manifests, max_bad_fraction)
    if verdict is not None and verdict.schema != plan.schema:
        raise DataError(
            f"{plan.output}: the column types of the first rows do not hold for every row "
            f"({_changes(plan, verdict.schema)}): the tasks must run again with the types by "
            "all rows; run `shardtrain settle` with the run's arguments (it runs them), then "
            "finalize"
        )
    return _record(plan, verdict)


def _verify(
    plan: Plan, manifests: list[dict[str, Any]], max_bad_fraction: float
) -> FinalSchema | None:
    """The types by all rows from the committed tasks' counts (see
    :func:`verify_plan_types`); None: nothing was guessed."""
    pieces: list[Piece] = []
    counts: list[list[list[int]]] = []
    for m in manifests:
        for p in m["pieces"]:
            if "type_counts" in p:
                # As read: from its first record to the end of its last.
                first, stop = p.get("first", p["start"]), p.get("stop", p["end"])
                pieces.append(Piece(p["uri"], first, stop, p.get("gzip", False)))
                counts.append(p["type_counts"])
    return verify_plan_types(plan.layout, pieces, counts, max_bad_fraction=max_bad_fraction)


def _record(plan: Plan, verdict: FinalSchema | None) -> Plan:
    """``plan`` with what a verdict that kept its schema found recorded (and stored)."""
    if verdict is None:
        return plan
    found = {k: v for k, v in verdict.options.items() if plan.options.get(k) != v}
    if plan.settled != found:
        plan = dataclasses.replace(plan, settled=found)
        storage.write_json(storage.join(plan.output, PLAN_NAME), plan.to_dict())
    log.info("%s: the sample's column types hold for every row", plan.output)
    return plan


def _wrong_starts(before: Plan, after: Plan) -> list[str]:
    """``uri, byte B`` for each piece start ``after`` knows and ``before`` did not."""
    return [
        f"{uri}, byte {start:,}"
        for uri, starts in after.record_starts.items()
        for start, first in starts.items()
        if before.record_starts.get(uri, {}).get(start) != first
    ]


def _changes(plan: Plan, schema: Schema) -> str:
    """``zip int -> string, fee int -> float``: the columns ``schema`` types otherwise (``tags
    new -> string``: a column only all rows have, as JSON lines may)."""
    old = {c.name: c.type for c in plan.schema.columns}
    return ", ".join(
        f"{col.name} {old.get(col.name, 'new')} -> {col.type}"
        for col in schema.columns
        if old.get(col.name) != col.type
    )


def verify_plan_types(
    layout: SourceLayout,
    pieces: list[Piece],
    counts: list[list[list[int]]],
    *,
    max_bad_fraction: float,
) -> FinalSchema | None:
    """Decide the types a plan's tasks checked as they read (its source's guess, which its
    options mark; None when nothing was guessed): the schema by all rows and the options
    that record it, from ``counts[i]``, the ``Batch.type_counts`` of ``pieces[i]`` added up
    (:func:`~shardtrain.data.sources.base.sparse_counts`; pieces as read: from a record
    start to the end of a record). The schema is the plan's when the guess held; otherwise
    the run is planned again with these options (the source's ``recall`` takes the types
    from them) and every task runs again. From the stored plan alone, so that ``finalize``
    can settle workers that ran on several machines."""
    if layout.options.get(VERIFY_TYPES_OPTION):  # CSV types by the sample
        return verify_csv_types(layout, pieces, counts, max_bad_fraction=max_bad_fraction)
    if layout.options.get(VERIFY_JSONL_TYPES_OPTION):  # JSON-lines types by the sample
        return verify_jsonl_types(layout, pieces, counts, max_bad_fraction=max_bad_fraction)
    return None


def _uncommit(old: Plan, new: Plan) -> None:
    """Delete what the tasks of ``old`` wrote and ``new`` does not overwrite: the task
    manifests first (a deletion cut short leaves tasks to redo, never a stale commit), then
    their rejects, then the shards ``new`` has no place for (the summaries of the tasks before
    anything: see :mod:`.summary`)."""
    delete_summaries(old.output)
    for task in old.tasks:
        storage.delete(task_uri(old.output, task.index))
    for task in old.tasks:
        storage.delete(task_uri(old.output, task.index, ".rejects.jsonl"))
    keep = {
        new.shard_path(s, shard)
        for s in range(len(new.splits))
        for shard in range(new.num_shards[s])
    }
    for s in range(len(old.splits)):
        for shard in range(old.num_shards[s]):
            path = old.shard_path(s, shard)
            if path not in keep:
                storage.delete(storage.join(old.output, path))
