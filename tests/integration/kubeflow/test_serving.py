"""A real export, published as the pipeline publishes it, is what KServe's TensorFlow Serving
loads and answers the request body KServe's v1 protocol sends.

A CSV whose headers have '/', spaces and Japanese (so some signature inputs are derived
names, not the columns') is sharded and trained (30 steps) through the ``shardtrain`` command,
and its export published to a serving base with the export step's own function. Then:

* the base is laid out as TensorFlow Serving reads ``--model_base_path``: the highest
  integer-named directory holds ``saved_model.pb`` and ``variables/``, ``latest.json`` names
  it (:func:`shardtrain.kubeflow.serving.check_published`), and that directory loads;
* raw CSV rows become the JSON body a client POSTs to ``/v1/models/<name>:predict``
  (``{"instances": [{<input name>: value, ...}, ...]}``), and the body becomes tensors the
  way TensorFlow Serving's REST layer does for the row format (its ``json_tensor.cc``:
  every instance an object whose keys are exactly the signature's inputs, each value
  checked against the input's dtype, stacked into one batch tensor per input);
* ``serving_default`` on those tensors predicts exactly what ``predict_csv`` predicts from
  the same raw lines.
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from exports import input_values, latest_export
from helpers import run_cli
from shardtrain import storage
from shardtrain.kubeflow import serving, steps

pytestmark = [pytest.mark.slow]

TRAIN = ("--train-steps", "30", "--batch-size", "64", "--checkpoint-every", "30")
HEADER = ["player level", "zone/area", "クエスト種別", "time (min)", "party", "cleared"]
SCORED = 50


def _rows(n: int = 500) -> list[list[str]]:
    rng = random.Random(5)
    rows = []
    for _ in range(n):
        level = rng.randint(1, 60)
        zone = rng.choice(["north/hills", "south/coast", "east/ruins"])
        kind = rng.choice(["討伐", "採集", "護衛"])
        minutes = "" if rng.random() < 0.1 else f"{rng.uniform(3, 90):.1f}"  # some missing
        party = rng.choice(["true", "false"])
        p = (
            0.2
            + 0.6 * level / 60
            - (0.2 if kind == "討伐" else 0)
            + (0.1 if party == "true" else 0)
        )
        rows.append([str(level), zone, kind, minutes, party, "yes" if rng.random() < p else "no"])
    return rows


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """(serving base, the CSV's header, its rows, its raw lines) of a trained, published model."""
    tmp = tmp_path_factory.mktemp("serving")
    rows = _rows()
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([HEADER, *rows])
    source = tmp / "quests.csv"
    source.write_text(buf.getvalue(), encoding="utf-8")
    data, model_dir = str(tmp / "data"), str(tmp / "model")
    shard = run_cli("shard", str(source), "--output", data, "--label", "cleared")
    assert shard.returncode == 0, shard.stderr[-3000:]
    train = run_cli("train", "--data", data, "--model-dir", model_dir, *TRAIN)
    assert train.returncode == 0, train.stderr[-3000:]
    base = str(tmp / "serving")
    export, _ = latest_export(model_dir)
    steps.publish_export(str(export), base, step=30)
    lines = buf.getvalue().splitlines()[1 : SCORED + 1]
    return base, rows[:SCORED], lines


def _tf_serving_version_dir(base: str) -> Path:
    """What TensorFlow Serving's file-system source serves: the highest directory under the
    base whose name parses as an int64; anything else (latest.json) is not a version."""
    versions = [p for p in Path(base).iterdir() if p.name.isdigit() and p.is_dir()]
    return max(versions, key=lambda p: int(p.name))


def test_the_published_base_is_what_tensorflow_serving_loads(published):
    import tensorflow as tf

    base, _, _ = published
    checked = serving.check_published(base)
    served = _tf_serving_version_dir(base)
    assert checked.uri == str(served) and checked.version == int(served.name)
    assert storage.read_json(f"{base}/latest.json")["version"] == served.name
    assert (served / "saved_model.pb").is_file() and (served / "variables").is_dir()
    assert {p.name for p in Path(base).iterdir()} == {"latest.json", served.name}
    loaded = tf.saved_model.load(str(served))
    assert {"serving_default", "predict_csv"} <= set(loaded.signatures)


def v1_body(info: dict, rows: list[list[str]]) -> str:
    """The JSON a client POSTs to ``/v1/models/<name>:predict`` for raw CSV rows: one object
    per row keyed by the signature's input names (shardtrain_model.json's ``inputs``), a
    missing number as the literal NaN (which TensorFlow Serving's parser accepts)."""
    texts = [[None if t == "" else t for t in row] for row in rows]
    values = input_values(info, HEADER, texts)
    instances = [{name: column[i] for name, column in values.items()} for i in range(len(rows))]
    return json.dumps({"instances": instances}, ensure_ascii=False)


def tf_serving_row_format(body: str, signature) -> dict:
    """The tensors TensorFlow Serving's REST layer builds from a row-format body: each
    instance must be an object with exactly the signature's input names; each value must
    suit the input's dtype (a JSON number for float32, a string for string); an input's
    values are stacked, in instance order, into a tensor of the signature's dtype."""
    import tensorflow as tf

    specs = signature.structured_input_signature[1]
    instances = json.loads(body)["instances"]
    assert isinstance(instances, list) and instances, "No values in 'instances' array"
    columns: dict[str, list] = {name: [] for name in specs}
    for i, instance in enumerate(instances):
        if not isinstance(instance, dict) or set(instance) != set(specs):
            raise ValueError(
                f"Failed to process element: {i} of 'instances' list. JSON object keys must "
                f"be equal to: {','.join(sorted(specs))}"
            )
        for name, value in instance.items():
            dtype = specs[name].dtype
            ok = (
                isinstance(value, str)
                if dtype == tf.string
                else isinstance(value, int | float) and not isinstance(value, bool)
            )
            if not ok:
                raise ValueError(f"JSON Value: {value!r} is not of expected type: {dtype.name}")
            columns[name].append(value)
    return {name: tf.constant(columns[name], dtype=specs[name].dtype) for name in specs}


def test_serving_default_answers_kserves_v1_body_as_predict_csv(published):
    import tensorflow as tf

    base, rows, lines = published
    version = _tf_serving_version_dir(base)
    info = json.loads((version / "shardtrain_model.json").read_text())
    names = {i["column"]: i["input"] for i in info["inputs"]}
    # The signature renames the columns TensorFlow does not take as input names (the README's
    # example body uses these very names).
    assert names == {
        "party": "party",
        "player level": "player_level_2752298c",
        "zone/area": "zone_area_6e504abc",
        "クエスト種別": "col_558bb9d6",
        "time (min)": "time_min_14c033b0",
    }
    dtypes = {i["input"]: i["dtype"] for i in info["inputs"]}
    assert dtypes["party"] == dtypes["time_min_14c033b0"] == "float32"  # true/false as 1/0

    loaded = tf.saved_model.load(str(version))
    signature = loaded.signatures["serving_default"]
    body = v1_body(info, rows)
    assert "NaN" in body  # the missing minutes
    instances = json.loads(body)["instances"]
    assert set(instances[0]) == set(names.values()) == set(signature.structured_input_signature[1])
    served = signature(**tf_serving_row_format(body, signature))
    from_csv = loaded.signatures["predict_csv"](lines=tf.constant(lines))

    probs = served["probabilities"].numpy()
    assert probs.shape == (SCORED, len(info["feature_spec"]["classes"]))
    np.testing.assert_allclose(probs, from_csv["probabilities"].numpy(), atol=1e-6)
    assert served["classes"].numpy().tolist() == from_csv["classes"].numpy().tolist()
    assert math.isfinite(float(probs.sum()))


def test_a_body_keyed_by_column_names_is_refused_as_tensorflow_serving_refuses_it(published):
    import tensorflow as tf

    base, rows, _ = published
    version = _tf_serving_version_dir(base)
    info = json.loads((version / "shardtrain_model.json").read_text())
    signature = tf.saved_model.load(str(version)).signatures["serving_default"]
    by_column = {
        "instances": [
            {c: row[HEADER.index(c)] for c in (i["column"] for i in info["inputs"])}
            for row in rows[:2]
        ]
    }
    with pytest.raises(ValueError, match="keys must be equal to"):
        tf_serving_row_format(json.dumps(by_column, ensure_ascii=False), signature)
    # A number sent as a string is refused too: TensorFlow Serving does not parse strings.
    good = json.loads(v1_body(info, rows[:1]))
    good["instances"][0]["party"] = "1.0"
    with pytest.raises(ValueError, match="is not of expected type: float32"):
        tf_serving_row_format(json.dumps(good), signature)
