"""A sharding run end to end on local disk: clear errors for bad sources, gzip sources and
globs, re-runs (nothing to do, other inputs refused, a killed run's temporaries removed),
--overwrite, and a truncated or corrupt gzip source."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest

from helpers import ALL_TYPES, run_cli, run_cli_here
from shardtrain import storage
from shardtrain.data import datagen, sharding
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.errors import ConfigError, DataError, StorageError


def _config(sources, output, **kw) -> sharding.ShardConfig:
    kw.setdefault("label", "cleared")
    kw.setdefault("processes", 1)
    return sharding.ShardConfig(sources=tuple(map(str, sources)), output=str(output), **kw)


def test_clear_errors_for_bad_sources(tmp_path):
    # The first through the console script (a process), the others in this process.
    missing = run_cli(
        "shard", str(tmp_path / "nope.csv"), "-o", str(tmp_path / "o"), "--label", "cleared"
    )
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"error: {tmp_path / 'nope.csv'}: no such file or object"
    no_label = run_cli_here("shard", str(ALL_TYPES), "-o", str(tmp_path / "o"), "--label", "won")
    assert no_label.returncode == 1 and no_label.stderr.count("\n") == 1
    assert "label column 'won' not found" in no_label.stderr and str(ALL_TYPES) in no_label.stderr
    binary = tmp_path / "binary.csv"
    binary.write_bytes(os.urandom(4096).replace(b"\n", b"x") + b"\x00")
    proc = run_cli_here("shard", str(binary), "-o", str(tmp_path / "o"), "--label", "x")
    assert proc.returncode == 1 and "not a text CSV file" in proc.stderr
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    proc = run_cli_here("shard", str(empty), "-o", str(tmp_path / "o"), "--label", "x")
    assert proc.returncode == 1 and "the file is empty" in proc.stderr
    header_only = tmp_path / "header.csv"
    header_only.write_text("a,b,cleared\n")
    proc = run_cli_here("shard", str(header_only), "-o", str(tmp_path / "o"), "--label", "cleared")
    assert proc.returncode == 1 and "no data rows" in proc.stderr
    proc = run_cli_here(
        "shard", str(tmp_path / "*.nothing"), "-o", str(tmp_path / "o"), "--label", "cleared"
    )
    assert proc.returncode == 1 and "no file matches" in proc.stderr
    with pytest.raises(ConfigError, match="sum to 1"):
        sharding.parse_splits("train=0.8,eval=0.1")
    with pytest.raises(StorageError):
        DatasetMetadata.load(str(tmp_path / "o"))


def test_gzip_sources_and_globs(tmp_path):
    for i in range(3):
        datagen.generate_quest_logs(str(tmp_path / f"part{i}.csv.gz"), 2_000, seed=i)
    out = tmp_path / "ds"
    meta = sharding.shard(
        _config([f"{tmp_path}/part*.csv.gz"], out, key="attempt_id")
    ).metadata.to_dict()
    assert meta["rows_accepted"] == 6_000
    assert [storage.basename(s["uri"]) for s in meta["sources"]] == [
        "part0.csv.gz",
        "part1.csv.gz",
        "part2.csv.gz",
    ]
    with gzip.open(tmp_path / "part1.csv.gz", "rt") as f:
        assert sum(1 for _ in f) == 2_001


def test_rerun_after_success_does_nothing_and_other_inputs_are_refused(tmp_path):
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 3_000, seed=1)
    out = tmp_path / "ds"
    args = ("shard", str(csv_path), "-o", str(out), "--label", "cleared")
    run_cli_here(*args, check=True)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    again = run_cli_here(*args, check=True)
    assert "already complete" in again.stdout
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before
    other = run_cli_here(*args, "--split", "train=0.5,eval=0.5")
    assert other.returncode == 1 and "--overwrite" in other.stderr
    replaced = run_cli_here(*args, "--split", "train=0.5,eval=0.5", "--overwrite", check=True)
    assert replaced.returncode == 0
    assert DatasetMetadata.load(str(out)).to_dict()["splits"]["train"]["fraction"] == 0.5


@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
def test_rerun_removes_the_temporary_files_a_killed_run_left(tmp_path, monkeypatch, relative):
    """Also with a relative --output, which a listing spells as absolute paths: the run's own
    lease is not taken for another run's (that left every temporary in place)."""
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 3_000, seed=3, bad_fraction=0.01)
    out = tmp_path / "ds"
    if relative:
        monkeypatch.chdir(tmp_path)
        out = Path("ds")
    config = _config([csv_path], out, task_bytes=100_000, max_bad_fraction=0.05)
    sharding.shard(config)
    # What kill -9 leaves: a task killed while writing, a finalize killed while merging.
    (out / "_tasks" / "task-00000.json").unlink()
    (out / "metadata.json").unlink()
    owned = [
        "_tasks/task-00000.rejects.jsonl",
        "_tasks/task-00000.json",
        f"train/{min(os.listdir(out / 'train'))}",
        "rejects/rejects.jsonl",
        "metadata.json",
        "_plan.json",
    ]
    for name in owned:
        (out / f"{name}.tmp-0123456789ab").write_text("partial")
    (out / "notes.txt.tmp-0123456789ab").write_text("not ours")
    sharding.shard(config)
    assert sorted(p.name for p in out.rglob("*.tmp-*")) == ["notes.txt.tmp-0123456789ab"]


