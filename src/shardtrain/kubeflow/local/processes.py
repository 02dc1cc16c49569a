"""Run a job's replicas as local processes: chief, workers and evaluator on localhost.

The Kubeflow training operator starts one pod per replica and gives each a ``TF_CONFIG``::

    {"cluster": {"chief": ["<job>-chief-0.<ns>.svc:2222"],
                 "evaluator": ["<job>-evaluator-0.<ns>.svc:2222"],
                 "worker": ["<job>-worker-0.<ns>.svc:2222", ...]},
     "task": {"type": "worker", "index": 0},
     "environment": "cloud"}

:func:`run_local` does the same with processes: every replica gets a free port on 127.0.0.1
in place of the service host name, the same ``TF_CONFIG`` shape, its command and environment.
Output is streamed with a ``[type-index]`` prefix per line. Like the operator, the job
succeeds when the chief (or worker 0, without a chief) succeeds; when any replica fails the
others are stopped and the job fails. Every multi-worker test and ``shardtrain run-local``
go through here, so local runs exercise exactly what a TFJob does. (Not the KFP "launcher",
the runner inside a pipeline step's pod.)
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from shardtrain.errors import ConfigError
from shardtrain.train.cluster import REPLICA_TYPES

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Replica:
    """One group of identical replicas (a TFJob ``tfReplicaSpecs`` entry).

    Attributes:
        type: chief, master, worker, ps or evaluator (lower case, as in TF_CONFIG).
        count: number of replicas.
        command: the container's command and args.
        env: extra environment variables of the container.
    """

    type: str
    count: int
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.type not in REPLICA_TYPES:
            raise ConfigError(
                f"unknown replica type '{self.type}' (use {', '.join(REPLICA_TYPES)})"
            )
        if self.count < 1:
            raise ConfigError(f"{self.type}: replica count must be at least 1")
        if not self.command:
            raise ConfigError(f"{self.type}: no command to run")


@dataclass
class ReplicaResult:
    """How one replica ended."""

    name: str
    exit_code: int | None  # None: still running when the job ended (then stopped)


@dataclass
class LocalJobResult:
    """How a local job ended."""

    succeeded: bool
    replicas: list[ReplicaResult]
    reason: str
    cause: str | None = None  # the replica whose exit ended the job

    @property
    def exit_code(self) -> int:
        """0 on success; the failing replica's code (128 + signal if killed); else 1."""
        if self.succeeded:
            return 0
        for r in self.replicas:
            if r.name == self.cause and r.exit_code not in (None, 0):
                return r.exit_code if r.exit_code > 0 else 128 - r.exit_code
        return 1


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def local_cluster(replicas: Sequence[Replica]) -> dict[str, list[str]]:
    """The ``cluster`` part of TF_CONFIG with a free localhost port per replica, its types in
    the operator's order (alphabetical: Go's JSON encoding of a map sorts its keys)."""
    types = [r.type for r in replicas]
    if len(set(types)) != len(types):
        raise ConfigError("each replica type may appear once")
    if "chief" in types and "master" in types:
        raise ConfigError("a job cannot have both a chief and a master")
    return {
        r.type: [f"127.0.0.1:{free_port()}" for _ in range(r.count)]
        for r in sorted(replicas, key=lambda r: r.type)
    }


def tf_config(cluster: Mapping[str, list[str]], task_type: str, index: int) -> dict:
    """TF_CONFIG exactly as the training operator writes it (``environment: cloud``)."""
    return {
        "cluster": {k: list(v) for k, v in cluster.items()},
        "task": {"type": task_type, "index": index},
        "environment": "cloud",
    }


def _pump(stream, prefix: str, out) -> None:
    for line in iter(stream.readline, ""):
        out.write(f"[{prefix}] {line}" if line.endswith("\n") else f"[{prefix}] {line}\n")
        out.flush()
    stream.close()


