"""Thresholds a candidate model must meet to be blessed, and the decision.

One syntax for any metric, absolute or relative to the served model (the *baseline*)::

    auc>=0.8                  # absolute bound
    auc>=baseline-0.002       # at most 0.002 below the baseline's AUC
    rmse<=3                   # absolute, in the label's units
    rmse<=baseline*1.05       # at most 5 % above the baseline's RMSE

Clauses are separated by commas (``auc>=0.8,auc>=baseline-0.002``); the operators are
``>=``, ``<=``, ``>`` and ``<``; a relative bound is ``baseline``, optionally followed by
``+``, ``-`` or ``*`` and an unsigned number. The metric is one of ``metrics.json``'s scalars
for the model's task (:data:`TASK_METRICS`).

Two metrics can be negative, which the syntax accounts for:

* ``mean_error`` (the bias, prediction minus label) is compared as its absolute value: a bias
  of -5 is as bad as one of 5, so ``mean_error<=0.5`` means ``|mean_error| <= 0.5`` and
  ``mean_error<=baseline+0.1`` at most 0.1 more bias than the baseline, either way. Its bound
  cannot be negative.
* ``r2`` (and ``mean_error``) refuse ``baseline*X``: scaling a negative baseline by 0.95
  raises the bound instead of lowering it; ``r2>=baseline-0.01`` says what is meant.

:func:`decide` checks every clause against the candidate's metrics and the baseline's: a
relative clause without a baseline (the first model, or a baseline that cannot score the
data) is *skipped*, not failed, so the first model is blessed on the absolute clauses alone.
A metric that is not finite (the NaN AUC of a one-class eval split) fails its clause, and a
candidate evaluated on no examples (``num_examples`` 0 or missing) is never blessed, whatever
the thresholds.

Pure Python (no TensorFlow, no storage): parsed by the CLI and the pipeline's parameters alike,
and tested on plain values.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from shardtrain.errors import ConfigError

#: The metrics a threshold may name, by task (the scalars of ``metrics.json``).
CLASSIFICATION_METRICS = ("auc", "accuracy", "log_loss")
REGRESSION_METRICS = ("rmse", "mae", "r2", "mse", "mean_error")
TASK_METRICS = {
    "binary": CLASSIFICATION_METRICS,
    "multiclass": CLASSIFICATION_METRICS,
    "regression": REGRESSION_METRICS,
}
#: Metrics that can be negative: no ``baseline*X`` bound for them.
SIGNED_METRICS = ("r2", "mean_error")
#: Metrics compared as their absolute value (a signed error: too low is as bad as too high).
ABSOLUTE_METRICS = ("mean_error",)
_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
}
_CLAUSE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(>=|<=|>|<)\s*(.+?)\s*$")
_RELATIVE = re.compile(r"^baseline\s*(?:([-+*])\s*(\S+))?$")
SYNTAX = "METRIC>=BOUND or METRIC<=BOUND, BOUND a number or baseline[+-*NUMBER]"


def measured(metric: str, value: float) -> float:
    """The value a clause on ``metric`` compares: ``|value|`` for :data:`ABSOLUTE_METRICS`."""
    return abs(value) if metric in ABSOLUTE_METRICS else value


@dataclass(frozen=True)
class Threshold:
    """One clause: ``metric op bound``.

    Attributes:
        metric: the metric's name (``auc``, ``rmse``...).
        op: ``>=``, ``<=``, ``>`` or ``<``.
        value: the absolute bound, or the number the baseline's value is offset/scaled by.
        relative: ``""`` for an absolute bound; for a bound relative to the baseline's value
            of the same metric, how ``value`` applies: ``+``, ``-`` or ``*``.
    """

    metric: str
    op: str
    value: float
    relative: str = ""

    def __post_init__(self) -> None:
        if self.relative and self.value < 0:
            raise ConfigError(
                f"thresholds: '{self}': the number after baseline{self.relative} must not be "
                "negative"
            )
        if self.relative == "*" and self.metric in SIGNED_METRICS:
            raise ConfigError(
                f"thresholds: '{self}': {self.metric} can be negative, where baseline*X moves "
                "the bound the wrong way; use baseline-X or baseline+X"
            )
        if not self.relative and self.metric in ABSOLUTE_METRICS and self.value < 0:
            raise ConfigError(
                f"thresholds: '{self}': {self.metric} is compared as its absolute value, so "
                "its bound cannot be negative"
            )

    @property
    def is_relative(self) -> bool:
        return bool(self.relative)

    def bound(self, baseline: float | None = None) -> float:
        """The bound: ``value``, or computed from the baseline's value."""
        if not self.relative:
            return self.value
        if baseline is None:
            raise ValueError(f"{self}: a relative threshold needs the baseline's value")
        if self.relative == "+":
            return baseline + self.value
        if self.relative == "-":
            return baseline - self.value
        return baseline * self.value

    def holds(self, value: float, bound: float) -> bool:
        """``value op bound`` (False for a value that is not finite)."""
        return math.isfinite(value) and _OPS[self.op](value, bound)

    def __str__(self) -> str:
        if not self.relative:
            return f"{self.metric}{self.op}{self.value:g}"
        tail = "" if self.relative == "+" and self.value == 0 else f"{self.relative}{self.value:g}"
        return f"{self.metric}{self.op}baseline{tail}"


