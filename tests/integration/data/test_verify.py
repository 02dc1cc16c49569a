"""``shardtrain inspect --verify``: every shard of a committed dataset checked against
``metadata.json`` (present, recorded size, recorded CRC-32C), locally and on a live MinIO.
A truncated, a garbled (same size, one flipped byte) and a deleted shard are each named with
what is wrong, the command that repairs the dataset is printed (exit 1), and running it gives
a dataset that verifies clean with every row exactly once."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest

from helpers import cli_exit_code, read_examples
from shardtrain.data import datagen, sharding

ROWS = 3_000
SHARDS = 3


@pytest.fixture(scope="module")
def quest_csv(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("quest") / "quest.csv")
    datagen.generate_quest_logs(path, ROWS, seed=5)
    return path


def _shard(quest_csv: str, out: str) -> None:
    sharding.shard(
        sharding.ShardConfig(
            sources=(quest_csv,), output=out, label="cleared", key="attempt_id",
            num_shards=SHARDS, processes=1, max_bad_fraction=1.0,
        )
    )  # fmt: skip


@pytest.fixture(scope="module")
def sound(quest_csv, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ds") / "quest"
    _shard(quest_csv, str(out))
    return out


def _verify(capsys, uri: str) -> tuple[int, list[str], list[str]]:
    """Exit code, stdout lines and stderr lines of ``inspect --verify URI``."""
    capsys.readouterr()
    code = cli_exit_code("inspect", "--verify", uri)
    out, err = capsys.readouterr()
    return code, out.splitlines(), [ln for ln in err.splitlines() if ln.strip()]


def _damage(shard: Path, how: str) -> str:
    """Damage ``shard`` and return what ``inspect --verify`` must say of it."""
    raw = bytearray(shard.read_bytes())
    if how == "truncated":
        shard.write_bytes(bytes(raw[: len(raw) // 2]))
        return f"size {len(raw) // 2:,} != recorded {len(raw):,} bytes"
    if how == "garbled":
        raw[len(raw) // 3] ^= 0x40  # same size, one byte changed
        shard.write_bytes(bytes(raw))
        return "CRC-32C mismatch ("
    shard.unlink()
    return "missing"


def test_verify_passes_a_sound_dataset_with_one_summary_line(sound, capsys):
    code, out, err = _verify(capsys, str(sound))
    assert code == 0, err
    assert out == [out[0]] and out[0].startswith(f"{sound}: all {2 * SHARDS} shard(s) of "), out
    assert "recorded sizes and CRC-32C" in out[0]


@pytest.mark.parametrize("how", ["truncated", "garbled", "deleted"])
def test_verify_names_a_damaged_shard_and_its_repair_repairs_it(sound, tmp_path, capsys, how):
    data = tmp_path / "quest"
    shutil.copytree(sound, data)
    before = sorted(r["attempt_id"] for r in read_examples(str(data)))
    shard = data / "train" / f"part-00001-of-{SHARDS:05d}.tfrecord"
    what = _damage(shard, how)

    code, out, err = _verify(capsys, str(data))
    assert code == 1, (out, err)
    assert len(out) == 1 and out[0].startswith(f"{shard}: {what}"), out
    assert len(err) == 1 and "Traceback" not in "\n".join(err), err
    assert err[0].startswith(f"error: {data}: 1 of {2 * SHARDS} shard(s) damaged ("), err
    repair = err[0].split("repair: ", 1)[1]
    words = shlex.split(repair)
    assert words[:2] == ["shardtrain", "shard"] and words[-1] == "--overwrite", repair
    assert words[words.index("--output") + 1] == str(data)
    assert "--key" in words and f"--num-shards {SHARDS}" in repair, repair

    assert cli_exit_code(*words[1:]) == 0, capsys.readouterr().err[-2000:]
    code, out, err = _verify(capsys, str(data))
    assert code == 0 and "all 6 shard(s)" in out[0], (out, err)
    after = sorted(r["attempt_id"] for r in read_examples(str(data)))
    assert after == before and len(set(after)) == len(after)


def test_verify_names_every_damaged_shard(sound, tmp_path, capsys):
    data = tmp_path / "quest"
    shutil.copytree(sound, data)
    shards = sorted((data / "train").iterdir()) + sorted((data / "eval").iterdir())
    said = {shards[0]: _damage(shards[0], "deleted"), shards[4]: _damage(shards[4], "garbled")}
    said[shards[5]] = _damage(shards[5], "truncated")
    code, out, err = _verify(capsys, str(data))
    assert code == 1
    assert [ln.split(": ", 1)[0] for ln in out] == [str(s) for s in said], out
    for line, what in zip(out, said.values(), strict=True):
        assert line.split(": ", 1)[1].startswith(what), line
    assert "3 of 6 shard(s) damaged (1 missing, 1 of the wrong size, 1 failing CRC-32C)" in err[0]


def test_verify_names_a_mistyped_metadata_field_in_one_line(sound, tmp_path, capsys):
    data = tmp_path / "quest"
    shutil.copytree(sound, data)
    doc = json.loads((data / "metadata.json").read_text())
    doc["splits"] = "x"
    (data / "metadata.json").write_text(json.dumps(doc))
    code, out, err = _verify(capsys, str(data))
    assert code == 1 and "Traceback" not in "\n".join(err)
    assert len(out) == 1 and out[0].startswith(f"{data}/metadata.json: ") and "splits" in out[0]
    assert err == [err[0]] and err[0].startswith(f"error: {data}: metadata.json cannot be read")
    assert err[0].endswith(" --overwrite") and "--key attempt_id" in err[0], err


@pytest.mark.minio
def test_verify_names_damaged_shards_on_minio(minio, quest_csv, capsys):
    out_uri = minio.uri("verify")
    _shard(quest_csv, out_uri)
    s3 = minio.s3_client()
    key = out_uri.split(f"{minio.bucket}/", 1)[1]
    gone, garbled = (f"{key}/train/part-0000{i}-of-{SHARDS:05d}.tfrecord" for i in (0, 2))
    s3.delete_object(Bucket=minio.bucket, Key=gone)
    raw = bytearray(s3.get_object(Bucket=minio.bucket, Key=garbled)["Body"].read())
    raw[len(raw) // 2] ^= 0x01
    s3.put_object(Bucket=minio.bucket, Key=garbled, Body=bytes(raw))

    code, out, err = _verify(capsys, out_uri)
    assert code == 1, err
    assert out[0] == f"s3://{minio.bucket}/{gone}: missing", out
    assert out[1].startswith(f"s3://{minio.bucket}/{garbled}: CRC-32C mismatch ("), out
    assert len(out) == 2 and len(err) == 1
    assert f"--output {out_uri}" in err[0] and err[0].endswith("--overwrite"), err


def test_verify_of_a_dataset_never_finished_says_so(sound, tmp_path, capsys):
    data = tmp_path / "quest"
    shutil.copytree(sound, data)
    (data / "metadata.json").unlink()
    code, out, err = _verify(capsys, str(data))
    assert (
        code == 1
        and out == []
        and err
        == [
            f"error: {data}: not committed (metadata.json "
            "is missing: the writer has not finished or crashed)"
        ]
    )
