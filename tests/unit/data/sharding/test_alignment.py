"""Pieces' guessed record starts verified once every task ran (sharding.alignment), and the
tasks read from a wrong guess run again (run._settle_and_redo)."""

from __future__ import annotations

import itertools
import json
import logging

import pytest

from helpers import european_export_csv, quoted_text_csv, read_examples, read_rejects, shard
from shardtrain.data import sharding
from shardtrain.data.schema import Schema
from shardtrain.data.sharding import plan as plan_module
from shardtrain.data.sharding import pool as pool_module
from shardtrain.data.sharding.alignment import settle_alignment
from shardtrain.data.sources.base import SourceFile, plan_pieces
from shardtrain.data.sources.csv import align as csv_align
from shardtrain.data.sources.csv.align import GUESS_BYTES
from shardtrain.errors import DataError

PIECE_BYTES = 64 * 1024  # the smallest piece planning makes


def _rows(out) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in read_examples(str(out)))


def _same_dataset(one, cut) -> None:
    """The dataset at ``cut`` holds what the one-piece dataset at ``one`` holds: the rows,
    the rejects (same file lines) and the counts."""
    assert _rows(cut) == _rows(one)
    key = lambda r: (r["source"], r["line"])  # noqa: E731
    assert sorted(read_rejects(cut), key=key) == sorted(read_rejects(one), key=key)
    a, b = (json.loads((d / "metadata.json").read_text()) for d in (one, cut))
    for field in ("rows_read", "rows_accepted", "rows_rejected", "rejects_by_reason"):
        assert a[field] == b[field], field
    assert a["blank_lines"] == b["blank_lines"]
    la, lb = dict(a["stats"]["label"]), dict(b["stats"]["label"])
    na, nb = la.pop("numeric", None), lb.pop("numeric", None)  # means: merged in another order
    assert la == lb
    if na is not None:
        exact = ("count", "min", "max")
        assert {k: na[k] for k in exact} == {k: nb[k] for k in exact}
    assert a["stats"]["num_rows"] == b["stats"]["num_rows"]


def _pieces(out) -> list[dict]:
    plan = json.loads((out / "_plan.json").read_text())
    return [p for t in plan["tasks"] for p in t["pieces"]]


def test_many_small_pieces_of_quoted_multiline_csv_read_as_one(tmp_path):
    text = quoted_text_csv(12_000)
    lines = text.split("\n")
    for at in (700, 9_000, 30_000):  # rows of a wrong width, spread over the pieces
        lines.insert(at, "1,2")
    path = tmp_path / "q.csv"
    path.write_text("\n".join(lines))
    kw = dict(label="label", infer_types="sample", num_shards=16, max_bad_fraction=0.1)
    shard([path], tmp_path / "one", task_bytes=1 << 30, **kw)
    shard([path], tmp_path / "cut", task_bytes=PIECE_BYTES, **kw)
    assert len(_pieces(tmp_path / "one")) == 1 and len(_pieces(tmp_path / "cut")) > 8
    assert len(read_rejects(tmp_path / "one")) >= 2  # one may fall inside a quoted field
    _same_dataset(tmp_path / "one", tmp_path / "cut")
    assert "record_starts" not in json.loads((tmp_path / "cut" / "_plan.json").read_text())


