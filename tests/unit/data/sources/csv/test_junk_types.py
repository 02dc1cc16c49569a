"""Types that survive junk: under ``--infer-types all`` a few values that are not numbers (and
do not look like codes) leave a column of numbers numeric, their rows rejected as
``bad_value`` with file, line and text, and planning says so in one line per column; codes
(ZIP+4 after numeric zips) still keep a column a string; the demo's data comes out with 12
numeric columns and a binary label."""

from __future__ import annotations

import csv
import json
import logging
import re

import pytest

from csv_corpus import _compare, _types, exact_pieces
from shardtrain import storage
from shardtrain.data import datagen, sharding
from shardtrain.data.metadata import rare_classes_note
from shardtrain.data.report import summarize, to_markdown
from shardtrain.data.schema import TYPE_NOTES_OPTION, number_pattern, type_notes
from shardtrain.data.sharding.plan import PLAN_NAME
from shardtrain.data.sources.base import plan_pieces
from shardtrain.data.sources.csv import plan_options
from shardtrain.data.sources.csv import source as csv_source_hooks
from shardtrain.data.sources.csv import types as csv_types_pass
from shardtrain.data.sources.csv.source import plan_dialect

NUMERIC = [
    "player_level",
    "quest_level",
    "party_size",
    "gear_score",
    "attempt_no",
    "latency_ms",
    "deaths_last_10",
    "hours_played",
    "gold",
    "achievement_pts",
    "win_rate",
    "session_minutes",
]


def _config(path, output, **kw) -> sharding.ShardConfig:
    kw.setdefault("label", "label")
    kw.setdefault("processes", 2)
    return sharding.ShardConfig(sources=(str(path),), output=str(output), **kw)


def _junk_rows(path, label: str, columns: list[str]) -> list[tuple[int, str]]:
    """(line, text) of the rows with the right field count, a label, and a value that is not a
    number in one of ``columns``: the rows the sharder must reject as ``bad_value``."""
    number = re.compile(number_pattern())
    text_lines = path.read_text().splitlines()
    header = text_lines[0].split(",")
    found = []
    for line, (text, fields) in enumerate(zip(text_lines, csv.reader(text_lines), strict=True)):
        if line == 0 or len(fields) != len(header):
            continue
        row = dict(zip(header, fields, strict=True))
        if row[label] in ("", "NA") or all(
            row[c] in ("", "NA") or number.match(row[c]) for c in columns
        ):
            continue
        found.append((line + 1, text))
    return found


def test_the_demo_data_has_twelve_numeric_columns_and_a_binary_label(tmp_path, caplog):
    """The reproduction: the demo's quest logs (a few ``12abc``, ``#REF!``, ``1.2.3`` ...),
    sharded with the default options, cut into pieces read by 2 processes."""
    path = tmp_path / "quest_logs.csv"
    summary = datagen.generate_quest_logs(str(path), 50_000, seed=7, bad_fraction=0.0005)
    out = tmp_path / "ds"
    with caplog.at_level(logging.INFO, logger="shardtrain"):
        meta = sharding.shard(
            _config(path, out, label="cleared", key="attempt_id", task_bytes=1 << 20)
        ).metadata
    types = {c.name: c.type for c in meta.schema.columns}
    assert {n: types[n] for n in NUMERIC} == {n: t for n, t in summary.columns if n in NUMERIC}
    assert set(types.values()) - {"string"} and types["is_weekend"] == "bool"
    assert sum(t in ("int", "float") for n, t in types.items() if n != "cleared") == 12
    assert (meta.label_info.type, meta.label_info.task) == ("int", "binary")
    assert meta.label_info.classes == ("0", "1")

    # Every row holding junk is a bad_value reject with its file, line and whole text.
    expected = _junk_rows(path, "cleared", [*NUMERIC, "cleared"])
    assert len(expected) == summary.bad_rows_by_kind["bad_value"] == 7
    with storage.open(str(out / "rejects" / "rejects.jsonl"), "r") as f:
        rejects = [json.loads(line) for line in f]
    bad = [(r["source"], r["line"], r["text"]) for r in rejects if r["reason"] == "bad_value"]
    assert bad == [(str(path), line, text) for line, text in expected]
    assert meta.rejects_by_reason == summary.bad_rows_by_kind
    assert meta.rows_accepted + meta.rows_rejected == meta.rows_read == 50_000

    # One line per column once the tasks' counts are settled, in the plan and metadata.json,
    # and shown by inspect.
    gear = (
        f"gear_score: 1 of 49,984 values is not a number ('12abc', {path} line 1327) → float; "
        "its row is rejected (bad_value); a --schema file with 'gear_score: string' keeps it"
    )
    label = f"cleared: 1 of 49,984 values is not a number ('12abc', {path} line 5941) → int"
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert gear in logged and any(m.startswith(label) for m in logged)
    assert len(meta.type_notes) == 7 and gear in meta.type_notes
    plan = storage.read_json(str(out / PLAN_NAME))
    assert plan["settled"][TYPE_NOTES_OPTION] == list(meta.type_notes)
    shown = summarize(str(out), meta)
    assert gear in shown.notes and f"- {gear}" in to_markdown(shown)
    assert meta.rare_classes is None


