"""FeatureSpec on awkward columns: names TensorFlow refuses, columns that carry no signal."""

from __future__ import annotations

import csv
import random

import pytest

from shardtrain.data import sharding
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.errors import ConfigError, DataError
from shardtrain.train.features import FeatureSpec, inputs_table

HEADER = [
    "row id",
    "行番号",
    "定数",
    "空",
    "sometimes",
    "Delta 15 N (o/oo)",
    "a b",
    "a_b",
    "A b",
    "1st",
    "x#y",
    "p.q",
    "k:v",
    "クエスト種別",
    "label",
]


@pytest.fixture(scope="module")
def awkward(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("awkward")
    rng = random.Random(5)
    order = list(range(1, 201))
    rng.shuffle(order)
    with open(tmp / "awkward.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        for i in range(200):
            w.writerow(
                [
                    f"r{i:05d}",
                    order[i],
                    "k",
                    "",
                    "x" if i % 3 else "",
                    f"{rng.gauss(0, 1):.3f}",
                    rng.random(),
                    rng.random(),
                    rng.random(),
                    rng.randint(0, 9),
                    rng.random(),
                    rng.random(),
                    rng.random(),
                    rng.choice(["討伐", "採集"]),
                    rng.choice("yn"),
                ]
            )
    out = str(tmp / "ds")
    sharding.shard(
        sharding.ShardConfig(
            sources=(str(tmp / "awkward.csv"),), output=out, label="label", processes=1
        )
    )
    return out, DatasetMetadata.load(out)


def test_columns_without_signal_are_left_out_and_can_be_kept(awkward):
    uri, meta = awkward
    spec = FeatureSpec.from_metadata(meta, where=uri)
    why = {o.column: o.reason for o in spec.left_out}
    assert why == {
        "row id": "ID-like",
        "行番号": "ID-like",
        "定数": "constant",
        "空": "all missing",
    }
    assert set(spec.excluded) == set(why)
    assert "sometimes" in spec.feature_names  # constant where present, but sometimes missing
    assert "Delta 15 N (o/oo)" in spec.feature_names and "クエスト種別" in spec.feature_names
    kept = FeatureSpec.from_metadata(meta, include=["行番号", "定数"])
    assert "行番号" in kept.feature_names and "定数" in kept.feature_names
    assert {o.column for o in kept.left_out} == {"row id", "空"}
    with pytest.raises(ConfigError, match="cannot include unknown column"):
        FeatureSpec.from_metadata(meta, include=["nope"])
    with pytest.raises(ConfigError, match="--include 'label'"):
        FeatureSpec.from_metadata(meta, include=["label"])
    with pytest.raises(ConfigError, match="excluded"):
        FeatureSpec.from_metadata(meta, include=["a b"], exclude=["a b"])


def test_nothing_left_says_why(awkward):
    _, meta = awkward
    features = [n for n in HEADER if n not in ("label", "row id", "行番号", "定数", "空")]
    with pytest.raises(DataError, match=r"no feature columns left.*ID-like.*--include COLUMN"):
        FeatureSpec.from_metadata(meta, exclude=features)


def test_features_keep_their_names_and_get_input_names(awkward):
    _, meta = awkward
    spec = FeatureSpec.from_metadata(meta)
    inputs = {f.name: f.input_name for f in (*spec.numeric, *spec.categorical)}
    assert inputs["a_b"] == "a_b" and inputs["sometimes"] == "sometimes"
    for name in ("Delta 15 N (o/oo)", "a b", "A b", "1st", "x#y", "p.q", "k:v", "クエスト種別"):
        assert inputs[name] != name
    assert len({v.lower() for v in inputs.values()}) == len(inputs)
    assert spec.renamed_inputs == {k: v for k, v in inputs.items() if k != v}
    table = inputs_table(spec)
    rows = {r[0]: r for r in table.rows}
    assert rows["Delta 15 N (o/oo)"][2] == inputs["Delta 15 N (o/oo)"]
    assert rows["定数"][1].startswith("left out: constant") and rows["label"][1] == "label"
