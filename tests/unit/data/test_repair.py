"""The repair command of a damaged dataset (:func:`shardtrain.data.repair.repair_command`):
the recorded inputs and the layout options that differ from the defaults, so that running it
rebuilds the dataset as it was sharded."""

from __future__ import annotations

import json
import shlex

from helpers import REPO
from shardtrain.data import repair
from shardtrain.data.metadata import DatasetMetadata

V1_FILE = REPO / "tests" / "data" / "metadata-v1.json"


def _meta(**changes) -> DatasetMetadata:
    raw = json.loads(V1_FILE.read_text())
    options = changes.pop("options", {})
    raw.update(changes)
    raw["options"].update(options)
    return DatasetMetadata.from_dict(raw)


def test_a_v1_dataset_per_row_gzip_repairs_with_its_record_format_and_nothing_else():
    # v1: per-row Examples (no record_format recorded), gzip: today's defaults are columnar.
    words = shlex.split(repair.repair_command("s3://b/ds", _meta().to_dict()))
    assert words[:3] == ["shardtrain", "shard", "/data/all_types.csv"]
    assert words[words.index("--output") + 1] == "s3://b/ds"
    assert words[words.index("--label") + 1] == "cleared" and "--key" in words
    assert words[words.index("--record-format") + 1] == "example"
    assert "--compression" not in words  # gzip is what per-row Examples get by default
    assert words[-1] == "--overwrite" and words.count("--overwrite") == 1
    for default in ("--num-shards", "--min-shards", "--task-mb", "--max-bad-fraction"):
        assert default not in words


def test_layout_options_dialect_and_rejects_are_carried_over():
    meta = _meta(
        options={
            "record_format": "columnar",
            "compression": "gzip",
            "num_shards": 3,
            "task_bytes": 16 << 20,
            "csv_dialect": {"delimiter": ";", "header": False, "columns": ["a", "b"]},
        },
        rows_read=1_000,
        rows_accepted=987,
        rows_rejected=13,
    )
    command = repair.repair_command("/data/ds", meta.to_dict())
    assert "--compression gzip" in command and "--record-format" not in command
    assert "--num-shards 3" in command and "--task-mb 16" in command
    assert "--delimiter ';'" in command and "--no-header" in command
    assert "--columns a,b" in command
    assert "--max-bad-fraction 0.013 " in command  # 1.3 % rejected: the default 0.1 % fails
