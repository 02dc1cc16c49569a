"""Parquet and JSON-lines sources against a live MinIO: s3:// row groups and line ranges, the same
shards locally and remotely with 1 or 3 workers, kill -9 and resume, and training on the result."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import SHORT_LEASE, read_examples, run_cli
from shardtrain import storage
from shardtrain.data import datagen, sharding
from shardtrain.data.metadata import DatasetMetadata


def _quest_parquet(tmp_path, rows: int, seed: int, row_group_size: int):
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), rows, seed=seed)
    frame = pd.read_csv(csv_path, keep_default_na=False, na_values=[""])
    table = pa.Table.from_pandas(frame, preserve_index=False)
    # Timestamps and decimals, as data lakes hold them.
    table = table.append_column(
        "started",
        pa.array(pd.Timestamp("2026-01-01") + pd.to_timedelta(range(rows), unit="s")).cast(
            pa.timestamp("ms")
        ),
    )
    path = tmp_path / "quest.parquet"
    pq.write_table(table, path, row_group_size=row_group_size)
    return csv_path, path


def _crcs(meta: dict) -> dict[str, list[int]]:
    return {s: [sh["crc32c"] for sh in meta["splits"][s]["shards"]] for s in ("train", "eval")}


@pytest.mark.minio
def test_parquet_on_minio_gives_the_local_shards_with_1_or_3_workers(minio, tmp_path):
    _, path = _quest_parquet(tmp_path, 8000, seed=21, row_group_size=500)
    src = minio.uri("lake", "quest.parquet")
    storage.upload_file(str(path), src)
    common = dict(label="cleared", key="attempt_id", task_bytes=40_000, processes=1)
    local = sharding.shard(
        sharding.ShardConfig(sources=(str(path),), output=str(tmp_path / "local"), **common)
    ).metadata.to_dict()
    out = minio.uri("ds")
    for w in range(3):
        sharding.shard(
            sharding.ShardConfig(
                sources=(src,), output=out, num_workers=3, worker_index=w, **common
            )
        )
    remote = sharding.finalize(out).to_dict()
    assert _crcs(remote) == _crcs(local)
    assert remote["rows_accepted"] == 8000 and remote["sources"][0]["uri"] == src
    plan = sharding.Plan.from_dict(out, storage.read_json(storage.join(out, "_plan.json")))
    assert len(plan.tasks) >= 3  # one object split by row groups over the workers
    rows = {r["attempt_id"]: r for r in read_examples(out)}
    frame = pd.read_parquet(path).set_index("attempt_id")
    for key in list(rows)[:300]:
        want = frame.loc[key.decode()]
        got = rows[key]
        region = None if pd.isna(want["region"]) else want["region"].encode()
        assert got["cleared"] == want["cleared"] and got.get("region") == region
        # Timestamps are ISO text at the column's precision (milliseconds here).
        assert got["started"].decode() == want["started"].strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


@pytest.mark.minio
def test_jsonl_gz_on_minio_with_rejects_located(minio, tmp_path):
    lines = []
    for i in range(3000):
        lines.append(
            json.dumps({"id": i, "v": i * 0.5, "tag": "x" if i % 3 else 7, "cleared": i % 2})
        )
        if i % 500 == 1:
            lines.append('{"id": 1,, "cleared": 0}')
    data = ("\n".join(lines) + "\n").encode()
    src = minio.uri("logs", "events.jsonl.gz")
    with storage.open(src, "wb") as f:
        f.write(gzip.compress(data))
    out = minio.uri("ds-json")
    meta = sharding.shard(
        sharding.ShardConfig(
            sources=(src,),
            output=out,
            label="cleared",
            key="id",
            processes=1,
            max_bad_fraction=0.01,
        )
    ).metadata.to_dict()
    assert meta["rows_read"] == len(lines) and meta["rows_accepted"] == 3000
    assert meta["rejects_by_reason"] == {"malformed_json": 6}
    assert {c["name"]: c["type"] for c in meta["schema"]["columns"]}["tag"] == "string"
    with storage.open(storage.join(out, meta["rejects"]), "r") as f:
        rejects = [json.loads(x) for x in f]
    assert [r["line"] for r in rejects] == [i + 1 for i, x in enumerate(lines) if ",," in x]
    tags = {r["id"]: r["tag"] for r in read_examples(out)}
    assert tags[0] == b"7" and tags[1] == b"x"


def _committed_tasks(out: str) -> int:
    try:
        return sum(1 for u in storage.ls(storage.join(out, "_tasks")) if u.endswith(".json"))
    except Exception:
        return 0


@pytest.mark.minio
@pytest.mark.slow
def test_kill_9_mid_parquet_run_then_rerun_gives_the_uninterrupted_shards(minio, tmp_path):
    _, path = _quest_parquet(tmp_path, 150_000, seed=4, row_group_size=5000)
    src = minio.uri("crash", "quest.parquet")
    storage.upload_file(str(path), src)
    out = minio.uri("crash-ds")
    args = ["shard", src, "-o", out, "--label", "cleared", "--key", "attempt_id"]
    args += ["--task-mb", "0.5", "--min-shards", "16", "--processes", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardtrain.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **SHORT_LEASE},
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None and _committed_tasks(out) < 2:
        time.sleep(0.01)
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not storage.exists(storage.join(out, "metadata.json"))
    plan = sharding.Plan.from_dict(out, storage.read_json(storage.join(out, "_plan.json")))
    assert _committed_tasks(out) < len(plan.tasks)
    run_cli(*args, check=True, env=SHORT_LEASE)
    resumed = DatasetMetadata.load(out).to_dict()
    clean = run_cli(*[a if a != out else str(tmp_path / "clean") for a in args], check=True)
    assert clean.returncode == 0
    assert _crcs(resumed) == _crcs(DatasetMetadata.load(str(tmp_path / "clean")).to_dict())
    keys = [r["attempt_id"] for r in read_examples(out)]
    assert len(keys) == len(set(keys)) == 150_000 == resumed["rows_accepted"]


@pytest.mark.slow
def test_train_on_parquet_sharded_data(tmp_path):
    _, path = _quest_parquet(tmp_path, 4000, seed=7, row_group_size=1000)
    out = str(tmp_path / "ds")
    run_cli("shard", str(path), "-o", out, "--label", "cleared", "--key", "attempt_id", check=True)
    model_dir = str(tmp_path / "model")
    proc = run_cli(
        "train",
        "--data",
        out,
        "--model-dir",
        model_dir,
        "--train-steps",
        "30",
        "--batch-size",
        "64",
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    metrics = storage.read_json(storage.join(model_dir, "eval", "metrics.json"))
    assert metrics["step"] == 30 and 0.0 <= metrics["auc"] <= 1.0
