"""The sharder's process pool: what its processes do when their parent is gone."""

from __future__ import annotations

import os
import subprocess
import sys

_WATCH = """
import os, sys, time
from shardtrain.data.sharding.pool import _die_with_parent
_die_with_parent(int(sys.argv[1]))
time.sleep(1.5)  # the watcher polls every 0.5 s
print("alive")
"""


def _watch(parent: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _WATCH, str(parent)], capture_output=True, text=True, timeout=60
    )


def test_a_pool_process_whose_parent_died_before_it_started_exits_at_once():
    """Regression: a spawned pool process took its parent's pid from ``getppid`` once it
    had started; the CLI killed (SIGTERM) during that second left it watching init forever,
    blocked on a progress queue nobody read (found as an orphan after a fault test)."""
    gone = _watch(_dead_pid())
    assert gone.returncode == 137, gone.stderr
    assert "alive" not in gone.stdout


def test_a_pool_process_with_its_parent_alive_keeps_running():
    child = _watch(os.getpid())  # subprocess starts it from this process: its parent
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "alive"


def _dead_pid() -> int:
    """The pid of a process that has ended (the pool's parent, killed)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid
