"""Leases on local disk: one live holder, free the moment its process dies, renewed while
it lives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from shardtrain.storage import lease as leases

_HOLD = """
import sys, time
from shardtrain.storage import lease
got = lease.try_acquire(sys.argv[1], {"who": "child"}, ttl=float(sys.argv[2]))
print("held" if isinstance(got, lease.Lease) else "busy", flush=True)
time.sleep(60)
"""


def _holder_process(uri: str, ttl: float = 60.0) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, uri, str(ttl)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_live_holder_is_named_and_a_dead_one_frees_the_lease_at_once(tmp_path):
    uri = str(tmp_path / "locks" / "a.json")
    proc = _holder_process(uri)
    try:
        busy = leases.try_acquire(uri)
        assert isinstance(busy, leases.Holder)
        assert busy.pid == proc.pid and busy.info == {"who": "child"}
        assert busy.expires > time.time()
        assert f"pid {proc.pid}" in busy.describe()
        assert leases.holder(uri) == busy
    finally:
        proc.kill()
        proc.wait()
    # kill -9 released nothing by hand: the kernel dropped the lock with the process.
    assert os.path.exists(uri) and leases.holder(uri) is None
    mine = leases.try_acquire(uri, {"who": "me"})
    assert isinstance(mine, leases.Lease)
    try:
        assert leases.holder(uri).pid == os.getpid()
    finally:
        mine.release()
    assert not os.path.exists(uri) and not os.path.exists(tmp_path / "locks")


def test_a_lease_is_renewed_while_its_holder_lives(tmp_path):
    uri = str(tmp_path / "b.json")
    mine = leases.try_acquire(uri, ttl=1.5)
    assert isinstance(mine, leases.Lease)
    try:
        first = json.loads(Path(uri).read_text())["expires"]
        time.sleep(1.2)
        later = json.loads(Path(uri).read_text())["expires"]
        assert later > first
        assert isinstance(leases.try_acquire(uri), leases.Holder)
    finally:
        mine.release()


def test_run_ids_sort_by_start_time():
    first = leases.new_run_id()
    time.sleep(0.001)
    assert leases.new_run_id() > first
