"""What the typed sources share (sources.typed): one table from Arrow types to column types,
for Parquet's types and JSON lines' alike; uint64 is text, exact beyond int64."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import read_examples, shard
from shardtrain.data.sources import jsonl_types, typed

MAPPED = [
    (pa.int8(), "int"),
    (pa.int64(), "int"),
    (pa.uint8(), "int"),
    (pa.uint32(), "int"),
    (pa.uint64(), "string"),  # beyond int64 it cannot be an int64 column
    (pa.float16(), "float"),
    (pa.float64(), "float"),
    (pa.decimal128(10, 2), "float"),
    (pa.bool_(), "bool"),
    (pa.string(), "string"),
    (pa.large_string(), "string"),
    (pa.dictionary(pa.int32(), pa.string()), "string"),
    (pa.timestamp("ms"), "string"),
    (pa.date32(), "string"),
    (pa.null(), None),
]
UNSUPPORTED = [pa.binary(), pa.list_(pa.int64()), pa.struct([("a", pa.int64())])]


@pytest.mark.parametrize(("arrow_type", "expected"), MAPPED, ids=str)
def test_arrow_types_map_to_one_column_type_for_parquet_and_json_lines(arrow_type, expected):
    assert typed.column_type(arrow_type) == expected
    assert jsonl_types.arrow_kind(arrow_type) == expected  # the JSON type pass uses the same table


@pytest.mark.parametrize("arrow_type", UNSUPPORTED, ids=str)
def test_types_no_column_holds_are_refused_and_nested_for_json_lines(arrow_type):
    with pytest.raises(typed.UnsupportedType):
        typed.column_type(arrow_type)
    assert jsonl_types.arrow_kind(arrow_type) == "nested"


def test_a_uint64_column_is_stored_as_exact_text_beyond_int64(tmp_path):
    path = tmp_path / "ids.parquet"
    ids = [0, 7, 2**63 - 1, 2**63, 2**64 - 1]
    table = pa.table({"id": pa.array(ids, pa.uint64()), "cleared": [0, 1, 0, 1, 0]})
    pq.write_table(table, path)
    meta = shard([path], tmp_path / "ds", compression="none", splits=(("train", 1.0),))
    assert {c["name"]: c["type"] for c in meta["schema"]["columns"]}["id"] == "string"
    stored = sorted(int(r["id"]) for r in read_examples(str(tmp_path / "ds")))
    assert stored == ids
