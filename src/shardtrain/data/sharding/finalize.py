"""Finalize: the committed tasks of a run merged into ``metadata.json``, the dataset's commit."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from shardtrain import __version__, storage
from shardtrain.data.metadata import (
    METADATA_NAME,
    DatasetMetadata,
    DatasetStats,
    LabelInfo,
    ShardInfo,
    SplitInfo,
)
from shardtrain.data.schema import Schema
from shardtrain.data.sharding.lease import live_leases
from shardtrain.data.sharding.plan import PLAN_NAME, Plan
from shardtrain.data.sharding.settle import settle_stored, stored_plan
from shardtrain.data.sharding.summary import Committed, committed_tasks, listed_summaries
from shardtrain.data.sharding.task import task_uri
from shardtrain.data.statistics import LabelStats
from shardtrain.data.task import choose_task
from shardtrain.errors import DataError

log = logging.getLogger(__name__)

#: The merged rejects of a dataset, relative to its URI.
REJECTS_PATH = "rejects/rejects.jsonl"


def finalize(
    output: str,
    *,
    max_bad_fraction: float | None = None,
    top_k: int | None = None,
    held_lease: str | None = None,
    settled: tuple[Plan, Committed] | None = None,
) -> DatasetMetadata:
    """Merge the committed tasks of a run into ``metadata.json`` (the dataset's commit).

    Args:
        output: the dataset URI.
        max_bad_fraction: fail when more rows than this fraction were rejected
            (default: the value the workers were given).
        top_k: vocabulary entries kept per categorical column (default: the workers').
        held_lease: the URI of the lease the caller holds on ``output``
            (:mod:`.lease`), if any: the leftovers of killed writers are deleted only when
            no other lease is live.
        settled: the plan and committed tasks a settle step that left nothing to run again
            has just read (:attr:`.settle.Settlement.committed`): not read again.

    Returns:
        The metadata written.

    Raises:
        DataError: tasks are missing or read a piece of a CSV file from a wrongly guessed
            record start (:func:`~.alignment.settle_alignment`: they are reset, to be run
            again), the rejected fraction is too high, or no row survived.
    """
    if settled is not None:  # settled just now: the plan and the tasks it read
        plan, committed = settled
    else:
        plan = stored_plan(output)
        committed = committed_tasks(plan)
    manifests = committed.manifests
    limit = (
        manifests[0].get("max_bad_fraction", 0.001)
        if max_bad_fraction is None
        else max_bad_fraction
    )
    # Settled by one machine's run and by the pipeline's settle step; not by workers that
    # ran on several machines: then here, when no task has to run again. The types follow
    # the workers' --max-bad-fraction, as settling with the run's options would decide them
    # (this call's limit is the reject check's only).
    plan = settle_stored(plan, manifests, manifests[0].get("max_bad_fraction", 0.001))

    # Only local writes leave temporary files (an object store's unfinished upload is
    # invisible): elsewhere, nothing to list or clean.
    live = live_leases(output, exclude=held_lease) if storage.is_local(output) else None
    if live:
        log.info(
            "%s: another run holds a lease (%s): its temporary files are left alone",
            output,
            live[0][1].describe(),
        )
    elif live is not None:
        _remove_stale_temporaries(plan)

    rows_read = sum(m["rows_read"] for m in manifests)
    rejected = sum(m["rows_rejected"] for m in manifests)
    accepted = sum(m["rows_accepted"] for m in manifests)
    reasons: dict[str, int] = {}
    for m in manifests:
        for reason, n in m["rejects_by_reason"].items():
            reasons[reason] = reasons.get(reason, 0) + n
    rejects_uri = _write_rejects(plan, manifests)

    top_k = manifests[0].get("top_k", 100) if top_k is None else top_k
    if rows_read == 0:
        raise DataError(
            f"{output}: the input has no data rows ({len(plan.sources)} source file(s))"
        )
    if rejected / rows_read > limit:
        top = ", ".join(f"{k}={v}" for k, v in sorted(reasons.items()))
        raise DataError(
            f"{output}: {rejected} of {rows_read} rows ({rejected / rows_read:.2%}) were "
            f"rejected ({top}), more than --max-bad-fraction {limit:g}; see {rejects_uri}"
        )
    if accepted == 0:
        raise DataError(f"{output}: no row was accepted; see {rejects_uri}")

    schema = plan.schema
    stats: dict[str, Any] = {}
    for col in schema.features:
        stats[col.name] = committed.column_stats(col.name, col.type).to_dict(top_k)
    label = LabelStats()
    for m in manifests:
        label.merge(LabelStats.from_dict(m["label"]))
    label_info = _label_info(schema, label, output)

    splits: dict[str, SplitInfo] = {}
    for s, (name, fraction) in enumerate(plan.splits):
        shards = sorted(
            (sh for m in manifests for sh in m["shards"] if sh["split"] == name),
            key=lambda sh: sh["index"],
        )
        if [sh["index"] for sh in shards] != list(range(plan.num_shards[s])):
            raise DataError(f"{output}: shards of split '{name}' are incomplete")
        parts = tuple(ShardInfo.from_dict(sh) for sh in shards)
        splits[name] = SplitInfo(
            fraction=fraction,
            num_records=sum(sh.num_records for sh in parts),
            num_shards=len(parts),
            bytes=sum(sh.bytes for sh in parts),
            shards=parts,
        )
    metadata = DatasetMetadata(
        data_kind=plan.options.get("data_kind", "tabular"),
        tool_version=__version__,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        plan=plan.fingerprint,
        label=schema.label,
        key=schema.key,
        label_info=label_info,
        schema=schema,
        stats=DatasetStats(columns=stats, label=label.to_dict(), num_rows=accepted),
        rows_read=rows_read,
        rows_accepted=accepted,
        rows_rejected=rejected,
        rejects_by_reason=dict(sorted(reasons.items())),
        blank_lines=sum(m["blank_lines"] for m in manifests),
        rejects=rejects_uri.removeprefix(output.rstrip("/") + "/"),
        compression="GZIP" if plan.compression == "gzip" else "NONE",
        splits=splits,
        sources=plan.sources,
        options={**plan.options, **plan.settled},
    )
    metadata.publish(output)
    if metadata.rare_classes:
        log.warning(metadata.rare_classes)
    log.info(
        "committed %s: %d rows read, %d accepted, %d rejected; %s",
        output,
        rows_read,
        accepted,
        rejected,
        ", ".join(f"{n}={v.num_records}" for n, v in splits.items()),
    )
    return metadata


def _remove_stale_temporaries(plan: Plan) -> None:
    """Every task is committed and no worker writes any more: delete the temporary files
    killed writers left of the dataset's objects (a kill during a finalize leaves the
    rejects' or the metadata's). Only the dataset's own objects, local output only."""
    tasks = [
        u
        for t in plan.tasks
        for u in (task_uri(plan.output, t.index), task_uri(plan.output, t.index, ".rejects.jsonl"))
    ]
    shards = [
        storage.join(plan.output, plan.shard_path(s, shard))
        for s in range(len(plan.splits))
        for shard in range(plan.num_shards[s])
    ]
    names = (PLAN_NAME, METADATA_NAME, REJECTS_PATH)
    storage.remove_temporaries(
        [
            *(storage.join(plan.output, n) for n in names),
            *tasks,
            *listed_summaries(plan.output),
            *shards,
        ]
    )


def _label_info(schema: Schema, label: LabelStats, output: str) -> LabelInfo:
    """The label's type, its ``auto`` task (:func:`~shardtrain.data.task.choose_task`) and
    its classes (none for a label with too many values to count)."""
    column = schema.column(schema.label)
    counts = None if label.many_values else label.counts
    if counts is not None and len(counts) < 2:
        task = "binary"  # one value: recorded as sharded; training refuses it with one line
    else:
        choice = choose_task(schema.label, column.type, counts, where=output)
        task = choice.task
        log.info("label '%s': %s (%s)", schema.label, task, choice.reason)
    return LabelInfo(
        type=column.type,
        task=task,
        classes=tuple(sorted(label.counts, key=_class_sort_key)),
    )


def _class_sort_key(value: str) -> tuple:
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)