def test_sample_mode_rejects_the_same_rows_as_before(tmp_path):
    """``--infer-types sample`` is unchanged: numeric by its 99% tolerance, junk rejected."""
    path = tmp_path / "quest_logs.csv"
    datagen.generate_quest_logs(str(path), 20_000, seed=3, bad_fraction=0.002)
    both = {}
    for mode in ("sample", "all"):
        out = tmp_path / mode
        meta = sharding.shard(
            _config(path, out, label="cleared", infer_types=mode, max_bad_fraction=0.01)
        ).metadata
        with storage.open(str(out / "rejects" / "rejects.jsonl"), "r") as f:
            rejects = [json.loads(line) for line in f]
        both[mode] = (
            {c.name: c.type for c in meta.schema.columns},
            [(r["line"], r["reason"], r["text"]) for r in rejects],
            meta.type_notes,
        )
    assert both["sample"][:2] == both["all"][:2]
    assert any(r == "bad_value" for _, r, _ in both["all"][1])
    assert both["sample"][2] == () and both["all"][2]


def test_codes_after_numbers_stay_exact_strings_and_are_named(tmp_path, caplog):
    """Issue 14's guarantee: a ZIP+4 (or a postal code) after thousands of numeric zips keeps
    the column a string, every value exact, nothing rejected; planning names the code."""
    n = 6000
    rows = ["zip,amount,label"]
    rows += [f"{10000 + i},{i % 97}.5,{i % 2}" for i in range(n)]
    rows += ["98115-4820,1.5,1", "K1A 0B1,2.5,0", "12345,#VALUE!,1"]
    path = tmp_path / "zips.csv"
    path.write_text("\n".join(rows) + "\n")
    with caplog.at_level(logging.INFO, logger="shardtrain"):
        meta = _compare(
            path,
            tmp_path / "ds",
            {"label": "label", "max_bad_fraction": 0.001, "task_bytes": 32 * 1024},
            {},
            expect_rejected=1,
        )
    assert _types(meta) == {"zip": "string", "amount": "float", "label": "int"}
    notes = meta["options"][TYPE_NOTES_OPTION]
    assert notes == [
        "zip: 2 of 6,003 values are not numbers, and one is shaped like a code "
        f"('98115-4820', {path} line {n + 2}) → string, every value kept as text",
        f"amount: 1 of 6,003 values is not a number ('#VALUE!', {path} line {n + 4}) → float; "
        "its row is rejected (bad_value); a --schema file with 'amount: string' keeps it",
    ]
    assert notes[0] in caplog.messages


