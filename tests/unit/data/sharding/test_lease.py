"""The wait for a busy lease: announced and waited as ``SHARDTRAIN_LEASE_WAIT`` says, however
long the first try takes (on S3 it is several requests; it once announced "up to 0s")."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from shardtrain.data.sharding import lease as shard_leases
from shardtrain.errors import OutputBusyError
from shardtrain.storage.lease import Holder

OWNER = Holder("node-a", 41, "0001-run", 2e9, {})


class SlowStore:
    """A clock and a ``try_acquire`` that finds a live owner after ``per_try`` seconds."""

    def __init__(self, per_try: float):
        self.now = 1000.0
        self.per_try = per_try
        self.tries: list[float] = []

    def try_acquire(self, uri, info):
        self.now += self.per_try
        self.tries.append(self.now)
        return OWNER

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def store(monkeypatch) -> SlowStore:
    fake = SlowStore(per_try=1.6)
    monkeypatch.setattr(shard_leases, "try_acquire", fake.try_acquire)
    monkeypatch.setattr(shard_leases, "time", SimpleNamespace(monotonic=lambda: fake.now,
                                                              sleep=fake.sleep))  # fmt: skip
    return fake


def test_the_wait_line_says_the_configured_wait_and_waits_it(store, monkeypatch, caplog):
    monkeypatch.setenv("SHARDTRAIN_LEASE_WAIT", "2")
    with caplog.at_level(logging.WARNING), pytest.raises(OutputBusyError, match="pid 41"):
        shard_leases.take_lease("s3://b/ds", 0, 1)
    (line,) = [r.getMessage() for r in caplog.records]
    assert "waiting up to 2s (SHARDTRAIN_LEASE_WAIT)" in line and "pid 41" in line
    first_seen = store.tries[0]
    assert store.now - first_seen >= 2.0  # waited the whole 2 s after seeing the owner
    assert len(store.tries) >= 2


@pytest.mark.parametrize(("wait", "said"), [("0.5", "0.5s"), ("90", "90s")])
def test_fractions_and_minutes(store, monkeypatch, caplog, wait, said):
    monkeypatch.setenv("SHARDTRAIN_LEASE_WAIT", wait)
    with caplog.at_level(logging.WARNING), pytest.raises(OutputBusyError):
        shard_leases.take_lease("s3://b/ds", 0, 1)
    assert f"waiting up to {said} " in caplog.records[0].getMessage()


def test_no_wait_means_one_try_and_no_waiting_line(store, monkeypatch, caplog):
    monkeypatch.setenv("SHARDTRAIN_LEASE_WAIT", "0")
    with caplog.at_level(logging.WARNING), pytest.raises(OutputBusyError):
        shard_leases.take_lease("s3://b/ds", 0, 1)
    assert len(store.tries) == 1 and not caplog.records
