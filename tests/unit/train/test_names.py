"""Input names: what TensorFlow and Keras call a column whose own name they refuse."""

from __future__ import annotations

import re

import pytest

from shardtrain.train.names import (
    derived_name,
    input_names,
    is_valid_input_name,
    unique_layer_name,
)

#: What a SavedModel signature input must look like (TensorFlow renames anything else) —
#: it is also a valid Keras layer name and TF name scope.
SIGNATURE_INPUT = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
#: TensorFlow's node-name rule (ops.py ``_VALID_OP_NAME_REGEX``) and Keras 3's (no ``/``).
OP_NAME = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_.\\/>-]*")

AWKWARD = [
    "Delta 15 N (o/oo)",
    "Culmen Length (mm)",
    "クエスト種別",
    "所要時間(分)",
    "プレイヤーID",
    "a b",
    "a_b",
    "A b",
    "a-b",
    "1st",
    "x#y",
    "p.q",
    "k:v",
    "",
    " ",
    "_private",
    "class",
    "self",
    "None",
    "lambda",
    "Ab",
    "ab",
    "ümlaut",
    "x" * 300,
    "/",
    "col_558bb9d6",
]


def test_valid_names_are_kept_and_others_derived():
    names = input_names(["player_level", "a_b", "Species", "x1", *AWKWARD])
    assert names["player_level"] == "player_level"
    assert names["a_b"] == "a_b" and names["Species"] == "Species" and names["x1"] == "x1"
    assert names["Delta 15 N (o/oo)"].startswith("Delta_15_N_o_oo_")
    assert names["クエスト種別"].startswith("col_") and names["1st"].startswith("col_1st_")
    for keyword in ("class", "self", "None", "lambda"):
        assert names[keyword] != keyword and names[keyword].startswith(f"{keyword}_")
    assert names["_private"].startswith("private_")


def test_every_input_name_is_valid_unique_ignoring_case_and_stable():
    columns = ["player_level", *AWKWARD]
    names = input_names(columns)
    assert list(names) == columns  # in the order given
    for column, name in names.items():
        assert SIGNATURE_INPUT.fullmatch(name), (column, name)
        assert OP_NAME.fullmatch(name) and "/" not in name
        assert is_valid_input_name(name)
        assert len(name) <= 300
    assert len({n.lower() for n in names.values()}) == len(columns)
    # Stable: the same names in any order, in any process (no salted hash()).
    assert input_names(reversed(columns)) == names
    assert derived_name("Delta 15 N (o/oo)") == "Delta_15_N_o_oo_ddfc3565"
    assert derived_name("クエスト種別") == "col_558bb9d6"
    assert len(derived_name("x" * 300)) <= 40 + 1 + 8


def test_names_differing_only_in_case_are_all_derived():
    names = input_names(["Ab", "ab", "AB", "other"])
    assert names["other"] == "other"
    assert all(names[n] != n for n in ("Ab", "ab", "AB"))
    assert len({n.lower() for n in names.values()}) == 4


def test_a_derived_name_that_meets_a_column_name_grows_its_hash():
    taken = derived_name("Delta 15 N (o/oo)")
    names = input_names(["Delta 15 N (o/oo)", taken])
    assert names[taken] == taken  # a valid name keeps itself
    assert names["Delta 15 N (o/oo)"] == derived_name("Delta 15 N (o/oo)", 16)


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("a", True),
        ("a_1", True),
        ("A", True),
        ("1a", False),
        ("_a", False),
        ("a.b", False),
        ("a b", False),
        ("é", False),
        ("class", False),
        ("self", False),
        ("", False),
    ],
)
def test_is_valid_input_name(name, valid):
    assert is_valid_input_name(name) is valid


def test_unique_layer_name():
    taken = {"logits", "hidden_0"}
    assert unique_layer_name("logits", taken) == "logits_1"
    assert unique_layer_name("logits", taken) == "logits_2"
    assert unique_layer_name("features", taken) == "features"
    assert {"logits_1", "logits_2", "features"} <= taken