def test_the_type_pass_agrees_with_the_reference_on_junk_in_quoted_pieces(tmp_path):
    """The compiled pass, which looks at the non-numbers again in the pieces whose counts show
    them, decides as the reference reader (which sees every value), and names the line of a
    value in a later piece of the file -- with quoted multi-line fields before it."""
    lines = ["id,note,score,count,label"]
    for i in range(20_000):
        note = f'"two\nlines, {i}"' if i % 11 == 0 else f"n{i}"
        score = {7_000: "n/a!", 15_000: "?"}.get(i, f"{i % 50}.25")
        count = "1.2.3" if i == 12_345 else str(i % 9)
        lines.append(f"{i},{note},{score},{count},{i % 2}")
    path = tmp_path / "junk.csv"
    path.write_text("\n".join(lines) + "\n")
    config = _config(path, tmp_path / "unused", max_bad_fraction=0.001)
    source = config.source()
    inputs = source.plan_inputs()
    dialect = plan_dialect(inputs.options)
    # At record starts, as the pass's line numbers need (the pieces of a run find theirs
    # when read, after the pass).
    pieces = exact_pieces(
        source.align_pieces(plan_pieces(inputs.sources, 64 * 1024), inputs).pieces, dialect
    )
    assert len(pieces) > 5
    found_compiled: dict = {}
    found_reference: dict = {}
    types = csv_types_pass.type_pass(
        pieces, inputs.schema, dialect, threads=2, max_bad_fraction=0.001, found=found_compiled
    )
    assert types == csv_types_pass.all_row_types(
        inputs.sources, inputs.schema, dialect, max_bad_fraction=0.001, found=found_reference
    )
    assert found_compiled == found_reference  # the same counts
    compiled = type_notes(found_compiled, 0.001)
    reference = type_notes(found_reference, 0.001)
    assert types == {
        "id": "int",
        "note": "string",
        "score": "float",
        "count": "int",
        "label": "int",
    }
    physical = path.read_text().split("\n")  # the rows below hold no line break
    score_line = next(n for n, text in enumerate(physical, 1) if text.startswith("7000,"))
    count_line = next(n for n, text in enumerate(physical, 1) if text.startswith("12345,"))
    assert compiled == [
        f"score: 2 of 20,000 values are not numbers ('n/a!', {path} line {score_line}) → float; "
        "their rows are rejected (bad_value); a --schema file with 'score: string' keeps them",
        f"count: 1 of 20,000 values is not a number ('1.2.3', {path} line {count_line}) → int; "
        "its row is rejected (bad_value); a --schema file with 'count: string' keeps it",
    ]
    # The reference names the values without their lines.
    assert reference == [re.sub(r", \S+ line \d+", "", note) for note in compiled]
    # The strict rule, as before: one non-number makes a string; the values looked at are
    # the same whatever the fraction (a plan keeps them to decide again for another).
    found_strict: dict = {}
    strict = csv_types_pass.type_pass(pieces, inputs.schema, dialect, found=found_strict)
    assert (strict["score"], strict["count"]) == ("string", "string")
    assert [t.to_dict() for t in found_strict.values()] == [
        t.to_dict() for t in found_compiled.values()
    ]


def test_the_second_look_is_bounded(tmp_path, monkeypatch):
    """With junk spread over more parts than :data:`NON_NUMBER_PARTS`, the column is decided
    by the values found in the parts looked at, and the line says how many those were."""
    monkeypatch.setattr(csv_types_pass, "NON_NUMBER_PARTS", 1)
    lines = ["v,label"] + [f"{'x' if i % 5000 == 4999 else i},{i % 2}" for i in range(20_000)]
    path = tmp_path / "spread.csv"
    path.write_text("\n".join(lines) + "\n")
    config = _config(path, tmp_path / "unused", max_bad_fraction=0.001)
    source = config.source()
    inputs = source.plan_inputs()
    pieces = source.align_pieces(plan_pieces(inputs.sources, 1 << 20), inputs).pieces
    found: dict = {}
    types = csv_types_pass.type_pass(
        pieces,
        inputs.schema,
        plan_dialect(inputs.options),
        block_bytes=16 * 1024,
        max_bad_fraction=0.001,
        found=found,
    )
    assert types["v"] == "int"
    assert type_notes(found, 0.001) == [
        f"v: 4 of 20,000 values are not numbers ('x', {path} line 5001) → int; their rows are "
        "rejected (bad_value); the first 1 looked at; a --schema file with 'v: string' keeps them"
    ]


def test_a_stored_plan_is_typed_again_only_for_the_old_rule(tmp_path, monkeypatch):
    """Planning never reads the data for types: the tasks count, settling decides and
    records the tallies with the plan. A later run with another ``--max-bad-fraction``
    decides again from them without reading the data, and plans the same unless it changes
    a type; tallies stored by the old rule (type pass 1) are not taken."""
    path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(path), 3000, seed=11, bad_fraction=0.01)
    runs = []
    type_pass = csv_source_hooks.type_pass
    monkeypatch.setattr(
        csv_source_hooks, "type_pass", lambda *a, **kw: runs.append(1) or type_pass(*a, **kw)
    )
    out = tmp_path / "ds"
    config = _config(path, out, label="cleared", max_bad_fraction=0.01)
    plan, _ = sharding.publish_plan(config)
    assert plan.options[plan_options.VERIFY_TYPES_OPTION] and TYPE_NOTES_OPTION not in plan.options
    sharding.shard(config)
    settled = storage.read_json(str(out / PLAN_NAME))["settled"]
    evidence = settled[plan_options.TYPE_EVIDENCE_OPTION]
    assert settled[TYPE_NOTES_OPTION]
    assert set(evidence) == {n.split(":")[0] for n in settled[TYPE_NOTES_OPTION]}
    assert settled[plan_options.TYPES_BASIS_OPTION] == {
        "null_values": list(plan.schema.null_values),
        "pass": csv_types_pass.TYPE_PASS_VERSION,
    }
    higher = sharding.build_plan(_config(path, out, label="cleared", max_bad_fraction=0.05))
    assert higher.fingerprint == plan.fingerprint  # decided again from the stored tallies
    strict = sharding.build_plan(_config(path, out, label="cleared", max_bad_fraction=0.0))
    assert strict.schema != plan.schema and not strict.options.get("csv_types_to_verify")
    assert {c.type for c in strict.schema.columns if c.name in evidence} == {"string"}
    assert strict.options[TYPE_NOTES_OPTION] != settled[TYPE_NOTES_OPTION]

    stored = storage.read_json(str(out / PLAN_NAME))
    old = json.loads(json.dumps(stored))
    old["settled"][plan_options.TYPES_BASIS_OPTION]["pass"] = 1
    old["settled"][plan_options.TYPES_OPTION] = {c.name: "string" for c in plan.schema.columns}
    storage.write_json(str(out / PLAN_NAME), old)
    again = sharding.build_plan(_config(path, out, label="cleared", max_bad_fraction=0.0))
    assert again.fingerprint == plan.fingerprint  # the old rule's tallies: a guess again
    assert runs == []  # and not one pass over the data


