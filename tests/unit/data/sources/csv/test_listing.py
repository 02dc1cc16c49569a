"""Listing CSV sources (sources.csv.listing): a local file's version tag changes with its
content, even when an edit keeps its size and restores its mtime."""

from __future__ import annotations

import os

import pytest

from helpers import shard_config
from shardtrain.data import datagen, sharding
from shardtrain.data.sources import csv as csv_source
from shardtrain.errors import DataError


def test_same_size_edit_with_mtime_restored_changes_the_source_version(tmp_path):
    small = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(small), 3_000, seed=1)  # < 1 MiB: hashed whole
    big = tmp_path / "big.csv"
    big.write_bytes(os.urandom(5 << 20))  # 16 sampled blocks, the last ending at the end

    def edit(path, offset):
        before = csv_source.list_sources([str(path)])[0]
        st = path.stat()
        with open(path, "r+b") as f:
            f.seek(offset)
            byte = f.read(1)
            f.seek(offset)
            f.write(b"7" if byte != b"7" else b"8")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        after = csv_source.list_sources([str(path)])[0]
        assert after.size == before.size and after.version != before.version
        assert after.version.split("-")[0] == before.version.split("-")[0]  # same mtime

    out = tmp_path / "ds"
    sharding.shard(shard_config([small], out))
    edit(small, small.stat().st_size // 2)
    with pytest.raises(DataError, match="sharded from other inputs"):
        sharding.shard(shard_config([small], out))  # not "already complete", no mixed rows
    edit(big, (5 << 20) - 1)
    edit(big, 0)
