"""Worker summaries: what settling and finalizing read instead of every task's manifest.

A task commits by writing its manifest (:mod:`.task`), and every manifest holds the top
values of every categorical column of its rows (up to ``MANIFEST_TOP`` of each): most of its
bytes, and most of what merging it costs. Read task by task, a run of 100 GB (some 750
tasks) costs the one pod that settles it seconds of JSON and vocabulary merging, as long as
each of 64 workers' share of the sharding itself. So each worker, once all its tasks have
committed, writes one summary of them, ``_tasks/summary-IIIII-of-NNNNN.json`` (worker ``I``
of ``N``: the tasks ``t`` with ``t % N == I``):

* every one of its task manifests, *without* their categorical columns' statistics (counts,
  pieces, shards, rejects, numeric statistics: small, and merged task by task exactly as
  before, so means and deviations do not depend on the number of workers);
* the categorical columns' statistics of those tasks merged, as two lists
  (:meth:`~shardtrain.data.statistics.CategoricalStats.to_columns`): every value while the
  merged column is exact, so that merging the summaries gives what merging the tasks gives;
  the most frequent ones once it is approximate (a column with more distinct values than
  the statistics track, whose top values are lower bounds either way): ten times the run's
  ``top_k``, at least 1,000.

Settling then reads ``N`` summaries and merges ``N`` vocabularies (work that grows with the
workers, not with the data), and the pod work per task left is a small JSON document.

The task manifests stay the commit and the truth; a summary is a copy, used only when:

* it is of the stored plan (its fingerprint), and
* every task it covers has a committed manifest (one listing of ``_tasks/`` says so).

Whatever deletes a committed manifest -- settling, when tasks must run again -- deletes the
summaries covering it first (:func:`delete_summaries`): a deletion cut short leaves tasks
read one by one, never a summary of a manifest that is gone or changed. A worker that ran
again writes its summary again, over the old one.
"""

from __future__ import annotations

import logging
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from shardtrain import documents, storage
from shardtrain.data.histogram import Histogram
from shardtrain.data.sharding.plan import Plan
from shardtrain.data.sharding.task import task_uri
from shardtrain.data.statistics import (
    MANIFEST_TOP,
    CategoricalStats,
    ColumnStats,
    NumericStats,
    new_stats,
    stats_from_dict,
)
from shardtrain.documents import DocumentError
from shardtrain.errors import DataError, StorageError

log = logging.getLogger(__name__)

#: Bumped when the summary's layout changes: summaries of another version are not used.
SUMMARY_VERSION = 1

#: Manifests and summaries read at once: on object storage each read is a round trip or two.
MANIFEST_READERS = 16

_SUMMARY = re.compile(r"summary-(\d{5})-of-(\d{5})\.json")
_TASK = re.compile(r"task-(\d{5})\.json")


def summary_uri(output: str, worker: int, num_workers: int) -> str:
    return storage.join(output, "_tasks", f"summary-{worker:05d}-of-{num_workers:05d}.json")


@dataclass
class Committed:
    """The committed tasks of a plan, as settling and finalizing read them.

    Attributes:
        manifests: every committed task's manifest, in task order; those a summary holds
            (``covered``) lack their categorical columns' statistics and their numeric
            columns' histograms.
        covered: the tasks whose manifests came from a summary.
        categorical: the merged categorical statistics of each summary read (column name
            -> :meth:`~shardtrain.data.statistics.CategoricalStats.to_columns`).
        histograms: the merged histograms of each summary read (numeric column name ->
            ``{"count", "nan", "histogram"}``: the values its tasks counted, the histogram
            None when some of them had none).
    """

    manifests: list[dict[str, Any]] = field(default_factory=list)
    covered: set[int] = field(default_factory=set)
    categorical: list[dict[str, dict[str, Any]]] = field(default_factory=list)
    histograms: list[dict[str, dict[str, Any]]] = field(default_factory=list)

    def column_stats(self, name: str, column_type: str) -> ColumnStats:
        """The statistics of column ``name`` (of schema type ``column_type``) over every
        task: what merging each task's in task order gives (the same sums; means and
        deviations folded task by task in the same order, so the same floats), with the
        top values of a column too many to count exactly as lower bounds either way."""
        if column_type == "string":
            vocabulary = CategoricalStats.for_merging()  # no compiled kernel to start
            for m in self.manifests:
                if name in m["stats"]:
                    vocabulary.merge_dict(m["stats"][name])
            for part in self.categorical:
                if name in part:
                    vocabulary.merge_dict(part[name])
            return vocabulary
        stats = new_stats(column_type)
        if not isinstance(stats, NumericStats):  # images: every task's, in task order
            for m in self.manifests:
                stats.merge(stats_from_dict(m["stats"][name]))  # type: ignore[arg-type]
            return stats
        histogram = new_stats(column_type)  # the histogram's own merge, as NumericStats.merge
        assert isinstance(histogram, NumericStats)
        for m in self.manifests:
            numeric = NumericStats.from_dict(m["stats"][name])
            stats.merge_moments(numeric)
            if m["task"] not in self.covered:
                histogram.merge(numeric)
        for h in self.histograms:
            if name in h:
                histogram.merge(_histogram_part(h[name]))
        stats.histogram = histogram.histogram
        return stats


