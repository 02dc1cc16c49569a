"""Streaming regression metrics, and the headline metrics of a metrics.json by task."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shardtrain.train.evaluation import RegressionAccumulator, headline, headline_keys


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
