"""The plan's task rule applied to a listing (data.task_rule): the pipeline's fan-out counts
the tasks from the file sizes alone, and the count is the plan's, or fewer when the output
is so much larger than the input that the plan adds tasks to bound their open shards."""

from __future__ import annotations

import gzip
import shutil

import pytest

from helpers import wide_csv
from shardtrain.data import datagen, task_rule
from shardtrain.data.shard_config import ShardConfig
from shardtrain.data.sharding.plan import build_plan


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("task-rule")
    paths = {}
    for name, rows in (("a", 4000), ("b", 1500), ("c", 300)):
        path = root / f"{name}.csv"
        datagen.generate_quest_logs(str(path), rows, seed=len(name) + rows)
        paths[name] = path
    with open(paths["a"], "rb") as src, gzip.open(root / "a.csv.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    paths["a.gz"] = root / "a.csv.gz"
    return paths


def _config(sources, **options) -> ShardConfig:
    return ShardConfig(
        sources=tuple(str(s) for s in sources),
        output="unused",
        label="cleared",
        key="attempt_id",
        **options,
    )


@pytest.mark.parametrize(
    "names",
    [("a",), ("b", "c"), ("a", "b", "c"), ("a.gz",), ("a.gz", "b"), ("c",)],
)
@pytest.mark.parametrize(
    "options",
    [
        {"task_bytes": 50_000},
        {"task_bytes": 120_000, "min_shards": 40},
        {"task_bytes": 20_000, "num_shards": 7},
        {"task_bytes": 20_000, "num_shards": 100},
        {"task_bytes": 10_000_000},
        {"task_bytes": 33_333, "splits": (("train", 0.8), ("eval", 0.1), ("test", 0.1))},
    ],
)
def test_the_listing_counts_the_plans_tasks(files, names, options):
    config = _config([files[n] for n in names], **options)
    listed = task_rule.listed_tasks(config)
    assert listed == len(build_plan(config).tasks)


#: Options under which the plan adds tasks the sizes do not show (with :func:`wide_csv`).
MORE_TASKS_THAN_LISTED = dict(
    target_shard_bytes=1 << 20, record_format="example", compression="none", task_bytes=1 << 30
)


def test_an_output_much_larger_than_its_input_gets_more_tasks_than_the_listing_counts(tmp_path):
    """Small shards of per-row Examples uncompressed: a split needs more than 16 shards per
    task, so the plan adds tasks the sizes alone do not show. The fan-out then starts fewer
    workers than there are tasks: safe (the workers pick their tasks by their own count, see
    tests/unit/kubeflow/test_steps.py) but less parallel, a documented limit held here."""
    wide_csv(tmp_path / "wide.csv")
    config = ShardConfig(
        sources=(str(tmp_path / "wide.csv"),),
        output="unused",
        label="label",
        **MORE_TASKS_THAN_LISTED,
    )
    assert task_rule.listed_tasks(config) == 1
    assert len(build_plan(config).tasks) == 2


def test_sources_the_listing_cannot_count(tmp_path, files):
    assert task_rule.listed_tasks(_config([tmp_path / "x.parquet"])) is None
    images = ShardConfig(sources=(str(tmp_path),), output="unused", images=True)
    assert not task_rule.counts_by_listing(images)
    assert task_rule.counts_by_listing(_config([files["a"]]))
