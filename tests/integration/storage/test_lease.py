"""Leases on live object stores: MinIO (conditional create with If-None-Match, renewal and
takeover of an expired lease with If-Match) and fake-gcs-server (write, read back)."""

from __future__ import annotations

import time

import pytest

from shardtrain import storage
from shardtrain.storage import lease as leases


@pytest.mark.minio
def test_only_one_of_two_writers_holds_an_s3_lease(minio):
    uri = storage.join(minio.uri(), "leases", f"l-{time.time_ns()}.json")
    first = leases.try_acquire(uri, {"n": 1}, ttl=30)
    assert isinstance(first, leases.Lease)
    try:
        second = leases.try_acquire(uri, {"n": 2}, ttl=30)
        assert isinstance(second, leases.Holder)
        assert second.run == first.run and second.info == {"n": 1}
    finally:
        first.release()
    assert not storage.exists(uri)
    again = leases.try_acquire(uri, ttl=30)
    assert isinstance(again, leases.Lease)
    again.release()


@pytest.mark.minio
def test_a_lease_taken_while_the_process_is_stopped_is_not_left_to_expire(minio, monkeypatch):
    """SIGTERM becomes an exception while sharding runs (:mod:`shardtrain.data.sharding.signals`):
    landing after the lease object is written and before its holder has it -- inside the
    conditional PUT, or in the sharder's check of overlapping leases -- it deletes that
    object, as a release would; before, the object was left for its TTL and the pod
    replacing this one waited about a minute."""
    from shardtrain.data.sharding import lease as shard_leases
    from shardtrain.errors import ShardingStopped

    output = storage.join(minio.uri(), f"ds-{time.time_ns()}")
    uri = shard_leases.lease_uri(output, 0, 1)
    real_put = leases._acquire_s3

    def put_then_stop(lease):
        real_put(lease)  # the object is written...
        raise ShardingStopped("sharding stopped by SIGTERM")  # ...and the signal lands

    monkeypatch.setattr(leases, "_acquire_s3", put_then_stop)
    with pytest.raises(ShardingStopped):
        shard_leases.take_lease(output, 0, 1)
    assert not storage.exists(uri)
    monkeypatch.setattr(leases, "_acquire_s3", real_put)

    def stopped(*args, **kwargs):
        assert storage.exists(uri)  # held by now
        raise ShardingStopped("sharding stopped by SIGTERM")

    monkeypatch.setattr(shard_leases, "live_leases", stopped)
    with pytest.raises(ShardingStopped):
        shard_leases.take_lease(output, 0, 1)
    assert not storage.exists(uri)
    monkeypatch.undo()
    with shard_leases.take_lease(output, 0, 1):  # free at once
        assert storage.exists(uri)


@pytest.mark.minio
def test_an_expired_s3_lease_is_taken_over_and_its_renewal_then_fails(minio):
    uri = storage.join(minio.uri(), "leases", f"l-{time.time_ns()}.json")
    stale = leases.Lease(uri, leases.new_run_id(), {}, ttl=1.0)
    stale._etag = leases._s3_put(stale, stale.record())  # held, then never renewed
    assert stale._etag
    assert isinstance(leases.try_acquire(uri, ttl=30), leases.Holder)
    time.sleep(1.2)
    assert leases.holder(uri) is None
    taker = leases.try_acquire(uri, ttl=30)
    assert isinstance(taker, leases.Lease)
    try:
        with pytest.raises(Exception, match="taken over"):
            leases._renew(stale)  # the old owner learns it lost the lease
        assert leases.holder(uri).run == taker.run
    finally:
        taker.release()


@pytest.mark.gcs
def test_a_gcs_lease_is_held_by_the_writer_read_back(gcs):
    uri = gcs.uri("leases", f"l-{time.time_ns()}.json")
    first = leases.try_acquire(uri, {"n": 1}, ttl=30)
    assert isinstance(first, leases.Lease)
    try:
        second = leases.try_acquire(uri, ttl=30)
        assert isinstance(second, leases.Holder) and second.run == first.run
    finally:
        first.release()
    assert leases.holder(uri) is None
