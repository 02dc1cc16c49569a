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


def input_values(info: dict, header: list[str], rows: list) -> dict[str, list]:
    """``serving_default``'s inputs for ``rows`` as plain values, by input name: numbers as
    floats (NaN for missing, true/false as 1/0, as the sharder stores them), strings as they
    are ('' for missing). ``rows`` are field texts (None for missing) in ``header``'s order."""
    nulls = set(info["feature_spec"]["null_values"])
    bools = {f["name"] for f in info["feature_spec"]["numeric"] if f["type"] == "bool"}
    values: dict[str, list] = {}
    for item in info["inputs"]:
        texts = [r[header.index(item["column"])] for r in rows]
        missing = [t is None or t in nulls for t in texts]
        if item["column"] in bools:
            values[item["input"]] = [
                math.nan if m else float(t.strip().lower() == "true")
                for t, m in zip(texts, missing, strict=True)
            ]
        elif item["dtype"] == "float32":
            values[item["input"]] = [
                math.nan if m else float(t) for t, m in zip(texts, missing, strict=True)
            ]
        else:
            values[item["input"]] = ["" if m else t for t, m in zip(texts, missing, strict=True)]
    return values


def score(export: Path, info: dict, header: list[str], rows: list, lines: list[str]):
    """``(predict_csv(lines), serving_default(inputs), serve(inputs by column))`` for the same
    rows: ``rows`` are the lines' fields (texts, None for missing) in ``header``'s order."""
    import tensorflow as tf

    loaded = tf.saved_model.load(str(export))
    from_csv = loaded.signatures["predict_csv"](lines=tf.constant(lines))
    dtypes = {i["input"]: i["dtype"] for i in info["inputs"]}
    kwargs = {
        name: tf.constant(values, tf.float32 if dtypes[name] == "float32" else tf.string)
        for name, values in input_values(info, header, rows).items()
    }
    served = loaded.signatures["serving_default"](**kwargs)
    # The restored module also takes the features keyed by the columns' own names.
    by_column = {i["column"]: kwargs[i["input"]] for i in info["inputs"]}
    direct = loaded.serve(by_column)
    return from_csv, served, direct
