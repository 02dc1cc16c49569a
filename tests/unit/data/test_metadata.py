"""metadata.json through DatasetMetadata: the typed contract between sharding and training."""

from __future__ import annotations

import copy
import json

import pytest

from helpers import REPO
from shardtrain.data.metadata import FORMAT, DatasetMetadata
from shardtrain.errors import DataError

#: metadata.json as shardtrain 0.1.0 wrote it before DatasetMetadata existed (tests/data).
V1_FILE = REPO / "tests" / "data" / "metadata-v1.json"


def _v1() -> dict:
    return json.loads(V1_FILE.read_text())


def test_a_file_written_before_the_typed_reader_reads_back_and_writes_the_same_json():
    raw = _v1()
    meta = DatasetMetadata.from_dict(raw)
    assert meta.format == FORMAT and meta.data_kind == "tabular" and not meta.is_image
    assert meta.label == "cleared" and meta.key == "id"
    assert meta.label_info.classes == ("0", "1") and meta.label_info.task == "binary"
    assert meta.schema.label == "cleared" and "score" in meta.schema.names
    assert meta.rows_read == meta.rows_accepted + meta.rows_rejected
    train = meta.split("train")
    assert train.num_shards == len(train.shards) == 8
    assert sum(s.num_records for s in train.shards) == train.num_records
    assert (
        meta.shard_uris("s3://b/ds", "eval")[0] == "s3://b/ds/" + meta.splits["eval"].shards[0].path
    )
    assert meta.to_dict() == raw  # the same file, key for key


def test_fields_added_after_v1_are_optional_when_reading():
    raw = _v1()
    for key in ("blank_lines", "sources", "options", "tool_version", "created"):
        raw.pop(key)
    del raw["stats"]["num_rows"]
    meta = DatasetMetadata.from_dict(raw)
    assert meta.blank_lines == 0 and meta.sources == () and meta.options == {}
    assert meta.stats.num_rows == meta.rows_accepted


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(format="shardtrain.dataset/v9"), "known format"),
        (lambda d: d.pop("format"), "known format"),
        (lambda d: d.pop("splits"), "lacks or mistypes 'splits'"),
        (lambda d: d["label_info"].pop("classes"), "lacks or mistypes 'classes'"),
    ],
)
def test_what_is_not_a_dataset_of_a_known_format_is_one_clear_error(change, message):
    raw = copy.deepcopy(_v1())
    change(raw)
    with pytest.raises(DataError, match=message) as err:
        DatasetMetadata.from_dict(raw, "s3://b/ds/metadata.json")
    assert str(err.value).startswith("s3://b/ds/metadata.json: ")


def test_an_unknown_split_names_the_dataset_and_its_splits():
    meta = DatasetMetadata.from_dict(_v1())
    with pytest.raises(Exception, match=r"s3://b/ds: no split 'test' \(splits: train, eval\)"):
        meta.shard_uris("s3://b/ds", "test")
