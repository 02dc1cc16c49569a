"""``shard --overwrite`` rewrites a dataset whatever state it is in, and a damaged dataset's
error gives the command that gets out.

Each damaged state -- a complete dataset with a corrupt, truncated or deleted shard, a
``metadata.json`` that is ``{}``, has ``"schema": null`` or ``"splits": "x"``, a mistyped
``_plan.json``, a half-written run -- is rebuilt by ``shard --overwrite`` into the exact
dataset a clean run writes: every input row exactly once, the same rows in each split.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import shlex
import shutil
from pathlib import Path

import pytest

from helpers import read_examples, run_cli
from shardtrain import storage
from shardtrain.data import datagen, sharding
from shardtrain.data.metadata import DatasetMetadata

ROWS = 4_000


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("overwrite") / "q.csv"
    datagen.generate_quest_logs(str(path), ROWS, seed=11)
    return path


def _args(source: Path | str, out: Path | str, *extra: str) -> list[str]:
    common = ["--label", "cleared", "--key", "attempt_id", "--processes", "1", "--task-mb", "0.2"]
    return ["shard", str(source), "--output", str(out), *common, *extra]


def _rows(uri: str) -> dict[str, collections.Counter]:
    """The key of every row of the dataset at ``uri``, counted per split."""
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for row in read_examples(uri):
        counts[row["__split__"]][row["attempt_id"]] += 1
    return dict(counts)


@pytest.fixture(scope="module")
def clean(source, tmp_path_factory) -> tuple[Path, dict[str, collections.Counter]]:
    """A dataset sharded once, and its rows."""
    out = tmp_path_factory.mktemp("clean") / "ds"
    run_cli(*_args(source, out), check=True)
    rows = _rows(str(out))
    every = sum(rows.values(), collections.Counter())
    assert len(every) == ROWS and set(every.values()) == {1}  # every row exactly once
    return out, rows


def _metadata(out: Path, change) -> None:
    path = out / "metadata.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _a_shard(out: Path) -> Path:
    return sorted((out / "train").iterdir())[1]


def _flip_a_byte(out: Path) -> None:
    shard = _a_shard(out)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))


def _truncate(out: Path) -> None:
    shard = _a_shard(out)
    shard.write_bytes(shard.read_bytes()[:100])


def _half_written(out: Path) -> None:
    """What a killed run leaves: no metadata.json, a task uncommitted, a temporary file."""
    (out / "metadata.json").unlink()
    for summary in (out / "_tasks").glob("summary-*"):
        summary.unlink()
    (out / "_tasks" / "task-00001.json").unlink()
    (_a_shard(out).parent / (_a_shard(out).name + ".tmp-0123456789ab")).write_text("partial")


def _mistyped_plan(out: Path) -> None:
    plan = json.loads((out / "_plan.json").read_text())
    plan["splits"] = "x"
    (out / "_plan.json").write_text(json.dumps(plan))


DAMAGES = {
    "corrupt shard": _flip_a_byte,
    "truncated shard": _truncate,
    "deleted shard": lambda out: _a_shard(out).unlink(),
    "metadata {}": lambda out: (out / "metadata.json").write_text("{}"),
    "schema null": lambda out: _metadata(out, lambda d: d.update(schema=None)),
    "splits x": lambda out: _metadata(out, lambda d: d.update(splits="x")),
    "shard entry mistyped": lambda out: _metadata(
        out, lambda d: d["splits"]["eval"]["shards"].__setitem__(0, 7)
    ),
    "plan mistyped": _mistyped_plan,
    "half-written run": _half_written,
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_overwrite_rebuilds_the_exact_dataset_from_any_damaged_state(
    source, clean, tmp_path, damage
):
    reference, rows = clean
    out = tmp_path / "ds"
    shutil.copytree(reference, out)
    DAMAGES[damage](out)
    done = run_cli(*_args(source, out, "--overwrite"))
    assert done.returncode == 0, done.stderr
    assert "already complete" not in done.stdout + done.stderr  # rewritten, not kept
    assert _rows(str(out)) == rows  # every row exactly once, each in its split
    meta = DatasetMetadata.load(str(out)).to_dict()
    expected = DatasetMetadata.load(str(reference)).to_dict()
    for volatile in ("created",):
        meta.pop(volatile), expected.pop(volatile)
    assert meta == expected
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]


@pytest.mark.parametrize("damage", ["metadata {}", "schema null", "splits x", "plan mistyped"])
def test_a_damaged_dataset_names_the_field_and_the_command_that_gets_out(
    source, clean, tmp_path, damage
):
    """``shard`` without ``--overwrite``, ``inspect`` and ``validate`` end in one line naming
    the file and what is wrong, and the command it gives rebuilds the dataset."""
    reference, rows = clean
    out = tmp_path / "ds"
    shutil.copytree(reference, out)
    DAMAGES[damage](out)
    stuck = run_cli(*_args(source, out))
    assert stuck.returncode == 1 and "Traceback" not in stuck.stderr, stuck.stderr
    line = stuck.stderr.strip().splitlines()[-1]
    name = "_plan.json" if damage == "plan mistyped" else "metadata.json"
    assert line.startswith(f"error: {out / name}: ")
    command = line.split("`")[1]  # this command with --overwrite, its flags in their order
    expected = ["shardtrain", *_args(source, out, "--overwrite")]
    assert shlex.split(command)[:3] == expected[:3]
    assert sorted(shlex.split(command)) == sorted(expected)
    if damage != "plan mistyped":  # readers of the metadata: the same line, their command
        for reader in (["inspect", str(out)], ["validate", str(out), "--against", str(out)]):
            failed = run_cli(*reader)
            assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
            last = failed.stderr.strip().splitlines()[-1]
            assert last.startswith(f"error: {out / 'metadata.json'}: ")
            assert "the dataset is damaged: shard it again with `shardtrain shard " in last
            assert f"--output {out} --label cleared --key attempt_id " in last
            assert last.endswith("--overwrite`")
    run_cli(*shlex.split(command)[1:], check=True)
    assert _rows(str(out)) == rows


@pytest.mark.minio
def test_overwrite_rebuilds_a_damaged_dataset_on_minio(minio, source, clean):
    """On an object store: ``"schema": null`` and a deleted shard at once."""
    _, rows = clean
    src = minio.uri("overwrite", "q.csv")
    storage.upload_file(str(source), src)
    out = minio.uri("overwrite", "ds")
    config = sharding.ShardConfig(
        sources=(src,),
        output=out,
        label="cleared",
        key="attempt_id",
        processes=1,
        task_bytes=200_000,
    )
    sharding.shard(config)
    meta = storage.read_json(storage.join(out, "metadata.json"))
    storage.delete(storage.join(out, meta["splits"]["train"]["shards"][1]["path"]))
    storage.write_json(storage.join(out, "metadata.json"), {**meta, "schema": None})
    with pytest.raises(Exception, match="field 'schema' must be an object, not null"):
        sharding.shard(config)
    outcome = sharding.shard(dataclasses.replace(config, overwrite=True))
    assert outcome.status == "complete"
    assert _rows(out) == rows


@pytest.mark.parametrize("damage", ["truncated shard", "deleted shard"])
def test_shard_again_on_a_complete_dataset_that_lost_a_shard_names_it(
    source, clean, tmp_path, damage
):
    """Complete is not intact: the same ``shard`` command (no ``--overwrite``) lists the
    shards, names the one missing or cut short and gives the command that rebuilds it,
    instead of "already complete; nothing to do"."""
    reference, rows = clean
    out = tmp_path / "ds"
    shutil.copytree(reference, out)
    shard = _a_shard(out)
    DAMAGES[damage](out)
    stuck = run_cli(*_args(source, out))
    assert stuck.returncode == 1 and "Traceback" not in stuck.stderr, stuck.stderr
    line = stuck.stderr.strip().splitlines()[-1]
    assert f"train/{shard.name} " in line and "nothing to do" not in stuck.stdout, line
    command = line.split("; repair: ")[1]
    assert shlex.split(command)[:2] == ["shardtrain", "shard"] and "--overwrite" in command
    run_cli(*shlex.split(command)[1:], check=True)
    assert _rows(str(out)) == rows
