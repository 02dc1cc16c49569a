"""What the Parquet and JSON-lines tests share: the value an Example holds for a pandas value,
a quest-log Parquet file, the shards' CRCs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from shardtrain.data import datagen


def as_example_value(value, column_type: str):
    """What an Example holds for a pandas value of a column of ``column_type`` (None: absent)."""
    if value is None or value is pd.NaT or (isinstance(value, float) and math.isnan(value)):
        return None
    if column_type == "float":
        with np.errstate(over="ignore"):  # beyond float32: inf, as the sharder stores it
            return float(np.float32(value))
    if column_type == "bool":
        return int(bool(value))
    if column_type == "int":
        return int(value)
    return str(value).encode()


def quest_parquet(tmp_path, rows: int, seed: int, **write) -> tuple:
    """A quest-log CSV and the same rows as a Parquet file: ``(csv_path, parquet_path)``."""
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), rows, seed=seed)
    table = pa.Table.from_pandas(pd.read_csv(csv_path, keep_default_na=False, na_values=[""]))
    path = tmp_path / "quest.parquet"
    pq.write_table(table, path, **write)
    return csv_path, path


def crc_lists(meta: dict) -> list:
    """The CRC32C of every shard of the train and eval splits, in order."""
    return [[s["crc32c"] for s in meta["splits"][n]["shards"]] for n in ("train", "eval")]
