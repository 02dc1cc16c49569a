"""Errors that shardtrain reports to its users, and the exit codes they map to.

Every failure a user can cause or fix — a missing object, wrong credentials, a malformed CSV,
a configuration that makes no sense — is raised as a :class:`ShardtrainError` (or a subclass)
whose message is one line naming the file/URI and what is wrong. The CLI prints that line and
exits with the error's ``exit_code``; it never shows a traceback for these.

Exit codes follow the convention a Kubeflow TFJob with ``restartPolicy: ExitCode`` relies on:

====  ====================================================================================
code  meaning
====  ====================================================================================
0     success (or nothing to do)
1     permanent failure: bad input, bad configuration, data that fails validation
2     command-line usage error (unknown option, missing argument; reported by Click)
3     storage unusable for now, not a fault of the data: unreachable after retries, full
      (ENOSPC/EDQUOT), or the output still leased by another live run after the wait; fix
      the cause (or let the other run end) and run the same command again: it resumes
130   retryable interruption: SIGINT (128 + 2) after a checkpoint
143   retryable interruption: SIGTERM (128 + 15) after a checkpoint, on every training
      replica of a job when any one of them received it (and on the evaluator); a
      sharding run stopped by SIGTERM, its lease released (:class:`ShardingStopped`)
200   retryable: a peer of the multi-worker collective went away (killed, evicted,
      unreachable); every replica should be recreated and resumes from the last checkpoint
====  ====================================================================================

Codes 128-255 are what ``restartPolicy: ExitCode`` treats as retryable (the operator recreates
the pods); 1-127 fail the job for good. 200 lies outside ``128 + signal`` (129-192) so that a
replica that lost a peer is not mistaken for one that was killed. :func:`peer_lost` decides
which errors of a collective mean a lost peer (200); :func:`one_line` turns another library's
error into the one line a message quotes.
"""

from __future__ import annotations

import contextlib
import json
import re


class ShardtrainError(Exception):
    """A user-facing error: one clear line, a non-zero exit code, no traceback."""

    exit_code: int = 1


class StorageError(ShardtrainError):
    """An object-storage operation failed; the message names the URI."""


class StorageUnavailableError(StorageError):
    """Storage could not be reached even after the bounded retries (network, 5xx, throttling)."""

    exit_code = 3


class StorageFullError(StorageError):
    """A write failed because the storage is full (no space left, quota exceeded).

    Not a fault of the data, and not retried automatically either (a restarted pod would
    find the same full volume): exit code 3, like unreachable storage. Free space and run the
    same command again; a sharding run resumes from its committed tasks.
    """

    exit_code = 3


class ShardingStopped(BaseException):
    """A sharding run stopped on SIGTERM (a pod evicted or preempted, ``kubectl delete``).

    Raised in the main thread by :func:`shardtrain.data.sharding.signals.stop_on_sigterm`'s
    handler. A ``BaseException``, as ``KeyboardInterrupt`` is, so that no ``except
    Exception`` on the way (a storage retry, a warm-up) takes it for an error to retry or
    ignore: it unwinds the run, which releases the worker's lease, so that the pod that
    replaces this one starts at once instead of waiting for the lease to expire. Committed
    tasks are kept; the same command resumes. Exit code 143 (128 + SIGTERM): retryable.
    """

    exit_code = 143


class OutputBusyError(ShardtrainError):
    """Another live run holds the lease on the output (or on this worker's tasks of it).

    Exit code 3: a transient cause whose bounded wait was exhausted; run the same command
    again once the other run has ended.
    """

    exit_code = 3


class NotCommittedError(StorageError):
    """A reader found output that was never published (its manifest/marker is missing)."""


class DataError(ShardtrainError):
    """Input data is unusable: empty, missing a column, too many malformed rows."""


class ConfigError(ShardtrainError):
    """A configuration or argument value makes no sense."""


class StaleDecisionError(ShardtrainError):
    """A step acts on a decision whose grounds changed since it was taken (a model blessed
    against a served model that another run has replaced since): take it again."""


class TrainingInterrupted(ShardtrainError):
    """Training stopped on SIGTERM/SIGINT after writing a checkpoint: restart to resume.

    The exit code is ``128 + signal`` (143 for SIGTERM), which a TFJob with
    ``restartPolicy: ExitCode`` treats as retryable: the pod is recreated and resumes.
    """

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum


class PeerLostError(ShardtrainError):
    """A collective operation failed because another replica of the job went away.

    Raised by a chief or worker of a multi-worker job when the collective (all-reduce,
    checkpoint broadcast) is aborted by a peer's death or unreachability: TensorFlow's
    ``UnavailableError``/``AbortedError``/``DeadlineExceededError``/``CancelledError``, or a
    "connection reset by peer". Exit code :data:`PEER_LOST_EXIT_CODE` (200): retryable, so
    the operator recreates the pods and every replica resumes from the last checkpoint.
    """

    exit_code = 200


#: The exit code of :class:`PeerLostError`.
PEER_LOST_EXIT_CODE = PeerLostError.exit_code


#: TensorFlow error classes by which a collective reports that a peer went away.
_PEER_LOSS_ERRORS = ("UnavailableError", "AbortedError", "DeadlineExceededError", "CancelledError")
#: Message fragments of a peer's loss reported under another class (e.g. UnknownError).
_PEER_LOSS_MESSAGES = (
    "collective ops is aborted",
    "connection reset by peer",
    "socket closed",
    "failed to connect to all addresses",
    "stopped sending heartbeats",
    "heartbeat",
)
_QUOTE_LIMIT = 160


def peer_lost(exc: BaseException, replica: str) -> PeerLostError | None:
    """The retryable error (exit 200) for ``exc`` when it means a peer of the collective went
    away; ``replica`` describes the replica that saw it (e.g. ``"worker 1 of 3"``).

    Only a chief or worker of a multi-worker job has peers: ask this only for them. TensorFlow
    reports a lost peer as ``UnavailableError: Collective ops is aborted by: ... Connection
    reset by peer`` (the dead task's socket), or, when the peer vanished without a reset, once
    the coordination service misses its heartbeats, which aborts every pending collective
    (``Aborted``/``Unavailable``/``Cancelled``), or as ``DeadlineExceeded``. Data errors
    (``DataLossError``, ``InvalidArgumentError``, ``NotFoundError``) are not peer losses and
    are left alone: they fail the job for good. Classes are matched by name, so this needs no
    TensorFlow.

    Returns:
        A :class:`PeerLostError` to raise from ``exc``, or None.
    """
    names = {cls.__name__ for cls in type(exc).__mro__}
    text = str(exc)
    lowered = text.lower()
    if not names & set(_PEER_LOSS_ERRORS) and not any(m in lowered for m in _PEER_LOSS_MESSAGES):
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    # TF's first line is often "Graph execution error:"; the cause is further down.
    telling = [ln for ln in lines if any(m in ln.lower() for m in _PEER_LOSS_MESSAGES)]
    first = (telling or lines or [type(exc).__name__])[0]
    if len(first) > _QUOTE_LIMIT:
        first = first[: _QUOTE_LIMIT - 3] + "..."
    return PeerLostError(
        f"train: {replica} lost a peer of the collective ({type(exc).__name__}: "
        f"{first}); every replica must restart and resume from the last checkpoint"
    )


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: Messages of other libraries' errors are cut to this many characters.
ONE_LINE_LIMIT = 400


def one_line(exc: BaseException) -> str:
    """Another library's error as one readable line, for a :class:`ShardtrainError` message.

    An HTTP API error anywhere in ``exc``'s chain (the Kubernetes client's ``ApiException``:
    status, reason and a JSON body) becomes ``HTTP <status>: <the API's message>``; anything
    else is its text with colour codes and line breaks taken out (or its class name when it
    has none). At most :data:`ONE_LINE_LIMIT` characters.
    """
    cause: BaseException | None = exc
    while cause is not None and not _is_api_error(cause):
        cause = cause.__cause__ or cause.__context__
    if cause is not None:
        detail = getattr(cause, "reason", None) or ""
        with contextlib.suppress(TypeError, ValueError, AttributeError):
            detail = json.loads(getattr(cause, "body", "")).get("message") or detail
        status = getattr(cause, "status", None)
        return f"HTTP {status}: {' '.join(str(detail).split())}"[:ONE_LINE_LIMIT]
    text = " ".join(_ANSI.sub("", str(exc)).split()) or type(exc).__name__
    return text[:ONE_LINE_LIMIT]


def _is_api_error(exc: BaseException) -> bool:
    """The Kubernetes client's ``ApiException`` (matched by name: this module imports no
    client library)."""
    return any(cls.__name__ == "ApiException" for cls in type(exc).__mro__) and isinstance(
        getattr(exc, "status", None), int
    )