def test_junk_beyond_the_fraction_keeps_a_string_and_says_why(tmp_path, caplog):
    lines = ["v,label"] + [f"{'oops' if i % 50 == 0 else i},{i % 2}" for i in range(5000)]
    path = tmp_path / "many.csv"
    path.write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.INFO, logger="shardtrain"):
        meta = sharding.shard(_config(path, tmp_path / "ds")).metadata
    assert meta.schema.column("v").type == "string" and meta.rows_rejected == 0
    assert meta.type_notes == (
        "v: 100 of 5,000 values are not numbers (2.00%), more than --max-bad-fraction lets a "
        "numeric column hold (at most 1%) → string; a --schema file with 'v: int' rejects "
        "their rows",
    )


def test_a_rare_label_class_is_warned_about_at_finalize_and_shown(tmp_path, caplog):
    lines = ["x,label"] + [f"{i},{'yes' if i % 3 else 'no'}" for i in range(3000)]
    lines[1234] = "5,yes "  # a stray class of one row
    path = tmp_path / "labels.csv"
    path.write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING, logger="shardtrain"):
        meta = sharding.shard(_config(path, tmp_path / "ds")).metadata
    assert meta.label_info.classes == ("no", "yes", "yes ")
    note = (
        "label 'label': 1 rare class (under 0.1% of the rows or 10 rows): 'yes ' (1 of 3,000 "
        "rows, 0.033%); too few to learn; a stray value?"
    )
    assert meta.rare_classes == note and note in caplog.messages
    assert note in summarize(str(tmp_path / "ds"), meta).notes


@pytest.mark.parametrize(
    ("counts", "rare"),
    [
        ({"0": 5, "1": 7}, None),  # a small file: every class is small
        ({"a": 100_000}, None),
        ({}, None),
        ({"0": 995, "1": 5}, "'1' (5 of 1,000 rows, 0.500%)"),
        ({"0": 99_950, "1": 50}, "'1' (50 of 100,000 rows, 0.050%)"),
        ({"0": 99_900, "1": 100}, None),
    ],
)
def test_rare_classes_are_few_rows_of_many(counts, rare):
    note = rare_classes_note("y", counts)
    assert (note is None) == (rare is None)
    assert rare is None or rare in note


def test_a_schema_type_keeps_the_junk_and_says_nothing_about_that_column(tmp_path, caplog):
    lines = ["a,b,label"] + [f"{i},{i * 2},{i % 2}" for i in range(3000)]
    lines[100] = "12abc,7,1"
    lines[200] = "5,#REF!,0"
    path = tmp_path / "junk.csv"
    path.write_text("\n".join(lines) + "\n")
    schema_file = tmp_path / "schema.yaml"
    schema_file.write_text("columns:\n  a: string\n")
    with caplog.at_level(logging.INFO, logger="shardtrain"):
        meta = sharding.shard(_config(path, tmp_path / "ds", schema_file=str(schema_file))).metadata
    assert (meta.schema.column("a").type, meta.schema.column("b").type) == ("string", "int")
    assert meta.rejects_by_reason == {"bad_value": 1}
    assert [n.split(":")[0] for n in meta.type_notes] == ["b"]
    assert not [m for m in caplog.messages if m.startswith("a: ")]
