"""The end-to-end demo on the embedded default: local storage, no server, a few minutes.

It runs the main job the way a user would: synthetic quest logs (with a few malformed rows)
→ TFRecord shards with schema, statistics, a deterministic train/eval split and the rejects
accounted for. Later stages (training on a local TFJob-shaped cluster, the pipeline) plug in
here as they land.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from shardtrain import datagen, sharding, storage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DemoResult:
    """Where the demo put things."""

    csv: str
    dataset: str
    metadata: dict


def run_demo(workdir: str, *, rows: int = 200_000, seed: int = 7) -> DemoResult:
    """Generate quest logs in ``workdir`` and shard them; re-running reuses what is done.

    Args:
        workdir: a local directory for all outputs.
        rows: quest attempts to generate.
        seed: generator seed.

    Returns:
        The paths of the CSV and the dataset, and the dataset's metadata.
    """
    os.makedirs(workdir, exist_ok=True)
    csv = os.path.join(workdir, "data", "quest_logs.csv")
    if not storage.exists(csv):
        log.info("generating %d quest-log rows into %s", rows, csv)
        datagen.generate_quest_logs(csv, rows, seed=seed, bad_fraction=0.0005)
    dataset = os.path.join(workdir, "dataset")
    config = sharding.ShardConfig(
        sources=(csv,),
        output=dataset,
        label="cleared",
        key="attempt_id",
        max_bad_fraction=0.01,
    )
    outcome = sharding.shard(config)
    meta = outcome.metadata or sharding.load_metadata(dataset)
    return DemoResult(csv=csv, dataset=dataset, metadata=meta)