def _number(text: str, clause: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"thresholds: '{clause}': '{text}' is not a number ({SYNTAX})") from None
    if not math.isfinite(value):
        raise ConfigError(f"thresholds: '{clause}': the bound must be finite")
    return value


def parse_clause(clause: str) -> Threshold:
    """One clause (``auc>=baseline-0.002``) → :class:`Threshold`.

    Raises:
        ConfigError: not ``METRIC OP BOUND``, an unknown metric, a bound that is neither a
            number nor ``baseline[+-*NUMBER]`` (NUMBER unsigned), ``baseline*`` for a metric
            that can be negative, or a negative bound for ``mean_error``.
    """
    match = _CLAUSE.match(clause)
    if not match:
        raise ConfigError(f"thresholds: '{clause}' is not {SYNTAX}")
    metric, op, bound = match.group(1).lower(), match.group(2), match.group(3)
    known = sorted({m for ms in TASK_METRICS.values() for m in ms})
    if metric not in known:
        raise ConfigError(
            f"thresholds: '{clause}': unknown metric '{metric}' (known: {', '.join(known)})"
        )
    relative = _RELATIVE.match(bound.lower())
    if relative is None:
        return Threshold(metric, op, _number(bound, clause))
    sign, number = relative.group(1), relative.group(2)
    if sign is None:
        return Threshold(metric, op, 0.0, "+")
    if number[0] in "+-":
        raise ConfigError(
            f"thresholds: '{clause}': '{number}' after baseline{sign} must be an unsigned "
            f"number ({SYNTAX})"
        )
    return Threshold(metric, op, _number(number, clause), sign)


def parse_thresholds(text: str | None) -> tuple[Threshold, ...]:
    """``"auc>=0.8,auc>=baseline-0.002"`` → the clauses (``""`` or None: none).

    Raises:
        ConfigError: a clause that does not parse (:func:`parse_clause`).
    """
    if isinstance(text, list | tuple):  # already parsed (a configuration built in code)
        return tuple(t if isinstance(t, Threshold) else parse_clause(str(t)) for t in text)
    clauses = [c for c in (text or "").split(",") if c.strip()]
    return tuple(parse_clause(c) for c in clauses)


def format_thresholds(thresholds: tuple[Threshold, ...]) -> str:
    """The inverse of :func:`parse_thresholds`."""
    return ",".join(str(t) for t in thresholds)


def check_task(thresholds: tuple[Threshold, ...], task: str, where: str) -> None:
    """Every clause names a metric of ``task`` (``binary``, ``multiclass``, ``regression``).

    Raises:
        ConfigError: a clause names a metric the model's task does not have.
    """
    known = TASK_METRICS.get(task, CLASSIFICATION_METRICS)
    for t in thresholds:
        if t.metric not in known:
            kind = "regression" if task == "regression" else f"{task} classifier"
            raise ConfigError(
                f"thresholds: '{t}': {where} is a {kind}, which has no {t.metric} "
                f"(its metrics: {', '.join(known)})"
            )