def _long_field_csv() -> bytes:
    """Rows, then a quoted field whose lines look like rows (right width, no quote) and that
    runs on for more than :data:`GUESS_BYTES` after the start of the third piece (planning
    cuts this file into 9 pieces of ~63 KB), then rows."""
    head = b"id,text,label\n" + b"".join(b"%d,row %d,%d\n" % (i, i, i % 2) for i in range(7000))
    inner = b"".join(b"%d,inner,1\n" % i for i in range(GUESS_BYTES // 8))
    tail = b"".join(b"%d,after %d,%d\n" % (i, i, i % 2) for i in range(100_000, 116_000))
    return head + b'9999999,"start\n' + inner + b'end",0\n' + tail


def test_a_wrong_guess_is_found_and_its_task_read_again(tmp_path, monkeypatch, caplog):
    path = tmp_path / "long.csv"
    data = _long_field_csv()
    path.write_bytes(data)
    kw = dict(label="label", infer_types="sample", num_shards=16, max_bad_fraction=0.1)
    shard([path], tmp_path / "one", task_bytes=1 << 30, **kw)

    runs: list[int] = []
    run_task = pool_module.run_task

    def counted(plan, task, *args, **kwargs):
        runs.append(task.index)
        return run_task(plan, task, *args, **kwargs)

    monkeypatch.setattr(pool_module, "run_task", counted)
    caplog.set_level(logging.WARNING, logger="shardtrain.data.sharding")
    out = tmp_path / "cut"
    shard([path], out, task_bytes=PIECE_BYTES, **kw)
    pieces = _pieces(out)
    assert len(pieces) > 4
    # The third piece starts inside the field, more than GUESS_BYTES before its end.
    bad = pieces[2]["start"]
    assert data.index(b"start") < bad < data.index(b'end"') - GUESS_BYTES
    true_start = data.index(b"100000,after")
    stored = json.loads((out / "_plan.json").read_text())
    assert stored["record_starts"] == {str(path): {str(bad): true_start}}
    n_tasks = len(stored["tasks"])
    assert runs == [*range(n_tasks), 2]  # every task once, then the one misread
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"{out}: 1 piece start(s) were guessed wrong ({path}, byte {bad:,}): read again"
    ]
    _same_dataset(tmp_path / "one", out)
    # The manifest of the task read again says where it began now.
    manifest = json.loads((out / "_tasks" / "task-00002.json").read_text())
    assert manifest["pieces"][0]["first"] == true_start

    # A re-run of the finished dataset does nothing; a re-plan keeps the start found.
    runs.clear()
    config = sharding.ShardConfig(
        sources=(str(path),), output=str(out), task_bytes=PIECE_BYTES, processes=1, **kw
    )
    assert sharding.shard(config).status == "already-complete" and runs == []
    assert plan_module.build_plan(config).record_starts == {str(path): {bad: true_start}}


def test_settle_alignment_checks_each_file_up_to_its_first_break(tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes(b"x" * 400)
    config = sharding.ShardConfig(sources=(str(path),), output=str(tmp_path / "ds"), label="x")
    pieces = [p.to_dict() for p in plan_pieces([SourceFile(str(path), 400, "v")], 100)]
    plan = plan_module.Plan(
        output=config.output,
        sources=(),
        schema=Schema.from_dict({"columns": [{"name": "x", "type": "int"}], "label": "x"}),
        splits=(("train", 1.0),),
        num_shards=(4,),
        tasks=tuple(
            plan_module.Task.from_dict({"index": i, "pieces": [p], "shard_ranges": [[i, i + 1]]})
            for i, p in enumerate(pieces)
        ),
        compression="none",
        options={},
        estimated_rows=0,
    )
    (tmp_path / "ds" / "_tasks").mkdir(parents=True)

    def manifests(extents):
        out = []
        for i, (first, stop) in enumerate(extents):
            (tmp_path / "ds" / "_tasks" / f"task-{i:05d}.json").write_text("{}")
            out.append({"task": i, "pieces": [{**pieces[i], "first": first, "stop": stop}]})
        return out

    assert settle_alignment(plan, manifests([(0, 110), (110, 205), (205, 300), (300, 400)])) == []
    assert not (tmp_path / "ds" / "_plan.json").exists()  # nothing written
    # Two breaks: the first is fixed, the second waits for the re-run.
    assert settle_alignment(plan, manifests([(0, 110), (101, 205), (207, 300), (300, 400)])) == [1]
    stored = json.loads((tmp_path / "ds" / "_plan.json").read_text())
    assert stored["record_starts"] == {str(path): {"100": 110}}
    assert not (tmp_path / "ds" / "_tasks" / "task-00001.json").exists()
    assert (tmp_path / "ds" / "_tasks" / "task-00002.json").exists()
    # The fingerprint does not cover the record starts.
    settled = plan_module.Plan.from_dict(plan.output, stored)
    assert settled.record_starts == {str(path): {100: 110}}
    assert settled.fingerprinted().fingerprint == plan.fingerprinted().fingerprint


def test_planning_reads_no_data_to_cut_the_files(tmp_path, monkeypatch):
    """Only the sample is read: no reader of pieces runs while planning (``--infer-types
    sample``), and the pieces are where planning cut them."""
    path = tmp_path / "q.csv"
    path.write_text(quoted_text_csv(12_000))

    def refuse(*args, **kwargs):
        raise AssertionError("planning read the data")

    for name in ("guess_record_start", "scan_record_start", "iter_record_blocks"):
        monkeypatch.setattr(csv_align, name, refuse)
    config = sharding.ShardConfig(
        sources=(str(path),),
        output=str(tmp_path / "ds"),
        label="label",
        infer_types="sample",
        task_bytes=PIECE_BYTES,
        num_shards=16,
    )
    plan = plan_module.build_plan(config)
    pieces = [p for t in plan.tasks for p in t.pieces]
    assert len(pieces) > 8
    data = path.read_bytes()
    assert pieces[0].start == 0 and pieces[-1].end == len(data)
    assert all(a.end == b.start for a, b in itertools.pairwise(pieces))
    assert any(data[p.start - 1] != ord("\n") for p in pieces[1:])  # not moved to lines


def test_a_complete_dataset_of_the_planner_that_aligned_is_kept(tmp_path, caplog):
    """A dataset written when planning moved the pieces to record starts (its plan holds
    them as ``csv_record_starts``) is the same dataset: complete, it is kept."""
    path = tmp_path / "q.csv"
    path.write_text(quoted_text_csv(12_000))
    out = tmp_path / "ds"
    kw = dict(label="label", infer_types="sample", num_shards=16, task_bytes=PIECE_BYTES)
    shard([path], out, **kw)
    stored = json.loads((out / "_plan.json").read_text())
    stored["options"]["csv_record_starts"] = {str(path): [[65536, 65601]]}
    stored["tasks"][1]["pieces"][0]["start"] = 65601
    stored["fingerprint"] = "0" * 32
    (out / "_plan.json").write_text(json.dumps(stored))
    caplog.set_level(logging.INFO, logger="shardtrain.data.sharding.run")
    config = sharding.ShardConfig(sources=(str(path),), output=str(out), processes=1, **kw)
    assert sharding.shard(config).status == "already-complete"
    assert any("earlier version's planner" in m for m in caplog.messages)
    # Other options are another dataset still.
    other = sharding.ShardConfig(
        sources=(str(path),), output=str(out), processes=1, **{**kw, "num_shards": 8}
    )
    with pytest.raises(DataError, match="other inputs or options"):
        sharding.shard(other)


@pytest.mark.parametrize("encoding", ["cp932", "cp1252"])
def test_transcoded_files_cut_into_pieces_read_as_one(tmp_path, encoding):
    """A file in another encoding finds each piece's records in its source bytes, then
    transcodes them: the same dataset as one piece."""
    path = tmp_path / f"{encoding}.csv"
    if encoding == "cp1252":
        european_export_csv(path, 6000, encoding=encoding)
        kw = dict(label="label", delimiter=";", decimal=",", encoding=encoding)
    else:
        text = quoted_text_csv(12_000).replace("é✓", "ソ表 東京、「引用」")
        path.write_bytes(text.encode(encoding))
        kw = dict(label="label", encoding=encoding)
    assert path.stat().st_size > 4 * PIECE_BYTES
    kw.update(infer_types="sample", num_shards=16, max_bad_fraction=0.1)
    shard([path], tmp_path / "one", task_bytes=1 << 30, **kw)
    shard([path], tmp_path / "cut", task_bytes=PIECE_BYTES, **kw)
    assert len(_pieces(tmp_path / "cut")) > 4
    _same_dataset(tmp_path / "one", tmp_path / "cut")


def test_with_several_workers_finalize_resets_a_misread_task(tmp_path):
    """Workers run apart, so finalize checks the pieces: it resets the task read from a
    wrong guess and says to run its worker again; then the dataset is right."""
    path = tmp_path / "long.csv"
    path.write_bytes(_long_field_csv())
    kw = dict(label="label", infer_types="sample", num_shards=16, max_bad_fraction=0.1)
    shard([path], tmp_path / "one", task_bytes=1 << 30, **kw)
    out = tmp_path / "cut"

    def workers() -> None:
        for worker in range(3):
            config = sharding.ShardConfig(
                sources=(str(path),),
                output=str(out),
                task_bytes=PIECE_BYTES,
                processes=1,
                worker_index=worker,
                num_workers=3,
                **kw,
            )
            assert sharding.shard(config).status == "worker-done"

    workers()
    with pytest.raises(
        DataError, match=r"1 task\(s\) began .* \(tasks 2\).* or those workers again"
    ):
        sharding.finalize(str(out))
    assert not (out / "_tasks" / "task-00002.json").exists()
    # The summary of the worker that read it went first; the others' stay in use.
    summaries = sorted(p.name for p in (out / "_tasks").glob("summary-*"))
    assert summaries == ["summary-00000-of-00003.json", "summary-00001-of-00003.json"]
    workers()
    sharding.finalize(str(out))
    _same_dataset(tmp_path / "one", out)
