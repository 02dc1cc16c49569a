"""JSON-lines sources → TFRecord shards on local disk: types by all the data, values (compared
with pandas), rejects, errors, resume; the same sharder as CSV."""

from __future__ import annotations

import gzip
import json
import shutil

import numpy as np
import pandas as pd
import pytest

from helpers import read_examples, read_rejects, run_cli_here, shard, shard_config
from shardtrain.data import sharding
from shardtrain.data.sharding.plan import build_plan
from shardtrain.errors import DataError
from typed_sources import as_example_value, crc_lists


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
    meta = shard([path], out, key="id", block_bytes=20_000, compression="none")
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
    meta = shard(
        [path], out, key="id", task_bytes=100_000, block_bytes=30_000, max_bad_fraction=0.05
    )
    plan = sharding.Plan.from_dict(str(out), json.loads((out / "_plan.json").read_text()))
    assert len(plan.tasks) > 3  # line-boundary pieces inside one file
    rejects = read_rejects(out)
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
            want = as_example_value(record.get(name), column_type)
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
    plain = shard([path], tmp_path / "plain", **common)
    gz = shard([tmp_path / "z" / "*.jsonl.gz"], tmp_path / "gz", **common)
    for w in range(3):
        sharding.shard(
            shard_config(
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
    assert [r["line"] for r in read_rejects(tmp_path / "gz")] == sorted(expected_rejects)
    assert [r["line"] for r in read_rejects(tmp_path / "three")] == sorted(expected_rejects)
    split_of = {
        d: {r["id"]: r["__split__"] for r in read_examples(str(tmp_path / d))}
        for d in ("plain", "gz", "three")
    }
    assert split_of["plain"] == split_of["gz"] == split_of["three"]


def test_jsonl_byte_order_mark_and_a_last_line_without_newline(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"k": "a", "cleared": 1}\n{"k": "b", "cleared": 0}')
    meta = shard([path], tmp_path / "ds", key="k", min_shards=1)
    assert meta["rows_read"] == meta["rows_accepted"] == 2
    assert sorted(r["k"] for r in read_examples(str(tmp_path / "ds"))) == [b"a", b"b"]


def test_jsonl_a_line_longer_than_the_limit_is_one_error_naming_file_and_byte(
    tmp_path, monkeypatch
):
    from shardtrain.data.sources import jsonl
    from shardtrain.data.sources.base import Piece, SourceFile

    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(jsonl, "SCAN_BLOCK_BYTES", 256)  # blocks smaller than the long line
    short = json.dumps({"k": "a", "cleared": 1}) + "\n"
    long = json.dumps({"k": "x" * 5000, "cleared": 0}) + "\n"
    path = tmp_path / "long.jsonl"
    path.write_text(short * 3 + long + short)
    at = len(short) * 3
    message = rf"^{path}: the line starting at byte {at:,} is longer than 1,000 bytes"
    size = path.stat().st_size
    with pytest.raises(DataError, match=message):  # the type pass, in blocks of 256 bytes
        jsonl.scan_types([SourceFile(str(path), size, "v")])
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
    proc = run_cli_here("shard", str(path), "-o", str(tmp_path / "ds"), "--label", "cleared")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"error: {path}: column 'user' holds JSON ")
    schema = tmp_path / "schema.yaml"
    schema.write_text("drop: [user]\n")
    meta = shard([path], tmp_path / "ds", schema_file=str(schema), min_shards=1)
    assert meta["rows_accepted"] == 2


def test_jsonl_without_the_label_or_any_object_is_one_line(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"x": 1}\n')
    with pytest.raises(
        DataError, match=rf"^{path}: label column 'cleared' not found \(columns: x\)$"
    ):
        build_plan(shard_config([path], tmp_path / "ds"))
    path.write_text("not json\n[1]\n")
    with pytest.raises(DataError, match=rf"^{path}: no JSON object in the file"):
        build_plan(shard_config([path], tmp_path / "ds"))


def test_format_flag_reads_a_jsonl_file_with_another_name_and_resumes(tmp_path):
    path = tmp_path / "events.log"
    path.write_text("".join(json.dumps({"k": i, "cleared": i % 2}) + "\n" for i in range(50)))
    out = tmp_path / "ds"
    args = ["shard", str(path), "-o", str(out), "--label", "cleared", "--format", "jsonl"]
    first = run_cli_here(*args, check=True)
    assert "sharded" in first.stdout
    assert json.loads((out / "metadata.json").read_text())["options"]["format"] == "jsonl"
    again = run_cli_here(*args, check=True)  # complete: nothing to do
    assert "is already complete" in again.stdout
    shutil.rmtree(out)
    proc = run_cli_here("shard", str(path), "-o", str(out), "--label", "cleared")  # read as CSV
    assert proc.returncode == 1 and "label column 'cleared' not found" in proc.stderr


def _every_type_schema():
    """A column of every type, and a dropped one."""
    from shardtrain.data.schema import Column, Schema

    return Schema(
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


def test_jsonl_arrow_and_line_by_line_reads_give_the_same_batch(monkeypatch):
    from shardtrain.data.sources import jsonl

    schema = _every_type_schema()
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


def test_jsonl_the_second_worker_takes_the_stored_plan_and_no_worker_reads_all_the_data_to_plan(
    tmp_path, monkeypatch
):
    from shardtrain.data.sources import jsonl

    path = tmp_path / "e.jsonl"
    path.write_text(
        "".join(json.dumps({"k": f"k{i}", "cleared": i % 2}) + "\n" for i in range(300))
    )
    common = {"key": "k", "task_bytes": 11_000, "min_shards": 2}
    whole = shard([path], tmp_path / "whole", **common)
    scans = []
    real_scan = jsonl.scan_types
    monkeypatch.setattr(jsonl, "scan_types", lambda s: scans.append(s) or real_scan(s))
    sharding.shard(shard_config([path], tmp_path / "two", num_workers=2, worker_index=0, **common))
    sharding.shard(shard_config([path], tmp_path / "two", num_workers=2, worker_index=1, **common))
    assert scans == []  # the types are the sample's, checked by the tasks
    two = sharding.finalize(str(tmp_path / "two")).to_dict()
    assert crc_lists(two) == crc_lists(whole)
    # Other content at the same path: the stored plan does not apply, and the run says so.
    path.write_text(path.read_text() + json.dumps({"k": "new", "cleared": "yes"}) + "\n")
    with pytest.raises(DataError, match="holds a dataset sharded from other inputs"):
        sharding.shard(shard_config([path], tmp_path / "two", **common))
    assert scans == []


# --------------------------------------------------------------------------------------------
# Types by all rows without a pass at planning: the sample's guess, checked by the tasks
# --------------------------------------------------------------------------------------------


def _drifting_logs(path, *, drift: bool = True, rows: int = 24_000):
    """JSON lines of more than the sample (1 MiB); with ``drift``, columns change after it."""
    lines = []
    for i in range(rows):
        row = {"id": i, "zip": 98115, "fee": 0, "n": i, "cleared": i % 2}
        if drift and i == 20_000:  # far past the sample
            row.update(zip="K1A 0B1", fee=45.12)
        if drift and i == 21_000:
            row.update(n=18446744073709551616, extra=5)  # beyond int64; a key the sample lacks
        lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n")
    assert sum(len(line) + 1 for line in lines[:20_000]) > 1 << 20  # past the sample
    return path


def _reference_types(path) -> dict:
    """The column types the type pass over all the data gives (as planning did before)."""
    from shardtrain.data.sources import jsonl
    from shardtrain.data.sources.csv.listing import list_sources

    found = jsonl.scan_types(list_sources([str(path)]))
    return {name: t or "string" for name, t in found.types.items()}


def _types(meta: dict) -> dict:
    return {c["name"]: c["type"] for c in meta["schema"]["columns"]}


def _by_the_type_pass(monkeypatch):
    """Plan as before the tasks checked types: the type pass over all the data."""
    from shardtrain.data.sources import jsonl

    monkeypatch.setattr(jsonl, "sample_types", lambda *a: None)


def test_jsonl_a_column_that_changes_after_the_sample_is_typed_by_all_rows_after_one_rerun(
    tmp_path, monkeypatch
):
    from shardtrain.data.sources import jsonl

    path = _drifting_logs(tmp_path / "logs.jsonl")
    common = {"key": "id", "task_bytes": 500_000, "compression": "none"}
    outcome = sharding.shard(shard_config([path], tmp_path / "ds", **common))
    plan = sharding.Plan.from_dict(
        str(tmp_path / "ds"), json.loads((tmp_path / "ds" / "_plan.json").read_text())
    )
    assert outcome.tasks_run == 2 * len(plan.tasks) > 2  # every task once more, once
    assert jsonl.VERIFY_TYPES_OPTION not in plan.options
    meta = outcome.metadata.to_dict()
    assert _types(meta) == _reference_types(path)
    assert _types(meta) == {
        "id": "int",
        "zip": "string",
        "fee": "float",
        "n": "string",
        "cleared": "int",
        "extra": "int",
    }
    assert list(_types(meta)) == list(_reference_types(path))  # the same column order
    assert meta["rows_read"] == meta["rows_accepted"] == 24_000
    rows = {r["id"]: r for r in read_examples(str(tmp_path / "ds"))}
    assert rows[20_000]["zip"] == b"K1A 0B1" and rows[0]["zip"] == b"98115"
    assert rows[21_000]["n"] == b"18446744073709551616" and rows[21_000]["extra"] == 5
    # The same dataset as planning with the type pass over all the data.
    with monkeypatch.context() as m:
        _by_the_type_pass(m)
        before = shard([path], tmp_path / "before", **common)
    assert _types(before) == _types(meta)
    assert crc_lists(before) == crc_lists(meta)
    # Settled: a second run finds the dataset complete, with no type pass.
    monkeypatch.setattr(jsonl, "scan_types", lambda s: pytest.fail("a type pass ran"))
    again = sharding.shard(shard_config([path], tmp_path / "ds", **common))
    assert again.status == "already-complete"


def test_jsonl_planning_reads_the_listing_and_the_sample_only(tmp_path, monkeypatch):
    import contextlib

    from shardtrain.data.sources import jsonl

    path = _drifting_logs(tmp_path / "logs.jsonl")
    read = []
    real_open = jsonl.open_source

    class Counted:
        def __init__(self, f):
            self.f = f

        def read(self, *a):
            data = self.f.read(*a)
            read.append(len(data))
            return data

        def readline(self, *a):
            data = self.f.readline(*a)
            read.append(len(data))
            return data

        def seek(self, *a):
            return self.f.seek(*a)

    @contextlib.contextmanager
    def counted(*a, **kw):
        with real_open(*a, **kw) as f:
            yield Counted(f)

    monkeypatch.setattr(jsonl, "open_source", counted)
    monkeypatch.setattr(jsonl, "scan_types", lambda s: pytest.fail("a type pass ran"))
    plan = build_plan(shard_config([path], tmp_path / "ds", key="id", task_bytes=500_000))
    assert 0 < sum(read) <= (1 << 20) + 3 < path.stat().st_size  # a block, and a BOM's bytes
    assert plan.options[jsonl.VERIFY_TYPES_OPTION] == {"forced": {}}
    assert sharding.plan.needs_settling(plan)
    # The sample's types, a guess: zip and fee changed after it.
    assert {c.name: c.type for c in plan.schema.columns} == {
        "id": "int",
        "zip": "int",
        "fee": "int",
        "n": "int",
        "cleared": "int",
    }
    assert plan.estimated_rows == pytest.approx(24_000, rel=0.05)


def test_jsonl_workers_on_several_machines_settle_in_finalize_or_with_settle(tmp_path):
    from shardtrain.data.sources import jsonl

    steady = _drifting_logs(tmp_path / "steady.jsonl", drift=False)
    drifting = _drifting_logs(tmp_path / "drifting.jsonl")
    common = {"key": "id", "task_bytes": 400_000}
    for path in (steady, drifting):
        out = tmp_path / f"three-{path.stem}"
        for w in range(3):
            sharding.shard(shard_config([path], out, num_workers=3, worker_index=w, **common))
        if path == drifting:  # a wrong guess: the tasks must run again, which finalize cannot
            with pytest.raises(DataError, match=r"zip int -> string.*shardtrain settle"):
                sharding.finalize(str(out))
            config = shard_config([path], out, num_workers=3, **common)
            plan = json.loads((out / "_plan.json").read_text())
            assert sorted(r.task for r in sharding.settle_and_redo(config)[0]) == list(
                range(len(plan["tasks"]))
            )
        three = sharding.finalize(str(out)).to_dict()
        one = shard([path], tmp_path / f"one-{path.stem}", **common)
        assert _types(three) == _types(one) == _reference_types(path)
        assert crc_lists(three) == crc_lists(one)
        stored = json.loads((out / "_plan.json").read_text())
        if path == steady:  # the guess held: recorded, the shards stand
            assert jsonl.VERIFY_TYPES_OPTION in stored["options"]
            assert stored["settled"] == {jsonl.ALL_ROW_TYPES_OPTION: _types(one)}
            assert three["options"][jsonl.ALL_ROW_TYPES_OPTION] == _types(one)
        again = sharding.shard(shard_config([path], out, **common))
        assert again.status == "already-complete"


def test_jsonl_a_stored_plan_of_the_type_pass_is_recalled_as_before(tmp_path, monkeypatch):
    from shardtrain.data.sources import jsonl

    path = _drifting_logs(tmp_path / "logs.jsonl")
    common = {"key": "id", "task_bytes": 500_000}
    with monkeypatch.context() as m:
        _by_the_type_pass(m)
        first = shard([path], tmp_path / "ds", **common)
    stored = json.loads((tmp_path / "ds" / "_plan.json").read_text())
    assert stored["options"]["jsonl_types"]["bytes"] == path.stat().st_size
    assert jsonl.VERIFY_TYPES_OPTION not in stored["options"]
    assert _types(first) == _reference_types(path)
    monkeypatch.setattr(jsonl, "scan_types", lambda s: pytest.fail("a type pass ran"))
    again = sharding.shard(shard_config([path], tmp_path / "ds", **common))
    assert again.status == "already-complete"


def test_jsonl_objects_after_the_sample_are_one_error_naming_file_and_column(tmp_path):
    path = _drifting_logs(tmp_path / "logs.jsonl", drift=False)
    lines = path.read_text().splitlines()
    lines[20_000] = json.dumps({"id": 20_000, "zip": {"code": 98115}, "cleared": 1})
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=rf"^{path}: column 'zip' holds JSON dict values"):
        shard([path], tmp_path / "ds", key="id")
    # A key the sample does not have: found when the run settles.
    lines[20_000] = json.dumps({"id": 20_000, "zip": 1, "cleared": 1, "tags": ["a"]})
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=rf"^{path}: column 'tags' holds JSON "):
        shard([path], tmp_path / "ds2", key="id")


