"""Parquet and JSON-lines sources → TFRecord shards on local disk: values (compared with pandas),
types, splits, rejects, errors, resume; the same sharder as CSV."""

from __future__ import annotations

import datetime
import decimal
import gzip
import json
import math
import shutil

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import read_examples, run_cli
from shardtrain.data import datagen, sharding
from shardtrain.data.shard_config import detect_format
from shardtrain.data.sharding.plan import build_plan
from shardtrain.errors import ConfigError, DataError


def _config(sources, output, **kw) -> sharding.ShardConfig:
    kw.setdefault("label", "cleared")
    kw.setdefault("processes", 1)
    return sharding.ShardConfig(sources=tuple(map(str, sources)), output=str(output), **kw)


def _shard(sources, output, **kw) -> dict:
    return sharding.shard(_config(sources, output, **kw)).metadata.to_dict()


def _rejects(out) -> list[dict]:
    path = out / "rejects" / "rejects.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _as_example_value(value, column_type: str):
    """What an Example holds for a pandas value of a column of ``column_type`` (None: absent)."""
    if value is None or value is pd.NaT or (isinstance(value, float) and math.isnan(value)):
        return None
    if column_type == "float":
        with np.errstate(over="ignore"):  # beyond float32: inf, as the sharder stores it
            return float(np.float32(value))
    if column_type == "bool":
        return int(bool(value))
    if column_type == "int":
        return int(value)
    return str(value).encode()


# --------------------------------------------------------------------------------------------
# Parquet
# --------------------------------------------------------------------------------------------


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
    meta = _shard([src], out, key="id", compression="none", min_shards=2)
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
                value = _as_example_value(want, column_type)
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


def _quest_parquet(tmp_path, rows: int, seed: int, **write) -> tuple:
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), rows, seed=seed)
    table = pa.Table.from_pandas(pd.read_csv(csv_path, keep_default_na=False, na_values=[""]))
    path = tmp_path / "quest.parquet"
    pq.write_table(table, path, **write)
    return csv_path, path


def test_parquet_row_groups_split_over_tasks_and_workers_deterministically(tmp_path):
    csv_path, path = _quest_parquet(tmp_path, 12_000, seed=5, row_group_size=1000)
    common = {"key": "attempt_id", "task_bytes": 60_000}
    plan = build_plan(_config([path], tmp_path / "plan", **common))
    assert len(plan.tasks) > 3 and all(p.uri == str(path) for t in plan.tasks for p in t.pieces)
    one = _shard([path], tmp_path / "one", **common)
    for w in range(3):
        outcome = sharding.shard(
            _config([path], tmp_path / "three", num_workers=3, worker_index=w, **common)
        )
        assert outcome.status == "worker-done"
    three = sharding.finalize(str(tmp_path / "three")).to_dict()
    pooled = _shard([path], tmp_path / "pooled", **{**common, "processes": 2})
    for split in ("train", "eval"):
        crcs = [[s["crc32c"] for s in m["splits"][split]["shards"]] for m in (one, three, pooled)]
        assert crcs[0] == crcs[1] == crcs[2]
    assert one["rows_read"] == one["rows_accepted"] == 12_000
    keys = [r["attempt_id"] for r in read_examples(str(tmp_path / "one"))]
    assert len(keys) == len(set(keys)) == 12_000  # every row group read exactly once
    # The split key is hashed as text: the same rows land in the same splits as from CSV.
    csv_meta = _shard([csv_path], tmp_path / "csv", **common)
    split_of = {
        fmt: {r["attempt_id"]: r["__split__"] for r in read_examples(str(tmp_path / fmt))}
        for fmt in ("one", "csv")
    }
    assert split_of["one"] == split_of["csv"]
    assert one["stats"]["columns"]["gear_score"]["mean"] == pytest.approx(
        csv_meta["stats"]["columns"]["gear_score"]["mean"], rel=1e-6
    )


