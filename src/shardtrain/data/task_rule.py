"""How many shards and tasks a run is cut into: the plan's rule, apart from the plan so that
the pipeline's fan-out can apply it to a listing alone.

:func:`counts` is the rule :func:`shardtrain.data.sharding.plan.build_plan` applies (with the
output/input byte ratio it measures on the sample). :func:`listed_tasks` applies it to the
file sizes, without the sample: the shard workers a run can keep busy, known before any byte
is read. The one input it lacks, the ratio, only ever *adds* tasks (a split of more than
``MAX_SHARDS_PER_TASK`` shards per task gets more tasks), so the count from the listing is
the plan's or fewer; a worker count taken from it is safe either way, because the workers
pick their tasks by it (task ``t`` runs on worker ``t % n``), not by the plan's task count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol


class RunLayout(Protocol):
    """The options of a run the rule reads (a :class:`~shardtrain.data.shard_config.ShardConfig`;
    a protocol because the sources use this module and the config imports the sources)."""

    @property
    def sources(self) -> tuple[str, ...]: ...
    @property
    def splits(self) -> tuple[tuple[str, float], ...]: ...
    @property
    def num_shards(self) -> int | None: ...
    @property
    def min_shards(self) -> int: ...
    @property
    def target_shard_bytes(self) -> int: ...
    @property
    def task_bytes(self) -> int: ...
    @property
    def data_kind(self) -> str: ...
    @property
    def tabular_format(self) -> str: ...


#: At most this many shards of one split are written by one task (bounds open uploads).
MAX_SHARDS_PER_TASK = 16
#: A gzip file counts this many times its size (its uncompressed size is unknown up front;
#: ~4x is typical of CSV and JSON lines).
GZIP_EXPANSION = 4
#: The smallest piece a plain file is cut into.
MIN_PIECE_BYTES = 64 * 1024
#: The piece size when there are no plain files (gzip files are one piece each).
GZIP_ONLY_PIECE_BYTES = 1 << 20


def counts(config: RunLayout, input_bytes: int, ratio: float) -> tuple[list[int], int]:
    """The shards per split and the number of tasks for ``input_bytes`` of input whose
    output is ``ratio`` bytes per input byte, before the pieces cap the tasks.

    Tasks: about ``task_bytes`` of input each, and enough to keep each task's open shards
    bounded. Every task owns at least one shard of every split, so a split sized by
    ``target_shard_bytes`` alone (a 10% eval split) would cap the tasks -- and the workers
    that can share the run -- at its shard count: such a split gets a shard per task
    instead (smaller shards; not when ``--num-shards`` sets the counts).
    """
    num_shards = []
    for _, fraction in config.splits:
        if config.num_shards:
            num_shards.append(config.num_shards)
        else:
            est = input_bytes * ratio * fraction
            num_shards.append(max(config.min_shards, math.ceil(est / config.target_shard_bytes)))
    wanted = math.ceil(input_bytes / config.task_bytes)
    wanted = max(wanted, max(math.ceil(m / MAX_SHARDS_PER_TASK) for m in num_shards))
    if not config.num_shards:
        num_shards = [max(m, wanted) for m in num_shards]
    return num_shards, max(1, min(wanted, min(num_shards)))


def piece_bytes(plain_bytes: int, tasks: int) -> int:
    """The size plain files are cut into for ``tasks`` tasks (``plain_bytes``: the size of
    the files that are not gzip; a gzip file is one piece)."""
    return (
        max(MIN_PIECE_BYTES, math.ceil(plain_bytes / tasks))
        if plain_bytes
        else GZIP_ONLY_PIECE_BYTES
    )


def count_pieces(sizes: Sequence[tuple[int, bool]], piece_size: int) -> int:
    """How many pieces files of these ``(size, gzip)`` are cut into (as
    :func:`~shardtrain.data.sources.base.plan_pieces` cuts them)."""
    return sum(
        1 if gz or size <= piece_size else math.ceil(size / piece_size) for size, gz in sizes
    )


def counts_by_listing(config: RunLayout) -> bool:
    """Whether the listing tells ``config``'s tasks: CSV and JSON lines, cut by bytes (not
    Parquet, cut by row groups, nor images)."""
    return config.data_kind == "tabular" and config.tabular_format in ("csv", "jsonl")


def listed_tasks(config: RunLayout) -> int | None:
    """The tasks of ``config``'s run by its listing alone (file sizes; no byte read): the
    plan's count, or fewer when the output is so much larger than the input that a split
    needs more than ``MAX_SHARDS_PER_TASK`` shards per task. None for sources whose tasks
    the listing cannot tell (Parquet row groups, images).

    Raises:
        DataError, StorageError: as listing the sources (a pattern matching nothing...).
    """
    if not counts_by_listing(config):
        return None
    from shardtrain.data import listing

    sizes = [(f.size, f.uri.endswith(".gz")) for f in listing.expand(config.sources)]
    input_bytes = sum(size * (GZIP_EXPANSION if gz else 1) for size, gz in sizes)
    _, tasks = counts(config, input_bytes, ratio=0.0)
    plain = sum(size for size, gz in sizes if not gz)
    return max(1, min(tasks, count_pieces(sizes, piece_bytes(plain, tasks))))
