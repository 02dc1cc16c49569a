"""The local processes of the node agent's pods: one :class:`Container` per run of a pod's
container, its state as a pod status reports it (:func:`pod_status`), and how containers are
stopped (SIGTERM to the process group, SIGKILL after a grace period)."""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def now() -> str:
    """The current time as Kubernetes writes it (RFC 3339, seconds, UTC)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Container:
    """The local process of one pod's container (one run of it)."""

    uid: str
    namespace: str
    pod: str
    name: str
    log_path: Path
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    proc: subprocess.Popen | None = None
    started_at: str = ""
    restarts: int = 0
    exit_code: int | None = None
    finished_at: str = ""
    last_terminated: dict[str, Any] | None = None
    reported: str = ""  # the last state reported: waiting/running/terminated:<code>
    start_error: str = ""  # why the process could not be started (no process then)
    stopping: bool = False
    done: threading.Event = field(default_factory=threading.Event)

    def poll(self) -> int | None:
        if self.proc is None:
            return None
        code = self.proc.poll()
        if code is None:
            return None
        return code if code >= 0 else 128 - code  # killed by signal N: 128 + N, as runtimes do

    def state(self) -> tuple[dict[str, Any], str, str]:
        """This run's container state as a pod status reports it, the pod's phase, and a tag
        of the state (``running``, ``terminated:<code>``) to report each state once."""
        code = self.poll() if self.exit_code is None else self.exit_code
        state: dict[str, Any]
        if self.start_error:
            state = {
                "terminated": {
                    "exitCode": 128,
                    "reason": "StartError",
                    "message": self.start_error,
                    "startedAt": self.started_at,
                    "finishedAt": self.finished_at or now(),
                }
            }
            phase, tag = "Failed", "terminated:128"
        elif code is None:
            state = {"running": {"startedAt": self.started_at}}
            phase, tag = "Running", "running"
        else:
            state = {
                "terminated": {
                    "exitCode": code,
                    "reason": "Completed" if code == 0 else "Error",
                    "startedAt": self.started_at,
                    "finishedAt": self.finished_at or now(),
                    "containerID": f"local-process://{self.proc.pid if self.proc else 0}",
                }
            }
            phase, tag = ("Succeeded" if code == 0 else "Failed"), f"terminated:{code}"
        return state, phase, tag


def stop_all(containers: list[Container], grace: float) -> None:
    """SIGTERM the process groups of all ``containers`` at once, wait for them with one
    deadline ``grace`` seconds away, then SIGKILL what is left (and what is left of each
    group)."""
    procs = [c.proc for c in containers if c.proc is not None and c.proc.poll() is None]
    for proc in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
    for proc in procs:
        proc.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):  # the rest of its group
            os.killpg(proc.pid, signal.SIGKILL)


def ended(c: Container, path: Path) -> bool:
    """True once the run of ``c`` that writes ``path`` is over (a log follower stops)."""
    return c.log_path != path or c.proc is None or c.proc.poll() is not None


def pod_status(pod: Any, c: Container, *, state: dict, phase: str) -> dict[str, Any]:
    """The status of ``pod`` (one container, run ``c``) with its container in ``state``."""
    running = "running" in state
    ready = "True" if running else "False"
    start = (pod.status.start_time if pod.status else None) or None
    container = {
        "name": c.name,
        "image": pod.spec.containers[0].image or "",
        "imageID": "",
        "ready": running,
        "started": running,
        "restartCount": c.restarts,
        "state": state,
    }
    if c.proc is not None:
        container["containerID"] = f"local-process://{c.proc.pid}"
    if c.last_terminated:
        container["lastState"] = c.last_terminated
    status = {
        "phase": phase,
        "hostIP": "127.0.0.1",
        "hostIPs": [{"ip": "127.0.0.1"}],
        "podIP": "127.0.0.1",
        "podIPs": [{"ip": "127.0.0.1"}],
        "startTime": start.strftime("%Y-%m-%dT%H:%M:%SZ") if start else now(),
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "ContainersReady", "status": ready},
            {"type": "Ready", "status": ready},
        ],
        "containerStatuses": [container],
    }
    if pod.status is not None and pod.status.qos_class:
        status["qosClass"] = pod.status.qos_class
    return status
