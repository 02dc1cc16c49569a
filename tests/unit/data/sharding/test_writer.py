"""The shard writer through the whole sharder on local disk: every type and missing value round
trips, every row once in the documented layout, O_DIRECT and page-cache writes give the same
bytes, and shard CRCs name a corrupt file."""

from __future__ import annotations

import collections
import csv
import math
import os

import pytest

from helpers import ALL_TYPES, dataset_files, read_examples
from shardtrain import storage
from shardtrain.data import datagen, sharding
from shardtrain.errors import DataError
from shardtrain.storage import direct


def _config(sources, output, **kw) -> sharding.ShardConfig:
    kw.setdefault("label", "cleared")
    kw.setdefault("processes", 1)
    return sharding.ShardConfig(sources=tuple(map(str, sources)), output=str(output), **kw)


def _metadata(config: sharding.ShardConfig) -> dict:
    """Shard, and return metadata.json as it is written."""
    return sharding.shard(config).metadata.to_dict()


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_values_round_trip_for_every_type_and_missing(tmp_path, compression):
    # Per-row Examples: a missing value is an absent feature, a NaN a stored one (columnar
    # blocks store both as NaN: test_column_blocks compares them with these rows).
    out = tmp_path / "ds"
    outcome = sharding.shard(
        _config(
            [ALL_TYPES],
            out,
            key="id",
            compression=compression,
            min_shards=2,
            record_format="example",
        )
    )
    assert outcome.status == "complete"
    meta = outcome.metadata.to_dict()
    types = {c["name"]: c["type"] for c in meta["schema"]["columns"]}
    assert types == {
        "id": "string",
        "level": "int",
        "score": "float",
        "cls": "string",
        "weekend": "bool",
        "note": "string",
        "cleared": "int",
    }
    rows = {r["id"].decode(): r for r in read_examples(str(out))}
    assert sorted(rows) == ["r1", "r2", "r3", "r4", "r5", "r6"]
    assert rows["r1"]["level"] == 1 and rows["r1"]["score"] == 0.5
    assert rows["r1"]["cls"] == b"mage" and rows["r1"]["weekend"] == 1
    assert rows["r2"]["level"] == -7 and rows["r2"]["score"] == -2.25
    assert rows["r2"]["note"] == b"quoted, comma" and rows["r2"]["weekend"] == 0
    # Missing values are absent features.
    assert "level" not in rows["r3"] and "cls" not in rows["r3"] and "note" not in rows["r3"]
    assert rows["r3"]["score"] == 1000.0
    assert "score" not in rows["r4"] and "weekend" not in rows["r4"]
    assert rows["r4"]["note"] == "unicode é ✓".encode()
    assert rows["r5"]["level"] == 9223372036854775807 and math.isnan(rows["r5"]["score"])
    assert rows["r6"]["level"] == 0 and math.copysign(1, rows["r6"]["score"]) == -1.0
    # A quoted empty string is missing too, as in pandas: quoting does not change what a
    # null word means (issue 14; before, "" was an empty string only when quoted).
    assert "note" not in rows["r6"]
    assert {r["cleared"] for r in rows.values()} == {0, 1}
    assert meta["rows_read"] == 6 and meta["rows_accepted"] == 6 and meta["rows_rejected"] == 0
    stats = meta["stats"]["columns"]
    assert stats["level"]["missing"] == 1 and stats["level"]["min"] == -7
    assert stats["score"]["nan"] == 1 and stats["score"]["max"] == 1000.0
    assert {t["value"] for t in stats["cls"]["top"]} == {"mage", "warrior", "rogue", "cleric"}
    assert meta["stats"]["label"]["counts"] == {"0": 3, "1": 3}
    assert meta["label_info"]["task"] == "binary"


