"""The type rule of ``--infer-types all`` (``TypeTally``) for columns of numbers holding values
that are not numbers: what is a code, what is junk, when junk leaves a column numeric, and the
one line planning says about it."""

from __future__ import annotations

import pyarrow as pa
import pytest

from shardtrain.data.type_rule import MAX_JUNK_FRACTION, TypeTally, code_shaped, type_notes

CODES = [
    "98115-4820",  # ZIP+4
    "2024-01-05",
    "555-1234",
    "K1A 0B1",  # a Canadian postal code
    "SW1A 1AA",
    "12:30",
    "1,234.50",  # thousands separators: text, as documented
    "05/01/2024",
    " 98115-4820 ",  # blanks around, as the reader allows them around numbers
    "1 2",
]


@pytest.mark.parametrize("value", CODES)
def test_codes_are_digit_groups_joined_by_separators(value):
    assert code_shaped(value)


@pytest.mark.parametrize(
    "value",
    [
        "12abc",  # one group
        "#VALUE!",
        "#REF!",
        "?",
        "n/a",  # groups without a digit
        "n/a!",
        "N.A.",
        "12 kg",
        "abc-def",
        "1.2.3",  # only decimal marks between the groups: a number with a mark too many
        "192.168.0.1",
        "v1.2",
        "-",
        "",
        "1--2",  # separators are single
        "K1A  0B1",
        "日本-1",
    ],
)
def test_junk_is_anything_else(value):
    assert not code_shaped(value)


def test_the_decimal_mark_decides_which_separators_make_a_number_with_a_mark_too_many():
    assert not code_shaped("1,2,3", decimal=",")
    assert code_shaped("1.2.3", decimal=",")  # points are not the mark: a code (1.234.567)
    assert code_shaped("1,2,3", decimal=".")


def _tally(present, numbers, ints=None, **kw) -> TypeTally:
    return TypeTally(present=present, numbers=numbers, ints=numbers if ints is None else ints, **kw)


def test_junk_within_the_fraction_leaves_a_column_numeric_once_looked_at():
    tally = _tally(50_000, 49_999, ints=1000)
    assert tally.type() == "string"  # the strict rule: one non-number makes a string
    assert tally.needs_shapes()
    assert tally.type(0.001) == "string"  # not looked at yet: nothing decided
    tally.see("12abc", "q.csv line 1327")
    assert not tally.needs_shapes()
    assert tally.type(0.001) == "float"
    assert tally.type(0.0) == "string"
    assert tally.junk_numeric(0.001)


def test_integers_stay_int_and_the_label_follows_the_same_rule():
    tally = _tally(49_986, 49_985)
    tally.see("1.2.3", "q.csv line 32969")
    assert tally.type(0.001) == "int"


def test_one_code_among_the_non_numbers_keeps_the_column_a_string():
    tally = _tally(230_002, 230_000)
    tally.see("12abc", "z.csv line 10")
    tally.see("98115-4820", "z.csv line 230001")
    assert tally.type(0.001) == "string"
    assert tally.first_code == ("98115-4820", "z.csv line 230001")


def test_more_junk_than_the_fraction_or_than_one_percent_is_a_string():
    tally = _tally(1000, 998)
    tally.see("x")
    tally.see("y")
    assert tally.type(0.001) == "string"  # 2 of 1000 > 0.001
    assert tally.type(0.002) == "int"
    assert tally.type(1.0) == "int"
    wide = _tally(1000, 980)
    wide.see("x")
    assert round(MAX_JUNK_FRACTION, 6) == 0.01
    assert wide.type(1.0) == "string"  # 2% is text, whatever --max-bad-fraction allows


def test_exact_numbers_stay_strings_whatever_the_junk():
    for kw in ({"leading_zero": True}, {"beyond_int64": True}):
        tally = _tally(10_000, 9_999, **kw)
        tally.see("12abc")
        assert not tally.junk_candidate() and not tally.junk_tolerated(0.001)
        assert tally.type(0.001) == "string"


