"""CSV → TFRecord shards on local disk: values, splits, rejects, errors, resume."""

from __future__ import annotations

import collections
import csv
import gzip
import json
import math
import os
import shutil

import pytest

from helpers import ALL_TYPES, dataset_files, read_examples, run_cli
from shardtrain import storage
from shardtrain.data import datagen, sharding
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.errors import ConfigError, DataError, StorageError
from shardtrain.storage import direct


def _config(sources, output, **kw) -> sharding.ShardConfig:
    kw.setdefault("label", "cleared")
    kw.setdefault("processes", 1)
    return sharding.ShardConfig(sources=tuple(map(str, sources)), output=str(output), **kw)


def _metadata(config: sharding.ShardConfig) -> dict:
    """Shard, and return metadata.json as it is written."""
    return sharding.shard(config).metadata.to_dict()


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_values_round_trip_for_every_type_and_missing(tmp_path, compression):
    out = tmp_path / "ds"
    outcome = sharding.shard(
        _config([ALL_TYPES], out, key="id", compression=compression, min_shards=2)
    )
    assert outcome.status == "complete"
    meta = outcome.metadata.to_dict()
    types = {c["name"]: c["type"] for c in meta["schema"]["columns"]}
    assert types == {
        "id": "string",
        "level": "int",
        "score": "float",
        "cls": "string",
        "weekend": "bool",
        "note": "string",
        "cleared": "int",
    }
    rows = {r["id"].decode(): r for r in read_examples(str(out))}
    assert sorted(rows) == ["r1", "r2", "r3", "r4", "r5", "r6"]
    assert rows["r1"]["level"] == 1 and rows["r1"]["score"] == 0.5
    assert rows["r1"]["cls"] == b"mage" and rows["r1"]["weekend"] == 1
    assert rows["r2"]["level"] == -7 and rows["r2"]["score"] == -2.25
    assert rows["r2"]["note"] == b"quoted, comma" and rows["r2"]["weekend"] == 0
    # Missing values are absent features.
    assert "level" not in rows["r3"] and "cls" not in rows["r3"] and "note" not in rows["r3"]
    assert rows["r3"]["score"] == 1000.0
    assert "score" not in rows["r4"] and "weekend" not in rows["r4"]
    assert rows["r4"]["note"] == "unicode é ✓".encode()
    assert rows["r5"]["level"] == 9223372036854775807 and math.isnan(rows["r5"]["score"])
    assert rows["r6"]["level"] == 0 and math.copysign(1, rows["r6"]["score"]) == -1.0
    # A quoted empty string is missing too, as in pandas: quoting does not change what a
    # null word means (issue 14; before, "" was an empty string only when quoted).
    assert "note" not in rows["r6"]
    assert {r["cleared"] for r in rows.values()} == {0, 1}
    assert meta["rows_read"] == 6 and meta["rows_accepted"] == 6 and meta["rows_rejected"] == 0
    stats = meta["stats"]["columns"]
    assert stats["level"]["missing"] == 1 and stats["level"]["min"] == -7
    assert stats["score"]["nan"] == 1 and stats["score"]["max"] == 1000.0
    assert {t["value"] for t in stats["cls"]["top"]} == {"mage", "warrior", "rogue", "cleric"}
    assert meta["stats"]["label"]["counts"] == {"0": 3, "1": 3}
    assert meta["label_info"]["task"] == "binary"