def test_overwrite_replaces_only_a_dataset_and_refuses_foreign_files(tmp_path):
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 2_000, seed=2)
    out, other = tmp_path / "ds", tmp_path / "other"
    sharding.shard(_config([csv_path], out))
    for directory in (out, other):
        (directory / "sub").mkdir(parents=True)
        (directory / "important.txt").write_text("keep")
        (directory / "sub" / "y.dat").write_text("keep")
    halves = (("train", 0.5), ("eval", 0.5))
    for target in (out, other):  # a dataset with foreign files, a directory of them only
        with pytest.raises(DataError, match=r"\(important\.txt, sub/y\.dat\).*--overwrite-fore"):
            sharding.shard(_config([csv_path], target, splits=halves, overwrite=True))
        assert (target / "important.txt").exists() and (target / "sub" / "y.dat").exists()
    assert DatasetMetadata.load(str(out)).to_dict()["splits"]["train"]["fraction"] == 0.9
    sharding.shard(
        _config([csv_path], other, splits=halves, overwrite=True, overwrite_foreign=True)
    )
    assert not (other / "important.txt").exists() and not (other / "sub").exists()
    (out / "important.txt").unlink()
    shutil.rmtree(out / "sub")
    sharding.shard(_config([csv_path], out, splits=halves, overwrite=True))  # a dataset only
    assert DatasetMetadata.load(str(out)).to_dict()["splits"]["train"]["fraction"] == 0.5


def test_truncated_or_corrupt_gzip_source_is_one_line_naming_the_file(tmp_path):
    good = tmp_path / "good.csv.gz"
    datagen.generate_quest_logs(str(good), 60_000, seed=3)  # > the 4 MiB schema sample
    data = good.read_bytes()
    src = tmp_path / "quest.csv.gz"
    src.write_bytes(data[: len(data) * 3 // 4])  # truncated after the sample
    args = ("shard", str(src), "-o", str(tmp_path / "ds"), "--label", "cleared")
    proc = run_cli_here(*args, "--processes", "1")
    last = proc.stderr.splitlines()[-1]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert last.startswith(f"error: {src}: truncated gzip file:") and "Aborted" not in last
    assert f"({len(data) * 3 // 4:,} compressed bytes read)" in last
    # Replaced by a good copy (a new version, so a new plan): the re-run completes.
    shutil.copy(good, src)
    run_cli_here(*args, "--overwrite", check=True)
    assert DatasetMetadata.load(str(tmp_path / "ds")).rows_accepted == 60_000
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    src.write_bytes(bytes(flipped))
    with pytest.raises(DataError, match=rf"^{src}: corrupt gzip file: .* compressed bytes read"):
        sharding.shard(_config([src], tmp_path / "ds2", max_bad_fraction=1.0))


def test_a_plan_another_worker_is_writing_is_waited_for_not_taken_for_foreign_files(tmp_path):
    """Two workers of one job start on an empty output: the first's ``_plan.json`` is still its
    temporary file (a local write is renamed into place) when the second looks. That is a
    dataset in progress, not a foreign folder: the second waits for the plan and goes on (it
    failed with "not empty and not a shardtrain dataset in progress": seen in a suite run)."""
    import threading

    csv = tmp_path / "q.csv"
    datagen.generate_quest_logs(str(csv), 200, seed=3)
    out = tmp_path / "out"
    out.mkdir()
    config = _config([csv], out, key="attempt_id", num_workers=2, worker_index=1)
    plan = sharding.build_plan(config)
    in_flight = out / f"{sharding.PLAN_NAME}.tmp-0123456789ab"
    in_flight.write_text('{"fingerp')

    def first_worker_finishes_its_write() -> None:
        storage.write_json(str(out / sharding.PLAN_NAME), plan.to_dict())
        in_flight.unlink()

    later = threading.Timer(0.5, first_worker_finishes_its_write)
    later.start()
    try:
        published, complete = sharding.publish_plan(config)
    finally:
        later.join()
    assert not complete and published.fingerprint == plan.fingerprint
