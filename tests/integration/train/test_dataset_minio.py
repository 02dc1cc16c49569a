"""Reading committed shards: local/native paths, and s3:// through the bounded shard cache."""

from __future__ import annotations

import os

import pytest

from shardtrain.data import datagen, sharding
from shardtrain.errors import ConfigError, DataError
from shardtrain.train import dataset


@pytest.fixture(scope="module")
def quest_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("quest") / "quest.csv"
    datagen.generate_quest_logs(str(path), 30_000, seed=12)
    return path


def _shard(src, out, **kw):
    """Per-row shards: one record a row, so the records read are counted against the rows
    (``num_records``); the reader and its cache treat columnar shards' records alike."""
    return sharding.shard(
        sharding.ShardConfig(
            sources=(str(src),), output=out, label="cleared", processes=1,
            record_format="example", **kw,
        )
    ).metadata  # fmt: skip


def test_pipelines_read_disjoint_shards(tmp_path, quest_csv):
    meta = _shard(quest_csv, str(tmp_path / "ds"))
    shards = dataset.split_shards(str(tmp_path / "ds"), meta, "train")
    parts = [dataset.files_for_pipeline(shards, i, 3) for i in range(3)]
    uris = [f.uri for part in parts for f in part]
    assert sorted(uris) == sorted(f.uri for f in shards) and len(set(uris)) == len(uris)
    with pytest.raises(ConfigError, match=r"8 shard\(s\) for 9 input pipelines"):
        dataset.files_for_pipeline(shards, 0, 9)
    with pytest.raises(DataError, match="no split 'test'"):
        dataset.split_shards(str(tmp_path / "ds"), meta, "test")


def test_local_shards_are_read_natively(tmp_path, quest_csv):
    out = str(tmp_path / "ds")
    meta = _shard(quest_csv, out)
    shards = dataset.split_shards(out, meta, "eval")
    ds = dataset.record_dataset(shards, compression=meta.compression)
    assert sum(1 for _ in ds) == meta.splits["eval"].num_records


@pytest.mark.minio
def test_s3_shards_stream_through_a_bounded_cache(minio, quest_csv, tmp_path):
    out = minio.uri()
    meta = _shard(quest_csv, out, num_shards=12)
    shards = dataset.split_shards(out, meta, "train")
    biggest = max(f.bytes for f in shards)
    cache_dir = tmp_path / "cache"
    cache = dataset.ShardCache(str(cache_dir), max_bytes=2 * biggest, threads=2)
    try:
        ds = dataset.record_dataset(
            shards, compression=meta.compression, cache=cache, cycle_length=2
        )
        n = 0
        for _ in ds:
            n += 1
            # max_bytes (2 shards) + what the reader holds: 2 open files + its look-ahead.
            assert len(os.listdir(cache_dir)) <= 2 + 2 * 2 + 1
        assert n == meta.splits["train"].num_records
        assert cache.downloaded == len(shards)
        assert cache.peak_bytes <= (2 + 2 * 2 + 1) * biggest
        assert os.listdir(cache_dir) == []  # every consumed file was deleted
        # A second pass (another epoch) streams again.
        assert sum(1 for _ in ds) == n
    finally:
        cache.close()
    with pytest.raises(ConfigError, match="ShardCache is needed"):
        dataset.record_dataset(shards, compression=meta.compression)


@pytest.mark.minio
def test_a_corrupt_s3_shard_is_named_by_the_cache(minio, quest_csv, tmp_path):
    out = minio.uri("corrupt")
    meta = _shard(quest_csv, out, num_shards=2)
    shards = dataset.split_shards(out, meta, "train")
    key = shards[1].uri.split(f"{minio.bucket}/", 1)[1]
    s3 = minio.s3_client()
    raw = bytearray(s3.get_object(Bucket=minio.bucket, Key=key)["Body"].read())
    raw[len(raw) // 2] ^= 0x01
    s3.put_object(Bucket=minio.bucket, Key=key, Body=bytes(raw))
    cache = dataset.ShardCache(str(tmp_path / "cache"), threads=1)
    try:
        ds = dataset.record_dataset(shards, compression=meta.compression, cache=cache)
        with pytest.raises(Exception) as raised:  # TensorFlow's error, without the name
            sum(1 for _ in ds)
        error = dataset.input_error(raised.value, out, meta, ["train"], [cache])
    finally:
        cache.close()
    assert isinstance(error, DataError)
    assert str(error).startswith(f"{shards[1].uri}: corrupt (CRC-32C ")


@pytest.mark.minio
def test_an_endless_pass_that_fits_the_cache_downloads_each_shard_once(minio, quest_csv, tmp_path):
    """Training repeats over the same files: when a pipeline's share fits in the cache bound
    the files are kept after the first pass (MinIO is read once, not once per epoch); when
    it does not, they stream through the bound every pass."""
    out = minio.uri("retain")
    meta = _shard(quest_csv, out, num_shards=4)
    shards = dataset.split_shards(out, meta, "train")
    rows = meta.splits["train"].num_records
    total = sum(f.bytes for f in shards)
    for max_bytes, kept in ((total, True), (total - 1, False)):
        cache = dataset.ShardCache(str(tmp_path / f"cache-{max_bytes}"), max_bytes=max_bytes)
        try:
            ds = dataset.record_dataset(
                shards, compression=meta.compression, cache=cache, repeat=True,
                shuffle_files=True, seed=1, block=256,
            )  # fmt: skip
            blocks = iter(ds)
            seen = 0
            while seen < 3 * rows:  # three passes over the files
                seen += int(next(blocks).shape[0])
        finally:
            cache.close()
        if kept:
            assert cache.downloaded == len(shards)
        else:
            assert cache.downloaded >= 2 * len(shards)