@dataclass(frozen=True)
class Check:
    """One clause checked: the candidate's value, the bound, whether it holds.

    Attributes:
        threshold: the clause.
        value: the candidate's value of the metric (``|mean_error|``: :func:`measured`).
        bound: the bound it was held to (None: skipped).
        passed: True, False, or None when skipped (a relative clause with no baseline).
        note: why it was skipped.
    """

    threshold: Threshold
    value: float
    bound: float | None
    passed: bool | None
    note: str = ""

    def describe(self) -> str:
        """``auc 0.8123 >= 0.8000 (auc>=0.8): holds``;
        ``auc 0.7912 is not >= 0.8000 (auc>=0.8)``."""
        t = self.threshold
        name = f"|{t.metric}|" if t.metric in ABSOLUTE_METRICS else t.metric
        if self.passed is None:
            return f"{t}: skipped ({self.note})"
        if self.passed:
            return f"{name} {self.value:.4f} {t.op} {self.bound:.4f} ({t}): holds"
        return f"{name} {self.value:.4f} is not {t.op} {self.bound:.4f} ({t})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "threshold": str(self.threshold),
            "metric": self.threshold.metric,
            "value": self.value,
            "bound": self.bound,
            "pass": self.passed,
            **({"note": self.note} if self.note else {}),
        }


@dataclass(frozen=True)
class Decision:
    """Whether the candidate is blessed: every clause holds (skipped ones aside).

    Attributes:
        checks: every clause checked.
        refused: why the candidate is not blessed whatever its checks ('' : it may be).
    """

    checks: tuple[Check, ...]
    refused: str = ""

    @property
    def blessed(self) -> bool:
        return not self.refused and all(c.passed is not False for c in self.checks)

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.passed is False)

    def summary(self) -> str:
        """One line: ``blessed: ...`` or ``not blessed: <the failing clauses>``."""
        if self.refused:
            return f"not blessed: {self.refused}"
        if not self.checks:
            return "blessed: no thresholds"
        if not self.blessed:
            return "not blessed: " + "; ".join(c.describe() for c in self.failed)
        skipped = [c for c in self.checks if c.passed is None]
        text = f"blessed: {len(self.checks) - len(skipped)} threshold(s) hold"
        return text + (f", {len(skipped)} skipped ({skipped[0].note})" if skipped else "")


def decide(
    thresholds: tuple[Threshold, ...],
    candidate: Mapping[str, Any],
    baseline: Mapping[str, Any] | None,
    *,
    no_baseline: str = "no baseline",
) -> Decision:
    """Check every clause: the candidate's metrics against absolute bounds and against the
    baseline's metrics (None: no baseline, relative clauses are skipped with ``no_baseline``
    as the reason); ``mean_error`` is compared as its absolute value (:func:`measured`), the
    candidate's and the baseline's alike. A candidate without examples (``num_examples`` 0
    or missing) is refused: its metrics describe nothing.
    """
    examples = candidate.get("num_examples")
    refused = ""
    if not (isinstance(examples, int | float) and not isinstance(examples, bool) and examples > 0):
        refused = f"the candidate was evaluated on no examples (num_examples {examples})"
    checks = []
    for t in thresholds:
        value = measured(t.metric, float(candidate.get(t.metric, math.nan)))
        if not t.is_relative:
            checks.append(Check(t, value, t.value, t.holds(value, t.value)))
            continue
        if baseline is None:
            checks.append(Check(t, value, None, None, no_baseline))
            continue
        base = measured(t.metric, float(baseline.get(t.metric, math.nan)))
        if not math.isfinite(base):
            checks.append(Check(t, value, None, None, f"the baseline's {t.metric} is {base}"))
            continue
        bound = t.bound(base)
        checks.append(Check(t, value, bound, t.holds(value, bound)))
    return Decision(tuple(checks), refused)