def test_parquet_whole_row_hash_is_the_same_with_any_task_size(tmp_path):
    _, path = _quest_parquet(tmp_path, 6_000, seed=8, row_group_size=500)
    a = _shard([path], tmp_path / "a", task_bytes=40_000)
    b = _shard([path], tmp_path / "b", task_bytes=400_000)
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
    meta = _shard([path], out, task_bytes=12_000, max_bad_fraction=0.01)
    bad = [i for i, v in enumerate(labels) if v is None]
    assert meta["rows_read"] == n and meta["rows_rejected"] == len(bad)
    assert meta["rejects_by_reason"] == {"missing_label": len(bad)}
    rejects = _rejects(out)
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
    plan = build_plan(_config([path], tmp_path / "plan", **common))
    assert len([p for t in plan.tasks for p in t.pieces]) >= 3
    out = tmp_path / "ds"
    meta = _shard([path], out, **common)
    bad = frame.index[frame["cleared"].isna()].tolist()
    assert meta["rows_rejected"] == len(bad) == 8
    rejects = _rejects(out)
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
    meta = _shard([tmp_path / "*.parquet"], out, compression="none", min_shards=1)
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
        build_plan(_config([a, c], tmp_path / "bad"))
    assert str(info.value) == (
        f"{c}: column 'x' is string here but int in {a}; make the files' types agree, or "
        "force one with a --schema file"
    )
    d = tmp_path / "d.parquet"
    pq.write_table(pa.table({"x": [1], "cleared": [0]}), d)
    with pytest.raises(DataError, match=rf"^{d}: its columns differ from {a}'s: it lacks s$"):
        build_plan(_config([a, d], tmp_path / "bad"))


def test_parquet_unsupported_types_name_the_file_and_column_and_can_be_dropped(tmp_path):
    path = tmp_path / "nested.parquet"
    table = pa.table({"tags": [[1, 2], [3]], "blob": [b"\x00", b"\x01"], "cleared": [0, 1]})
    pq.write_table(table, path)
    proc = run_cli("shard", str(path), "-o", str(tmp_path / "ds"), "--label", "cleared")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"error: {path}: column 'tags' has type list<element: int64>")
    assert "drop: [tags]" in proc.stderr
    schema = tmp_path / "schema.yaml"
    schema.write_text("drop: [tags, blob]\n")
    meta = _shard([path], tmp_path / "ds", schema_file=str(schema), min_shards=1)
    assert meta["rows_accepted"] == 2
    assert [c["name"] for c in meta["schema"]["columns"] if not c["drop"]] == ["cleared"]
    assert all(set(r) == {"__split__", "cleared"} for r in read_examples(str(tmp_path / "ds")))


def test_parquet_schema_file_forces_string_and_float(tmp_path):
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"zip": [7919, 98115], "n": [1, 2], "cleared": [0, 1]}), path)
    schema = tmp_path / "schema.yaml"
    schema.write_text("columns: {zip: string, n: float}\n")
    out = tmp_path / "ds"
    meta = _shard([path], out, schema_file=str(schema), key="zip", min_shards=1)
    assert {c["name"]: c["type"] for c in meta["schema"]["columns"]}["n"] == "float"
    assert sorted(r["zip"] for r in read_examples(str(out))) == [b"7919", b"98115"]
    schema.write_text("columns: {zip: bool}\n")
    with pytest.raises(ConfigError, match="it can be forced to string"):
        build_plan(_config([path], tmp_path / "bad", schema_file=str(schema)))


def test_not_a_parquet_file_is_one_line(tmp_path):
    path = tmp_path / "fake.parquet"
    path.write_text("id,cleared\n1,0\n")
    with pytest.raises(DataError, match=rf"^{path}: not a readable Parquet file \("):
        build_plan(_config([path], tmp_path / "ds"))


# --------------------------------------------------------------------------------------------
# JSON lines
# --------------------------------------------------------------------------------------------


def test_jsonl_types_are_decided_by_all_the_data_not_the_first_block(tmp_path):
    lines = []
    for i in range(3000):
        row = {"id": i, "zip": 98115, "fee": 0, "uid": i, "ok": True, "cleared": i % 2}
        row["w"] = i / 8
        if i == 2500:  # far past the first block: the column must still hold it
            row.update(zip="K1A 0B1", fee=45.12, uid=18446744073709551616, w=2**64)
        if i == 2600:
            row.update(zip="07919", ok=None)
        lines.append(json.dumps(row))
    path = tmp_path / "logs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "ds"
    meta = _shard([path], out, key="id", block_bytes=20_000, compression="none")
    types = {c["name"]: c["type"] for c in meta["schema"]["columns"]}
    assert types == {
        "id": "int",
        "zip": "string",
        "fee": "float",
        "uid": "string",
        "ok": "bool",
        "cleared": "int",
        "w": "string",  # an integer beyond int64 among floats: exact text, not rounded
    }
    assert meta["rows_read"] == meta["rows_accepted"] == 3000 and meta["rows_rejected"] == 0
    rows = {r["id"]: r for r in read_examples(str(out))}
    assert rows[0]["zip"] == b"98115" and rows[2500]["zip"] == b"K1A 0B1"
    assert rows[2600]["zip"] == b"07919"  # a code stays text, leading zero and all
    assert rows[2500]["fee"] == pytest.approx(45.12) and rows[0]["fee"] == 0.0
    assert rows[2500]["uid"] == b"18446744073709551616" and rows[7]["uid"] == b"7"
    assert "ok" not in rows[2600] and rows[1]["ok"] == 1
    assert rows[2500]["w"] == b"18446744073709551616" and rows[3]["w"] == b"0.375"


