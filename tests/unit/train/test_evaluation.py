"""Streaming metrics (regression; AUC of a split of one class), and the headline metrics of
a metrics.json by task."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shardtrain.train.evaluation import (
    MetricsAccumulator,
    RegressionAccumulator,
    headline,
    headline_keys,
)


def test_regression_metrics_are_exact_whatever_the_batches():
    """Sums, not averages of batch averages: uneven batches give the whole split's figures,
    even for labels far from zero (the label's spread is merged with Chan's update)."""
    rng = np.random.default_rng(11)
    y = rng.normal(1e6, 3.0, 10_001)  # a mean 300,000 times the spread
    p = y + rng.normal(0.5, 2.0, len(y))
    acc = RegressionAccumulator()
    for start in range(0, len(y), 777):
        acc.update(p[start : start + 777], y[start : start + 777])
    acc.update(np.array([]), np.array([]))  # an empty batch changes nothing
    m = acc.result()
    err = p - y
    assert m["num_examples"] == len(y)
    assert m["rmse"] == pytest.approx(math.sqrt(np.mean(err**2)), rel=1e-12)
    assert m["mae"] == pytest.approx(np.mean(np.abs(err)), rel=1e-12)
    assert m["mean_error"] == pytest.approx(np.mean(err), rel=1e-9)
    sst = np.sum((y - y.mean()) ** 2)
    assert m["r2"] == pytest.approx(1 - np.sum(err**2) / sst, rel=1e-9)
    assert m["label_std"] == pytest.approx(y.std(), rel=1e-9)
    assert m["label_mean"] == pytest.approx(y.mean(), rel=1e-12)


def test_regression_edge_cases():
    acc = RegressionAccumulator()
    assert acc.result()["num_examples"] == 0 and math.isnan(acc.result()["rmse"])
    acc.update(np.array([[1.0], [3.0]]), np.array([2.0, 2.0]))  # [batch, 1] predictions
    m = acc.result()
    assert (m["rmse"], m["mae"], m["mean_error"]) == (1.0, 1.0, 0.0)
    assert math.isnan(m["r2"])  # constant labels: R² is undefined
    with pytest.raises(ValueError, match="2 predictions for 3 labels"):
        acc.update(np.zeros(2), np.zeros(3))


def test_headline_metrics_by_task():
    regression = {"task": "regression", "rmse": 2.5, "mae": 2.0, "r2": 0.75}
    assert headline(regression) == "rmse 2.5000, mae 2.0000, r2 0.7500"
    # A metrics.json of a classifier (written before tasks were recorded too).
    old = {"auc": 0.9, "accuracy": 0.8, "log_loss": 0.4}
    assert headline_keys(old) == ("auc", "accuracy", "log_loss")
    assert headline(old) == "auc 0.9000, accuracy 0.8000, log_loss 0.4000"
    # The pipeline's metrics table (what `pipeline run-local` prints) has no task.
    table = {k: v for k, v in regression.items() if k != "task"} | {"num_examples": 9}
    assert headline(table) == "rmse 2.5000, mae 2.0000, r2 0.7500"


def _exact_auc(p, y):
    pos, neg = p[y == 1], p[y == 0]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return wins / (len(pos) * len(neg))


def test_binary_metrics_match_exact_computations():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 5000)
    p = np.clip(rng.normal(0.35 + 0.3 * y, 0.2), 0, 1)
    acc = MetricsAccumulator(["0", "1"])
    for start in range(0, 5000, 777):  # uneven batches
        acc.update(p[start : start + 777], y[start : start + 777])
    m = acc.result()
    assert m["num_examples"] == 5000
    assert m["auc"] == pytest.approx(_exact_auc(p, y), abs=2e-4)
    assert m["accuracy"] == pytest.approx(((p >= 0.5) == y).mean())
    true_p = np.clip(np.where(y == 1, p, 1 - p), 1e-7, 1)
    assert m["log_loss"] == pytest.approx(-np.log(true_p).mean(), rel=1e-9)
    cm = np.array(m["confusion_matrix"]["matrix"])
    assert cm.sum() == 5000 and cm[1, 1] == ((p >= 0.5) & (y == 1)).sum()
    roc = m["roc"]
    assert roc["fpr"][0] == 0 and roc["tpr"][-1] == 1 and roc["fpr"][-1] == 1
    assert all(a <= b for a, b in zip(roc["tpr"], roc["tpr"][1:], strict=False))


def test_multiclass_metrics():
    acc = MetricsAccumulator(["a", "b", "c"])
    probs = np.array([[0.8, 0.1, 0.1], [0.1, 0.7, 0.2], [0.2, 0.2, 0.6], [0.5, 0.4, 0.1]])
    acc.update(probs, np.array([0, 1, 2, 1]))
    m = acc.result()
    assert m["accuracy"] == 0.75
    assert m["confusion_matrix"]["matrix"] == [[1, 0, 0], [1, 1, 0], [0, 0, 1]]
    assert m["auc"] == pytest.approx(1.0)  # every class ranks its own examples first
    with pytest.raises(ValueError, match="out of range"):
        acc.update(probs[:1], np.array([3]))


def test_an_eval_split_of_one_class_has_no_auc_but_the_other_metrics():
    """A tiny file's eval split (la-riots: 63 rows, 4 eval rows, all 'Male') holds one class:
    AUC is undefined (NaN), accuracy and log loss are not."""
    acc = MetricsAccumulator(["Female", "Male"])
    acc.update(np.array([0.9, 0.7, 0.4, 0.8]), np.array([1, 1, 1, 1]))
    m = acc.result()
    assert math.isnan(m["auc"]) and m["accuracy"] == 0.75 and math.isfinite(m["log_loss"])
    three = MetricsAccumulator(["a", "b", "c"])
    three.update(np.array([[0.5, 0.3, 0.2], [0.2, 0.5, 0.3]]), np.array([0, 0]))
    assert math.isnan(three.result()["auc"])


def test_metrics_of_no_examples_are_nan_not_zero():
    """An empty eval split has no accuracy or log loss (0.0 would pass log_loss<=0.5)."""
    for classes in (["0", "1"], ["a", "b", "c"]):
        m = MetricsAccumulator(classes).result()
        assert m["num_examples"] == 0
        assert all(math.isnan(m[k]) for k in ("auc", "accuracy", "log_loss")), m
    r = RegressionAccumulator().result()
    keys = ("rmse", "mae", "r2", "mse", "mean_error", "label_mean", "label_std")
    assert r["num_examples"] == 0 and all(math.isnan(r[k]) for k in keys), r
