"""Training on a damaged dataset: a deleted or cut-short shard is refused before step 1 with
one line naming it and the repair command (exit 1, nothing trained, no TensorFlow graph
built); a shard that vanishes after that check — mid-run, locally or on MinIO behind the
shard cache — ends training with one line too, not TensorFlow's 63-line traceback."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from helpers import cli_exit_code, run_cli
from shardtrain.data import datagen, sharding
from shardtrain.errors import DataError
from shardtrain.train import dataset, trainer

pytestmark = pytest.mark.slow

SHARDS = 4
STEPS = ("--train-steps", "20", "--batch-size", "32", "--checkpoint-every", "10")


@pytest.fixture(scope="module")
def quest_csv(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("quest") / "quest.csv")
    datagen.generate_quest_logs(path, 4_000, seed=8)
    return path


def _shard(quest_csv: str, out: str):
    return sharding.shard(
        sharding.ShardConfig(
            sources=(quest_csv,), output=out, label="cleared", key="attempt_id",
            num_shards=SHARDS, processes=1,
        )
    ).metadata  # fmt: skip


@pytest.fixture(scope="module")
def sound(quest_csv, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ds") / "quest"
    _shard(quest_csv, str(out))
    return out


@pytest.fixture
def data(sound, tmp_path) -> Path:
    copy = tmp_path / "quest"
    shutil.copytree(sound, copy)
    return copy


@pytest.mark.parametrize("how", ["deleted", "truncated"])
def test_train_refuses_a_damaged_shard_before_step_1(data, tmp_path, how):
    shard = data / "train" / f"part-00002-of-{SHARDS:05d}.tfrecord"
    if how == "deleted":
        shard.unlink()
        what = "missing"
    else:
        size = shard.stat().st_size
        shard.write_bytes(shard.read_bytes()[:100])
        what = f"size 100 != recorded {size:,} bytes"
    model_dir = tmp_path / "model"
    started = time.monotonic()
    proc = run_cli("train", "--data", str(data), "--model-dir", str(model_dir), *STEPS)
    took = time.monotonic() - started
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert lines[-1].startswith(
        f"error: {data}: 1 shard(s) damaged (train/part-00002-of-{SHARDS:05d}.tfrecord "
        f"{what}; splits 'train', 'eval' checked); repair: shardtrain shard "
    ), lines[-1]
    assert lines[-1].endswith(" --overwrite") and f"--output {data}" in lines[-1]
    # Refused before any step: no checkpoint, no TensorFlow log line.
    assert not (model_dir / "checkpoints").exists()
    assert not any(ln.startswith(("I0000", "W0000", "E0000")) for ln in lines), lines
    print(f"refused in {took:.1f}s")


@pytest.mark.parametrize("split", ["train", "eval"])  # eval: the chief's evaluation
def test_a_shard_deleted_after_the_check_ends_training_in_one_line(
    data, tmp_path, capsys, monkeypatch, split
):
    """The pre-check passes, then the shard goes (deleted as the training input is built,
    after the check): TensorFlow's NotFoundError when the reader opens it becomes one line."""
    shard = data / split / f"part-00001-of-{SHARDS:05d}.tfrecord"
    build_input = trainer.loop.distributed_input

    def delete_then_build(*args, **kwargs):
        shard.unlink()
        return build_input(*args, **kwargs)

    monkeypatch.setattr(trainer.loop, "distributed_input", delete_then_build)
    model_dir = tmp_path / "model"
    code = cli_exit_code("train", "--data", str(data), "--model-dir", str(model_dir), *STEPS)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 1, err[-30:]
    assert "Traceback" not in "\n".join(err) and "Graph execution error" not in "\n".join(err)
    assert err[-1].startswith(
        f"error: {data}: 1 shard(s) damaged ({split}/part-00001-of-{SHARDS:05d}.tfrecord "
        "missing; splits "
    ), err[-1]
    assert "checked); repair: shardtrain shard " in err[-1] and err[-1].endswith(" --overwrite")


@pytest.mark.minio
def test_an_s3_shard_deleted_mid_read_is_named_by_the_cache(minio, quest_csv, tmp_path):
    out = minio.uri("vanished")
    meta = _shard(quest_csv, out)
    shards = [s for s in dataset.split_shards(out, meta, "train") if s.num_records]
    key = shards[-1].uri.split(f"{minio.bucket}/", 1)[1]
    minio.s3_client().delete_object(Bucket=minio.bucket, Key=key)
    cache = dataset.ShardCache(str(tmp_path / "cache"), threads=1)
    try:
        ds = dataset.record_dataset(shards, compression=meta.compression, cache=cache)
        with pytest.raises(Exception) as raised:  # TensorFlow's error around the generator's
            sum(1 for _ in ds)
        error = dataset.input_error(raised.value, out, meta, ["train"], [cache])
    finally:
        cache.close()
    assert isinstance(error, DataError), raised.value
    assert str(error).startswith(
        f"{out}: 1 shard(s) damaged ({key.split('/', 1)[1]} missing; splits 'train' "
        "checked); repair: shardtrain shard "
    ), error
