"""Parquet sources → TFRecord shards on local disk: values (compared with pandas), types,
splits, rejects, errors; the same sharder as CSV."""

from __future__ import annotations

import datetime
import decimal
import json
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import read_examples, read_rejects, run_cli_here, shard, shard_config
from shardtrain.data import sharding
from shardtrain.data.sharding.plan import build_plan
from shardtrain.errors import ConfigError, DataError
from typed_sources import as_example_value, quest_parquet


def _every_type_table() -> pa.Table:
    n = 7
    ts = datetime.datetime(2024, 2, 29, 13, 45, 7, 250000)
    return pa.table(
        {
            "id": pa.array([f"r{i}" for i in range(n)]),
            "tiny": pa.array([1, -2, None, 4, 5, 6, 127], pa.int8()),
            "big": pa.array([2**63 - 1, -(2**63), 0, None, 1, 2, 3], pa.int64()),
            "u32": pa.array([0, 2**32 - 1, 5, 6, 7, 8, None], pa.uint32()),
            "uid": pa.array([2**64 - 1, 18446744073709551615, 1, 2, None, 3, 4], pa.uint64()),
            "f32": pa.array([0.5, -2.25, float("nan"), None, 1e30, -0.0, 3.0], pa.float32()),
            "f64": pa.array([0.1, 1e-300, None, 2.5, 1e39, -1.0, 7.0], pa.float64()),
            "price": pa.array(
                [decimal.Decimal(x) if x else None for x in ["45.12", "0.01", None, "9.99"]]
                + [decimal.Decimal("1.00")] * 3,
                pa.decimal128(10, 2),
            ),
            "flag": pa.array([True, False, None, True, False, True, False]),
            "text": pa.array(["a, b", "", None, "unicode é ✓", "NA", "null", "x\ny"]),
            "cat": pa.array(
                ["mage", "rogue", "mage", None, "mage", "cleric", "rogue"]
            ).dictionary_encode(),
            "day": pa.array(
                [datetime.date(2024, 1, d + 1) for d in range(6)] + [None], pa.date32()
            ),
            "at": pa.array([ts, None, ts, ts, ts, ts, ts], pa.timestamp("ms")),
            "at_utc": pa.array([ts] * n, pa.timestamp("us", tz="UTC")),
            "cleared": pa.array([0, 1, 1, 0, 1, 0, 1], pa.int64()),
        }
    )


def test_parquet_every_type_value_by_value_against_pandas(tmp_path):
    src = tmp_path / "types.parquet"
    pq.write_table(_every_type_table(), src, row_group_size=3)
    out = tmp_path / "ds"
    # Per-row Examples: a null is an absent feature, a NaN a stored one (columnar blocks
    # store both as NaN).
    meta = shard([src], out, key="id", compression="none", min_shards=2, record_format="example")
    types = {c["name"]: c["type"] for c in meta["schema"]["columns"]}
    assert types == {
        "id": "string",
        "tiny": "int",
        "big": "int",
        "u32": "int",
        "uid": "string",  # beyond int64: exact text
        "f32": "float",
        "f64": "float",
        "price": "float",
        "flag": "bool",
        "text": "string",
        "cat": "string",
        "day": "string",
        "at": "string",
        "at_utc": "string",
        "cleared": "int",
    }
    assert meta["rows_read"] == meta["rows_accepted"] == 7 and meta["rows_rejected"] == 0
    assert meta["schema"]["null_values"] == []
    rows = {r["id"].decode(): r for r in read_examples(str(out))}
    # pandas with Arrow types: ints stay exact, and NaN is not null.
    frame = pd.read_parquet(src, dtype_backend="pyarrow")
    compared = 0
    for _, expected in frame.iterrows():
        got = rows[expected["id"]]
        for name, column_type in types.items():
            want = expected[name]
            if name in ("day", "at", "at_utc"):
                continue  # compared as text below
            if want is pd.NA:
                assert name not in got, (expected["id"], name)
            elif isinstance(want, float) and math.isnan(want):
                assert math.isnan(got[name]), (expected["id"], name)
            else:
                value = as_example_value(want, column_type)
                assert got[name] == value, (expected["id"], name, got[name], value)
            compared += 1
    assert compared == 7 * 12
    assert rows["r0"]["uid"] == b"18446744073709551615"
    assert rows["r0"]["day"] == b"2024-01-01" and "day" not in rows["r6"]
    assert rows["r0"]["at"] == b"2024-02-29 13:45:07.250" and "at" not in rows["r1"]
    assert rows["r0"]["at_utc"] == b"2024-02-29 13:45:07.250000Z"
    assert rows["r4"]["f64"] == math.inf  # beyond float32, as in CSV
    assert rows["r4"]["text"] == b"NA" and rows["r5"]["text"] == b"null"  # text, not missing
    assert rows["r6"]["text"] == b"x\ny"
    stats = meta["stats"]["columns"]
    assert stats["tiny"]["missing"] == 1 and stats["tiny"]["min"] == -2
    assert stats["f32"]["nan"] == 1
    assert {t["value"] for t in stats["cat"]["top"]} == {"mage", "rogue", "cleric"}


