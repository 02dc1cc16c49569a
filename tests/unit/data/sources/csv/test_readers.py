"""The CSV reader paths (sources.csv.readers) through the whole sharder: the compiled fast path
gives the dataset Arrow gives, byte for byte; lines Arrow cannot map back to records (invalid
UTF-8, a bare carriage return, a bad value beside them) are read record by record and
rejected with their line; CRLF, blank lines and quoted line breaks."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from helpers import dataset_files, read_examples, shard_config
from shardtrain.data import datagen, sharding
from shardtrain.data.sources import csv as csv_source
from shardtrain.data.sources.csv import readers


def test_crlf_blank_lines_multiline_fields_and_no_final_newline(tmp_path):
    src = tmp_path / "odd.csv"
    src.write_bytes(b'a,b,cleared\r\n1,x,0\r\n2,y,1\r\n\r\n3,"multi\r\nline",1\r\n4,"q, r",0')
    out = tmp_path / "ds"
    meta = sharding.shard(
        shard_config([src], out, min_shards=1, max_bad_fraction=1.0)
    ).metadata.to_dict()
    # A quoted field with a line break is one value (issue 14; it used to be two rejects).
    assert (meta["rows_read"], meta["rows_accepted"], meta["rows_rejected"]) == (4, 4, 0)
    assert meta["blank_lines"] == 1
    rows = {r["a"]: r for r in read_examples(str(out))}
    expected = pd.read_csv(src, dtype=str).set_index("a")
    assert sorted(rows) == [1, 2, 3, 4] and rows[4]["b"] == b"q, r"
    assert rows[3]["b"] == b"multi\r\nline" == expected.loc["3", "b"].encode()


def test_three_processes_and_unreadable_lines(tmp_path):
    """Regression: 3+ pool processes used to kill each other; a bad UTF-8 byte past the
    schema sample or a bare carriage return inside a field used to crash the run."""
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 60_000, seed=13)
    data = csv_path.read_bytes().splitlines(keepends=True)
    data[50_000] = data[50_000].replace(b",p", b",\xe9", 1)  # not UTF-8
    data[50_010] = data[50_010].replace(b",", b"\r", 1)  # a bare CR inside the line
    csv_path.write_bytes(b"".join(data))
    out = tmp_path / "ds"
    meta = sharding.shard(
        sharding.ShardConfig(
            sources=(str(csv_path), f"{tmp_path}/*.csv"),  # the same file twice: read once
            output=str(out),
            label="cleared",
            processes=3,
            task_bytes=600_000,
            max_bad_fraction=0.01,
        )
    ).metadata.to_dict()
    assert len(meta["sources"]) == 1
    assert meta["rows_read"] == 60_000
    assert meta["rows_accepted"] + meta["rows_rejected"] == 60_000
    assert meta["rejects_by_reason"].get("unreadable_line", 0) >= 1
    rejects = [json.loads(x) for x in (out / "rejects" / "rejects.jsonl").read_text().splitlines()]
    lines = {r["line"] for r in rejects}
    assert {50_001, 50_011} <= lines  # the header is line 1: data[i] is line i + 1


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_csv_fast_path_gives_the_same_dataset_as_arrow(tmp_path, monkeypatch, compression):
    """Shards, rejects, statistics and metadata are byte for byte those of the Arrow-only
    path (timings and the creation time aside), blocks that fall back to Arrow included."""
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 42_000, seed=5, bad_fraction=0.01)
    lines = csv_path.read_bytes().splitlines(keepends=True)
    lines[9_000] = lines[9_000].replace(b",", b',"quoted",', 1)  # a block for Arrow
    lines[41_000] = lines[41_000].replace(b",", b",\xe9", 1)  # past the schema sample
    csv_path.write_bytes(b"".join(lines).replace(b"\n", b"\r\n", 50))  # some CRLF lines too

    fallbacks = []
    read_arrow = readers.read_arrow
    monkeypatch.setattr(readers, "read_arrow", lambda *a: fallbacks.append(1) or read_arrow(*a))
    datasets = {}
    for flag in ("1", "0"):
        monkeypatch.setenv(csv_source.FAST_PATH_ENV, flag)
        fallbacks.clear()
        out = tmp_path / f"ds-{flag}"
        config = shard_config(
            [csv_path],
            out,
            key="attempt_id",
            compression=compression,
            block_bytes=256 * 1024,
            task_bytes=1_500_000,
            max_bad_fraction=0.05,
        )
        sharding.shard(config)
        datasets[flag] = dataset_files(out)
        blocks = len(fallbacks)
        if flag == "1":
            # The blocks of the quoted and the non-UTF-8 lines, and the sample the plan
            # estimates the output size from (it holds the quoted line).
            assert blocks == 3
    assert blocks > 18  # every block, with the fast path off
    assert datasets["1"] == datasets["0"]
    meta = datasets["1"]["metadata.json"]
    assert meta["rejects_by_reason"]["unreadable_line"] == 1


@pytest.mark.parametrize("fast", ["1", "0"])
def test_a_bad_value_and_invalid_utf8_in_one_block_are_both_rejected(tmp_path, monkeypatch, fast):
    """Regression: the re-read after a conversion error crashed on a non-UTF-8 line."""
    monkeypatch.setenv("SHARDTRAIN_CSV_FAST", fast)
    csv_path = tmp_path / "mixed.csv"
    # Past the 4 MB the schema is inferred from (which must be UTF-8), in one block.
    rows = [b"id,level,note,cleared"] + [f"r{i},{i},ok,{i % 2}".encode() for i in range(300_000)]
    rows[290_000] = b"r9x,not-a-number,ok,1"  # a bad int
    rows[290_010] = b"r19x,5,caf\xe9,0"  # not UTF-8
    csv_path.write_bytes(b"\n".join(rows) + b"\n")
    meta = sharding.shard(  # types from the sample: 'level' stays an int, the bad int a reject
        shard_config([csv_path], tmp_path / "ds", max_bad_fraction=0.05, infer_types="sample")
    ).metadata.to_dict()
    assert meta["rows_read"] == 300_000 and meta["rows_rejected"] == 2
    rejects = [
        json.loads(x)
        for x in (tmp_path / "ds" / "rejects" / "rejects.jsonl").read_text().splitlines()
    ]
    assert sorted(r["line"] for r in rejects) == [290_001, 290_011]