def _logs_with_bad_lines(tmp_path) -> tuple:
    rng = np.random.default_rng(3)
    good = []
    text_lines = []
    expected_rejects = {}
    for i in range(4000):
        row = {
            "id": f"e{i:05d}",
            "level": int(rng.integers(1, 60)) if i % 13 else None,
            "score": float(np.round(rng.normal(), 4)),
            "region": str(rng.choice(["eu", "us", "jp"])),
            "agent": 'Mozilla/5.0 (X11; Linux) "quoted", commas, ünïcode',
            "cleared": int(rng.integers(0, 2)),
        }
        if i % 17 == 0:
            del row["region"]  # absent key: missing
        if i % 401 == 5:
            text_lines.append('{"id": "broken", "level": 3,')
            expected_rejects[len(text_lines)] = "malformed_json"
        if i % 503 == 7:
            text_lines.append("[1, 2, 3]")
            expected_rejects[len(text_lines)] = "not_an_object"
        if i % 211 == 9:
            text_lines.append("")  # blank lines are skipped, and still counted as lines
        if i % 307 == 11:
            text_lines.append(json.dumps({"id": f"nolabel{i}", "level": 1, "cleared": None}))
            expected_rejects[len(text_lines)] = "missing_label"
        text_lines.append(json.dumps(row, ensure_ascii=False))
        good.append(row)
    path = tmp_path / "events.jsonl"
    path.write_text("\r\n".join(text_lines) + "\r\n", encoding="utf-8")
    return path, good, expected_rejects, text_lines


def test_jsonl_values_against_pandas_and_malformed_lines_are_located_rejects(tmp_path):
    path, good, expected_rejects, text_lines = _logs_with_bad_lines(tmp_path)
    out = tmp_path / "ds"
    meta = _shard(
        [path], out, key="id", task_bytes=100_000, block_bytes=30_000, max_bad_fraction=0.05
    )
    plan = sharding.Plan.from_dict(str(out), json.loads((out / "_plan.json").read_text()))
    assert len(plan.tasks) > 3  # line-boundary pieces inside one file
    rejects = _rejects(out)
    assert {r["line"]: r["reason"] for r in rejects} == expected_rejects
    for r in rejects:
        assert r["source"] == str(path) and text_lines[r["line"] - 1].startswith(r["text"])
    assert meta["rows_read"] == len(good) + len(expected_rejects)
    assert meta["rows_accepted"] == len(good)
    assert meta["blank_lines"] == sum(1 for line in text_lines if not line)
    types = {c["name"]: c["type"] for c in meta["schema"]["columns"]}
    assert types == {
        "id": "string",
        "level": "int",
        "score": "float",
        "region": "string",
        "agent": "string",
        "cleared": "int",
    }
    # pandas reading the good lines gives the same values.
    frame = pd.DataFrame(good)
    rows = {r["id"].decode(): r for r in read_examples(str(out))}
    assert len(rows) == len(frame)
    for record in frame.to_dict("records"):
        got = rows[record["id"]]
        for name, column_type in types.items():
            want = _as_example_value(record.get(name), column_type)
            if want is None:
                assert name not in got
            else:
                assert got[name] == want, (record["id"], name)


def test_jsonl_gzip_glob_and_the_same_dataset_in_one_or_three_workers(tmp_path):
    path, good, expected_rejects, _ = _logs_with_bad_lines(tmp_path)
    zipped = tmp_path / "z" / "events.jsonl.gz"
    zipped.parent.mkdir()
    zipped.write_bytes(gzip.compress(path.read_bytes()))
    common = {"key": "id", "max_bad_fraction": 0.05}
    plain = _shard([path], tmp_path / "plain", **common)
    gz = _shard([tmp_path / "z" / "*.jsonl.gz"], tmp_path / "gz", **common)
    for w in range(3):
        sharding.shard(
            _config(
                [path],
                tmp_path / "three",
                num_workers=3,
                worker_index=w,
                task_bytes=80_000,
                **common,
            )
        )
    three = sharding.finalize(str(tmp_path / "three")).to_dict()
    for m in (gz, three):
        assert m["rows_accepted"] == plain["rows_accepted"] == len(good)
        assert m["rejects_by_reason"] == plain["rejects_by_reason"]
    assert [r["line"] for r in _rejects(tmp_path / "gz")] == sorted(expected_rejects)
    assert [r["line"] for r in _rejects(tmp_path / "three")] == sorted(expected_rejects)
    split_of = {
        d: {r["id"]: r["__split__"] for r in read_examples(str(tmp_path / d))}
        for d in ("plain", "gz", "three")
    }
    assert split_of["plain"] == split_of["gz"] == split_of["three"]


