"""CPU binding of training replicas that share a host (local runs).

``shardtrain run-local`` puts every replica of a job on ``127.0.0.1``. Every step of a chief +
worker job waits twice for the peer (the gradient all-reduce and the loss/stop vote, each a gRPC
round trip through several threads of both processes). With both processes' thread pools free to
run on every core, each hand-off waits for the scheduler to find a core; a replica kept to its
own cores finds its threads where it left them, and TensorFlow sizes its thread pools from the
CPUs a process may use, so the pools shrink to match. The cost: a bound replica cannot move to
an idle core when something else (another job, other tests) is busy on its own. The measurements
are in ``benchmarks/RESULTS.md`` ("Multi-worker").

On a real cluster the pods of a job each have their own host name, so nothing is bound there.
:func:`keep_to_host_share` is called by :func:`shardtrain.train.cluster.make_strategy` before
TensorFlow starts its runtime.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)

#: ``0`` turns off :func:`host_cpu_share` binding (e.g. two local jobs on one machine, whose
#: chiefs would both take the first CPUs).
CPU_BINDING_ENV = "SHARDTRAIN_CPU_BINDING"


def host_cpu_share(tf_config: Mapping[str, Any], cpus: Sequence[int]) -> list[int] | None:
    """The CPUs this training replica keeps to when other replicas of its job share its host.

    Replicas share a host when their ``TF_CONFIG`` addresses have the same host part. Shares
    are dealt per job: two local jobs on one machine both start at the first CPUs
    (``SHARDTRAIN_CPU_BINDING=0`` turns binding off); an evaluator is not in the cluster and
    is not bound. The host's ``cpus`` are dealt out in contiguous, disjoint parts, one per
    co-located replica in ``cluster`` order (chief first), the remainder going to the first
    replicas.

    Args:
        tf_config: the training collective's ``TF_CONFIG`` (cluster and task).
        cpus: the CPUs this process may use.

    Returns:
        The CPUs to keep to, or None: alone on its host, or fewer CPUs than co-located
        replicas (nothing sensible to split), or no address for this task.
    """
    task = tf_config.get("task", {})
    cluster = tf_config.get("cluster", {})
    try:
        mine = cluster[task["type"]][task["index"]]
    except (KeyError, IndexError, TypeError):
        return None
    host = str(mine).rpartition(":")[0]
    together = [
        (kind, i)
        for kind, addresses in cluster.items()
        for i, address in enumerate(addresses)
        if str(address).rpartition(":")[0] == host
    ]
    cpus = sorted(cpus)
    if len(together) < 2 or len(cpus) < len(together):
        return None
    position = together.index((task["type"], task["index"]))
    each, extra = divmod(len(cpus), len(together))
    start = position * each + min(position, extra)
    return cpus[start : start + each + (1 if position < extra else 0)]


def keep_to_host_share(tf_config: Mapping[str, Any]) -> None:
    """Bind this process to :func:`host_cpu_share` (before TensorFlow sizes its pools)."""
    if not hasattr(os, "sched_setaffinity"):
        return  # not Linux: nothing to do
    if os.environ.get(CPU_BINDING_ENV, "1") == "0":
        return
    share = host_cpu_share(tf_config, sorted(os.sched_getaffinity(0)))
    if share is None:
        return
    # sched_setaffinity(0) binds the calling thread only: bind every thread started so far
    # (threads started later inherit the mask).
    tids = os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ["0"]
    for tid in tids:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), share)
    task = tf_config["task"]
    log.info(
        "%s-%d shares this host with other training replicas: keeping to CPU(s) %s",
        task["type"],
        task["index"],
        ",".join(map(str, share)),
    )
