"""Shard options (data.shard_config): the format of the sources chosen from their names."""

from __future__ import annotations

import pytest

from shardtrain.data.shard_config import detect_format
from shardtrain.errors import ConfigError


def test_detect_format_from_names_and_mixing_is_refused():
    assert detect_format(["s3://b/logs/*.parquet"]) == "parquet"
    assert detect_format(["a.PQ", "b.parq"]) == "parquet"
    assert detect_format(["x.jsonl.gz", "y.ndjson"]) == "jsonl"
    assert detect_format(["x.csv.gz", "data/*", "z.tsv"]) == "csv"
    with pytest.raises(ConfigError, match=r"^the sources mix formats: csv \(a.csv\), parquet"):
        detect_format(["a.csv", "b.parquet"])