def test_quest_logs_every_row_once_and_shard_layout(tmp_path):
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 20_000, seed=3)
    out = tmp_path / "ds"
    meta = _metadata(_config([csv_path], out, key="attempt_id"))
    assert meta["rows_read"] == 20_000 == meta["rows_accepted"]
    for split in ("train", "eval"):
        shards = meta["splits"][split]["shards"]
        assert len(shards) == 8  # never fewer than 8 per split
        for i, s in enumerate(shards):
            assert s["path"] == f"{split}/part-{i:05d}-of-00008.tfrecord.gz"
            assert (out / s["path"]).stat().st_size == s["bytes"]
    examples = read_examples(str(out))
    keys = [r["attempt_id"] for r in examples]
    assert len(keys) == len(set(keys)) == 20_000
    frac = meta["splits"]["eval"]["num_records"] / 20_000
    assert 0.08 < frac < 0.12
    with open(csv_path, newline="") as f:
        src = {row["attempt_id"]: row for row in csv.DictReader(f)}
    for r in examples[:500]:
        row = src[r["attempt_id"].decode()]
        assert str(r["cleared"]) == row["cleared"]
        assert ("player_level" in r) == (row["player_level"] != "")
    assert meta["sources"][0]["uri"] == str(csv_path) and meta["sources"][0]["size"] > 0
    assert meta["tool_version"]


def _split_keys(uri: str, key: str = "attempt_id") -> dict[str, set]:
    out = collections.defaultdict(set)
    for r in read_examples(uri):
        out[r["__split__"]].add(r[key])
    return out


def test_split_is_deterministic_across_runs_and_worker_counts(tmp_path):
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 12_000, seed=5)
    common = {"key": "attempt_id", "task_bytes": 256 * 1024}  # several tasks and pieces
    one = _metadata(_config([csv_path], tmp_path / "one", **common))
    again = _metadata(_config([csv_path], tmp_path / "again", **common))
    for w in range(3):
        outcome = sharding.shard(
            _config([csv_path], tmp_path / "three", num_workers=3, worker_index=w, **common)
        )
        assert outcome.status == "worker-done"
    three = sharding.finalize(str(tmp_path / "three")).to_dict()
    # And with the tasks spread over two local processes.
    pooled = sharding.shard(
        sharding.ShardConfig(
            sources=(str(csv_path),),
            output=str(tmp_path / "pooled"),
            label="cleared",
            processes=2,
            **common,
        )
    ).metadata.to_dict()
    runs = (one, again, three, pooled)
    checks = [[s["crc32c"] for s in m["splits"]["train"]["shards"]] for m in runs]
    assert checks[0] == checks[1] == checks[2] == checks[3]  # byte-identical shards
    assert _split_keys(str(tmp_path / "one")) == _split_keys(str(tmp_path / "three"))
    # Hashing the whole row instead of a key is deterministic too.
    a = sharding.shard(
        _config([csv_path], tmp_path / "row-a", task_bytes=300_000)
    ).metadata.to_dict()
    b = sharding.shard(
        _config([csv_path], tmp_path / "row-b", task_bytes=100_000)
    ).metadata.to_dict()
    assert a["splits"]["eval"]["num_records"] == b["splits"]["eval"]["num_records"]
    assert _split_keys(str(tmp_path / "row-a")) == _split_keys(str(tmp_path / "row-b"))


