"""The task a label makes (binary, multiclass, regression): the auto rule and --task."""

from __future__ import annotations

import pytest

from shardtrain.data.task import MAX_AUTO_CLASSES, choose_task
from shardtrain.errors import DataError


def _counts(values, n=10):
    return {str(v): n for v in values}


@pytest.mark.parametrize(
    ("label_type", "counts", "task"),
    [
        ("string", _counts(["cat", "dog"]), "binary"),
        ("string", _counts(["a", "b", "c"]), "multiclass"),
        ("bool", _counts(["0", "1"]), "binary"),
        ("int", _counts([0, 1]), "binary"),
        ("int", _counts([-1, 1]), "binary"),  # any two values are two classes
        ("float", _counts([0.0, 1.0]), "binary"),
        ("int", _counts([1, 2, 3, 4, 5]), "multiclass"),  # ratings
        ("int", _counts(range(MAX_AUTO_CLASSES)), "multiclass"),
        ("float", _counts([0.0, 1.0, 2.0]), "multiclass"),  # an int column with gaps
        ("int", _counts(range(MAX_AUTO_CLASSES + 1)), "regression"),  # many values
        ("int", _counts([-5, 0, 5]), "regression"),  # negative: not class ids
        ("int", _counts([2019, 2020, 2021]), "regression"),  # large: not class ids
        ("float", _counts([0.5, 1.0, 1.5]), "regression"),  # movielens' rating
        ("float", _counts([39.4, 39.2, 39.0]), "regression"),
        ("float", None, "regression"),  # more than 1000 distinct values
        ("int", None, "regression"),
    ],
)
def test_auto(label_type, counts, task):
    choice = choose_task("y", label_type, counts)
    assert choice.task == task, choice.reason
    assert choice.reason


def test_the_reason_says_how_to_override():
    assert "--task multiclass" in choose_task("y", "int", _counts(range(30))).reason
    assert "--task regression" in choose_task("y", "int", _counts([1, 2, 3])).reason


@pytest.mark.parametrize(
    ("label_type", "counts", "requested"),
    [
        ("int", _counts([1, 2, 3]), "regression"),
        ("float", _counts([0.5, 1.5]), "binary"),
        ("int", _counts(range(50)), "multiclass"),
        ("float", _counts([0.5, 1.5, 2.5]), "multiclass"),  # whole numbers or not
        ("float", None, "regression"),
    ],
)
def test_requested_tasks_the_label_allows(label_type, counts, requested):
    assert choose_task("y", label_type, counts, requested).task == requested


@pytest.mark.parametrize(
    ("label_type", "counts", "requested", "message"),
    [
        (
            "float",
            None,
            "binary",
            r"^ds: label 'temp' \(float, more than 1,000 distinct values\) cannot be binary "
            r"classes \(at most 1,000\); use --task regression or auto$",
        ),
        ("float", _counts([1.5, 2.5, 3.5]), "binary", "is not binary .*--task regression"),
        ("string", _counts("abc"), "binary", "is not binary .*--task multiclass"),
        ("string", _counts("ab"), "regression", "is not a number: it cannot be a regression"),
        ("bool", _counts("01"), "regression", "is not a number"),
        ("int", _counts([0, 1]), "multiclass", "has 2 classes: that is --task binary"),
        ("string", None, "auto", "too many classes for a classifier"),
        ("int", _counts([1]), "auto", "has 1 value"),
        ("int", _counts([1]), "binary", "has 1 value"),
        ("int", _counts([1]), "sideways", "unknown task 'sideways'"),
    ],
)
def test_impossible_tasks_get_one_clear_line(label_type, counts, requested, message):
    with pytest.raises(DataError, match=message) as err:
        choose_task("temp", label_type, counts, requested, where="ds")
    assert "\n" not in str(err.value)


def test_a_regression_needs_no_counts_and_tolerates_one_value():
    assert choose_task("y", "float", _counts([3.0]), "regression").task == "regression"