def _histogram_part(d: dict[str, Any]) -> NumericStats:
    """A summary's histogram of a column, as statistics to merge (counts only)."""
    return NumericStats(
        count=d["count"],
        nan=d["nan"],
        histogram=Histogram.from_dict(d["histogram"]) if d["histogram"] else None,
    )


def _kept(stats: CategoricalStats, top_k: int) -> int | None:
    """How many values a summary keeps of a column: every one while they are exact; of an
    approximate column (its counts lower bounds already), ten times the run's ``top_k``
    (at least 1,000, at most a task manifest's ``MANIFEST_TOP``): the candidates for the
    dataset's top values, without every summary carrying thousands of ids."""
    if not stats.approximate:
        return None
    return min(MANIFEST_TOP, max(1_000, 10 * top_k))


def summarize(
    manifests: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """The manifests of some tasks (in task order) without their categorical statistics and
    numeric histograms, and those merged (see the module docstring): ``(manifests,
    categorical, histograms)``."""
    if not manifests:
        return [], {}, {}
    kinds = {n: s["kind"] for n, s in manifests[0]["stats"].items()}
    categorical: dict[str, Any] = {}
    histograms: dict[str, Any] = {}
    for name, kind in kinds.items():
        if kind == "categorical":
            stats = CategoricalStats()
            for m in manifests:
                stats.merge_dict(m["stats"][name])
            categorical[name] = stats.to_columns(_kept(stats, manifests[0].get("top_k", 100)))
        elif kind == "numeric":
            counted = NumericStats()
            for m in manifests:
                counted.merge(NumericStats.from_dict(m["stats"][name]))
            histograms[name] = {
                "count": counted.count,
                "nan": counted.nan,
                "histogram": counted.histogram.to_dict() if counted.histogram else None,
            }

    def light(stats: dict[str, Any]) -> dict[str, Any]:
        return {
            n: {k: v for k, v in s.items() if k != "histogram"} if n in histograms else s
            for n, s in stats.items()
            if n not in categorical
        }

    return [{**m, "stats": light(m["stats"])} for m in manifests], categorical, histograms


def write_summary(
    plan: Plan, worker: int, num_workers: int, manifests: list[dict[str, Any]]
) -> None:
    """Write worker ``worker`` of ``num_workers``'s summary of its task ``manifests`` (every
    one of its tasks', committed, in task order)."""
    mine = [t.index for t in plan.tasks if t.index % num_workers == worker]
    if [m["task"] for m in manifests] != mine:
        raise AssertionError(f"a summary of tasks {mine} was given other manifests")
    light, categorical, histograms = summarize(manifests)
    storage.write_json(
        summary_uri(plan.output, worker, num_workers),
        {
            "version": SUMMARY_VERSION,
            "plan": plan.fingerprint,
            "worker": worker,
            "num_workers": num_workers,
            "manifests": light,
            "categorical": categorical,
            "histograms": histograms,
        },
        compact=True,
    )


def read_committed(plan: Plan) -> tuple[Committed, list[int]]:
    """The committed tasks of ``plan`` (from the summaries that hold, and the manifests of
    the tasks none covers) and the indices of the tasks that have no manifest of it."""
    listed = set(map(storage.basename, storage.ls(storage.join(plan.output, "_tasks"))))
    present = {int(m.group(1)) for n in listed if (m := _TASK.fullmatch(n))}
    candidates = []
    for name in sorted(listed):
        if (m := _SUMMARY.fullmatch(name)) is not None:
            worker, n = int(m.group(1)), int(m.group(2))
            covers = {t.index for t in plan.tasks if t.index % n == worker}
            if n and covers and covers <= present:
                candidates.append((worker, n, covers))
    # The largest first; a summary overlapping one taken is not read (runs of another
    # number of workers may have left summaries of the same tasks).
    candidates.sort(key=lambda c: (-len(c[2]), c[1], c[0]))
    chosen: list[tuple[int, int]] = []
    covered: set[int] = set()
    for worker, n, covers in candidates:
        if not covers & covered:
            chosen.append((worker, n))
            covered |= covers
    with ThreadPoolExecutor(MANIFEST_READERS, thread_name_prefix="summaries") as pool:
        summaries = list(pool.map(lambda c: _read_summary(plan, *c), chosen))
    committed = Committed()
    by_task: dict[int, dict[str, Any]] = {}
    for s in summaries:
        if s is None:
            continue
        for m in s["manifests"]:
            by_task[m["task"]] = m
            committed.covered.add(m["task"])
        committed.categorical.append(s["categorical"])
        committed.histograms.append(s["histograms"])
    rest = [t.index for t in plan.tasks if t.index not in by_task and t.index in present]

    def read(index: int) -> dict[str, Any] | None:
        return read_manifest(task_uri(plan.output, index), listed=True)

    with ThreadPoolExecutor(MANIFEST_READERS, thread_name_prefix="manifests") as pool:
        for index, found in zip(rest, pool.map(read, rest), strict=True):
            if found is not None and found["plan"] == plan.fingerprint:
                by_task[index] = found
    missing = []
    for t in plan.tasks:
        if t.index in by_task:
            committed.manifests.append(by_task[t.index])
        else:
            missing.append(t.index)
    return committed, missing


def read_manifest(uri: str, *, listed: bool = False) -> dict[str, Any] | None:
    """The task manifest at ``uri`` (``listed``: a listing found it); None when there is none,
    or when it does not read as one (not JSON, a field missing or mistyped:
    :data:`~shardtrain.documents.TASK_MANIFEST`): the task is then not committed, and runs
    again (said in one warning naming the file and the field)."""
    try:
        doc = storage.read_json(uri) if listed else storage.read_json_if_exists(uri)
        return None if doc is None else documents.check(doc, documents.TASK_MANIFEST, uri)
    except (DocumentError, StorageError) as exc:
        if isinstance(exc, StorageError) and "not valid JSON" not in str(exc):
            raise
        log.warning("%s; the task is not taken as committed: it runs again", exc)
        return None


def committed_tasks(plan: Plan) -> Committed:
    """The committed tasks of ``plan`` (:func:`read_committed`), every one of them.

    Raises:
        DataError: some tasks have not committed under this plan.
    """
    committed, missing = read_committed(plan)
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        raise DataError(
            f"{plan.output}: {len(missing)} of {len(plan.tasks)} task(s) have not finished "
            f"(tasks {shown}); run the missing workers (task t belongs to worker t % n) first"
        )
    return committed


def _read_summary(plan: Plan, worker: int, num_workers: int) -> dict[str, Any] | None:
    """A summary, or None when it is not of ``plan`` (or is gone, or unreadable: its tasks
    are then read one by one)."""
    uri = summary_uri(plan.output, worker, num_workers)
    try:
        s = storage.read_json(uri)
    except (FileNotFoundError, StorageError):
        return None
    if not isinstance(s, dict) or s.get("version") != SUMMARY_VERSION:
        return None
    try:
        documents.check(s, documents.WORKER_SUMMARY, uri)
    except DocumentError as exc:
        log.warning("%s; its tasks are read one by one", exc)
        return None
    return s if s["plan"] == plan.fingerprint else None


def delete_summaries(output: str, tasks: set[int] | None = None) -> None:
    """Delete the summaries covering any of ``tasks`` (None: every summary): before a
    committed task manifest is deleted."""
    for uri in storage.ls(storage.join(output, "_tasks")):
        m = _SUMMARY.fullmatch(storage.basename(uri))
        if m is None:
            continue
        worker, n = int(m.group(1)), int(m.group(2))
        if tasks is None or any(n and t % n == worker for t in tasks):
            storage.delete(uri)


def listed_summaries(output: str) -> list[str]:
    """The URIs of the summaries a listing of ``output`` finds, and of those whose write was
    cut short (their temporary files are named after them)."""
    found = set()
    for uri in storage.ls(storage.join(output, "_tasks")):
        m = _SUMMARY.match(storage.basename(uri))
        if m is not None:
            found.add(summary_uri(output, int(m.group(1)), int(m.group(2))))
    return sorted(found)
