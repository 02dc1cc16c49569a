"""Planning a large CSV once per run: a worker that finds the run's plan stored at the output
takes the record starts and the types by all rows from it instead of reading the file again
(``CsvSource.recall``), and gets the very same plan."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from shardtrain import storage
from shardtrain.data import sharding
from shardtrain.data.sharding import plan as plan_module
from shardtrain.data.sources import csv as csv_source
from shardtrain.data.sources.base import plan_pieces
from shardtrain.data.sources.csv import source as csv_source_hooks
from shardtrain.kubeflow import steps


def _write_csv(path, rows: int = 12_000) -> None:
    """A ~330 KB CSV whose quoted fields hold line breaks, and whose ``zip`` column turns
    from int to string only near its end (the sample alone would call it an int)."""
    lines = ["id,zip,note,label"]
    for i in range(rows):
        zip_code = "98115-4820" if i == rows - 5 else str(10000 + i % 89999)
        note = f'"line one {i}\nline two, with comma"' if i % 7 == 0 else f"plain {i}"
        lines.append(f"{i},{zip_code},{note},{i % 2}")
    path.write_text("\n".join(lines) + "\n")


def _config(source, output, **kw) -> sharding.ShardConfig:
    return sharding.ShardConfig(
        sources=(str(source),),
        output=str(output),
        label="label",
        key="id",
        task_bytes=128 * 1024,  # → the file is cut into several pieces
        infer_types="all",
        processes=1,
        **kw,
    )


@pytest.fixture
def counted(monkeypatch):
    """Counts of the full read of planning: the all-rows types (record alignment reads
    nothing at planning: each piece finds its records when it is read)."""
    calls = {"types": 0}
    types = csv_source_hooks.type_pass

    def counted_types(*args, **kw):
        calls["types"] += 1
        return types(*args, **kw)

    monkeypatch.setattr(csv_source_hooks, "type_pass", counted_types)
    return calls


def test_a_worker_with_the_stored_plan_does_not_read_the_file_and_plans_the_same(tmp_path, counted):
    src = tmp_path / "big.csv"
    _write_csv(src)
    config = _config(src, tmp_path / "ds")

    fresh = sharding.build_plan(config)
    assert counted == {"types": 1}
    pieces = [p for t in fresh.tasks for p in t.pieces]
    assert len(pieces) >= 3  # cut into pieces
    assert fresh.schema.column("zip").type == "string"  # typed by all rows, not the sample

    # The plan step publishes the plan; every worker then plans from it.
    published, complete = sharding.publish_plan(config)
    assert not complete and published.to_dict() == fresh.to_dict()
    assert counted == {"types": 2}  # nothing stored yet: planned in full
    for worker in range(3):
        recalled = sharding.build_plan(
            _config(src, tmp_path / "ds", worker_index=worker, num_workers=3)
        )
        assert json.dumps(recalled.to_dict()) == json.dumps(fresh.to_dict())
    assert counted == {"types": 2}  # the workers did not read the file

    # Each piece reads the records that begin in it: every row exactly once.
    layout = fresh.layout
    source = config.source()
    ids = [
        int(i.as_py())
        for p in pieces
        for b in source.read_piece(p, layout, 1 << 20)
        for i in b.table.column("id")
    ]
    assert sorted(ids) == list(range(12_000)) and len(ids) == len(set(ids))


def test_a_changed_source_or_dialect_is_not_recalled(tmp_path, counted):
    src = tmp_path / "big.csv"
    _write_csv(src)
    output = tmp_path / "ds"
    sharding.publish_plan(_config(src, output))
    assert counted == {"types": 1}

    # Same size, other content, other mtime: the version differs, so both passes run again.
    data = bytearray(src.read_bytes())
    at = data.index(b"plain 1")
    data[at : at + 7] = b"PLAIN 1"
    src.write_bytes(bytes(data))
    os.utime(src, ns=(1, 1))
    changed = sharding.build_plan(_config(src, output))
    assert counted == {"types": 2}
    assert (
        changed.sources[0].version
        != json.loads((output / "_plan.json").read_text())["sources"][0]["version"]
    )

    # Another quote character is another dialect: not recalled either.
    other = tmp_path / "other"
    sharding.publish_plan(_config(src, other))
    assert counted == {"types": 3}
    sharding.build_plan(_config(src, other))
    assert counted == {"types": 3}
    sharding.build_plan(_config(src, other, quote_char="'"))
    assert counted == {"types": 4}


def test_recall_is_refused_for_another_label_or_a_stored_plan_of_another_size(tmp_path, counted):
    src = tmp_path / "big.csv"
    _write_csv(src)
    output = tmp_path / "ds"
    sharding.publish_plan(_config(src, output))
    stored = storage.read_json(str(output / "_plan.json"))
    source = _config(src, output).source()

    other_size = json.loads(json.dumps(stored))
    other_size["sources"][0]["size"] += 1
    source.recall(other_size)
    _plan(source)
    assert counted == {"types": 2}

    source = csv_source.CsvSource([str(src)], label="zip", key="id", infer_types="all")
    source.recall(stored)
    _plan(source)
    assert counted == {"types": 3}

    # A damaged stored plan is ignored, not trusted: the pass runs again.
    broken = json.loads(json.dumps(stored))
    broken["options"]["csv_record_starts"] = {str(src): [["x", 1]]}
    broken["options"]["csv_all_row_types"] = {"id": "int"}  # not the file's columns
    source = _config(src, output).source()
    source.recall(broken)
    _plan(source)
    assert counted == {"types": 4}


def _plan(source) -> None:
    """What planning asks of a source: inputs, aligned pieces, the schema by all rows."""
    inputs = source.plan_inputs()
    aligned = source.align_pieces(plan_pieces(inputs.sources, 64 * 1024), inputs)
    source.final_schema(aligned.pieces, dataclasses.replace(inputs, options=aligned.options))


def test_the_plan_step_publishes_the_plan_for_its_workers(tmp_path, counted):
    src = tmp_path / "big.csv"
    _write_csv(src, rows=6000)
    common = dict(
        sources=[str(src)],
        dataset_uri=str(tmp_path / "ds"),
        label="label",
        key="id",
        splits="train=0.9,eval=0.1",
        num_shards=0,
        task_mb=0.1,
        infer_types="all",
    )
    workers = steps.plan_step(**common, num_workers=2)
    assert workers == [0, 1]
    assert counted == {"types": 1}
    stored = storage.read_json(str(tmp_path / "ds" / plan_module.PLAN_NAME))
    reports = [
        json.loads(steps.shard_step(**common, worker_index=i, num_workers=2, cpu="1"))
        for i in workers
    ]
    assert [r["status"] for r in reports] == ["worker-done", "worker-done"]
    assert counted == {"types": 1}  # the workers read the file only for rows
    assert storage.read_json(str(tmp_path / "ds" / plan_module.PLAN_NAME)) == stored
    meta = sharding.finalize(str(tmp_path / "ds"))
    assert meta.rows_accepted == 6000


def test_types_are_found_again_when_the_null_words_change(tmp_path):
    """The stored types hold for the null words they were found with: a ``--schema`` file
    whose ``null_values`` changed between two runs into the same output (``--overwrite``)
    gets types found again, not the old ones (which rejected every ``-`` as not an int)."""
    path = tmp_path / "nw.csv"
    rows = [f"{i},{'-' if i % 7 == 0 else i},{i % 2}" for i in range(2000)]
    path.write_text("a,b,label\n" + "\n".join(rows) + "\n")
    schema = tmp_path / "schema.yaml"
    out = tmp_path / "ds"

    def run(null_values: str) -> dict:
        schema.write_text(f"null_values: {null_values}\n")
        config = sharding.ShardConfig(
            sources=(str(path),),
            output=str(out),
            label="label",
            schema_file=str(schema),
            overwrite=True,
            processes=1,
            min_shards=1,
            max_bad_fraction=0.0,
        )
        return sharding.shard(config).metadata.to_dict()

    first = run('["-"]')
    assert {c["name"]: c["type"] for c in first["schema"]["columns"]}["b"] == "int"
    second = run('[""]')
    assert {c["name"]: c["type"] for c in second["schema"]["columns"]}["b"] == "string"
    assert second["rows_rejected"] == 0 and second["rows_accepted"] == 2000