def test_parquet_row_groups_split_over_tasks_and_workers_deterministically(tmp_path):
    csv_path, path = quest_parquet(tmp_path, 12_000, seed=5, row_group_size=1000)
    common = {"key": "attempt_id", "task_bytes": 60_000}
    plan = build_plan(shard_config([path], tmp_path / "plan", **common))
    assert len(plan.tasks) > 3 and all(p.uri == str(path) for t in plan.tasks for p in t.pieces)
    one = shard([path], tmp_path / "one", **common)
    for w in range(3):
        outcome = sharding.shard(
            shard_config([path], tmp_path / "three", num_workers=3, worker_index=w, **common)
        )
        assert outcome.status == "worker-done"
    three = sharding.finalize(str(tmp_path / "three")).to_dict()
    pooled = shard([path], tmp_path / "pooled", **{**common, "processes": 2})
    for split in ("train", "eval"):
        crcs = [[s["crc32c"] for s in m["splits"][split]["shards"]] for m in (one, three, pooled)]
        assert crcs[0] == crcs[1] == crcs[2]
    assert one["rows_read"] == one["rows_accepted"] == 12_000
    keys = [r["attempt_id"] for r in read_examples(str(tmp_path / "one"))]
    assert len(keys) == len(set(keys)) == 12_000  # every row group read exactly once
    # The split key is hashed as text: the same rows land in the same splits as from CSV.
    csv_meta = shard([csv_path], tmp_path / "csv", **common)
    split_of = {
        fmt: {r["attempt_id"]: r["__split__"] for r in read_examples(str(tmp_path / fmt))}
        for fmt in ("one", "csv")
    }
    assert split_of["one"] == split_of["csv"]
    assert one["stats"]["columns"]["gear_score"]["mean"] == pytest.approx(
        csv_meta["stats"]["columns"]["gear_score"]["mean"], rel=1e-6
    )


def test_parquet_whole_row_hash_is_the_same_with_any_task_size(tmp_path):
    _, path = quest_parquet(tmp_path, 6_000, seed=8, row_group_size=500)
    a = shard([path], tmp_path / "a", task_bytes=40_000)
    b = shard([path], tmp_path / "b", task_bytes=400_000)
    assert a["splits"]["eval"]["num_records"] == b["splits"]["eval"]["num_records"] > 0
    split_a = {r["attempt_id"]: r["__split__"] for r in read_examples(str(tmp_path / "a"))}
    split_b = {r["attempt_id"]: r["__split__"] for r in read_examples(str(tmp_path / "b"))}
    assert split_a == split_b


def test_parquet_null_labels_are_rejected_with_their_row_number(tmp_path):
    n = 5000
    labels = [None if i % 997 == 3 else i % 2 for i in range(n)]
    table = pa.table({"id": [f"k{i}" for i in range(n)], "x": list(range(n)), "cleared": labels})
    path = tmp_path / "labels.parquet"
    pq.write_table(table, path, row_group_size=700)
    out = tmp_path / "ds"
    meta = shard([path], out, task_bytes=12_000, max_bad_fraction=0.01)
    bad = [i for i, v in enumerate(labels) if v is None]
    assert meta["rows_read"] == n and meta["rows_rejected"] == len(bad)
    assert meta["rejects_by_reason"] == {"missing_label": len(bad)}
    rejects = read_rejects(out)
    assert [r["line"] for r in rejects] == [i + 1 for i in bad]  # 1-based row numbers
    for r in rejects:
        assert r["source"] == str(path)
        assert json.loads(r["text"])["id"] == f"k{r['line'] - 1}"


