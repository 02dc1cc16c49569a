"""Stopping a sharding run on SIGTERM, with its lease released.

Kubernetes stops a pod (eviction, preemption, a deleted run) with SIGTERM, then SIGKILL
after the grace period (30 s by default). Python's default for SIGTERM ends the process at
once, like SIGKILL: the data stays consistent (a task commits only whole, see
:mod:`.task`), but the worker's lease (:mod:`.lease`) is left to expire, so the pod that
replaces this one first waits for it (about a minute). :func:`stop_on_sigterm` turns SIGTERM
into :class:`~shardtrain.errors.ShardingStopped` in the main thread instead: the run unwinds,
the pool's processes stop, the lease is released, and the process exits with 143.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from shardtrain.errors import ShardingStopped


def _stop(signum: int, frame: FrameType | None) -> None:
    raise ShardingStopped(
        f"sharding stopped by {signal.Signals(signum).name}: the committed tasks are kept and "
        "this worker's lease is released; run the same command again to resume"
    )


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """Inside the block, SIGTERM raises :class:`~shardtrain.errors.ShardingStopped` in the
    main thread; the previous handler is restored after. A no-op outside the main thread
    (only it can take signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def default_sigterm() -> None:
    """SIGTERM's default action again (a pool process forked inside :func:`stop_on_sigterm`:
    it simply ends, and its parent, which got the same signal or sees the pool broken,
    unwinds)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
