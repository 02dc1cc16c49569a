"""A model's training data: saved beside it, found from any place a user points at."""

from __future__ import annotations

import json

import pytest

from helpers import shard
from shardtrain import storage
from shardtrain.data import datagen
from shardtrain.data.profile import TRAINING_DATA, load_profile, model_version, write_profile
from shardtrain.errors import DataError


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> str:
    tmp = tmp_path_factory.mktemp("profile")
    datagen.generate_quest_logs(str(tmp / "q.csv"), 1_500, seed=4)
    shard([tmp / "q.csv"], tmp / "ds")
    return str(tmp / "ds")


def test_a_saved_profile_is_found_from_a_version_a_serving_base_and_a_model_dir(dataset, tmp_path):
    version = tmp_path / "serving" / "1700000000"
    version.mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"")
    written = write_profile(str(version), dataset)
    doc = json.loads((version / TRAINING_DATA).read_text())
    assert written.endswith(TRAINING_DATA) and doc["uri"] == dataset
    assert all(s["shards"] == [] for s in doc["metadata"]["splits"].values())
    storage.write_json(str(tmp_path / "serving" / "latest.json"), {"path": "1700000000"})
    model = tmp_path / "model"
    (model / "export").mkdir(parents=True)
    storage.write_json(str(model / "export" / "latest.json"), {"path": "../serving/1700000000"})
    for uri in (version, tmp_path / "serving", model):
        profile = load_profile(str(uri))
        assert profile.uri == dataset and profile.source.endswith(TRAINING_DATA)
        assert profile.metadata.stats.columns["gear_score"]["histogram"]["counts"]
    assert model_version(str(tmp_path / "serving")) == str(version)
    own = load_profile(dataset)
    assert own.source == dataset and own.metadata.splits["train"].shards


def test_errors_name_the_place_and_what_is_missing(tmp_path):
    with pytest.raises(DataError, match=r"neither a dataset .* nor a model"):
        load_profile(str(tmp_path))
    (tmp_path / "saved_model.pb").write_bytes(b"")
    with pytest.raises(DataError, match=r"carries no schema and statistics .* earlier shardtrain"):
        load_profile(str(tmp_path))
    (tmp_path / TRAINING_DATA).write_text("{}")
    with pytest.raises(DataError, match=r"not a shardtrain training_data\.json"):
        load_profile(str(tmp_path))