def test_parquet_reject_rows_count_the_row_groups_before_the_piece(tmp_path):
    # Several pieces, each starting at a later row group: a reject's row number counts every
    # row of the file before it, not just the rows of its own piece.
    n = 12_000
    rng = np.random.default_rng(3)
    labels = [None if i % 1500 == 1234 else i % 2 for i in range(n)]
    frame = pd.DataFrame({"id": [f"k{i}" for i in range(n)], "x": rng.random(n), "cleared": labels})
    path = tmp_path / "groups.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path, row_group_size=1000)
    common = {"task_bytes": 40_000, "max_bad_fraction": 0.01}
    plan = build_plan(shard_config([path], tmp_path / "plan", **common))
    assert len([p for t in plan.tasks for p in t.pieces]) >= 3
    out = tmp_path / "ds"
    meta = shard([path], out, **common)
    bad = frame.index[frame["cleared"].isna()].tolist()
    assert meta["rows_rejected"] == len(bad) == 8
    rejects = read_rejects(out)
    assert sorted(r["line"] for r in rejects) == [i + 1 for i in bad]
    for r in rejects:
        assert json.loads(r["text"])["id"] == frame["id"][r["line"] - 1]


def test_parquet_files_with_compatible_and_incompatible_schemas(tmp_path):
    a = tmp_path / "a.parquet"
    b = tmp_path / "b.parquet"
    pq.write_table(pa.table({"x": [1, 2], "s": ["p", "q"], "cleared": [0, 1]}), a)
    # Other column order, x as float: unified to float.
    pq.write_table(pa.table({"cleared": [1, 0], "s": ["r", None], "x": [0.5, None]}), b)
    out = tmp_path / "ok"
    meta = shard([tmp_path / "*.parquet"], out, compression="none", min_shards=1)
    assert {c["name"]: c["type"] for c in meta["schema"]["columns"]} == {
        "x": "float",
        "s": "string",
        "cleared": "int",
    }
    values = sorted(((r.get("x"), r.get("s")) for r in read_examples(str(out))), key=str)
    assert values == [(0.5, b"r"), (1.0, b"p"), (2.0, b"q"), (None, None)]

    c = tmp_path / "c.parquet"
    pq.write_table(pa.table({"x": ["one"], "s": ["p"], "cleared": [0]}), c)
    with pytest.raises(DataError) as info:
        build_plan(shard_config([a, c], tmp_path / "bad"))
    assert str(info.value) == (
        f"{c}: column 'x' is string here but int in {a}; make the files' types agree, or "
        "force one with a --schema file"
    )
    d = tmp_path / "d.parquet"
    pq.write_table(pa.table({"x": [1], "cleared": [0]}), d)
    with pytest.raises(DataError, match=rf"^{d}: its columns differ from {a}'s: it lacks s$"):
        build_plan(shard_config([a, d], tmp_path / "bad"))


def test_parquet_unsupported_types_name_the_file_and_column_and_can_be_dropped(tmp_path):
    path = tmp_path / "nested.parquet"
    table = pa.table({"tags": [[1, 2], [3]], "blob": [b"\x00", b"\x01"], "cleared": [0, 1]})
    pq.write_table(table, path)
    proc = run_cli_here("shard", str(path), "-o", str(tmp_path / "ds"), "--label", "cleared")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"error: {path}: column 'tags' has type list<element: int64>")
    assert "drop: [tags]" in proc.stderr
    schema = tmp_path / "schema.yaml"
    schema.write_text("drop: [tags, blob]\n")
    meta = shard([path], tmp_path / "ds", schema_file=str(schema), min_shards=1)
    assert meta["rows_accepted"] == 2
    assert [c["name"] for c in meta["schema"]["columns"] if not c["drop"]] == ["cleared"]
    assert all(set(r) == {"__split__", "cleared"} for r in read_examples(str(tmp_path / "ds")))


def test_parquet_schema_file_forces_string_and_float(tmp_path):
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"zip": [7919, 98115], "n": [1, 2], "cleared": [0, 1]}), path)
    schema = tmp_path / "schema.yaml"
    schema.write_text("columns: {zip: string, n: float}\n")
    out = tmp_path / "ds"
    meta = shard([path], out, schema_file=str(schema), key="zip", min_shards=1)
    assert {c["name"]: c["type"] for c in meta["schema"]["columns"]}["n"] == "float"
    assert sorted(r["zip"] for r in read_examples(str(out))) == [b"7919", b"98115"]
    schema.write_text("columns: {zip: bool}\n")
    with pytest.raises(ConfigError, match="it can be forced to string"):
        build_plan(shard_config([path], tmp_path / "bad", schema_file=str(schema)))


def test_not_a_parquet_file_is_one_line(tmp_path):
    path = tmp_path / "fake.parquet"
    path.write_text("id,cleared\n1,0\n")
    with pytest.raises(DataError, match=rf"^{path}: not a readable Parquet file \("):
        build_plan(shard_config([path], tmp_path / "ds"))