def test_jsonl_byte_order_mark_and_a_last_line_without_newline(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"k": "a", "cleared": 1}\n{"k": "b", "cleared": 0}')
    meta = _shard([path], tmp_path / "ds", key="k", min_shards=1)
    assert meta["rows_read"] == meta["rows_accepted"] == 2
    assert sorted(r["k"] for r in read_examples(str(tmp_path / "ds"))) == [b"a", b"b"]


def test_jsonl_a_line_longer_than_the_limit_is_one_error_naming_file_and_byte(
    tmp_path, monkeypatch
):
    from shardtrain.data.sources import jsonl
    from shardtrain.data.sources.base import Piece

    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(jsonl, "SCAN_BLOCK_BYTES", 256)  # blocks smaller than the long line
    short = json.dumps({"k": "a", "cleared": 1}) + "\n"
    long = json.dumps({"k": "x" * 5000, "cleared": 0}) + "\n"
    path = tmp_path / "long.jsonl"
    path.write_text(short * 3 + long + short)
    at = len(short) * 3
    message = rf"^{path}: the line starting at byte {at:,} is longer than 1,000 bytes"
    with pytest.raises(DataError, match=message):
        build_plan(_config([path], tmp_path / "ds"))
    size = path.stat().st_size
    with pytest.raises(DataError, match=message):  # the reader, in blocks smaller than a line
        list(jsonl.read_piece(Piece(str(path), 0, size), _jsonl_schema(), block_bytes=256))
    # A piece starting inside the long line does not read the whole of it to skip it.
    with pytest.raises(DataError, match=rf"^{path}: the line holding byte {at + 9:,} is longer"):
        list(jsonl.read_piece(Piece(str(path), at + 10, size), _jsonl_schema(), block_bytes=256))
    # Lines within the limit: read as before, whatever the block size.
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 6000)
    batches = list(jsonl.read_piece(Piece(str(path), 0, size), _jsonl_schema(), block_bytes=256))
    assert sum(b.rows_read for b in batches) == 5


def _jsonl_schema():
    from shardtrain.data.schema import Column, Schema

    return Schema((Column("k", "string"), Column("cleared", "int")), label="cleared")


def test_jsonl_nested_values_are_one_error_and_can_be_dropped(tmp_path):
    path = tmp_path / "nested.ndjson"
    path.write_text('{"user": "a", "cleared": 1}\n{"user": {"id": 3}, "cleared": 0}\n')
    proc = run_cli("shard", str(path), "-o", str(tmp_path / "ds"), "--label", "cleared")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"error: {path}: column 'user' holds JSON ")
    schema = tmp_path / "schema.yaml"
    schema.write_text("drop: [user]\n")
    meta = _shard([path], tmp_path / "ds", schema_file=str(schema), min_shards=1)
    assert meta["rows_accepted"] == 2


def test_jsonl_without_the_label_or_any_object_is_one_line(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"x": 1}\n')
    with pytest.raises(
        DataError, match=rf"^{path}: label column 'cleared' not found \(columns: x\)$"
    ):
        build_plan(_config([path], tmp_path / "ds"))
    path.write_text("not json\n[1]\n")
    with pytest.raises(DataError, match=rf"^{path}: no JSON object in the file"):
        build_plan(_config([path], tmp_path / "ds"))


# --------------------------------------------------------------------------------------------
# Choosing the format
# --------------------------------------------------------------------------------------------


def test_detect_format_from_names_and_mixing_is_refused():
    assert detect_format(["s3://b/logs/*.parquet"]) == "parquet"
    assert detect_format(["a.PQ", "b.parq"]) == "parquet"
    assert detect_format(["x.jsonl.gz", "y.ndjson"]) == "jsonl"
    assert detect_format(["x.csv.gz", "data/*", "z.tsv"]) == "csv"
    with pytest.raises(ConfigError, match=r"^the sources mix formats: csv \(a.csv\), parquet"):
        detect_format(["a.csv", "b.parquet"])


