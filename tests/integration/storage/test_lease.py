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
