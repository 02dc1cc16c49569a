"""FeatureSpec on awkward columns: names TensorFlow refuses, columns that carry no signal."""

from __future__ import annotations

import copy
import csv
import random

import numpy as np
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


def test_feature_spec_from_metadata(all_types):
    _, meta = all_types
    spec = FeatureSpec.from_metadata(meta)
    assert spec.label == "cleared" and spec.classes == ("0", "1") and spec.is_binary
    assert [f.name for f in spec.numeric] == ["level", "score", "weekend"]
    assert [f.name for f in spec.categorical] == ["cls", "note"]
    assert spec.excluded == ("id",)  # the split key identifies rows: never a feature
    level = spec.numeric[0]
    assert level.has_missing and level.std > 0
    assert "mage" in spec.categorical[0].vocabulary
    without = FeatureSpec.from_metadata(meta, exclude=["note"])
    assert [f.name for f in without.categorical] == ["cls"]
    with pytest.raises(ConfigError, match="cannot exclude unknown column"):
        FeatureSpec.from_metadata(meta, exclude=["nope"])
    with pytest.raises(DataError, match="not a shardtrain dataset"):
        DatasetMetadata.from_dict({"schema": {}})


def test_label_tasks_float_labels_and_a_single_class(all_types):
    _, meta = all_types
    bad = copy.deepcopy(meta.to_dict())  # to_dict shares the fixture's dicts
    bad["label_info"]["classes"] = ["1"]
    bad["stats"]["label"]["counts"] = {"1": 5}
    with pytest.raises(DataError, match="at least 2"):
        FeatureSpec.from_metadata(DatasetMetadata.from_dict(bad), where="ds")
    floats = copy.deepcopy(meta.to_dict())
    for col in floats["schema"]["columns"]:
        if col["name"] == "cleared":
            col["type"] = "float"
    # 0.0/1.0: still a binary label (a float column of two values).
    spec = FeatureSpec.from_metadata(DatasetMetadata.from_dict(floats))
    assert spec.is_binary and spec.output_width == 1 and spec.label_type == "float"
    # Many values: a regression on the standardised label, with the statistics' moments.
    floats["stats"]["label"] = {
        "missing": 0,
        "counts": {},
        "many_values": True,
        "numeric": {"kind": "numeric", "count": 9, "missing": 0, "mean": 40.0, "std": 8.0},
    }
    spec = FeatureSpec.from_metadata(DatasetMetadata.from_dict(floats))
    assert (spec.task, spec.classes, spec.output_width) == ("regression", (), 1)
    assert (spec.label_mean, spec.label_std) == (40.0, 8.0)
    floats["stats"]["label"]["numeric"]["nan"] = 3
    with pytest.raises(DataError, match="holds 3 NaN or infinite value"):
        FeatureSpec.from_metadata(DatasetMetadata.from_dict(floats))
    floats["stats"]["label"]["numeric"]["nan"] = 0
    with pytest.raises(DataError, match=r"^ds: label 'cleared' \(float, more than 1,000"):
        FeatureSpec.from_metadata(DatasetMetadata.from_dict(floats), where="ds", task="binary")
    # An int label trained as a regression: its moments from the counts of an older dataset.
    ints = copy.deepcopy(meta.to_dict())
    ints["stats"]["label"] = {"missing": 0, "counts": {"0": 1, "1": 3}}
    spec = FeatureSpec.from_metadata(DatasetMetadata.from_dict(ints), task="regression")
    assert spec.is_regression and spec.label_mean == 0.75
    assert spec.label_std == pytest.approx(np.std([0, 1, 1, 1]))
