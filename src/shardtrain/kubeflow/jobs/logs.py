"""Streaming the chief's log while a job runs, for any job API."""

from __future__ import annotations

import logging
import threading
from typing import Any, TextIO

from shardtrain.errors import one_line
from shardtrain.kubeflow.jobs.api import JobApi

log = logging.getLogger(__name__)
#: The most of a kubelet's termination message a failed job's one line carries (its end: runc
#: puts the cause last).
MESSAGE_LIMIT = 300


class ChiefLogs:
    """Streams the chief's log while the main thread waits for the job.

    A daemon thread polls the chief's pods (``api.chief_pods``: the Chief, or worker 0
    without one) and follows the log of a running one (``api.follow_chief_log``, which prints
    each line as ``[Pod name]: line``) once per pod: a pod recreated after exit code 143 is
    followed again. Logs of a chief pod that ran between two polls are printed at the end.
    """

    def __init__(self, api: JobApi, name: str, namespace: str, poll: float, out: TextIO) -> None:
        self._api, self._name, self._namespace = api, name, namespace
        self._poll, self._out = poll, out
        self._followed: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"logs-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _pods(self) -> list[Any]:
        return self._api.chief_pods(self._name, self._namespace)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                running = [
                    p
                    for p in self._pods()
                    if p.status is not None
                    and p.status.phase == "Running"
                    and p.metadata.uid not in self._followed
                ]
                if running:
                    self._followed.update(p.metadata.uid for p in running)
                    # Blocks until the chief's container exits, printing every line.
                    self._api.follow_chief_log(self._name, self._namespace)
            except Exception as exc:  # a log hiccup must never fail the job's outcome
                log.warning("cannot follow the chief's log: %s", one_line(exc))
            self._stop.wait(self._poll)

    def finish(self, *, wait: float) -> None:
        """Stop polling; give an open stream ``wait`` seconds; print logs never streamed."""
        self._stop.set()
        self._thread.join(timeout=wait)
        if self._thread.is_alive():
            return  # still streaming a running chief (timeout): nothing more to print
        try:
            unseen = {
                p.metadata.name
                for p in self._pods()
                if p.metadata.uid not in self._followed
                and p.status is not None
                and p.status.phase != "Pending"
            }
            if not unseen:
                return
            logs = self._api.chief_logs(self._name, self._namespace)
        except Exception as exc:
            log.warning("cannot read the chief's log: %s", one_line(exc))
            return
        for pod, text in logs.items():
            if pod in unseen:
                for line in str(text).splitlines():
                    self._out.write(f"[{pod}] {line}\n")
        self._out.flush()


def failed_pod_detail(core: Any, pods: list[Any], namespace: str, container: str) -> str | None:
    """What the first of ``pods`` to fail said: ``pod P exited N: <its last log line>`` (the
    trainer's one-line error), for a failed job's message; None when no pod failed.

    A reason of the kubelet's other than a plain ``Error`` (``OOMKilled``; ``StartError``, a
    container that never ran) is named after the exit code; a container that logged nothing
    (it never started) is described by the kubelet's message (runc's, e.g. ``exec:
    "train": executable file not found``)."""
    failed = []
    for pod in pods:
        for status in (pod.status.container_statuses if pod.status else None) or ():
            done = status.state.terminated if status.state else None
            if status.name == container and done is not None and done.exit_code:
                failed.append((done.finished_at or done.started_at, pod.metadata.name, done))
    if not failed:
        return None
    failed.sort(key=lambda f: (f[0] is None, f[0]))
    _, pod, done = failed[0]
    detail = f"pod {pod} exited {done.exit_code}"
    if done.reason and done.reason not in ("Error", "Completed"):
        detail += f" ({done.reason})"
    said = " ".join(str(done.message or "").split())
    try:
        text = core.read_namespaced_pod_log(pod, namespace, container=container, tail_lines=5)
    except Exception as exc:  # the exit code alone still says more than nothing
        log.debug("cannot read the log of %s: %s", pod, one_line(exc))
        text = ""
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    if lines:
        return f"{detail}: {lines[-1]}"
    return f"{detail}: {said[-MESSAGE_LIMIT:]}" if said else detail
