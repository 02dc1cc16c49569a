"""Pods of a job that cannot go on, as the wait for the job reports them.

A job whose pod the scheduler cannot place (``0/3 nodes are available: 3 Insufficient
memory``) or whose container the kubelet cannot start (a Secret without the key it needs:
``CreateContainerConfigError``; an image it cannot pull) is neither running nor failed: the
controllers wait, and without a word the submit command would wait with them until its
timeout. :class:`PendingPods` says once per pod and reason what Kubernetes says about it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TextIO

from shardtrain.errors import one_line
from shardtrain.kubeflow.jobs.status import say

log = logging.getLogger(__name__)

#: Waiting reasons of a container that are only a moment of a normal start.
STARTING = frozenset({"ContainerCreating", "PodInitializing"})
#: The least time between two listings of the job's pods.
INTERVAL_SECONDS = 5.0


def stuck(pod: Any) -> list[str]:
    """What keeps ``pod`` (a kubernetes client V1Pod) from running, in Kubernetes' words: the
    scheduler's reason it is not placed, or a container's waiting reason and message."""
    status = pod.status
    if status is None:
        return []
    said = []
    for c in status.conditions or ():
        if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
            said.append(f"not scheduled: {' '.join(str(c.message or c.reason).split())}")
    for s in status.container_statuses or ():
        waiting = s.state.waiting if s.state else None
        if waiting is not None and waiting.reason and waiting.reason not in STARTING:
            message = " ".join(str(waiting.message or "").split())
            said.append(f"{waiting.reason}" + (f": {message}" if message else ""))
    return said


class PendingPods:
    """Called by the wait loop after each poll: lists the job's pods (at most every
    :data:`INTERVAL_SECONDS`) and says once per pod and reason what keeps one from running."""

    def __init__(self, what: str, list_pods: Callable[[], list[Any]], out: TextIO) -> None:
        """``what``: the job as messages name it; ``list_pods``: the job's pods now."""
        self._what = what
        self._list_pods = list_pods
        self._out = out
        self._said: set[tuple[str, str]] = set()
        self._next = 0.0

    def __call__(self, job: Any) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + INTERVAL_SECONDS
        try:
            pods = self._list_pods()
        except Exception as exc:  # a report, never a reason to stop waiting
            log.debug("cannot list the pods of %s: %s", self._what, one_line(exc))
            return
        for pod in pods:
            name = pod.metadata.name
            for reason in stuck(pod):
                if (name, reason) not in self._said:
                    self._said.add((name, reason))
                    say(self._out, f"{self._what}: pod {name} {reason}")
