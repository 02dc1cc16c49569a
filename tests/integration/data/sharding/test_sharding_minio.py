"""The sharder against a live MinIO: s3:// sources and outputs, determinism, rejects, crashes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from helpers import REPO, committed_tasks, kill_then_resume, quoted_text_csv, read_examples, run_cli
from shardtrain import storage
from shardtrain.data import datagen, sharding
from shardtrain.data.metadata import DatasetMetadata

pytestmark = pytest.mark.minio
ALL_TYPES = REPO / "tests" / "data" / "all_types.csv"


def test_s3_source_to_s3_shards_round_trip(minio):
    base = minio.uri()
    src = storage.join(base, "in", "all_types.csv")
    storage.upload_file(str(ALL_TYPES), src)
    out = storage.join(base, "ds")
    meta = sharding.shard(
        sharding.ShardConfig(
            sources=(src,),
            output=out,
            label="cleared",
            key="id",
            min_shards=2,
            processes=1,
        )
    ).metadata.to_dict()
    assert meta["rows_accepted"] == 6
    rows = {r["id"].decode(): r for r in read_examples(out)}
    assert rows["r2"]["level"] == -7 and rows["r2"]["note"] == b"quoted, comma"
    assert "level" not in rows["r3"] and rows["r4"]["note"] == "unicode é ✓".encode()
    assert storage.exists(storage.join(out, "metadata.json"))


def test_same_shards_locally_and_on_minio_with_1_or_3_workers(minio, tmp_path):
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 8_000, seed=21, bad_fraction=0.002)
    src = minio.uri("inputs", "quest.csv")
    storage.upload_file(str(csv_path), src)
    common = dict(label="cleared", task_bytes=200_000, processes=1, max_bad_fraction=0.01)
    local = sharding.shard(
        sharding.ShardConfig(sources=(str(csv_path),), output=str(tmp_path / "local"), **common)
    )
    out = minio.uri()
    for w in range(3):
        sharding.shard(
            sharding.ShardConfig(
                sources=(src,), output=out, num_workers=3, worker_index=w, **common
            )
        )
    remote = sharding.finalize(out).to_dict()
    for split in ("train", "eval"):
        assert [s["crc32c"] for s in local.metadata.to_dict()["splits"][split]["shards"]] == [
            s["crc32c"] for s in remote["splits"][split]["shards"]
        ]
    assert remote["rows_rejected"] == local.metadata.to_dict()["rows_rejected"] > 0
    assert remote["rejects_by_reason"] == local.metadata.to_dict()["rejects_by_reason"]
    lines = csv_path.read_text().splitlines()
    with storage.open(storage.join(out, remote["rejects"]), "r") as f:
        for r in map(json.loads, f):
            assert r["source"] == src
            assert lines[r["line"] - 1].startswith(r["text"])


def test_missing_source_and_label_errors_on_minio(minio):
    missing = minio.uri("nothing-here.csv")
    proc = run_cli("shard", missing, "-o", minio.uri(), "--label", "cleared")
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"error: {missing}: no such file or object"
    src = minio.uri("types.csv")
    storage.upload_file(str(ALL_TYPES), src)
    proc = run_cli("shard", src, "-o", minio.uri(), "--label", "won")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert f"{src}: label column 'won' not found" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("kill_when", [0, 3])
def test_kill_9_mid_run_then_rerun_gives_every_row_once_on_minio(minio, tmp_path, kill_when):
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 150_000, seed=4)
    src = minio.uri("crash", "quest.csv")
    storage.upload_file(str(csv_path), src)
    info = kill_then_resume(src, minio.uri(), csv_path, kill_when)
    assert info["done_before_kill"] < info["tasks"]


@pytest.mark.slow
def test_kill_9_mid_run_then_rerun_gives_every_row_once_locally(tmp_path):
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 150_000, seed=9)
    out = str(tmp_path / "ds")
    info = kill_then_resume(str(csv_path), out, csv_path, kill_when=2)
    assert info["done_before_kill"] < info["tasks"]
    leftovers = [p for p in os.listdir(out + "/train") if ".tmp-" in p]
    assert leftovers == []


def _shard_through_outage(minio, tmp_path, outage: float) -> tuple[subprocess.Popen, str, str]:
    """Shard a local CSV to MinIO; kill MinIO once a task is committed, restart it after
    ``outage`` seconds. Returns the finished process, its stderr and the output URI."""
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 150_000, seed=5)
    out = minio.uri()
    args = ["shard", str(csv_path), "-o", out, "--label", "cleared", "--key", "attempt_id"]
    args += ["--task-mb", "1", "--min-shards", "16", "--processes", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardtrain.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and committed_tasks(out) < 1:
        time.sleep(0.01)
    assert proc.poll() is None, "the run finished before the outage"
    minio.kill()
    time.sleep(outage)
    minio.restart()
    _, stderr = proc.communicate(timeout=300)
    return proc, stderr, out


@pytest.mark.slow
def test_minio_killed_mid_shard_and_back_within_the_retry_window(minio, tmp_path, monkeypatch):
    monkeypatch.setenv("SHARDTRAIN_STORAGE_RETRIES", "10")
    monkeypatch.setenv("SHARDTRAIN_STORAGE_BACKOFF", "0.5")
    monkeypatch.setenv("SHARDTRAIN_STORAGE_CONNECT_TIMEOUT", "1")
    # Longer than s3fs's and botocore's own retries can ride out (about 2 s together), so
    # that the sharder's retries must: a 1 s outage sometimes passed unseen once tasks got
    # faster.
    proc, stderr, out = _shard_through_outage(minio, tmp_path, outage=3.0)
    assert proc.returncode == 0, stderr
    assert "transient error" in stderr  # it did retry
    keys = [r["attempt_id"] for r in read_examples(out)]
    with open(tmp_path / "quest.csv") as f:
        expected = {line.split(",", 1)[0].encode() for line in list(f)[1:]}
    assert len(keys) == len(set(keys)) and set(keys) == expected  # every row exactly once


@pytest.mark.slow
def test_minio_down_longer_than_the_retry_window_names_the_object(minio, tmp_path, fast_retries):
    proc, stderr, out = _shard_through_outage(minio, tmp_path, outage=6.0)
    assert proc.returncode == 3, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {out}/") and "failed after 3 attempts" in last, stderr
    assert not storage.exists(storage.join(out, "metadata.json"))


def test_quoted_multiline_csv_cut_into_pieces_on_minio_gives_pandas_rows(minio, tmp_path):
    """Issue 14: an s3:// CSV whose free-text column holds commas, quotes and line breaks,
    cut into 64 KiB pieces (boundaries placed by reading the object through S3), sharded by
    two workers: the same Examples as the local file, and as many rows as pandas reads."""
    import pandas as pd

    csv_path = tmp_path / "tweets.csv"
    csv_path.write_text(quoted_text_csv(8000, seed=9))
    src = minio.uri("inputs", "tweets.csv")
    storage.upload_file(str(csv_path), src)
    common = dict(label="label", key="id", task_bytes=64 * 1024, min_shards=8, processes=1)
    local = sharding.shard(
        sharding.ShardConfig(sources=(str(csv_path),), output=str(tmp_path / "local"), **common)
    ).metadata.to_dict()
    out = minio.uri()
    for w in range(2):
        sharding.shard(
            sharding.ShardConfig(
                sources=(src,), output=out, num_workers=2, worker_index=w, **common
            )
        )
    remote = sharding.finalize(out).to_dict()
    frame = pd.read_csv(csv_path, dtype=str, keep_default_na=False)
    assert remote["rows_read"] == remote["rows_accepted"] == len(frame) == 8000
    assert local["rows_accepted"] == 8000
    by_id = {r["id"]: r for r in read_examples(out)}
    assert by_id == {r["id"]: r for r in read_examples(str(tmp_path / "local"))}
    texts = dict(zip(frame["id"].astype(int), frame["text"], strict=True))
    assert all(r["text"].decode() == texts[i] for i, r in by_id.items())


def test_decimal_comma_csv_cut_into_pieces_on_minio_gives_pandas_values(minio, tmp_path):
    """``--decimal ,``: a UTF-8 European export (``;``, every field quoted, decimal commas,
    multi-line notes) in s3://, cut into 64 KiB pieces and sharded by two workers, each
    reading the dialect from the plan: every Example equals what ``pandas.read_csv(sep=";",
    decimal=",")`` reads, floats as float32."""
    import pandas as pd

    from helpers import european_export_csv, pandas_examples

    csv_path = tmp_path / "export.csv"
    european_export_csv(csv_path, 6000, seed=11, encoding="utf-8")
    src = minio.uri("inputs", "export.csv")
    storage.upload_file(str(csv_path), src)
    out = minio.uri()
    common = dict(label="label", key="id", decimal=",", task_bytes=64 * 1024, processes=1)
    for w in range(2):
        sharding.shard(
            sharding.ShardConfig(
                sources=(src,), output=out, min_shards=4, num_workers=2, worker_index=w, **common
            )
        )
    meta = sharding.finalize(out).to_dict()
    plan_tasks = storage.read_json(storage.join(out, "_plan.json"))["tasks"]
    assert csv_path.stat().st_size > 3 * 64 * 1024
    assert sum(len(t["pieces"]) for t in plan_tasks) > 3  # the file was cut into pieces
    assert meta["options"]["csv_dialect"]["delimiter"] == ";"
    types = {c["name"]: c["type"] for c in meta["schema"]["columns"]}
    assert (types["fee"], types["ratio"], types["zip"]) == ("float", "float", "string")
    frame = pd.read_csv(csv_path, sep=";", decimal=",", dtype={"zip": str})
    assert meta["rows_read"] == meta["rows_accepted"] == len(frame) == 6000
    got = {}
    for example in read_examples(out):
        example.pop("__split__")
        got[example.pop("id")] = example
    expected = {e.pop("id"): e for e in pandas_examples(frame, types)}
    assert got == expected


_FORKED_WORKER = """
import json, logging, sys
logging.basicConfig(level=logging.INFO)
logging.getLogger("shardtrain.data.sharding.pool").setLevel(logging.DEBUG)
from shardtrain.kubeflow.shard_steps import shard_step
from shardtrain.data.sharding.pool import WorkerPool
from shardtrain.data.shard_config import ShardConfig
params = json.loads(sys.argv[1])
print(shard_step(worker_index=0, num_workers=1, cpu="2", **params))
# Once the object store has been called, the pool can only spawn: None here.
config = ShardConfig(sources=("x.csv",), output="o", label="y", processes=2)
print("after storage:", WorkerPool.before_storage(config))
"""


def test_a_shard_worker_on_minio_forks_its_pool_before_the_first_storage_call(minio, tmp_path):
    """Regression (issue 29): a shard step's pool was made after the listing, when s3fs'
    resolver thread made forking unsafe, so it spawned its processes: each imported
    shardtrain and loaded the kernels again (~1.2 CPU-s of a MinIO worker's ~3 s)."""
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 6_000, seed=5)
    src = minio.uri("inputs", "fork.csv")
    storage.upload_file(str(csv_path), src)
    out = minio.uri()
    params = dict(sources=src, dataset_uri=out, label="cleared", key="attempt_id", task_mb=0.1)
    run = subprocess.run(
        [sys.executable, "-c", _FORKED_WORKER, json.dumps(params)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "1 pool process(es), fork" in run.stderr, run.stderr[-3000:]
    assert "spawn" not in run.stderr
    report = json.loads(run.stdout.splitlines()[0])
    assert report["status"] == "complete" and report["tasks_run"] >= 3
    assert run.stdout.splitlines()[1] == "after storage: None"
    # The forked pool's dataset is the one-process dataset.
    local = sharding.shard(
        sharding.ShardConfig(
            sources=(str(csv_path),),
            output=str(tmp_path / "local"),
            label="cleared",
            key="attempt_id",
            task_bytes=int(0.1 * 2**20),
            processes=1,
        )
    ).metadata.to_dict()
    remote = DatasetMetadata.load(out).to_dict()
    for split in ("train", "eval"):
        assert [s["crc32c"] for s in local["splits"][split]["shards"]] == [
            s["crc32c"] for s in remote["splits"][split]["shards"]
        ]
