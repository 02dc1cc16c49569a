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
3     storage unreachable after retries (transient cause, but the bound was exhausted)
130   retryable interruption: SIGINT (128 + 2) after a checkpoint
143   retryable interruption: SIGTERM (128 + 15) after a checkpoint, on every training
      replica of a job when any one of them received it (and on the evaluator)
200   retryable: a peer of the multi-worker collective went away (killed, evicted,
      unreachable); every replica should be recreated and resumes from the last checkpoint
====  ====================================================================================

Codes 128-255 are what ``restartPolicy: ExitCode`` treats as retryable (the operator recreates
the pods); 1-127 fail the job for good. 200 lies outside ``128 + signal`` (129-192) so that a
replica that lost a peer is not mistaken for one that was killed.
"""

from __future__ import annotations


class ShardtrainError(Exception):
    """A user-facing error: one clear line, a non-zero exit code, no traceback."""

    exit_code: int = 1


class StorageError(ShardtrainError):
    """An object-storage operation failed; the message names the URI."""


class StorageUnavailableError(StorageError):
    """Storage could not be reached even after the bounded retries (network, 5xx, throttling)."""

    exit_code = 3


class NotCommittedError(StorageError):
    """A reader found output that was never published (its manifest/marker is missing)."""


class DataError(ShardtrainError):
    """Input data is unusable: empty, missing a column, too many malformed rows."""


class ConfigError(ShardtrainError):
    """A configuration or argument value makes no sense."""


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
