"""The CSV part of a plan (sources.csv.plan_options): the stored layout plans already carry is
read and written unchanged, and a layout this version does not know is never trusted."""

from __future__ import annotations

import dataclasses
import json

import pytest

from shardtrain.data.csv_dialect import CsvDialect
from shardtrain.data.schema import TYPE_NOTES_OPTION, Column, Schema, TypeTally
from shardtrain.data.sources import csv as csv_source
from shardtrain.data.sources.base import plan_pieces
from shardtrain.data.sources.csv.plan_options import (
    PLAN_OPTIONS_VERSION,
    VERSION_OPTION,
    AllRowTypes,
    CsvPlanOptions,
)
from shardtrain.data.sources.csv.types import TYPE_PASS_VERSION

#: The CSV options of a ``_plan.json`` written before the record existed (the version-1
#: layout, copied from a plan of a quoted CSV cut into eight pieces), between the run's own
#: options, which the record leaves alone.
STORED_V1 = json.loads(
    """{
  "label": "label", "key": null, "task_bytes": 104857,
  "csv_dialect": {"delimiter": ",", "quote_char": "\\"", "escape_char": null,
                  "encoding": "utf-8", "header": true, "columns": null, "null_values": null,
                  "skip_initial_space": false},
  "csv_record_starts": {"/data/quoted.csv": [[137999, 138002], [275998, 276057]]},
  "csv_all_row_types": {"id": "int", "user": "string", "text": "string", "label": "int"},
  "csv_all_row_types_basis": {"null_values": ["", "NA", "N/A", "NULL", "null"], "pass": 1}
}"""
)

#: The CSV options of a ``_plan.json`` written by the type rule that lets junk leave a column
#: numeric (type pass 2, with the evidence and notes of the columns holding values that are not
#: numbers), copied from a plan of a file of zip codes and amounts; its dialect as above.
STORED_V1_WITH_EVIDENCE = {
    "csv_dialect": STORED_V1["csv_dialect"],
    "csv_all_row_types": {"zip": "string", "amount": "float", "label": "int"},
    "csv_all_row_types_basis": {"null_values": ["", "NA", "N/A", "NULL", "null"], "pass": 2},
    "csv_type_evidence": {
        "zip": {
            "decimal": ".",
            "present": 20000,
            "bools": 0,
            "numbers": 19998,
            "ints": 19998,
            "leading_zero": False,
            "beyond_int64": False,
            "shapes_seen": 1,
            "codes": 1,
            "first_code": ["98115-4820", "/data/zips.csv line 1001"],
            "first_junk": None,
        },
        "amount": {
            "decimal": ".",
            "present": 20000,
            "bools": 0,
            "numbers": 19998,
            "ints": 0,
            "leading_zero": False,
            "beyond_int64": False,
            "shapes_seen": 2,
            "codes": 0,
            "first_code": None,
            "first_junk": ["#VALUE!", "/data/zips.csv line 15001"],
        },
    },
    "type_notes": [
        (
            "zip: 2 of 20,000 values are not numbers, and one is shaped like a code "
            "('98115-4820', /data/zips.csv line 1001) → string, every value kept as text"
        ),
        (
            "amount: 2 of 20,000 values are not numbers ('#VALUE!', /data/zips.csv line 15001) "
            "→ float; their rows are rejected (bad_value); a --schema file with 'amount: "
            "string' keeps them"
        ),
    ],
}


def _csv_part(options: dict) -> dict:
    return {k: v for k, v in options.items() if k.startswith("csv_") or k == TYPE_NOTES_OPTION}


def test_the_stored_v1_layout_reads_and_writes_back_byte_for_byte():
    options = CsvPlanOptions.from_dict(STORED_V1)
    assert options.version == PLAN_OPTIONS_VERSION == 1
    assert options.dialect == CsvDialect(delimiter=",")
    assert options.known_starts() == {"/data/quoted.csv": {137999: 138002, 275998: 276057}}
    assert options.all_row_types == AllRowTypes(
        {"id": "int", "user": "string", "text": "string", "label": "int"},
        ("", "NA", "N/A", "NULL", "null"),
        1,
    )
    # Same keys, same order, same values: the plan's fingerprint does not change.
    assert json.dumps(options.to_dict()) == json.dumps(_csv_part(STORED_V1))