def test_format_flag_reads_a_jsonl_file_with_another_name_and_resumes(tmp_path):
    path = tmp_path / "events.log"
    path.write_text("".join(json.dumps({"k": i, "cleared": i % 2}) + "\n" for i in range(50)))
    out = tmp_path / "ds"
    args = ["shard", str(path), "-o", str(out), "--label", "cleared", "--format", "jsonl"]
    first = run_cli(*args, check=True)
    assert "sharded" in first.stdout
    assert json.loads((out / "metadata.json").read_text())["options"]["format"] == "jsonl"
    again = run_cli(*args, check=True)  # complete: nothing to do
    assert "is already complete" in again.stdout
    shutil.rmtree(out)
    proc = run_cli("shard", str(path), "-o", str(out), "--label", "cleared")  # read as CSV
    assert proc.returncode == 1 and "label column 'cleared' not found" in proc.stderr


def test_jsonl_arrow_and_line_by_line_reads_give_the_same_batch(monkeypatch):
    from shardtrain.data.schema import Column, Schema
    from shardtrain.data.sources import jsonl

    schema = Schema(
        (
            Column("zip", "string"),
            Column("n", "int"),
            Column("x", "float"),
            Column("b", "bool"),
            Column("s", "string"),
            Column("gone", "string", drop=True),
            Column("cleared", "int"),
        ),
        label="cleared",
        null_values=(),
    )
    lines = [
        {"zip": 98115, "n": -3, "x": 0.1, "b": True, "s": 'a, "b"', "gone": 1, "cleared": 1},
        {"zip": 7919, "n": 9223372036854775807, "x": 1e39, "b": False, "cleared": 0},
        {"zip": None, "n": None, "x": 3, "s": "ünï ✓", "cleared": 1, "extra": [1]},
        {"zip": 1, "x": -2.5e-7, "b": None, "s": "", "cleared": None},
        {},
    ]
    block = ("\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n\n").encode()
    assert jsonl._read_arrow(block, schema, 5) is not None  # Arrow reads this block
    fast = jsonl.parse_block(block, schema, lines_before=10)
    monkeypatch.setattr(jsonl, "_read_arrow", lambda *a: None)
    slow = jsonl.parse_block(block, schema, lines_before=10)
    assert fast.table.equals(slow.table)
    assert fast.table.column("zip").to_pylist() == ["98115", "7919", None]
    assert list(fast.row_hash) == list(slow.row_hash)
    assert [(r.line, r.reason) for r in fast.rejects] == [
        (14, "missing_label"),
        (15, "missing_label"),
    ]
    assert [(r.line, r.reason) for r in slow.rejects] == [
        (14, "missing_label"),
        (15, "missing_label"),
    ]
    assert fast.rows_read == slow.rows_read == 5 and fast.blank_lines == 1 and fast.lines == 6


def test_jsonl_type_pass_is_taken_from_the_stored_plan_for_the_same_files(tmp_path, monkeypatch):
    from shardtrain.data.sources import jsonl

    path = tmp_path / "e.jsonl"
    path.write_text(
        "".join(json.dumps({"k": f"k{i}", "cleared": i % 2}) + "\n" for i in range(300))
    )
    common = {"key": "k", "task_bytes": 11_000, "min_shards": 2}
    whole = _shard([path], tmp_path / "whole", **common)
    sharding.shard(_config([path], tmp_path / "two", num_workers=2, worker_index=0, **common))
    scans = []
    real_scan = jsonl.scan_types
    monkeypatch.setattr(jsonl, "scan_types", lambda s: scans.append(s) or real_scan(s))
    sharding.shard(_config([path], tmp_path / "two", num_workers=2, worker_index=1, **common))
    assert scans == []  # worker 1 read the types from worker 0's plan
    two = sharding.finalize(str(tmp_path / "two")).to_dict()
    assert _crc_lists(two) == _crc_lists(whole)
    # Other content at the same path: the stored types do not apply, and the run says so.
    path.write_text(path.read_text() + json.dumps({"k": "new", "cleared": "yes"}) + "\n")
    with pytest.raises(DataError, match="holds a dataset sharded from other inputs"):
        sharding.shard(_config([path], tmp_path / "two", **common))
    assert len(scans) == 1


def _crc_lists(meta: dict) -> list:
    return [[s["crc32c"] for s in meta["splits"][n]["shards"]] for n in ("train", "eval")]
