"""Finalize: the committed tasks of a run merged into ``metadata.json``, the dataset's commit
(:mod:`shardtrain.data.sharding.finalize`)."""

from __future__ import annotations

import shutil

import pytest

from helpers import late_code_csv, run_cli, run_cli_here
from shardtrain.data import datagen, sharding
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.errors import DataError


def _quest(tmp_path, rows: int, **kw):
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), rows, seed=8, **kw)
    return csv_path


def test_multi_worker_cli_and_finalize(tmp_path):
    csv_path = _quest(tmp_path, 6_000)
    out = tmp_path / "ds"
    for w in range(2):
        proc = run_cli_here(
            "shard",
            str(csv_path),
            "-o",
            str(out),
            "--label",
            "cleared",
            "--num-workers",
            "2",
            "--worker-index",
            str(w),
            "--task-mb",
            "0.25",
            check=True,
        )
        assert "run `shardtrain finalize" in proc.stdout
    early = run_cli("inspect", str(out))  # the console script (a process)
    assert early.returncode == 1 and "not committed" in early.stderr
    run_cli_here("finalize", str(out), check=True)
    shown = run_cli_here("inspect", str(out), check=True).stdout
    assert "train" in shown and "player_level" in shown and "6,000" in shown


def test_finalize_reports_missing_workers(tmp_path):
    csv_path = _quest(tmp_path, 4_000)
    out = tmp_path / "ds"
    sharding.shard(
        sharding.ShardConfig(
            sources=(str(csv_path),),
            output=str(out),
            label="cleared",
            processes=1,
            num_workers=2,
            worker_index=0,
            task_bytes=100_000,
        )
    )
    with pytest.raises(DataError, match=r"task\(s\) have not finished"):
        sharding.finalize(str(out))
    shutil.rmtree(out)


def test_finalize_can_be_stricter_than_the_workers_and_needs_a_plan(tmp_path):
    csv_path = _quest(tmp_path, 3_000, bad_fraction=0.01)
    out = tmp_path / "ds"
    config = sharding.ShardConfig(
        sources=(str(csv_path),),
        output=str(out),
        label="cleared",
        processes=1,
        max_bad_fraction=0.05,
    )
    committed = sharding.shard(config).metadata
    assert committed.rows_rejected > 0
    with pytest.raises(DataError, match=r"were rejected .*more than --max-bad-fraction 0;"):
        sharding.finalize(str(out), max_bad_fraction=0.0)
    again = sharding.finalize(str(out), top_k=1)  # the workers' limit: commits again
    assert (again.rows_read, again.rows_accepted) == (committed.rows_read, committed.rows_accepted)
    tops = [len(s["top"]) for s in again.stats.columns.values() if "top" in s]
    assert tops and max(tops) == 1
    with pytest.raises(DataError, match=r"no sharding run found \(_plan\.json is missing\)"):
        sharding.finalize(str(tmp_path / "nothing"))


def _config(sources, output, **kw) -> sharding.ShardConfig:
    kw.setdefault("label", "cleared")
    kw.setdefault("processes", 1)
    return sharding.ShardConfig(sources=tuple(map(str, sources)), output=str(output), **kw)


def test_too_many_rejects_fail_the_run_without_committing(tmp_path):
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 5_000, seed=2, bad_fraction=0.02)
    out = tmp_path / "ds"
    with pytest.raises(DataError, match=r"rejected .*more than --max-bad-fraction 0.001"):
        sharding.shard(_config([csv_path], out))
    assert not (out / "metadata.json").exists()
    # A file of nothing but malformed rows fails too, through the CLI with one line.
    junk = tmp_path / "junk.csv"
    good = csv_path.read_text().splitlines()[0]
    junk.write_text(good + "\n" + "\n".join("a,b" for _ in range(3000)) + "\n")
    proc = run_cli_here(
        "shard", str(junk), "--output", str(tmp_path / "junk"), "--label", "cleared"
    )
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and proc.stderr.splitlines()[-1] == errors[0]
    assert "wrong_field_count" in errors[0] and "Traceback" not in proc.stderr
    # With the threshold raised every row is accounted for as rejected... and none accepted.
    proc = run_cli_here(
        "shard",
        str(junk),
        "--output",
        str(tmp_path / "junk2"),
        "--label",
        "cleared",
        "--max-bad-fraction",
        "1",
    )
    assert proc.returncode == 1 and "no row was accepted" in proc.stderr
    rejects = (tmp_path / "junk2" / "rejects" / "rejects.jsonl").read_text().splitlines()
    assert len(rejects) == 3000


def test_workers_whose_guessed_types_fail_are_settled_by_the_settle_command(tmp_path):
    csv_path = late_code_csv(tmp_path / "zips.csv")
    assert csv_path.stat().st_size > 5 * 1024 * 1024
    out = tmp_path / "ds"
    args = (str(csv_path), "-o", str(out), "--label", "label", "--task-mb", "1")
    for w in range(2):
        run_cli_here("shard", *args, "--num-workers", "2", "--worker-index", str(w), check=True)
    refused = run_cli_here("finalize", str(out))
    assert refused.returncode == 1
    assert "zip int -> string" in refused.stderr
    assert "run `shardtrain settle` with the run's arguments" in refused.stderr
    settled = run_cli_here("settle", *args, "--num-workers", "2", check=True)
    assert "task(s) ran again" in settled.stdout
    run_cli_here("finalize", str(out), check=True)
    meta = DatasetMetadata.load(str(out))
    assert meta.schema.column("zip").type == "string" and meta.rows_accepted == 400_000
    assert meta.rows_rejected == 0