def test_quest_logs_every_row_once_and_shard_layout(tmp_path):
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 20_000, seed=3)
    out = tmp_path / "ds"
    meta = _metadata(_config([csv_path], out, key="attempt_id"))
    assert meta["rows_read"] == 20_000 == meta["rows_accepted"]
    assert meta["options"]["record_format"] == "columnar" and meta["compression"] == "NONE"
    for split in ("train", "eval"):
        shards = meta["splits"][split]["shards"]
        assert len(shards) == 8  # never fewer than 8 per split
        for i, s in enumerate(shards):
            # The default for tabular data: columnar blocks, uncompressed.
            assert s["path"] == f"{split}/part-{i:05d}-of-00008.tfrecord"
            assert (out / s["path"]).stat().st_size == s["bytes"]
    examples = read_examples(str(out))
    keys = [r["attempt_id"] for r in examples]
    assert len(keys) == len(set(keys)) == 20_000
    frac = meta["splits"]["eval"]["num_records"] / 20_000
    assert 0.08 < frac < 0.12
    with open(csv_path, newline="") as f:
        src = {row["attempt_id"]: row for row in csv.DictReader(f)}
    for r in examples[:500]:
        row = src[r["attempt_id"].decode()]
        assert str(r["cleared"]) == row["cleared"]
        assert ("player_level" in r) == (row["player_level"] != "")
    assert meta["sources"][0]["uri"] == str(csv_path) and meta["sources"][0]["size"] > 0
    assert meta["tool_version"]


def test_in_place_direct_writes_give_the_same_dataset_as_page_cache_writes(tmp_path, monkeypatch):
    """Uncompressed shards go to the disk straight from the encoder's buffer (O_DIRECT, each
    shard's records at its file's page phase): the dataset is byte for byte the one written
    through the page cache."""
    if not direct._on_block_device(str(tmp_path)):
        pytest.skip("O_DIRECT is not used on this file system")
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 30_000, seed=9, bad_fraction=0.01)
    calls = collections.Counter()
    for name in ("write", "write_in_place"):
        method = getattr(direct._DirectWriter, name)

        def counted(self, *args, _method=method, _name=name):
            calls[_name] += 1
            return _method(self, *args)

        monkeypatch.setattr(direct._DirectWriter, name, counted)
    datasets = {}
    for flag in ("1", "0"):
        monkeypatch.setenv(storage.DIRECT_IO_ENV, flag)
        out = tmp_path / f"ds-{flag}"
        # In place: per-row Examples only (columnar blocks are encoded apart, then copied).
        config = _config(
            [csv_path],
            out,
            compression="none",
            record_format="example",
            block_bytes=1024 * 1024,
            max_bad_fraction=0.05,
        )
        sharding.shard(config)
        datasets[flag] = dataset_files(out)
        if flag == "1":
            # Every write is offered in place; the groups too small for it (the eval split's,
            # here) fall back to a copying write(). Most of the train split's go in place.
            assert calls["write_in_place"] - calls["write"] > 20
    assert datasets["1"] == datasets["0"]
    assert datasets["1"]["metadata.json"]["splits"]["train"]["num_records"] > 20_000


def test_shard_crcs_name_the_corrupt_file(tmp_path):
    from shardtrain.train import dataset  # TensorFlow only when a dataset is built

    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 3_000, seed=1)
    out = str(tmp_path / "ds")
    meta = sharding.shard(_config([csv_path], out, num_shards=2)).metadata
    shards = dataset.split_shards(out, meta, "eval")
    assert dataset.find_corrupt_shard(shards) is None
    with open(storage.local_path(shards[1].uri), "r+b") as f:
        f.seek(-10, os.SEEK_END)
        byte = f.read(1)[0]
        f.seek(-10, os.SEEK_END)
        f.write(bytes([byte ^ 1]))

    class DataLossError(Exception):  # what tf.errors raises, without the file's name
        pass

    error = dataset.input_error(DataLossError("corrupted record at 12"), out, meta, ["eval"])
    assert isinstance(error, DataError)
    assert str(error).startswith(f"{shards[1].uri}: corrupt (CRC-32C ")
    expected = f"expected {shards[1].crc32c} of {shards[1].bytes:,}), re-shard the dataset: "
    assert expected in str(error)
    assert str(error).endswith(f"--output {out} --label cleared --num-shards 2 --overwrite`")
    assert dataset.input_error(ValueError("other"), out, meta, ["eval"]) is None
