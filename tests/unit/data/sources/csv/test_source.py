"""Planning a large CSV once per run: a worker that finds the run's plan stored at the output
takes the record starts from it instead of reading the file again (``CsvSource.recall``), and
gets the very same plan. Planning never types by all rows: the tasks check the sample's types
as they read, and settling decides (``shardtrain.data.sharding.settle``)."""

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
    """Counts of a type pass by all rows, which planning no longer runs (record alignment
    reads nothing at planning either: each piece finds its records when it is read)."""
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
    assert counted == {"types": 0}
    pieces = [p for t in fresh.tasks for p in t.pieces]
    assert len(pieces) >= 3  # cut into pieces
    assert fresh.schema.column("zip").type == "int"  # the sample's guess, checked by the tasks
    assert fresh.options["csv_types_to_verify"] == {"forced": []}

    # The plan step publishes the plan; every worker then plans from it.
    published, complete = sharding.publish_plan(config)
    assert not complete and published.to_dict() == fresh.to_dict()
    assert counted == {"types": 0}  # nothing stored yet: planned in full, from the sample
    for worker in range(3):
        recalled = sharding.build_plan(
            _config(src, tmp_path / "ds", worker_index=worker, num_workers=3)
        )
        assert json.dumps(recalled.to_dict()) == json.dumps(fresh.to_dict())
    assert counted == {"types": 0}  # the workers did not read the file

    # Each piece reads the records that begin in it: every row exactly once.
    layout = fresh.layout
    source = config.source()
    ids = [
        int(i.as_py())
        for p in pieces
        for b in source.read_piece(p, layout, 1 << 20)
        for i in b.table.column("id")
    ]
    # (Row 11,995's zip is the code: a bad value for the sample's int until settling.)
    assert sorted(ids) == [i for i in range(12_000) if i != 11_995] and len(ids) == len(set(ids))


def test_a_changed_source_or_dialect_is_not_recalled(tmp_path, counted):
    """The types by all rows of a finished run are recalled by a plan of the same files read
    the same way (a re-run finds the dataset complete), never by another."""
    src = tmp_path / "big.csv"
    _write_csv(src)
    output = tmp_path / "ds"
    sharding.shard(_config(src, output))  # the zip column's code: retyped once
    stored = json.loads((output / "_plan.json").read_text())
    again = sharding.build_plan(_config(src, output))
    assert again.fingerprint == stored["fingerprint"]
    assert again.schema.column("zip").type == "string"  # recalled

    # Same size, other content, other mtime: the version differs, so nothing is recalled.
    data = bytearray(src.read_bytes())
    at = data.index(b"plain 1")
    data[at : at + 7] = b"PLAIN 1"
    src.write_bytes(bytes(data))
    os.utime(src, ns=(1, 1))
    changed = sharding.build_plan(_config(src, output))
    assert changed.sources[0].version != stored["sources"][0]["version"]
    assert changed.schema.column("zip").type == "int"  # the sample's guess again

    # Another quote character is another dialect: not recalled either.
    src.write_bytes(bytes(data).replace(b"PLAIN 1", b"plain 1"))
    other = sharding.build_plan(_config(src, output, quote_char="'"))
    assert other.schema.column("zip").type == "int"
    assert counted == {"types": 0}  # and no pass over the data, ever


def test_recall_is_refused_for_another_label_or_a_stored_plan_of_another_size(tmp_path, counted):
    src = tmp_path / "big.csv"
    _write_csv(src)
    output = tmp_path / "ds"
    sharding.shard(_config(src, output))
    stored = storage.read_json(str(output / "_plan.json"))
    source = _config(src, output).source()
    source.recall(stored)
    assert _plan(source).schema.column("zip").type == "string"  # recalled: types by all rows

    other_size = json.loads(json.dumps(stored))
    other_size["sources"][0]["size"] += 1
    source = _config(src, output).source()
    source.recall(other_size)
    assert _plan(source).schema.column("zip").type == "int"  # refused: the sample's guess

    source = csv_source.CsvSource([str(src)], label="id", key="label", infer_types="all")
    source.recall(stored)
    assert _plan(source).schema.column("zip").type == "int"

    # A damaged stored plan is ignored, not trusted.
    broken = json.loads(json.dumps(stored))
    broken["options"]["csv_all_row_types"] = {"id": "int"}  # not the file's columns
    source = _config(src, output).source()
    source.recall(broken)
    assert _plan(source).schema.column("zip").type == "int"
    assert counted == {"types": 0}


def _plan(source):
    """What planning asks of a source: inputs, pieces, the schema (by all rows when
    recalled)."""
    inputs = source.plan_inputs()
    aligned = source.align_pieces(plan_pieces(inputs.sources, 64 * 1024), inputs)
    return source.final_schema(aligned.pieces, dataclasses.replace(inputs, options=aligned.options))


def test_the_workers_plan_alike_and_settle_decides_the_types(tmp_path, counted):
    """The plan step reads no data and stores nothing; each worker plans the run itself and
    they store the same plan (the second finds the first's and keeps it)."""
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
    plan_uri = str(tmp_path / "ds" / plan_module.PLAN_NAME)
    assert not storage.exists(plan_uri)
    reports = [steps.shard_step(**common, worker_index=0, num_workers=2, cpu="1")]
    stored = storage.read_json(plan_uri)
    reports.append(steps.shard_step(**common, worker_index=1, num_workers=2, cpu="1"))
    assert [json.loads(r)["status"] for r in reports] == ["worker-done", "worker-done"]
    assert storage.read_json(plan_uri) == stored
    # The zip column's code near the end: the sample's int was wrong, both workers run again
    # (the pipeline's second fan-out) with the types by all rows, then finalize commits.
    again = steps.settle_step(**common, num_workers=2, worker_reports=reports)
    assert again == [0, 1]
    for i in again:
        steps.shard_step(**common, worker_index=i, num_workers=2, cpu="1")
    assert steps.settle_step(**common, num_workers=2, worker_reports=reports) == []
    meta = sharding.finalize(str(tmp_path / "ds"))
    assert meta.rows_accepted == 6000 and meta.schema.column("zip").type == "string"
    assert counted["types"] == 0  # typed from the workers' counts, never by a pass


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