def test_the_evidence_and_notes_of_junk_read_and_write_back_byte_for_byte():
    """A plan of the junk rule keeps the tallies (decided again under another
    ``--max-bad-fraction``) and the notes, after the types, in that order."""
    options = CsvPlanOptions.from_dict(STORED_V1_WITH_EVIDENCE)
    assert options.all_row_types is not None and options.all_row_types.pass_version == 2
    assert set(options.type_evidence) == {"zip", "amount"}
    amount = options.type_evidence["amount"]
    assert isinstance(amount, TypeTally)
    assert amount.first_junk == ("#VALUE!", "/data/zips.csv line 15001")
    assert (amount.type(0.001), amount.type(0.0)) == ("float", "string")
    assert options.type_evidence["zip"].type(0.5) == "string"  # a code
    assert options.type_notes == tuple(STORED_V1_WITH_EVIDENCE[TYPE_NOTES_OPTION])
    assert json.dumps(options.to_dict()) == json.dumps(_csv_part(STORED_V1_WITH_EVIDENCE))


def test_parts_not_found_are_not_written_and_the_dialect_defaults_to_rfc4180():
    assert CsvPlanOptions(CsvDialect(delimiter=";")).to_dict() == {
        "csv_dialect": CsvDialect(delimiter=";").to_dict()
    }
    assert CsvPlanOptions.from_dict({"format": "csv"}).dialect == CsvDialect(delimiter=",")


@pytest.mark.parametrize(
    "damage",
    [
        {VERSION_OPTION: 2},
        {"csv_all_row_types_basis": None},
        {"csv_record_starts": {"/data/quoted.csv": [["x", 1]]}},
        {"csv_record_starts": {"/data/quoted.csv": [[1]]}},
        {"csv_type_evidence": {"amount": {"present": 3, "nonsense": 1}}},
        {"csv_type_evidence": ["amount"]},
    ],
)
def test_another_version_or_a_damaged_part_is_refused(damage):
    with pytest.raises(ValueError):
        CsvPlanOptions.from_dict({**STORED_V1, **damage})


def test_stored_types_fit_only_the_same_columns_null_words_and_pass():
    types = CsvPlanOptions.from_dict(STORED_V1).all_row_types
    assert types is not None
    schema = Schema(
        tuple(Column(n, "string") for n in ("id", "user", "text", "label")),
        label="label",
        null_values=("", "NA", "N/A", "NULL", "null"),
    )
    assert types.fits(schema, 1)
    assert not types.fits(dataclasses.replace(schema, null_values=("",)), 1)
    assert TYPE_PASS_VERSION == 2 and not types.fits(schema, TYPE_PASS_VERSION)  # the junk rule
    assert not types.fits(dataclasses.replace(schema, columns=schema.columns[::-1]), 1)
    image = AllRowTypes({**types.types, "text": "image"}, types.null_values, 1)
    assert not image.fits(schema, 1)


def test_hooks_return_the_record_and_need_no_call_order(tmp_path):
    """align_pieces and final_schema read what they need from the options they are given:
    the same answers whichever runs first, from a fresh source each time."""
    path = tmp_path / "q.csv"
    rows = [f'{i},"line {i}\nnext, line",{i % 2}' for i in range(3000)]
    path.write_text("id,text,label\n" + "\n".join(rows) + "\n")

    def source() -> csv_source.CsvSource:
        return csv_source.CsvSource([str(path)], label="label", infer_types="all", processes=1)

    inputs = source().plan_inputs()
    assert set(inputs.options) == {"csv_dialect"}
    pieces = plan_pieces(inputs.sources, 8 * 1024)
    aligned = source().align_pieces(pieces, inputs)
    assert aligned.pieces == pieces  # planning reads nothing for them
    assert aligned.options == inputs.options == {"csv_dialect": inputs.options["csv_dialect"]}

    final = source().final_schema(
        aligned.pieces, dataclasses.replace(inputs, options=aligned.options)
    )
    alone = source().final_schema(aligned.pieces, inputs)
    assert final.schema == alone.schema
    assert CsvPlanOptions.from_dict(final.options).record_starts == {}
    # The types are the sample's, a guess the tasks check as they read.
    for options in (final.options, alone.options):
        assert CsvPlanOptions.from_dict(options).all_row_types is None
        assert CsvPlanOptions.from_dict(options).types_to_verify
    assert list(final.options) == ["csv_dialect", "csv_types_to_verify"]