def test_rejects_are_counted_and_located(tmp_path):
    csv_path = tmp_path / "quest.csv"
    summary = datagen.generate_quest_logs(str(csv_path), 10_000, seed=11, bad_fraction=0.01)
    bad = sum(summary.bad_rows_by_kind.values())
    assert bad > 50
    out = tmp_path / "ds"
    # Types from the sample, so the junk values datagen writes are rejected as bad values (by
    # all rows, the default, their columns would be strings and the rows accepted).
    meta = sharding.shard(
        _config([csv_path], out, max_bad_fraction=0.05, task_bytes=200_000, infer_types="sample")
    ).metadata.to_dict()
    assert meta["rows_read"] == summary.rows
    assert meta["rows_rejected"] == bad
    assert meta["rows_accepted"] + meta["rows_rejected"] == meta["rows_read"]
    assert meta["rejects_by_reason"].get("wrong_field_count", 0) == summary.bad_rows_by_kind.get(
        "wrong_field_count", 0
    )
    assert meta["rejects_by_reason"].get("bad_value", 0) == summary.bad_rows_by_kind.get(
        "bad_value", 0
    )
    lines = csv_path.read_text().splitlines()
    rejects = [json.loads(x) for x in (out / "rejects" / "rejects.jsonl").read_text().splitlines()]
    assert len(rejects) == bad
    for r in rejects:
        assert r["source"] == str(csv_path)
        assert lines[r["line"] - 1][: len(r["text"])] == r["text"]  # the line number is right
    assert sum(1 for _ in read_examples(str(out))) == meta["rows_accepted"]


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
    proc = run_cli("shard", str(junk), "--output", str(tmp_path / "junk"), "--label", "cleared")
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and proc.stderr.splitlines()[-1] == errors[0]
    assert "wrong_field_count" in errors[0] and "Traceback" not in proc.stderr
    # With the threshold raised every row is accounted for as rejected... and none accepted.
    proc = run_cli(
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


def test_clear_errors_for_bad_sources(tmp_path):
    missing = run_cli(
        "shard", str(tmp_path / "nope.csv"), "-o", str(tmp_path / "o"), "--label", "cleared"
    )
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"error: {tmp_path / 'nope.csv'}: no such file or object"
    no_label = run_cli("shard", str(ALL_TYPES), "-o", str(tmp_path / "o"), "--label", "won")
    assert no_label.returncode == 1 and no_label.stderr.count("\n") == 1
    assert "label column 'won' not found" in no_label.stderr and str(ALL_TYPES) in no_label.stderr
    binary = tmp_path / "binary.csv"
    binary.write_bytes(os.urandom(4096).replace(b"\n", b"x") + b"\x00")
    proc = run_cli("shard", str(binary), "-o", str(tmp_path / "o"), "--label", "x")
    assert proc.returncode == 1 and "not a text CSV file" in proc.stderr
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    proc = run_cli("shard", str(empty), "-o", str(tmp_path / "o"), "--label", "x")
    assert proc.returncode == 1 and "the file is empty" in proc.stderr
    header_only = tmp_path / "header.csv"
    header_only.write_text("a,b,cleared\n")
    proc = run_cli("shard", str(header_only), "-o", str(tmp_path / "o"), "--label", "cleared")
    assert proc.returncode == 1 and "no data rows" in proc.stderr
    proc = run_cli(
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
    run_cli(*args, check=True)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    again = run_cli(*args, check=True)
    assert "already complete" in again.stdout
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before
    other = run_cli(*args, "--split", "train=0.5,eval=0.5")
    assert other.returncode == 1 and "--overwrite" in other.stderr
    replaced = run_cli(*args, "--split", "train=0.5,eval=0.5", "--overwrite", check=True)
    assert replaced.returncode == 0
    assert DatasetMetadata.load(str(out)).to_dict()["splits"]["train"]["fraction"] == 0.5


def test_schema_file_overrides_types_and_drops(tmp_path):
    schema_file = tmp_path / "schema.yaml"
    schema_file.write_text("columns:\n  level: float\ndrop: [note]\n")
    out = tmp_path / "ds"
    meta = sharding.shard(
        _config([ALL_TYPES], out, key="id", schema_file=str(schema_file), min_shards=1)
    ).metadata.to_dict()
    cols = {c["name"]: c for c in meta["schema"]["columns"]}
    assert cols["level"]["type"] == "float" and cols["note"]["drop"]
    rows = read_examples(str(out))
    assert all("note" not in r for r in rows)
    assert {r["id"]: r.get("level") for r in rows}[b"r2"] == -7.0
    bad = tmp_path / "bad.yaml"
    bad.write_text("columns:\n  level: decimal\n")
    with pytest.raises(ConfigError, match="expected one of int, float, bool, string"):
        sharding.shard(_config([ALL_TYPES], tmp_path / "x", schema_file=str(bad)))
    typo = tmp_path / "typo.yaml"
    typo.write_text("drop: [nonexistent]\n")
    with pytest.raises(ConfigError, match="does not have: nonexistent"):
        sharding.shard(_config([ALL_TYPES], tmp_path / "y", schema_file=str(typo)))


def test_in_place_direct_writes_give_the_same_dataset_as_page_cache_writes(tmp_path, monkeypatch):
    """Uncompressed shards go to the disk straight from the encoder's buffer (O_DIRECT, each
    shard's records at its file's page phase): the dataset is byte for byte the one written
    through the page cache."""
    if not direct._on_block_device(str(tmp_path)):
        pytest.skip("O_DIRECT is not used on this file system")
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 30_000, seed=9, bad_fraction=0.01)
    calls = collections.Counter()
    for name in ("write", "write_in_place"):
        method = getattr(direct._DirectWriter, name)

        def counted(self, *args, _method=method, _name=name):
            calls[_name] += 1
            return _method(self, *args)

        monkeypatch.setattr(direct._DirectWriter, name, counted)
    datasets = {}
    for flag in ("1", "0"):
        monkeypatch.setenv(storage.DIRECT_IO_ENV, flag)
        out = tmp_path / f"ds-{flag}"
        config = _config(
            [csv_path], out, compression="none", block_bytes=1024 * 1024, max_bad_fraction=0.05
        )
        sharding.shard(config)
        datasets[flag] = dataset_files(out)
        if flag == "1":
            # Every write is offered in place; the groups too small for it (the eval split's,
            # here) fall back to a copying write(). Most of the train split's go in place.
            assert calls["write_in_place"] - calls["write"] > 20
    assert datasets["1"] == datasets["0"]
    assert datasets["1"]["metadata.json"]["splits"]["train"]["num_records"] > 20_000


def test_rerun_removes_the_temporary_files_a_killed_run_left(tmp_path):
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 3_000, seed=3, bad_fraction=0.01)
    out = tmp_path / "ds"
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
    proc = run_cli(*args, "--processes", "1")
    last = proc.stderr.splitlines()[-1]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert last.startswith(f"error: {src}: truncated gzip file:") and "Aborted" not in last
    assert f"({len(data) * 3 // 4:,} compressed bytes read)" in last
    # Replaced by a good copy (a new version, so a new plan): the re-run completes.
    shutil.copy(good, src)
    run_cli(*args, "--overwrite", check=True)
    assert DatasetMetadata.load(str(tmp_path / "ds")).rows_accepted == 60_000
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    src.write_bytes(bytes(flipped))
    with pytest.raises(DataError, match=rf"^{src}: corrupt gzip file: .* compressed bytes read"):
        sharding.shard(_config([src], tmp_path / "ds2", max_bad_fraction=1.0))


def test_shard_crcs_name_the_corrupt_file(tmp_path):
    from shardtrain.train import dataset  # TensorFlow only when a dataset is built

    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 3_000, seed=1)
    out = str(tmp_path / "ds")
    meta = sharding.shard(_config([csv_path], out, num_shards=2)).metadata
    shards = dataset.split_shards(out, meta, "eval")
    assert dataset.find_corrupt_shard(shards) is None
    with open(storage.local_path(shards[1].uri), "r+b") as f:
        f.seek(-10, os.SEEK_END)
        byte = f.read(1)[0]
        f.seek(-10, os.SEEK_END)
        f.write(bytes([byte ^ 1]))

    class DataLossError(Exception):  # what tf.errors raises, without the file's name
        pass

    error = dataset.input_error(DataLossError("corrupted record at 12"), out, meta, ["eval"])
    assert isinstance(error, DataError)
    assert str(error).startswith(f"{shards[1].uri}: corrupt (CRC-32C ")
    expected = f"expected {shards[1].crc32c} of {shards[1].bytes:,}), re-shard the dataset"
    assert str(error).endswith(expected)
    assert dataset.input_error(ValueError("other"), out, meta, ["eval"]) is None
