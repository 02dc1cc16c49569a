"""Bounded retries: which errors are transient, and backoff that gives up."""

from __future__ import annotations

import pytest

from shardtrain import storage


def test_transient_classification():
    assert storage.is_transient(ConnectionRefusedError())
    assert storage.is_transient(OSError("503 Service Unavailable"))
    assert storage.is_transient(OSError("SlowDown: please reduce your request rate"))
    assert not storage.is_transient(FileNotFoundError("nope"))
    assert not storage.is_transient(PermissionError("AccessDenied"))
    assert not storage.is_transient(ValueError("bad"))


def test_retrying_is_bounded_and_recovers(monkeypatch, caplog):
    monkeypatch.setenv("SHARDTRAIN_STORAGE_RETRIES", "3")
    monkeypatch.setenv("SHARDTRAIN_STORAGE_BACKOFF", "0")
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionResetError("connection reset by peer")
        return "ok"

    assert storage.retrying("read", "s3://b/k", flaky) == "ok"
    assert len(calls) == 3
    assert "retry 1/2" in caplog.text

    def down():
        raise ConnectionRefusedError("connection refused")

    from shardtrain.errors import StorageUnavailableError

    with pytest.raises(StorageUnavailableError, match=r"s3://b/k: read failed after 3 attempts"):
        storage.retrying("read", "s3://b/k", down)
