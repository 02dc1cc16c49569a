"""Which values of a column get a slice of their own, from the dataset's statistics."""

from __future__ import annotations

import copy

import pytest

from shardtrain.data.metadata import DatasetMetadata
from shardtrain.errors import ConfigError
from shardtrain.train.slices import OTHER, parse_columns, slice_values

COLUMNS = [
    {"name": "difficulty", "type": "string", "drop": False},
    {"name": "user", "type": "string", "drop": False},
    {"name": "level", "type": "int", "drop": False},
    {"name": "secret", "type": "string", "drop": True},
    {"name": "label", "type": "int", "drop": False},
]


def _meta(users: int = 500) -> DatasetMetadata:
    top = [{"value": f"u{i}", "count": users - i} for i in range(users)]
    return DatasetMetadata.from_dict(
        {
            "format": "shardtrain.dataset/v1",
            "tool_version": "0",
            "created": "2026-11-26T00:00:00Z",
            "plan": "p",
            "label": "label",
            "key": None,
            "label_info": {"type": "int", "task": "binary", "classes": ["0", "1"]},
            "schema": {"columns": copy.deepcopy(COLUMNS), "label": "label", "key": None},
            "stats": {
                "num_rows": 1000,
                "columns": {
                    "difficulty": {
                        "kind": "categorical",
                        "count": 1000,
                        "missing": 0,
                        "distinct": 3,
                        "top": [
                            {"value": "hard", "count": 500},
                            {"value": "easy", "count": 300},
                            {"value": "normal", "count": 200},
                        ],
                    },
                    "user": {
                        "kind": "categorical",
                        "count": 1000,
                        "missing": 0,
                        "distinct": users,
                        "top": top,
                    },
                    "level": {"kind": "numeric", "count": 1000, "missing": 0},
                },
                "label": {"counts": {"0": 500, "1": 500}},
            },
            "rows_read": 1000,
            "rows_accepted": 1000,
            "rows_rejected": 0,
            "rejects_by_reason": {},
            "rejects": "_rejects",
            "compression": "GZIP",
            "splits": {},
        }
    )


def test_columns_parse_from_text_or_a_list():
    assert parse_columns(" difficulty, platform ,difficulty,") == ("difficulty", "platform")
    assert parse_columns("") == () and parse_columns(None) == ()
    assert parse_columns(["a", "b"]) == ("a", "b")


def test_each_column_keeps_its_most_frequent_values_and_the_rest_is_other():
    values = slice_values(_meta(), ["difficulty", "user"], where="ds", max_values=10)
    assert values["difficulty"] == ("hard", "easy", "normal")
    assert values["user"] == tuple(f"u{i}" for i in range(10))  # 500 users: capped
    assert OTHER == "(other)"


def test_an_unknown_dropped_or_numeric_column_is_one_line():
    meta = _meta()
    with pytest.raises(ConfigError, match=r"^--slice-by: ds has no column 'platform' \(columns: "):
        slice_values(meta, ["platform"], where="ds")
    with pytest.raises(ConfigError, match="has no column 'secret'"):
        slice_values(meta, ["secret"], where="ds")  # dropped: not in the records
    with pytest.raises(ConfigError, match=r"column 'level' of ds is int, not categorical"):
        slice_values(meta, ["level"], where="ds")
    with pytest.raises(ConfigError, match="--max-slices must be at least 1"):
        slice_values(meta, ["difficulty"], where="ds", max_values=0)


def test_slicing_by_the_label_is_one_line_naming_it():
    """Found by hand: the label (a string one, here an int) is no feature; the line said it
    was 'string, not categorical (slice by a string column)'."""
    with pytest.raises(ConfigError, match=r"^--slice-by: 'label' is the label of ds: "):
        slice_values(_meta(), ["label"], where="ds")
