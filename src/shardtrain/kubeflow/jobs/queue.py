"""A job's passage through its queue (Kueue, Volcano), as the wait for it reports it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TextIO

from shardtrain.kubeflow.jobs.status import say


class QueueWatch:
    """Reports a job's passage through its queue: called by the wait loop after each poll with
    the job; says once when it is queued and once when it is admitted (again after a
    preemption re-queued it).

    ``is_queued`` is the job API's test (e.g. a suspended TFJob): a queued job has no pods
    and is neither running nor failed.
    """

    def __init__(self, what: str, is_queued: Callable[[Any], bool], out: TextIO) -> None:
        """``what``: the job as messages name it, e.g. ``TFJob team/quest``."""
        self._what = what
        self._is_queued = is_queued
        self._out = out
        self.queued = False
        self.ever_queued = False

    def __call__(self, job: Any) -> None:
        queued = self._is_queued(job)
        if queued and not self.queued:
            say(self._out, f"{self._what} is queued: suspended until its queue admits it")
        elif self.queued and not queued:
            say(self._out, f"{self._what} was admitted: its pods are being created")
        self.queued = queued
        self.ever_queued = self.ever_queued or queued
