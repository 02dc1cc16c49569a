"""Evaluation metrics, computed in one streaming pass over the eval split.

:class:`MetricsAccumulator` takes batches of predicted probabilities and true class indices
and keeps only fixed-size state (counts and probability histograms), so evaluating a split of
any size needs constant memory. Its :meth:`~MetricsAccumulator.result` is what the trainer
writes to ``MODEL_DIR/eval/metrics.json`` and what the pipeline's ``evaluate`` step shows in
the Kubeflow Pipelines UI:

``auc``
    area under the ROC curve. Binary: of the positive class (``classes[1]``). Multi-class:
    the macro average of the one-vs-rest AUCs (of the classes the eval split holds with
    other classes). NaN when the eval split holds one class only, as a tiny file's few
    eval rows can.
``accuracy``
    fraction of examples whose most probable class is the true one (threshold 0.5 for binary).
``log_loss``
    mean negative log-likelihood of the true class (probabilities clipped to [1e-7, 1]).
``confusion_matrix``
    ``{"labels": classes, "matrix": rows = true class, columns = predicted class}``.
``roc``
    ``{"fpr": [...], "tpr": [...], "thresholds": [...]}`` at 101 thresholds 1.0, 0.99, …, 0
    (binary: the positive class; multi-class: micro-averaged one-vs-rest).

AUC comes from histograms of the predicted probability with :data:`BINS` bins per class:
every pair of examples in different bins is ranked exactly and pairs in the same bin count
half, so the error is bounded by the fraction of pairs sharing a bin (tiny at 10,000 bins).

A regression's :class:`RegressionAccumulator` keeps sums (of errors, absolute and squared
errors) and the label's count, mean and sum of squared deviations, merged batch by batch
with Chan et al.'s update, so its metrics are exact whatever the batches:

``rmse``
    root mean squared error, in the label's units.
``mae``
    mean absolute error.
``r2``
    coefficient of determination, ``1 - SSE / SST`` (SST: squared deviations of the eval
    labels from their own mean); 1 is perfect, 0 is no better than predicting that mean.
``mean_error``
    mean of prediction minus label (the bias).
``label_mean``, ``label_std``
    of the eval split's labels: the scale RMSE and MAE compare with.

Metrics of no examples (an empty eval split) are NaN, as a one-class split's AUC is: a 0.0
would read as a perfect log loss or RMSE and pass a threshold. Their readers take NaN: the
UI's metrics table leaves it out, the report shows ``n/a``, a threshold on it fails, and
``metrics.json`` holds it as ``NaN`` (as Python's ``json`` reads and writes it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

#: The headline metrics of ``metrics.json``, by task, in the order they are shown (logs,
#: TensorBoard, the pipeline's metrics table and report).
HEADLINE_KEYS = {
    "binary": ("auc", "accuracy", "log_loss"),
    "multiclass": ("auc", "accuracy", "log_loss"),
    "regression": ("rmse", "mae", "r2"),
}


def headline_keys(metrics: Mapping[str, Any]) -> tuple[str, ...]:
    """The headline metric names of a ``metrics.json``, or of the scalars the pipeline's
    metrics table holds (no ``task`` there, nor in a ``metrics.json`` written before
    regression existed: a regression is then known by its ``rmse``)."""
    task = metrics.get("task") or ("regression" if "rmse" in metrics else "binary")
    return HEADLINE_KEYS.get(str(task), HEADLINE_KEYS["binary"])


def headline(metrics: Mapping[str, Any]) -> str:
    """``auc 0.8561, accuracy 0.7702, log_loss 0.4790``; ``rmse 3.1024, mae 2.4410, r2 0.8113``."""
    return ", ".join(f"{k} {metrics[k]:.4f}" for k in headline_keys(metrics) if k in metrics)


#: Probability histogram resolution for AUC and ROC.
BINS = 10_000
_EPS = 1e-7


def _auc_from_histograms(pos: np.ndarray, neg: np.ndarray) -> float:
    """AUC from per-bin counts of positives and negatives (ties within a bin count half)."""
    n_pos, n_neg = pos.sum(), neg.sum()
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    # For every positive in bin i: negatives in lower bins rank below it, same bin is a tie.
    neg_below = np.cumsum(neg) - neg
    wins = (pos * neg_below).sum() + 0.5 * (pos * neg).sum()
    return float(wins / (n_pos * n_neg))


def _roc_from_histograms(pos: np.ndarray, neg: np.ndarray, points: int = 101) -> dict[str, list]:
    """ROC points (fpr, tpr) at evenly spaced thresholds from 1 down to 0."""
    n_pos, n_neg = max(pos.sum(), 1), max(neg.sum(), 1)
    # Counts at or above each bin edge: predicted positive when probability >= threshold.
    pos_at_least = np.cumsum(pos[::-1])[::-1]
    neg_at_least = np.cumsum(neg[::-1])[::-1]
    thresholds = np.linspace(1.0, 0.0, points)
    fpr, tpr = [], []
    for t in thresholds:
        b = min(math.ceil(t * len(pos)), len(pos))
        tp = pos_at_least[b] if b < len(pos) else 0
        fp = neg_at_least[b] if b < len(neg) else 0
        tpr.append(float(tp / n_pos))
        fpr.append(float(fp / n_neg))
    return {"fpr": fpr, "tpr": tpr, "thresholds": [float(t) for t in thresholds]}


class MetricsAccumulator:
    """Streaming classification metrics in constant memory.

    Args:
        classes: label values, index = class id (two classes: a binary task).

    Example:
        >>> acc = MetricsAccumulator(["0", "1"])
        >>> acc.update(np.array([0.9, 0.2, 0.6]), np.array([1, 0, 0]))
        >>> round(acc.result()["accuracy"], 3)
        0.667
    """

    def __init__(self, classes: list[str] | tuple[str, ...]):
        self.classes = [str(c) for c in classes]
        k = len(self.classes)
        if k < 2:
            raise ValueError("at least two classes are needed")
        self.num_examples = 0
        self.correct = 0
        self.log_loss_sum = 0.0
        self.confusion = np.zeros((k, k), dtype=np.int64)
        # One positive and one negative histogram per class (binary: only class 1 is used).
        self.pos_hist = np.zeros((k, BINS), dtype=np.int64)
        self.neg_hist = np.zeros((k, BINS), dtype=np.int64)

    @property
    def is_binary(self) -> bool:
        return len(self.classes) == 2

    def update(self, probabilities: np.ndarray, labels: np.ndarray) -> None:
        """Add a batch.

        Args:
            probabilities: binary: ``[batch]`` or ``[batch, 1]`` probability of class 1;
                multi-class: ``[batch, num_classes]`` rows summing to 1.
            labels: ``[batch]`` class indices.
        """
        labels = np.asarray(labels, dtype=np.int64).reshape(-1)
        p = np.asarray(probabilities, dtype=np.float64)
        k = len(self.classes)
        if self.is_binary:
            p1 = p.reshape(-1)
            full = np.stack([1.0 - p1, p1], axis=1)
            predicted = (p1 >= 0.5).astype(np.int64)
        else:
            full = p.reshape(-1, k)
            predicted = full.argmax(axis=1)
        if len(labels) != len(full):
            raise ValueError(f"{len(full)} predictions for {len(labels)} labels")
        if len(labels) and (labels.min() < 0 or labels.max() >= k):
            raise ValueError(f"label index out of range 0..{k - 1}")
        self.num_examples += len(labels)
        self.correct += int((predicted == labels).sum())
        true_p = np.clip(full[np.arange(len(labels)), labels], _EPS, 1.0)
        self.log_loss_sum += float(-np.log(true_p).sum())
        np.add.at(self.confusion, (labels, predicted), 1)
        bins = np.minimum((np.clip(full, 0.0, 1.0) * BINS).astype(np.int64), BINS - 1)
        for c in range(1 if self.is_binary else 0, k):
            is_c = labels == c
            self.pos_hist[c] += np.bincount(bins[is_c, c], minlength=BINS)
            self.neg_hist[c] += np.bincount(bins[~is_c, c], minlength=BINS)

    def result(self) -> dict[str, Any]:
        """The metrics so far (see the module docstring; NaN when there is no example)."""
        n = self.num_examples
        if self.is_binary:
            auc = _auc_from_histograms(self.pos_hist[1], self.neg_hist[1])
            roc = _roc_from_histograms(self.pos_hist[1], self.neg_hist[1])
        else:
            aucs = [
                _auc_from_histograms(self.pos_hist[c], self.neg_hist[c])
                for c in range(len(self.classes))
            ]
            present = [a for a in aucs if not math.isnan(a)]
            auc = float(np.mean(present)) if present else float("nan")
            roc = _roc_from_histograms(self.pos_hist.sum(axis=0), self.neg_hist.sum(axis=0))
        return {
            "num_examples": self.num_examples,
            "auc": auc,
            "accuracy": self.correct / n if n else math.nan,
            "log_loss": self.log_loss_sum / n if n else math.nan,
            "confusion_matrix": {
                "labels": list(self.classes),
                "matrix": self.confusion.tolist(),
            },
            "roc": roc,
        }


class RegressionAccumulator:
    """Streaming regression metrics (see the module docstring) in constant memory.

    Example:
        >>> acc = RegressionAccumulator()
        >>> acc.update(np.array([2.0, 4.0]), np.array([1.0, 5.0]))
        >>> acc.result()["rmse"], acc.result()["mae"]
        (1.0, 1.0)
    """

    task = "regression"

    def __init__(self) -> None:
        self.num_examples = 0
        self.error_sum = 0.0
        self.abs_error_sum = 0.0
        self.squared_error_sum = 0.0
        self.label_mean = 0.0
        self.label_m2 = 0.0  # squared deviations of the labels from their mean

    def update(self, predictions: np.ndarray, labels: np.ndarray) -> None:
        """Add a batch: ``predictions`` and ``labels`` ``[batch]`` in the label's units."""
        y = np.asarray(labels, dtype=np.float64).reshape(-1)
        p = np.asarray(predictions, dtype=np.float64).reshape(-1)
        if len(p) != len(y):
            raise ValueError(f"{len(p)} predictions for {len(y)} labels")
        if not len(y):
            return
        error = p - y
        self.error_sum += float(error.sum())
        self.abs_error_sum += float(np.abs(error).sum())
        self.squared_error_sum += float(np.square(error).sum())
        n_b, mean_b = len(y), float(y.mean())
        m2_b = float(np.square(y - mean_b).sum())
        n = self.num_examples + n_b
        delta = mean_b - self.label_mean
        self.label_mean += delta * n_b / n
        self.label_m2 += m2_b + delta * delta * self.num_examples * n_b / n
        self.num_examples = n

    def result(self) -> dict[str, Any]:
        """The metrics so far (NaN when there is no example; ``r2`` NaN for constant labels)."""
        n = self.num_examples
        if n == 0:
            keys = ("rmse", "mae", "r2", "mse", "mean_error", "label_mean", "label_std")
            return {"num_examples": 0, **dict.fromkeys(keys, math.nan)}
        mse = self.squared_error_sum / n
        return {
            "num_examples": n,
            "rmse": math.sqrt(mse),
            "mae": self.abs_error_sum / n,
            "r2": 1.0 - self.squared_error_sum / self.label_m2 if self.label_m2 > 0 else math.nan,
            "mse": mse,
            "mean_error": self.error_sum / n,
            "label_mean": self.label_mean,
            "label_std": math.sqrt(self.label_m2 / n),
        }
