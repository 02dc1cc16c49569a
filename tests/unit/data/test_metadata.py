"""metadata.json through DatasetMetadata: the typed contract between sharding and training."""

from __future__ import annotations

import copy
import json

import pytest

from helpers import REPO
from shardtrain.data.metadata import FORMAT, DatasetMetadata
from shardtrain.data.repair import repair_command
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
        (lambda d: d.pop("splits"), "field 'splits' is missing"),
        (lambda d: d["label_info"].pop("classes"), "field 'label_info.classes' is missing"),
        # Mistyped fields, nested ones too: each was a traceback (AttributeError, TypeError)
        # or Python's own words ("'NoneType' object is not subscriptable").
        (lambda d: d.update(splits="x"), "field 'splits' must be an object, not a string"),
        (lambda d: d.update(schema=None), "field 'schema' must be an object, not null"),
        (lambda d: d.update(label_info=[]), "field 'label_info' must be an object, not a list"),
        (
            lambda d: d["splits"]["train"]["shards"].__setitem__(0, "x"),
            r"field 'splits\.train\.shards\[0\]' must be an object, not a string",
        ),
        (
            lambda d: d["splits"]["eval"]["shards"][2].update(bytes="12"),
            r"field 'splits\.eval\.shards\[2\]\.bytes' must be an integer, not a string",
        ),
        (lambda d: d.update(rows_read=True), "field 'rows_read' must be an integer, not true"),
        (
            lambda d: d["schema"]["columns"].append(7),
            r"field 'schema\.columns\[\d+\]' must be an object, not an integer",
        ),
        (lambda d: d["stats"].update(columns=[]), "field 'stats.columns' must be an object"),
        (lambda d: d.update(sources={}), "field 'sources' must be a list, not an object"),
        # What the shape leaves to the dataclasses, still one line naming the file.
        (lambda d: d["schema"]["columns"][0].update(colour=1), "not a shardtrain dataset's"),
        (lambda d: d["schema"].update(label="nope"), "label column 'nope' not found"),
    ],
)
def test_what_is_not_a_dataset_of_a_known_format_is_one_clear_error(change, message):
    raw = copy.deepcopy(_v1())
    change(raw)
    with pytest.raises(DataError, match=message) as err:
        DatasetMetadata.from_dict(raw, "s3://b/ds/metadata.json")
    assert str(err.value).startswith("s3://b/ds/metadata.json: ")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "text",
    ["{}", '{"format": "shardtrain.dataset/v1", "schema": null}', "[]", "{not json"],
)
def test_a_damaged_metadata_file_says_which_command_shards_the_dataset_again(tmp_path, text):
    """``load`` of a damaged file names it and gives the exact command that gets out: the
    sources, label, key and splits from the stored plan when the file itself says nothing."""
    raw = _v1()
    plan = {
        "sources": [{"uri": "/data/q 1.csv", "size": 1, "version": "v"}],
        "schema": {"label": raw["label"], "key": raw["key"]},
        "splits": [["train", 0.8], ["eval", 0.2]],
    }
    (tmp_path / "_plan.json").write_text(json.dumps(plan))
    (tmp_path / "metadata.json").write_text(text)
    with pytest.raises(DataError) as err:
        DatasetMetadata.load(str(tmp_path))
    message = str(err.value)
    assert message.startswith(f"{tmp_path}/metadata.json: ")
    assert message.endswith(
        f"the dataset is damaged: shard it again with `shardtrain shard '/data/q 1.csv' "
        f"--output {tmp_path} --label cleared --key id --split train=0.8,eval=0.2 "
        "--overwrite`"
    )


def test_the_repair_command_takes_what_a_damaged_metadata_file_still_says(tmp_path):
    raw = _v1()
    raw["schema"] = None  # the label and key still read from the top level
    command = repair_command("s3://b/ds", raw)
    sources = " ".join(s["uri"] for s in raw["sources"])
    # A v1 file records no record format: its shards are Examples, which the repair keeps.
    assert command == (
        f"shardtrain shard {sources} --output s3://b/ds --label cleared --key id "
        "--record-format example --overwrite"
    )
    assert repair_command(str(tmp_path), {"splits": "x"}) == (
        f"shardtrain shard SOURCES --output {tmp_path} --label LABEL --overwrite"
    )


def test_an_unknown_split_names_the_dataset_and_its_splits():
    meta = DatasetMetadata.from_dict(_v1())
    with pytest.raises(Exception, match=r"s3://b/ds: no split 'test' \(splits: train, eval\)"):
        meta.shard_uris("s3://b/ds", "test")


def test_a_regression_label_has_no_rare_classes():
    """A float label repeats few of its values (seattle-temps' ``temp``): its counts are not
    classes and must not be warned about as rare ones."""
    raw = _v1()
    counts = {"0": 99_950, "1": 50}
    raw["stats"]["label"]["counts"] = counts
    assert DatasetMetadata.from_dict(raw).rare_classes is not None
    raw["label_info"]["task"] = "regression"
    assert DatasetMetadata.from_dict(raw).rare_classes is None
