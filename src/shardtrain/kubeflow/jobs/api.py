"""What the shared submit/wait machinery (:mod:`.submit`) needs of one job API."""

from __future__ import annotations

from typing import Any, Protocol


class JobApi(Protocol):
    """What :func:`shardtrain.kubeflow.jobs.submit.submit_and_wait` needs of a job API and its
    client (:class:`shardtrain.kubeflow.jobs.tfjob.submit.TFJobApi` for TFJobs)."""

    #: The kind, as messages name the job (``TFJob``).
    kind: str
    #: The condition types that end a job well and badly.
    succeeded: str
    failed: str

    def create(self, job: Any, namespace: str) -> None:
        """Create the job; raises :class:`~.submit.JobExistsError` when a job of that name
        exists, RuntimeError, TimeoutError or ValueError when refused otherwise."""

    def same_job(self, existing: Any, job: Any) -> bool:
        """True when ``existing`` (read from the cluster) runs what ``job`` asks for: a
        repeated submit then attaches to it instead of failing."""

    def wait(
        self, name: str, namespace: str, *, timeout: float, poll: float, callback: Any,
        request_timeout: int,
    ) -> Any:  # fmt: skip
        """Poll until the job has :attr:`succeeded` or :attr:`failed`, calling ``callback``
        with the job after each poll; return the job. Raises TimeoutError after ``timeout``
        seconds, RuntimeError when the job cannot be read, JobFailedError when the job can
        never start (e.g. its controller cannot create what it runs on)."""

    def get(self, name: str, namespace: str) -> Any:
        """The job as it is now."""

    def delete(self, name: str, namespace: str) -> None: ...

    def is_queued(self, job: Any) -> bool:
        """True while the job waits in a queue (no pods, neither running nor failed)."""

    def pods(self, name: str, namespace: str) -> list[Any]:
        """Every pod of the job (kubernetes client V1Pods)."""

    def chief_pods(self, name: str, namespace: str) -> list[Any]:
        """The pods of the replica that decides the job (the chief)."""

    def follow_chief_log(self, name: str, namespace: str) -> None:
        """Print the running chief's log until its container exits."""

    def chief_logs(self, name: str, namespace: str) -> dict[str, str]:
        """The logs of the chief's pods so far, by pod name."""

    def failure_detail(self, name: str, namespace: str) -> str | None:
        """Which pod failed first and its last log line (the trainer's error), if any."""
