"""Submitting a job and waiting for its end, for any job API.

:func:`submit_and_wait` creates a job, streams its chief's log (:mod:`.logs`), reports its
passage through a queue (:mod:`.queue`), waits for it with a real overall timeout, and turns
the end into a result or one error line. What differs between job APIs (the client, the kind,
the condition that means success, what "queued" looks like, where the chief's log is) comes
from a :class:`~shardtrain.kubeflow.jobs.api.JobApi`; :mod:`shardtrain.kubeflow.jobs.tfjob`
supplies the TFJob's.

The pieces, in order: :func:`check_submission` (before anything reaches the cluster),
:func:`_create`, :func:`_wait` (with the log thread and the queue watch), :func:`_outcome`
(the final conditions as a result or an error), and the optional deletion.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, TextIO

from shardtrain.errors import ConfigError, ShardtrainError, one_line
from shardtrain.kubeflow.jobs.api import JobApi
from shardtrain.kubeflow.jobs.logs import ChiefLogs
from shardtrain.kubeflow.jobs.pending import PendingPods
from shardtrain.kubeflow.jobs.queue import QueueWatch
from shardtrain.kubeflow.jobs.status import (
    Condition,
    conditions_of,
    has,
    print_conditions,
    say,
)

log = logging.getLogger(__name__)


class ClusterError(ShardtrainError):
    """The Kubernetes API could not be reached or refused a request."""


class JobExistsError(RuntimeError):
    """The API refused to create a job because one of that name exists (HTTP 409)."""


class JobFailedError(ShardtrainError):
    """The job ended with the Failed condition."""


class JobTimeoutError(ShardtrainError):
    """The job did not finish within the wait timeout (it may still be running)."""


@dataclass(frozen=True)
class SubmitResult:
    """A job that ran to success."""

    name: str
    namespace: str
    conditions: tuple[Condition, ...]


def check_submission(
    kind: str, name: str, namespace: str | None, wait_timeout: float, poll_interval: float
) -> None:
    """Refuse what cannot be submitted or waited for, before anything reaches the cluster.

    Raises:
        ConfigError: no namespace, or a wait timeout or poll interval that is not positive.
    """
    if not namespace:
        raise ConfigError(f"{kind} {name}: metadata.namespace is required to submit it")
    if wait_timeout <= 0 or poll_interval <= 0:
        raise ConfigError("wait_timeout and poll_interval must be positive")


def submit_and_wait(
    api: JobApi,
    job: Any,
    name: str,
    namespace: str,
    *,
    wait_timeout: float,
    poll_interval: float,
    stream_logs: bool,
    delete_after: bool,
    request_timeout: int,
    out: TextIO,
) -> SubmitResult:
    """Create ``job``, wait until it succeeded or failed, and report how it ended.

    ``wait_timeout`` bounds the whole wait, queue time included; ``request_timeout`` each API
    request. Re-entrant: when the same job exists already (:meth:`JobApi.same_job`: a retried
    pipeline step, a repeated submit) the wait attaches to it, finished or not; a different job
    of that name is an error. A failed job ends the wait at once and is reported as a failure,
    never as success; a job still queued at the timeout is a :class:`JobTimeoutError` saying so,
    and stays on the cluster (in its queue) unless ``delete_after``. Call
    :func:`check_submission` first.

    Returns:
        The job's name, namespace and final conditions, when it succeeded.

    Raises:
        ClusterError: the API could not be reached or refused the job (e.g. another job of
            that name exists).
        JobFailedError: the job ended failed (the message carries the operator's reason).
        JobTimeoutError: the job had not finished after ``wait_timeout`` seconds.
    """
    what = f"{api.kind} {namespace}/{name}"
    verb = "attached to" if _create(api, job, name, namespace, what, out) else "created"
    say(
        out,
        f"{verb} {what}; waiting up to {wait_timeout:g}s for it to end"
        + (" (queue time included)" if api.is_queued(job) else ""),
    )
    watch = QueueWatch(what, api.is_queued, out)
    pending = PendingPods(what, lambda: api.pods(name, namespace), out)

    def after_each_poll(job: Any) -> None:
        watch(job)
        if not watch.queued:  # a queued job has no pods
            pending(job)

    logs = ChiefLogs(api, name, namespace, poll_interval, out) if stream_logs else None
    if logs:
        logs.start()
    try:
        final, error = _wait(
            api, name, namespace, what, watch, after_each_poll,
            timeout=wait_timeout, poll=poll_interval, request_timeout=request_timeout,
            deleting=delete_after,
        )  # fmt: skip
    except KeyboardInterrupt:
        if logs:
            logs.finish(wait=0)
        if delete_after:
            _delete(api, name, namespace, what, out)
        raise
    if logs:
        logs.finish(wait=30 if final is not None else 0)
    conditions = conditions_of(final) if final is not None else _latest(api, name, namespace)
    print_conditions(out, what, conditions)
    error = error or _outcome(api, what, conditions, name, namespace)
    if delete_after:
        _delete(api, name, namespace, what, out)
    if error is not None:
        raise error
    say(out, f"{what} succeeded")
    return SubmitResult(name=name, namespace=namespace, conditions=conditions)


#: How long a failed job of an earlier attempt may take to be deleted before it is recreated.
DELETE_TIMEOUT_SECONDS = 300.0


def _create(api: JobApi, job: Any, name: str, namespace: str, what: str, out: TextIO) -> bool:
    """Create the job; True when the same job already exists and is running or has succeeded
    (a retried pipeline step, a repeated submit): the wait attaches to it instead. The same job
    that *failed* in an earlier attempt is deleted and created again (a retry must be able to
    train; it resumes from the checkpoint).

    Raises:
        ClusterError: the API refused the job, or a different job has its name.
    """
    try:
        api.create(job, namespace)
        return False
    except JobExistsError as exc:
        try:
            existing = api.get(name, namespace)
        except Exception as read:
            raise ClusterError(f"{what} exists but cannot be read: {one_line(read)}") from exc
        if not api.same_job(existing, job):
            raise ClusterError(
                f"{what} already exists and runs something else (another image, data, model "
                "directory, train arguments, pods' settings or queue): delete it or choose "
                "another name"
            ) from exc
        failed = has(conditions_of(existing), api.failed)
        if failed is None:
            return True
        say(
            out,
            f"{what} failed in an earlier attempt ({failed.reason or 'no reason given'}): "
            "deleting it to run it again (it resumes from its checkpoint)",
        )
        _delete_and_wait(api, name, namespace, what)
        return _create(api, job, name, namespace, what, out)
    except (RuntimeError, TimeoutError, ValueError) as exc:
        raise ClusterError(f"cannot create {what}: {one_line(exc)}") from exc


def _delete_and_wait(api: JobApi, name: str, namespace: str, what: str) -> None:
    """Delete the job and wait until the API no longer has it.

    Raises:
        ClusterError: it could not be deleted, or is still there after
            :data:`DELETE_TIMEOUT_SECONDS`.
    """
    try:
        api.delete(name, namespace)
    except Exception as exc:
        if not is_not_found(exc):
            raise ClusterError(f"cannot delete {what}: {one_line(exc)}") from exc
    deadline = time.monotonic() + DELETE_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        try:
            api.get(name, namespace)
        except Exception as exc:
            if is_not_found(exc):
                return
            raise ClusterError(f"lost track of {what} while deleting it: {one_line(exc)}") from exc
        time.sleep(1)
    raise ClusterError(f"{what} was not deleted within {DELETE_TIMEOUT_SECONDS:g}s")


def is_not_found(exc: BaseException) -> bool:
    """True when ``exc`` (or what it was raised from) is the API's HTTP 404."""
    cause: BaseException | None = exc
    while cause is not None:
        if getattr(cause, "status", None) == 404:
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _wait(
    api: JobApi,
    name: str,
    namespace: str,
    what: str,
    watch: QueueWatch,
    callback: Any,
    *,
    timeout: float,
    poll: float,
    request_timeout: int,
    deleting: bool,
) -> tuple[Any, ShardtrainError | None]:
    """The job once it has ended, or None and why the wait stopped without an end (a timeout
    says whether the job stays on the cluster, or is deleted next: ``deleting``)."""
    try:
        final = api.wait(
            name, namespace, timeout=timeout, poll=poll, callback=callback,
            request_timeout=request_timeout,
        )  # fmt: skip
    except TimeoutError as exc:
        queued = "still queued (suspended, never admitted by its queue)"
        if deleting:
            state = f"it was {queued}; deleted" if watch.queued else "deleted (--delete)"
        else:
            state = f"it is {queued} and" if watch.queued else "it"
            state += " is still on the cluster"
        error: ShardtrainError = JobTimeoutError(
            f"{what} did not end within {timeout:g}s; {state} ({one_line(exc)})"
        )
        error.__cause__ = exc
        return None, error
    except RuntimeError as exc:
        error = ClusterError(f"lost track of {what}: {one_line(exc)}")
        error.__cause__ = exc
        return None, error
    except JobFailedError as exc:  # the API knows the job can never start
        return None, exc
    return final, None


def _outcome(
    api: JobApi, what: str, conditions: tuple[Condition, ...], name: str, namespace: str
) -> ShardtrainError | None:
    """The error the final ``conditions`` mean (with the first failed pod's exit code and
    last log line), or None when the job succeeded."""
    failed = has(conditions, api.failed)
    if failed is not None:
        why = ": ".join(x for x in (failed.reason, failed.message) if x) or "no reason given"
        try:
            detail = api.failure_detail(name, namespace)
        except Exception as exc:  # the condition already says the job failed
            log.debug("cannot tell which pod of %s failed: %s", what, one_line(exc))
            detail = None
        return JobFailedError(f"{what} failed: {why}" + (f"; {detail}" if detail else ""))
    if has(conditions, api.succeeded) is None:
        return ClusterError(f"{what} ended without {api.succeeded} or {api.failed}")
    return None


def _latest(api: JobApi, name: str, namespace: str) -> tuple[Condition, ...]:
    try:
        job = api.get(name, namespace)
    except Exception as exc:
        log.warning(
            "cannot read the conditions of %s %s/%s: %s", api.kind, namespace, name, one_line(exc)
        )
        return ()
    return conditions_of(job)


def _delete(api: JobApi, name: str, namespace: str, what: str, out: TextIO) -> None:
    try:
        api.delete(name, namespace)
    except Exception as exc:  # the outcome is already known; do not hide it behind this
        log.warning("cannot delete %s: %s", what, one_line(exc))
        return
    say(out, f"deleted {what}")
