"""The plan: the split is deterministic across runs and worker counts; a schema file overrides
types and drops columns."""

from __future__ import annotations

import collections

import pytest

from helpers import ALL_TYPES, read_examples
from shardtrain.data import datagen, sharding
from shardtrain.errors import ConfigError


def _config(sources, output, **kw) -> sharding.ShardConfig:
    kw.setdefault("label", "cleared")
    kw.setdefault("processes", 1)
    return sharding.ShardConfig(sources=tuple(map(str, sources)), output=str(output), **kw)


def _metadata(config: sharding.ShardConfig) -> dict:
    """Shard, and return metadata.json as it is written."""
    return sharding.shard(config).metadata.to_dict()


def _split_keys(uri: str, key: str = "attempt_id") -> dict[str, set]:
    out = collections.defaultdict(set)
    for r in read_examples(uri):
        out[r["__split__"]].add(r[key])
    return out


def test_split_is_deterministic_across_runs_and_worker_counts(tmp_path):
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 6_000, seed=5)
    common = {"key": "attempt_id", "task_bytes": 128 * 1024}  # several tasks (6) and pieces
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
    # The histograms too, however many workers and processes counted them.
    hists = [{n: c.get("histogram") for n, c in m["stats"]["columns"].items()} for m in runs]
    assert hists[0] == hists[1] == hists[2] == hists[3]
    assert (
        sum(hists[0]["player_level"]["counts"]) == one["stats"]["columns"]["player_level"]["count"]
    )
    # Hashing the whole row instead of a key is deterministic too.
    a = sharding.shard(
        _config([csv_path], tmp_path / "row-a", task_bytes=150_000)
    ).metadata.to_dict()
    b = sharding.shard(
        _config([csv_path], tmp_path / "row-b", task_bytes=50_000)
    ).metadata.to_dict()
    assert a["splits"]["eval"]["num_records"] == b["splits"]["eval"]["num_records"]
    assert _split_keys(str(tmp_path / "row-a")) == _split_keys(str(tmp_path / "row-b"))


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


def test_histogram_bins_are_in_the_plan_but_not_in_its_fingerprint(tmp_path):
    """A dataset written before histograms existed (its plan has none) is the same dataset:
    complete, it is kept as it is."""
    import json

    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 3_000, seed=2)
    config = _config([csv_path], tmp_path / "ds", key="attempt_id")
    meta = _metadata(config)
    plan_file = tmp_path / "ds" / "_plan.json"
    plan = json.loads(plan_file.read_text())
    assert plan["histograms"]["player_level"][1:3] == [2, 0]  # steps of 2 levels
    assert "histogram" in meta["stats"]["columns"]["gear_score"]
    # As an earlier version wrote it: no bins in the plan, no histograms in the statistics.
    del plan["histograms"]
    plan_file.write_text(json.dumps(plan))
    stored = sharding.Plan.from_dict(str(tmp_path / "ds"), plan)
    assert stored.histograms == {} and stored.fingerprinted().fingerprint == plan["fingerprint"]
    assert sharding.shard(config).status == "already-complete"


def test_a_small_split_does_not_cap_the_tasks(tmp_path):
    """Every task owns a shard of every split: a 10% eval split sized by --target-shard-mb
    alone would cap the tasks -- and the workers that can share a run -- at its few shards.
    It gets a shard per task instead; --num-shards still decides when given."""
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 12_000, seed=5)  # ~1.3 MB
    config = _config([csv_path], tmp_path / "ds", task_bytes=64 * 1024)
    plan = sharding.build_plan(config)
    assert len(plan.tasks) >= 20  # about input / task_bytes, not min_shards (8)
    assert plan.num_shards == (len(plan.tasks), len(plan.tasks))
    fixed = sharding.build_plan(
        _config([csv_path], tmp_path / "fixed", task_bytes=64 * 1024, num_shards=4)
    )
    assert fixed.num_shards == (4, 4) and len(fixed.tasks) == 4
