"""A task's rejects: counted and located by file and line."""

from __future__ import annotations

import json

from helpers import read_examples
from shardtrain.data import datagen, sharding


def _config(sources, output, **kw) -> sharding.ShardConfig:
    kw.setdefault("label", "cleared")
    kw.setdefault("processes", 1)
    return sharding.ShardConfig(sources=tuple(map(str, sources)), output=str(output), **kw)


def test_rejects_are_counted_and_located(tmp_path):
    csv_path = tmp_path / "quest.csv"
    summary = datagen.generate_quest_logs(str(csv_path), 10_000, seed=11, bad_fraction=0.01)
    bad = sum(summary.bad_rows_by_kind.values())
    assert bad > 50
    out = tmp_path / "ds"
    # Types from the sample, so the junk values datagen writes are rejected as bad values (by
    # all rows, the default, their columns would be strings and the rows accepted).
    meta = sharding.shard(
        _config([csv_path], out, max_bad_fraction=0.05, task_bytes=200_000, infer_types="sample")
    ).metadata.to_dict()
    assert meta["rows_read"] == summary.rows
    assert meta["rows_rejected"] == bad
    assert meta["rows_accepted"] + meta["rows_rejected"] == meta["rows_read"]
    assert meta["rejects_by_reason"].get("wrong_field_count", 0) == summary.bad_rows_by_kind.get(
        "wrong_field_count", 0
    )
    assert meta["rejects_by_reason"].get("bad_value", 0) == summary.bad_rows_by_kind.get(
        "bad_value", 0
    )
    lines = csv_path.read_text().splitlines()
    rejects = [json.loads(x) for x in (out / "rejects" / "rejects.jsonl").read_text().splitlines()]
    assert len(rejects) == bad
    for r in rejects:
        assert r["source"] == str(csv_path)
        assert lines[r["line"] - 1][: len(r["text"])] == r["text"]  # the line number is right
    assert sum(1 for _ in read_examples(str(out))) == meta["rows_accepted"]
