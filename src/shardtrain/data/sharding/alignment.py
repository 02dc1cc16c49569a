"""The exact check of where the pieces of a file began reading, once all are read.

A piece of a CSV file that starts inside the file guesses where its first record begins (the
quote state there depends on every byte before it: see
:mod:`shardtrain.data.sources.csv.align`) and its task's manifest says where it began
(``first``) and stopped (``stop``: the first record start at or after its end). The first
piece of a file begins at a record start, so when every piece stopped where the next one
began, by induction every record was read exactly once, by the piece it begins in. At the
first piece of a file where that chain breaks, the piece before it was read right, so its
``stop`` is the true start of the next piece's first record: :func:`settle_alignment` records
it in the stored plan (:attr:`~shardtrain.data.sharding.plan.Plan.record_starts`, outside the
fingerprint) and deletes that task's manifest, so that the task is run again from there.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from shardtrain import storage
from shardtrain.data.sharding.plan import PLAN_NAME, Plan
from shardtrain.data.sharding.summary import delete_summaries
from shardtrain.data.sharding.task import task_uri


def settle_alignment(plan: Plan, manifests: Sequence[dict[str, Any]]) -> list[int]:
    """Check that the pieces of every file cut in several chain (piece ``i``'s ``stop`` is
    piece ``i + 1``'s ``first``) in the committed task ``manifests`` of ``plan``; at the first
    break of each file, record the true start of the piece after it in the stored plan and
    delete the manifest of the task that read it.

    Returns the indices of the tasks to run again (ascending; ``[]``: every chain holds,
    nothing was written). The pieces after a break are checked again once those tasks ran.
    Pieces without ``first``/``stop`` (other sources) and tasks without a manifest are not
    checked.

    Raises:
        AssertionError: a piece read from a start recorded here still does not chain (the
            reader did not use it: a bug, not bad data).
    """
    read: dict[tuple[str, int], tuple[int, int]] = {}  # (uri, start) -> (first, stop)
    for m in manifests:
        for p in m.get("pieces", ()):
            if "first" in p and "stop" in p:
                read[(p["uri"], p["start"])] = (p["first"], p["stop"])
    files: dict[str, list[tuple[int, int]]] = {}  # uri -> (start, task) of each piece
    for planned in plan.tasks:
        for piece in planned.pieces:
            files.setdefault(piece.uri, []).append((piece.start, planned.index))
    found: dict[str, dict[int, int]] = {}
    redo: set[int] = set()
    for uri, pieces in files.items():
        pieces.sort()
        for (before, _), (start, task) in itertools.pairwise(pieces):
            if (uri, before) not in read or (uri, start) not in read:
                break  # not read (yet): what follows cannot be checked
            stop, first = read[(uri, before)][1], read[(uri, start)][0]
            if stop == first:
                continue
            if plan.record_starts.get(uri, {}).get(start) == stop:
                raise AssertionError(
                    f"{uri}: the piece at byte {start:,} was read from {first:,}, not from "
                    f"the record start {stop:,} the plan holds for it"
                )
            found.setdefault(uri, {})[start] = stop
            redo.add(task)
            break
    if not redo:
        return []
    starts = {uri: dict(s) for uri, s in plan.record_starts.items()}
    for uri, new in found.items():
        starts.setdefault(uri, {}).update(new)
    settled = Plan(**{**plan.__dict__, "record_starts": starts})
    # The manifests first: a run killed in between reads those pieces again from their guess
    # (and is set right again), never holds a manifest that contradicts the stored plan; and
    # before them, the worker summaries that hold copies of them.
    delete_summaries(plan.output, redo)
    for index in sorted(redo):
        storage.delete(task_uri(plan.output, index))
    storage.write_json(storage.join(plan.output, PLAN_NAME), settled.to_dict())
    return sorted(redo)