def _write_rejects(plan: Plan, manifests: list[dict[str, Any]]) -> str:
    """Merge the tasks' rejects into one file with line numbers of the source files."""
    # Lines before each piece: the lines of the earlier pieces of the same file.
    pieces = sorted(
        ((p["uri"], p["start"], p["lines"]) for m in manifests for p in m["pieces"]),
    )
    offset: dict[tuple[str, int], int] = {}
    running: dict[str, int] = {}
    for uri, start, lines in pieces:
        offset[(uri, start)] = running.get(uri, 0)
        running[uri] = running.get(uri, 0) + lines
    target = storage.join(plan.output, REJECTS_PATH)
    with storage.open(target, "w") as out:
        for m in sorted(manifests, key=lambda m: m["task"]):
            if not m["rows_rejected"]:
                continue
            with storage.open(task_uri(plan.output, m["task"], ".rejects.jsonl"), "r") as f:
                for line in f:
                    r = json.loads(line)
                    piece = m["pieces"][r.pop("piece")]
                    line = r["line"]  # None: an image of a directory tree
                    r = {
                        "source": r.get("source") or piece["uri"],
                        "line": None
                        if line is None
                        else offset[(piece["uri"], piece["start"])] + line,
                        **{k: r[k] for k in ("reason", "detail", "text")},
                        # Images: the path, and the manifest the line number refers to.
                        **({"path": r["path"]} if "path" in r else {}),
                        **({"manifest": piece["uri"]} if "path" in r and line is not None else {}),
                    }
                    out.write(json.dumps(r, ensure_ascii=False) + "\n")
    return target