def test_booleans_and_columns_of_text_are_unchanged():
    assert TypeTally(present=10, bools=10).type(0.001) == "bool"
    text = TypeTally(present=10_000, numbers=3, ints=3)
    text.see("alice")
    assert text.type(0.5) == "string"
    assert text.note("name", 0.001) is None  # a text column with a few numbers: nothing to say
    assert TypeTally().type(0.001) is None


def test_the_planning_line_says_what_was_decided():
    one = _tally(49_999, 49_998, ints=0)
    one.see("12abc", "q.csv line 1327")
    assert one.note("gear_score", 0.001) == (
        "gear_score: 1 of 49,999 values is not a number ('12abc', q.csv line 1327) → float; "
        "its row is rejected (bad_value); a --schema file with 'gear_score: string' keeps it"
    )
    several = _tally(50_000, 49_997)
    for value in ("?", "#REF!", "n/a!"):
        several.see(value, "")
    note = several.note("party_size", 0.001)
    assert note is not None and note.startswith("party_size: 3 of 50,000 values are not numbers")
    assert "('?') → int; their rows are rejected" in note and "keeps them" in note
    code = _tally(230_002, 230_001)
    code.see("98115-4820", "z.csv line 230002")
    assert code.note("zip", 0.001) == (
        "zip: 1 of 230,002 values is not a number, and it is shaped like a code ('98115-4820', "
        "z.csv line 230002) → string, every value kept as text"
    )
    many = _tally(1000, 950)
    assert many.note("fee", 0.001) == (
        "fee: 50 of 1,000 values are not numbers (5.00%), more than --max-bad-fraction lets a "
        "numeric column hold (at most 1%) → string; a --schema file with 'fee: int' rejects "
        "their rows"
    )
    # The text depends on the fraction only through the type it decides.
    assert many.note("fee", 0.0) == many.note("fee", 0.02) == many.note("fee", 1.0)
    strict = one.note("gear_score", 0.0)
    assert strict is not None and "(0.00%), more than --max-bad-fraction" in strict
    assert code.note("zip", 0.0) == code.note("zip", 0.001)
    assert _tally(10, 10).note("all_numbers", 0.001) is None


def test_a_tally_round_trips_through_json_and_decides_again():
    import json

    tally = _tally(50_000, 49_998, ints=0)
    tally.see("12abc", "q.csv line 1327")
    tally.see("?", "q.csv line 2000")
    back = TypeTally.from_dict(json.loads(json.dumps(tally.to_dict())))
    assert back == tally and back.first_junk == ("12abc", "q.csv line 1327")
    assert back.shapes_seen == 2 and back.codes == 0
    assert (back.type(0.001), back.type(0.0)) == ("float", "string")
    assert type_notes({"g": back, "n": _tally(5, 5)}, 0.001) == [back.note("g", 0.001)]


def test_the_reference_tally_looks_at_every_non_number_and_compares_by_counts():
    numbers = pa.array([str(i) for i in range(300)], pa.string())
    tally = TypeTally()
    tally.add(pa.array(["2.5", None, "12abc", "3"], pa.string()))
    tally.add(numbers)
    assert (tally.present, tally.numbers, tally.shapes_seen, tally.codes) == (303, 302, 1, 0)
    assert tally.first_junk == ("12abc", "") and tally.first_code is None
    assert tally.type(0.01) == "float" and tally.type() == "string"
    tally.add(pa.array(["98115-4820"], pa.string()))
    assert tally.first_code == ("98115-4820", "") and tally.type(0.01) == "string"
    # The compiled pass counts kinds only: tallies are equal by their counts, and one made
    # from counts needs its non-numbers looked at before junk can leave it numeric.
    counted = TypeTally(present=304, numbers=302, ints=301)
    assert counted == tally
    assert counted.needs_shapes() and not tally.needs_shapes()
