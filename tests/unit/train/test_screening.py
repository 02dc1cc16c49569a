"""Columns that carry no signal, told from the statistics (no data pass, no TensorFlow)."""

from __future__ import annotations

import pytest

from shardtrain.train.screening import MIN_ID_ROWS, no_signal


def numeric(count, lo, hi, mean, m2, missing=0, nan=0):
    return {
        "kind": "numeric",
        "count": count,
        "missing": missing,
        "nan": nan,
        "min": lo,
        "max": hi,
        "mean": mean,
        "std": (m2 / count) ** 0.5 if count else None,
        "m2": m2,
    }


def categorical(count, distinct, top, missing=0, approximate=False):
    return {
        "kind": "categorical",
        "count": count,
        "missing": missing,
        "distinct": distinct,
        "approximate": approximate,
        "top": [{"value": v, "count": c} for v, c in top],
    }


def row_number(n, start=1):
    return numeric(n, start, start + n - 1, start + (n - 1) / 2, n * (n * n - 1) / 12)


def test_all_missing():
    out = no_signal("x", "float", numeric(0, None, None, None, 0.0, missing=7, nan=3))
    assert out is not None and out.reason == "all missing" and "10 missing" in out.detail
    assert no_signal("s", "string", categorical(0, 0, [], missing=5)).reason == "all missing"
    assert out.automatic


def test_constant_only_when_nothing_is_missing():
    out = no_signal("region", "string", categorical(344, 1, [("Anvers", 344)]))
    assert out.reason == "constant" and out.describe() == "constant ('Anvers' in all 344 rows)"
    assert no_signal("n", "int", numeric(10, 3.0, 3.0, 3.0, 0.0)).reason == "constant"
    # Constant where present, sometimes missing: whether it is missing may tell something.
    assert no_signal("c", "string", categorical(54, 1, [("x", 54)], missing=290)) is None
    assert no_signal("n", "float", numeric(10, 3.0, 3.0, 3.0, 0.0, missing=1)) is None


def test_string_ids():
    n = 600
    out = no_signal("プレイヤーID", "string", categorical(n, n, [(f"P{i}", 1) for i in range(100)]))
    assert out.reason == "ID-like" and "600 distinct values in 600" in out.detail
    # Repeated individuals (190 of 344) are a feature, not an id.
    assert no_signal("Individual ID", "string", categorical(344, 190, [("N1", 3)] * 100)) is None
    # Few rows: distinct values are as likely a small sample.
    small = MIN_ID_ROWS - 1
    assert no_signal("s", "string", categorical(small, small, [("a", 1)] * small)) is None
    # Too many values to count exactly: the top values' coverage decides.
    top = [(f"u{i}", 3) for i in range(100)]
    approx = no_signal("user", "string", categorical(10**6, 5000, top, approximate=True))
    assert approx.reason == "ID-like" and "0.0%" in approx.detail
    common = [(f"c{i}", 5000) for i in range(100)]
    assert no_signal("city", "string", categorical(10**6, 5000, common, approximate=True)) is None


@pytest.mark.parametrize("start", [0, 1, 1000])
def test_int_row_numbers(start):
    out = no_signal("row", "int", row_number(500, start))
    assert out.reason == "ID-like" and f"{start:,}-{start + 499:,}" in out.detail


def test_ints_that_only_look_like_row_numbers_are_kept():
    n = 500
    # The right range and count, but repeats: the spread is off.
    assert no_signal("a", "int", numeric(n, 1, n, (n + 1) / 2, n * (n * n - 1) / 12 * 0.9)) is None
    # Per-study sample numbers 1..152 over 344 rows.
    assert no_signal("Sample Number", "int", numeric(344, 1, 152, 63.15, 560668.1)) is None
    # Floats and bools are never ids; missing values rule a row number out.
    assert no_signal("f", "float", row_number(n)) is None
    missing = {**row_number(n), "missing": 1}
    assert no_signal("m", "int", missing) is None


def test_no_statistics_leaves_everything_in():
    assert no_signal("x", "int", None) is None
    assert no_signal("x", "int", {}) is None
