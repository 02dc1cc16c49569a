"""Scoring a shardtrain export the way a client does, shared by the export and real-data tests.

``predict_csv`` takes raw CSV lines; ``serving_default`` takes one tensor per input, named as
``shardtrain_model.json`` lists them (numbers as float32 with NaN for missing, true/false as
1/0, strings with '' for missing); the restored module's ``serve`` takes the same tensors
keyed by the columns' own names.
"""

from __future__ import annotations

import json
import math
from pathlib import Path


def latest_export(model_dir: str | Path) -> tuple[Path, dict]:
    """(the newest export's folder, its ``shardtrain_model.json``)."""
    pointer = json.loads((Path(model_dir) / "export" / "latest.json").read_text())
    export = Path(model_dir) / pointer["path"]
    return export, json.loads((export / "shardtrain_model.json").read_text())


def score(export: Path, info: dict, header: list[str], rows: list, lines: list[str]):
    """``(predict_csv(lines), serving_default(inputs), serve(inputs by column))`` for the same
    rows: ``rows`` are the lines' fields (texts, None for missing) in ``header``'s order."""
    import tensorflow as tf

    nulls = set(info["feature_spec"]["null_values"])
    bools = {f["name"] for f in info["feature_spec"]["numeric"] if f["type"] == "bool"}
    loaded = tf.saved_model.load(str(export))
    from_csv = loaded.signatures["predict_csv"](lines=tf.constant(lines))
    kwargs = {}
    for item in info["inputs"]:
        texts = [r[header.index(item["column"])] for r in rows]
        missing = [t is None or t in nulls for t in texts]
        if item["column"] in bools:  # true/false as 1/0, as the sharder stores them
            values = [
                math.nan if m else float(t.strip().lower() == "true")
                for t, m in zip(texts, missing, strict=True)
            ]
            kwargs[item["input"]] = tf.constant(values, tf.float32)
        elif item["dtype"] == "float32":
            values = [math.nan if m else float(t) for t, m in zip(texts, missing, strict=True)]
            kwargs[item["input"]] = tf.constant(values, tf.float32)
        else:
            kwargs[item["input"]] = tf.constant(
                ["" if m else t for t, m in zip(texts, missing, strict=True)]
            )
    served = loaded.signatures["serving_default"](**kwargs)
    # The restored module also takes the features keyed by the columns' own names.
    by_column = {i["column"]: kwargs[i["input"]] for i in info["inputs"]}
    direct = loaded.serve(by_column)
    return from_csv, served, direct
