"""Who may write which tasks of an output: one lease per worker's task set.

A ``shard`` run takes the lease ``_leases/worker-<i>-of-<n>.json`` of its task set (worker
``i`` of ``n`` runs the tasks ``t`` with ``t % n == i``) before it plans or writes anything,
and holds it until it ends (:mod:`shardtrain.storage.lease`: a lock object with its owner and
an expiry renewed while the run lives). So:

* the workers of one pipeline (``--worker-index i --num-workers n``, one pod each) write the
  same output at once, as designed: their task sets are disjoint, and so are their leases;
* a second run whose task set overlaps a live one's — the same command started twice, a
  retry while the first attempt still runs, a single-process run next to a pipeline's
  workers — waits for the lease (``SHARDTRAIN_LEASE_WAIT`` seconds, default one and a half
  times the lease's time to live, so that a killed owner's lease on an object store expires
  meanwhile), then resumes or finds the dataset complete; when the wait runs out it stops
  with one line naming the owner (exit 3).

Task sets ``i of n`` and ``j of m`` overlap when ``i ≡ j (mod gcd(n, m))``. Two runs that take
overlapping leases of different names at once both see the other; the earlier run id keeps
its lease and the later one waits. A run that holds its lease is the only one writing its
tasks, which is what allows each task to delete the temporary files a killed run left of its
objects (:func:`shardtrain.data.sharding.task.run_task`), and finalize to delete every
leftover only when no lease is live.
"""

from __future__ import annotations

import logging
import math
import os
import re
import time

from shardtrain import storage
from shardtrain.errors import OutputBusyError
from shardtrain.storage.lease import Holder, Lease, holder, lease_ttl, try_acquire

log = logging.getLogger(__name__)

#: The folder of the leases, relative to the dataset.
LEASES_DIR = "_leases"
_NAME = re.compile(r"worker-(\d{5})-of-(\d{5})\.json")


def lease_uri(output: str, worker_index: int, num_workers: int) -> str:
    return storage.join(output, LEASES_DIR, f"worker-{worker_index:05d}-of-{num_workers:05d}.json")


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether task sets ``(i, n)`` and ``(j, m)`` share a task."""
    return (a[0] - b[0]) % math.gcd(a[1], b[1]) == 0


def lease_wait() -> float:
    """Seconds a run waits for a busy lease, from ``SHARDTRAIN_LEASE_WAIT``."""
    default = 1.5 * lease_ttl()
    return max(0.0, float(os.environ.get("SHARDTRAIN_LEASE_WAIT", default)))


def live_leases(output: str, exclude: str | None = None) -> list[tuple[tuple[int, int], Holder]]:
    """The live leases on ``output`` (their task sets and holders), ``exclude`` left out.

    Leases are told apart by name: a listing spells URIs its own way (a relative local
    ``output`` is listed as absolute paths), and every lease of ``output`` is in one folder."""
    found = []
    skip = storage.basename(exclude) if exclude else None
    for uri in storage.ls(storage.join(output, LEASES_DIR)):
        name = storage.basename(uri)
        match = _NAME.fullmatch(name)
        if match is None or name == skip:
            continue
        owner = holder(uri)
        if owner is not None:
            found.append(((int(match[1]), int(match[2])), owner))
    return found


def take_lease(output: str, worker_index: int, num_workers: int) -> Lease:
    """The lease of worker ``worker_index`` of ``num_workers`` on ``output``, waiting at most
    :func:`lease_wait` seconds for a live owner of an overlapping task set to end.

    Raises:
        OutputBusyError: the wait ran out; the message names the owner.
    """
    mine = (worker_index, num_workers)
    uri = lease_uri(output, *mine)
    wait = lease_wait()
    # The wait runs from the first sight of a live owner: on an object store the first try
    # (conditional put, reads, listing) takes a while, and counting it would announce, and
    # wait, less than SHARDTRAIN_LEASE_WAIT says.
    deadline: float | None = None
    info = {"worker_index": worker_index, "num_workers": num_workers}
    while True:
        got = try_acquire(uri, info)
        owner: Holder | None = None
        if isinstance(got, Lease):
            try:
                rivals = [h for ts, h in live_leases(output, exclude=uri) if overlaps(ts, mine)]
            except BaseException:  # stopped (SIGTERM) or failed: not left to expire
                got.release()
                raise
            earlier = [h for h in rivals if h.run < got.run]
            if not earlier:
                return got
            got.release()
            owner = earlier[0]
        else:
            owner = got
        if deadline is None:
            deadline = time.monotonic() + wait
            if wait > 0:
                log.warning(
                    "%s: another run holds the lease of these tasks (%s); waiting up to %ss "
                    "(SHARDTRAIN_LEASE_WAIT)",
                    output,
                    owner.describe(),
                    f"{wait:.1f}".removesuffix(".0"),
                )
        if time.monotonic() >= deadline:
            raise OutputBusyError(
                f"{output}: another run is writing worker {worker_index} of {num_workers}'s "
                f"tasks ({owner.describe()}); wait for it to end and run the same command "
                "again (it resumes or finds the dataset complete), or stop it first"
            )
        time.sleep(min(2.0, max(0.05, deadline - time.monotonic())))