def test_jsonl_the_counts_of_arrow_and_line_by_line_reads_decide_the_same_types(monkeypatch):
    from shardtrain.data.sources import jsonl, jsonl_types

    schema = _every_type_schema()
    blocks = {
        "steady": [
            {"n": 1, "x": 2, "b": True, "s": "a", "gone": [1], "cleared": 1},
            {"n": None, "x": 0.5, "s": "b", "gone": [2, 3], "cleared": 0},
        ],
        "mixed": [{"s": 7, "gone": {"a": 1}, "cleared": 1}, {"s": "b", "cleared": 0}],
        "huge": [{"n": 1, "x": 18446744073709551616, "cleared": 1}, {"x": 0.5, "cleared": 0}],
        "new key": [{"n": 1, "x": 1.5, "cleared": 1, "more": None}],
        "changed": [{"n": 1.5, "x": "a", "b": 1, "s": False, "cleared": 1}],
    }

    def decided(counts):
        total = counts[:-1]
        return {
            c.name: jsonl_types.column_type(
                {jsonl_types.KINDS[k] for k in row.nonzero()[0]} - {jsonl_types.NESTED}
            )
            for c, row in zip(schema.columns, total, strict=True)
        }, int(counts[-1, 0])

    found = {}
    for name, rows in blocks.items():
        block = ("\n".join(json.dumps(r) for r in rows) + "\n").encode()
        fast = jsonl.parse_block(block, schema, lines_before=0, count_types=True)
        with monkeypatch.context() as m:
            m.setattr(jsonl, "_read_arrow", lambda *a: None)
            slow = jsonl.parse_block(block, schema, lines_before=0, count_types=True)
        assert decided(fast.type_counts) == decided(slow.type_counts), name
        if name == "steady":
            assert jsonl._read_arrow(block, schema, 2, jsonl.new_counts(schema)) is not None
        assert fast.table.equals(slow.table)
        found[name] = decided(slow.type_counts)
    assert found["steady"][0] == {
        "zip": None,
        "n": "int",
        "x": "float",
        "b": "bool",
        "s": "string",
        "gone": None,  # objects and arrays only: nested, no type
        "cleared": "int",
    }
    assert found["huge"][0]["x"] == "string" and found["new key"][1] == 1
    assert found["mixed"][0]["s"] == "string"
    assert found["changed"][0] == {
        "zip": None,
        "n": "float",
        "x": "string",
        "b": "int",
        "s": "bool",
        "gone": None,
        "cleared": "int",
    }


def test_jsonl_a_gzip_file_whose_columns_change_settles_into_the_same_rows_and_types(tmp_path):
    path = _drifting_logs(tmp_path / "logs.jsonl")
    zipped = tmp_path / "z" / "logs.jsonl.gz"
    zipped.parent.mkdir()
    zipped.write_bytes(gzip.compress(path.read_bytes()))
    outcome = sharding.shard(shard_config([zipped], tmp_path / "gz", key="id"))
    assert outcome.tasks_run == 2  # one piece: its task, and once more with the types found
    meta = outcome.metadata.to_dict()
    plain = shard([path], tmp_path / "plain", key="id")
    assert _types(meta) == _types(plain) == _reference_types(path)
    split_of = {
        d: {r["id"]: r["__split__"] for r in read_examples(str(tmp_path / d))}
        for d in ("plain", "gz")
    }
    assert split_of["plain"] == split_of["gz"] and len(split_of["gz"]) == 24_000
