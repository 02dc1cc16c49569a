"""The threshold syntax and the blessing decision, on plain values."""

from __future__ import annotations

import math

import pytest

from shardtrain.errors import ConfigError
from shardtrain.train.thresholds import (
    Threshold,
    check_task,
    decide,
    format_thresholds,
    parse_thresholds,
)


def test_absolute_and_relative_clauses_parse_and_print_back():
    text = "auc>=0.8, auc >= baseline-0.002,rmse<=3,rmse<=baseline*1.05,r2>baseline,mae<baseline+1"
    parsed = parse_thresholds(text)
    assert parsed == (
        Threshold("auc", ">=", 0.8),
        Threshold("auc", ">=", 0.002, "-"),
        Threshold("rmse", "<=", 3.0),
        Threshold("rmse", "<=", 1.05, "*"),
        Threshold("r2", ">", 0.0, "+"),
        Threshold("mae", "<", 1.0, "+"),
    )
    assert format_thresholds(parsed) == (
        "auc>=0.8,auc>=baseline-0.002,rmse<=3,rmse<=baseline*1.05,r2>baseline,mae<baseline+1"
    )
    assert parse_thresholds(format_thresholds(parsed)) == parsed
    assert parse_thresholds("") == () and parse_thresholds(None) == ()
    assert parse_thresholds("r2>=-0.5") == (Threshold("r2", ">=", -0.5),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("auc=>0.8", r"^thresholds: 'auc=>0.8' is not METRIC>=BOUND or METRIC<=BOUND"),
        ("auc==0.8", r"^thresholds: 'auc==0.8' is not METRIC>=BOUND"),
        ("auc>=high", r"^thresholds: 'auc>=high': 'high' is not a number"),
        ("auc>=baseline-", r"'baseline-' is not a number"),
        ("auc>=baseline/2", r"'baseline/2' is not a number"),
        ("f1>=0.5", r"^thresholds: 'f1>=0.5': unknown metric 'f1' \(known: accuracy, auc, "),
        ("auc>=nan", r"the bound must be finite"),
        ("auc>=0.8,,rmse", r"^thresholds: 'rmse' is not METRIC"),
        ("auc>=baseline--1", r"^thresholds: 'auc>=baseline--1': '-1' after baseline- must be an "),
        ("auc>=baseline*-1", r"'-1' after baseline\* must be an unsigned number"),
        ("auc>=baseline + +1", r"'\+1' after baseline\+ must be an unsigned number"),
        ("r2>=baseline*0.95", r"^thresholds: 'r2>=baseline\*0.95': r2 can be negative, where "),
        ("mean_error<=baseline*1.1", r"mean_error can be negative, where baseline\*X moves"),
        ("mean_error>=-0.5", r"mean_error is compared as its absolute value, so its bound "),
    ],
)
def test_a_bad_clause_is_one_line_naming_it(text, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_thresholds(text)
    assert "\n" not in str(info.value)


def test_a_metric_of_the_other_task_is_refused():
    check_task(parse_thresholds("auc>=0.8,log_loss<=baseline"), "binary", "m")
    check_task(parse_thresholds("rmse<=3,r2>=0.5"), "regression", "m")
    with pytest.raises(ConfigError, match=r"^thresholds: 'rmse<=3': m is a binary classifier, "):
        check_task(parse_thresholds("auc>=0.8,rmse<=3"), "binary", "m")
    with pytest.raises(ConfigError, match=r"m is a regression, which has no auc \(its metrics: r"):
        check_task(parse_thresholds("auc>=0.8"), "regression", "m")


#: The examples a candidate's metrics were computed on (none: it is never blessed).
N = {"num_examples": 500}


def test_the_first_model_is_blessed_on_the_absolute_thresholds_alone():
    thresholds = parse_thresholds("auc>=0.8,auc>=baseline-0.002")
    decision = decide(thresholds, {**N, "auc": 0.85}, None)
    assert decision.blessed
    assert [c.passed for c in decision.checks] == [True, None]
    assert decision.summary() == "blessed: 1 threshold(s) hold, 1 skipped (no baseline)"
    assert not decide(thresholds, {**N, "auc": 0.79}, None).blessed


def test_a_relative_bound_comes_from_the_baselines_value_of_the_same_metric():
    thresholds = parse_thresholds("auc>=baseline-0.002,log_loss<=baseline*1.05")
    baseline = {"auc": 0.85, "log_loss": 0.40}
    better = decide(thresholds, {**N, "auc": 0.849, "log_loss": 0.41}, baseline)
    assert better.blessed
    assert [c.bound for c in better.checks] == pytest.approx([0.848, 0.42])
    worse = decide(thresholds, {**N, "auc": 0.84, "log_loss": 0.41}, baseline)
    assert not worse.blessed and [c.passed for c in worse.checks] == [False, True]
    assert worse.summary() == ("not blessed: auc 0.8400 is not >= 0.8480 (auc>=baseline-0.002)")
    regression = decide(parse_thresholds("rmse<=baseline*1.05"), {**N, "rmse": 3.1}, {"rmse": 3.0})
    assert regression.blessed and regression.checks[0].bound == pytest.approx(3.15)


def test_a_metric_that_is_not_finite_fails_and_a_nan_baseline_is_skipped():
    thresholds = parse_thresholds("auc>=0.5,auc>=baseline")
    decision = decide(thresholds, {**N, "auc": math.nan}, {"auc": math.nan})
    assert [c.passed for c in decision.checks] == [False, None]
    assert decision.checks[1].note == "the baseline's auc is nan"
    missing = decide(parse_thresholds("auc>=0.5"), N, None)
    assert not missing.blessed


def test_no_thresholds_bless_and_the_checks_serialise():
    assert decide((), {**N, "auc": 0.1}, None).summary() == "blessed: no thresholds"
    thresholds = parse_thresholds("auc>=baseline")
    check = decide(thresholds, {**N, "auc": 0.9}, None, no_baseline="x").checks[0]
    assert check.to_dict() == {
        "threshold": "auc>=baseline",
        "metric": "auc",
        "value": 0.9,
        "bound": None,
        "pass": None,
        "note": "x",
    }


@pytest.mark.parametrize("examples", [0, None])
def test_a_candidate_evaluated_on_no_examples_is_never_blessed(examples):
    """An empty eval split (its metrics are NaN, and were a perfect 0.0 log loss) is refused
    in one line, even with no threshold, or a baseline as empty."""
    empty = {"num_examples": 0, "auc": math.nan, "accuracy": math.nan, "log_loss": math.nan}
    candidate = {"log_loss": 0.0} if examples is None else {**empty, "log_loss": 0.0}
    thresholds = parse_thresholds("log_loss<=0.5,log_loss<=baseline*1.05")
    for baseline in (None, empty, {**N, "log_loss": 0.4}):
        decision = decide(thresholds, candidate, baseline)
        assert not decision.blessed
        assert decision.summary() == (
            f"not blessed: the candidate was evaluated on no examples (num_examples {examples})"
        )
    assert not decide((), candidate, None).blessed


def test_a_relative_number_is_unsigned_even_in_code():
    with pytest.raises(ConfigError, match=r"'auc>=baseline--1': the number after baseline- "):
        Threshold("auc", ">=", -1.0, "-")
    with pytest.raises(ConfigError, match=r"r2 can be negative"):
        parse_thresholds([Threshold("r2", ">=", 0.95, "*")])


def test_mean_error_is_compared_as_its_absolute_value():
    """A bias of -5 is as bad as one of 5: it fails mean_error<=0.5, and is held to the
    baseline's absolute bias."""
    thresholds = parse_thresholds("mean_error<=0.5,mean_error<=baseline+0.1")
    low = decide(thresholds, {**N, "mean_error": -5.0}, {"mean_error": -0.2})
    assert [c.passed for c in low.checks] == [False, False]
    assert [c.value for c in low.checks] == [5.0, 5.0]
    assert low.checks[1].bound == pytest.approx(0.3)
    assert low.summary().startswith("not blessed: |mean_error| 5.0000 is not <= 0.5000 (")
    good = decide(thresholds, {**N, "mean_error": -0.25}, {"mean_error": 0.2})
    assert good.blessed and [c.value for c in good.checks] == [0.25, 0.25]
    # r2's relative bounds stay additive: 0.01 below a negative baseline is below it.
    r2 = decide(parse_thresholds("r2>=baseline-0.01"), {**N, "r2": -0.505}, {"r2": -0.5})
    assert r2.checks[0].bound == pytest.approx(-0.51) and r2.blessed
