"""Faults of a sharding run on purpose, with real processes: two runs on one output at once,
a full disk, a damaged dataset. Each ends in the right result or one clear line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import run_cli
from shardtrain.data import datagen

pytestmark = pytest.mark.slow

ROWS = 500_000


@pytest.fixture(scope="module")
def quest_csv(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("faults") / "q.csv"
    datagen.generate_quest_logs(str(path), ROWS, seed=5, bad_fraction=0.0005)
    return path


def _shard_args(csv: Path, out: Path | str, *extra: str) -> list[str]:
    common = ["--label", "cleared", "--key", "attempt_id", "--task-mb", "1"]
    return ["shard", str(csv), "--output", str(out), *common, *extra]


def _start(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "shardtrain.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _wait_for_temporaries(out: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Until the run ``proc`` is writing shards (a temporary file of its exists)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(".tmp-" in p.name for p in out.rglob("*")):
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    raise AssertionError("the first run never wrote a shard")


def _last_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _assert_every_row_once(out: Path) -> None:
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["rows_read"] == ROWS
    assert meta["rows_accepted"] + meta["rows_rejected"] == ROWS
    assert sum(s["num_records"] for s in meta["splits"].values()) == meta["rows_accepted"]
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]


def test_a_second_run_on_a_live_output_waits_and_never_deletes_its_temporaries(quest_csv, tmp_path):
    out = tmp_path / "out"
    first = _start(_shard_args(quest_csv, out, "--processes", "1"))
    _wait_for_temporaries(out, first)
    second = _start(_shard_args(quest_csv, out), {"SHARDTRAIN_LEASE_WAIT": "600"})
    _, err1 = first.communicate(timeout=600)
    out2, err2 = second.communicate(timeout=600)
    assert first.returncode == 0, err1
    assert second.returncode == 0, err2
    assert f"pid {first.pid}" in err2  # it waited for the first run, naming it
    assert "already complete" in out2
    _assert_every_row_once(out)
    assert not (out / "_leases").exists()


def test_a_second_run_refuses_in_one_line_when_the_wait_runs_out(quest_csv, tmp_path):
    out = tmp_path / "out"
    first = _start(_shard_args(quest_csv, out, "--processes", "1"))
    _wait_for_temporaries(out, first)
    second = run_cli(*_shard_args(quest_csv, out), env={"SHARDTRAIN_LEASE_WAIT": "0"})
    _, err1 = first.communicate(timeout=600)
    assert first.returncode == 0, err1
    assert second.returncode == 3, second.stderr
    assert "Traceback" not in second.stderr
    line = _last_line(second.stderr)
    assert line.startswith(f"error: {out}: another run is writing worker 0 of 1's tasks")
    assert f"pid {first.pid}" in line and "run the same command again" in line
    _assert_every_row_once(out)


def test_the_workers_of_a_pipeline_still_write_one_output_at_once(quest_csv, tmp_path):
    out = tmp_path / "out"
    workers = [
        _start(
            _shard_args(quest_csv, out, "--worker-index", str(i), "--num-workers", "2"),
            {"SHARDTRAIN_LEASE_WAIT": "0"},
        )
        for i in range(2)
    ]
    for w in workers:
        _, err = w.communicate(timeout=600)
        assert w.returncode == 0, err
    run_cli("finalize", str(out), check=True)
    _assert_every_row_once(out)


def test_a_killed_run_leaves_no_lease_that_blocks_the_same_command(quest_csv, tmp_path):
    out = tmp_path / "out"
    first = _start(_shard_args(quest_csv, out, "--processes", "1"))
    _wait_for_temporaries(out, first)
    first.kill()
    first.communicate()
    assert list((out / "_leases").iterdir())  # the lock file is still there, unlocked
    again = run_cli(*_shard_args(quest_csv, out), env={"SHARDTRAIN_LEASE_WAIT": "0"})
    assert again.returncode == 0, again.stderr
    _assert_every_row_once(out)


def _mount_tmpfs(where: Path, size: str) -> None:
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


def test_a_full_disk_ends_in_one_line_naming_the_object_and_the_same_command_recovers(
    quest_csv, tmp_path
):
    small = tmp_path / "small"
    _mount_tmpfs(small, "16m")  # the CSV is ~57 MB; its shards do not fit
    try:
        out = small / "out"
        full = run_cli(*_shard_args(quest_csv, out))
        assert full.returncode == 3, full.stderr
        assert "Traceback" not in full.stderr
        line = _last_line(full.stderr)
        assert line.startswith(f"error: {out}/")
        assert "no space left on the device" in line and "run the same command again" in line
        subprocess.run(["mount", "-o", "remount,size=200m", str(small)], check=True)
        again = run_cli(*_shard_args(quest_csv, out))
        assert again.returncode == 0, again.stderr
        _assert_every_row_once(out)
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


@pytest.fixture(scope="module")
def sharded(quest_csv, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sharded") / "out"
    run_cli(*_shard_args(quest_csv, out), check=True)
    return out


@pytest.mark.parametrize("damaged", ["metadata.json", "_plan.json", "both"])
def test_overwrite_deletes_a_damaged_dataset(quest_csv, sharded, tmp_path, damaged):
    out = tmp_path / "out"
    subprocess.run(["cp", "-r", str(sharded), str(out)], check=True)
    for name in ("metadata.json", "_plan.json") if damaged == "both" else (damaged,):
        (out / name).write_text("junk\n")
    stuck = run_cli(*_shard_args(quest_csv, out))
    assert stuck.returncode == 1
    line = _last_line(stuck.stderr)
    assert "not valid JSON" in line and "is damaged: shard it again with `shardtrain shard" in line
    assert line.endswith(
        "--overwrite` (it deletes the dataset; add --overwrite-foreign if other "
        "files share the folder)"
    )
    again = run_cli(*_shard_args(quest_csv, out, "--overwrite"))
    assert again.returncode == 0, again.stderr
    _assert_every_row_once(out)


def test_overwrite_of_a_damaged_dataset_keeps_foreign_files_unless_told(
    quest_csv, sharded, tmp_path
):
    out = tmp_path / "out"
    subprocess.run(["cp", "-r", str(sharded), str(out)], check=True)
    (out / "metadata.json").write_text("junk\n")
    (out / "_plan.json").write_text("{")
    (out / "notes.txt").write_text("mine\n")
    refused = run_cli(*_shard_args(quest_csv, out, "--overwrite"))
    assert refused.returncode == 1
    assert "notes.txt" in _last_line(refused.stderr)
    assert (out / "notes.txt").exists()
    both = run_cli(*_shard_args(quest_csv, out, "--overwrite", "--overwrite-foreign"))
    assert both.returncode == 0, both.stderr
    assert not (out / "notes.txt").exists()
    _assert_every_row_once(out)


@pytest.mark.minio
def test_two_runs_on_one_s3_output_one_waits_or_refuses_naming_the_other(quest_csv, minio):
    from shardtrain import storage

    out = storage.join(minio.uri(), f"faults-{time.time_ns()}")
    lease = storage.join(out, "_leases", "worker-00000-of-00001.json")
    first = _start(_shard_args(quest_csv, out, "--processes", "1"))
    deadline = time.monotonic() + 120
    while not storage.exists(lease):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.05)
    refused = run_cli(*_shard_args(quest_csv, out), env={"SHARDTRAIN_LEASE_WAIT": "0"})
    waited = _start(_shard_args(quest_csv, out), {"SHARDTRAIN_LEASE_WAIT": "600"})
    _, err1 = first.communicate(timeout=600)
    out3, err3 = waited.communicate(timeout=600)
    assert first.returncode == 0, err1
    assert refused.returncode == 3, refused.stderr
    assert f"pid {first.pid}" in _last_line(refused.stderr)
    assert waited.returncode == 0 and "already complete" in out3, err3
    meta = storage.read_json(storage.join(out, "metadata.json"))
    assert meta["rows_read"] == ROWS
    assert not storage.exists(lease)


@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_sigterm_stopped_run_on_s3_releases_its_lease_so_the_same_command_resumes_at_once(
    quest_csv, minio, processes
):
    """Regression (issue 29): an evicted shard pod (SIGTERM) kept its object-store lease
    until it expired (~60 s), so the pod replacing it waited. It now exits 143 with one line
    and releases the lease; the re-run, allowed no wait at all, resumes and every row lands
    once."""
    from helpers import committed_tasks
    from shardtrain import storage

    out = storage.join(minio.uri(), f"sigterm-{time.time_ns()}")
    args = _shard_args(quest_csv, out, "--processes", processes)
    first = _start(args)
    deadline = time.monotonic() + 120
    while committed_tasks(out) < 2:
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.02)
    first.terminate()  # SIGTERM, as the kubelet stops a pod
    _, err = first.communicate(timeout=60)
    assert first.returncode == 143, err
    assert "Traceback" not in err
    assert _last_line(err).startswith("error: sharding stopped by SIGTERM"), err
    assert not storage.exists(storage.join(out, "metadata.json"))
    assert not storage.exists(storage.join(out, "_leases", "worker-00000-of-00001.json"))
    again = run_cli(*args, env={"SHARDTRAIN_LEASE_WAIT": "0"})
    assert again.returncode == 0, again.stderr
    assert "another run holds the lease" not in again.stderr
    meta = storage.read_json(storage.join(out, "metadata.json"))
    assert meta["rows_read"] == ROWS
    assert meta["rows_accepted"] + meta["rows_rejected"] == ROWS
    assert sum(s["num_records"] for s in meta["splits"].values()) == meta["rows_accepted"]