def _stop(procs: dict[str, subprocess.Popen], grace: float) -> None:
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in procs.values():
        remaining = max(0.0, deadline - time.monotonic())
        try:
            p.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _wait_for_all(procs: dict[str, subprocess.Popen], seconds: float) -> None:
    """Wait up to ``seconds`` for every process to end by itself."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and any(p.poll() is None for p in procs.values()):
        time.sleep(0.1)


def run_local(
    replicas: Sequence[Replica],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    grace: float = 30.0,
    out=None,
) -> LocalJobResult:
    """Start every replica as a local process and wait for the job to end.

    Args:
        replicas: the replica groups (a single replica gets no TF_CONFIG, as on a cluster).
        env: environment for every replica (default: this process's).
        timeout: overall seconds before the job is stopped and reported as failed.
        grace: seconds between SIGTERM and SIGKILL when stopping replicas (time for a
            trainer to write its checkpoint).
        out: where prefixed output goes (default: sys.stdout).

    Returns:
        The outcome; the job succeeded when the chief (or worker 0) exited with 0.
    """
    out = out or sys.stdout
    cluster = local_cluster(replicas)
    total = sum(r.count for r in replicas)
    base_env = dict(os.environ if env is None else env)
    procs: dict[str, subprocess.Popen] = {}
    peers: dict[str, subprocess.Popen] = {}  # the collective's members: all but the evaluator
    pumps: list[threading.Thread] = []
    for r in replicas:
        for i in range(r.count):
            name = f"{r.type}-{i}"
            replica_env = {**base_env, **r.env}
            replica_env.pop("TF_CONFIG", None)
            if total > 1:  # the operator sets TF_CONFIG only for multi-replica jobs
                replica_env["TF_CONFIG"] = json.dumps(tf_config(cluster, r.type, i))
            replica_env.setdefault("PYTHONUNBUFFERED", "1")
            proc = subprocess.Popen(
                list(r.command),
                env=replica_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                encoding="utf-8",
                errors="replace",  # a stray byte must not kill the pump and stall the child
                bufsize=1,
            )
            procs[name] = proc
            if r.type != "evaluator":
                peers[name] = proc
            t = threading.Thread(target=_pump, args=(proc.stdout, name, out), daemon=True)
            t.start()
            pumps.append(t)
    log.info("local job: %s", ", ".join(f"{n} (pid {p.pid})" for n, p in procs.items()))

    decider = "chief-0" if "chief-0" in procs else "master-0" if "master-0" in procs else "worker-0"
    if decider not in procs:
        decider = next(iter(procs))
    deadline = None if timeout is None else time.monotonic() + timeout
    reason = ""
    cause = None
    succeeded = False
    try:
        while True:
            codes = {n: p.poll() for n, p in procs.items()}
            failed = [n for n, c in codes.items() if c not in (None, 0)]
            if failed:
                cause = failed[0]
                reason = f"{cause} exited with code {codes[cause]}"
                if 128 <= (codes[cause] or 0) <= 255:
                    # A retryable stop (SIGTERM after a checkpoint, a lost peer): its peers in
                    # the collective stop at the same step by themselves (the flag rides on the
                    # step's all-reduce). Stopping them at once would cut a slower one short in
                    # its own exit -- after its checkpoint, its handler gone: killed, not 143.
                    # The evaluator is no peer: it would wait for checkpoints to the end.
                    _wait_for_all(peers, grace)
                break
            if codes[decider] == 0:
                # Like the operator: the chief decides. Give the rest (evaluator, workers
                # finishing their last step) a moment to end by themselves.
                _wait_for_all(procs, grace)
                failed = [n for n, p in procs.items() if p.poll() not in (None, 0)]
                succeeded = not failed
                cause = failed[0] if failed else None
                reason = (
                    "succeeded"
                    if succeeded
                    else f"{failed[0]} exited with code {procs[failed[0]].returncode}"
                )
                break
            if deadline is not None and time.monotonic() > deadline:
                reason = f"timed out after {timeout:g}s"
                break
            time.sleep(0.1)
    finally:
        _stop(procs, grace)
        for t in pumps:
            t.join(timeout=5)
    results = [ReplicaResult(n, p.returncode) for n, p in procs.items()]
    log.info("local job %s: %s", "succeeded" if succeeded else "failed", reason)
    return LocalJobResult(succeeded=succeeded, replicas=results, reason=reason, cause=cause)
