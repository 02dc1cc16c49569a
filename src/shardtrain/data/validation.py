"""Data checks: is a new dataset still the data a model was trained on?

:func:`validate` compares a new dataset's schema and statistics with a baseline's -- another
dataset, or the training data a model carries (:mod:`shardtrain.data.profile`) -- and
reports, column by column:

=====================  ======================================================  ==========
check                  fails when                                              default
=====================  ======================================================  ==========
``missing_columns``    a column of the baseline is not in the new data         on
``new_columns``        the new data has a column the baseline has not          on
``retyped_columns``    a column's type changed (``int`` → ``string``...)       on
``label_classes``      a label class appeared or vanished (or the label        on
                       column changed)
``label_drift``        the L-infinity distance of the label's class            0.1
                       frequencies exceeds this (for a regression label: the
                       Jensen-Shannon divergence of its histograms)
``missing_rate``       a column's share of missing values (NaN included)       0.05
                       moved by more than this (absolute)
``numeric_drift``      the Jensen-Shannon divergence of a numeric column's     0.05
                       histograms exceeds this (bits, 0-1)
``categorical_drift``  the L-infinity distance of a categorical column's       0.1
                       value frequencies exceeds this (0-1)
=====================  ======================================================  ==========

(:mod:`shardtrain.data.drift` defines both distances.) Drift between today's data and an
older dataset is one use; *skew* between the data a model is trained on and the data it is
served is the same comparison with the model's directory as the baseline.

Limits are given as text, ``"numeric_drift=0.05,new_columns=off,missing_rate.gold=0.2"``
(:meth:`Limits.parse`): a check's limit for every column, or for one column after a dot;
``off`` disables a check, ``on`` enables an on/off one. The defaults suit data that should
not change: two samples of 5,000 and 20,000 rows of the same generator differ by at most
~0.01 by either distance, while a log-normal column multiplied by 3 moves by ~0.15 and a
column turned into strings is retyped. Smaller datasets are noisier: raise the drift
limits for datasets of a few thousand rows or less.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from shardtrain import storage
from shardtrain.data.report import fmt, markdown_table
from shardtrain.errors import ConfigError, DataError, one_line

if TYPE_CHECKING:
    from shardtrain.data.metadata import DatasetMetadata
    from shardtrain.data.profile import DataProfile

# :class:`Limits` is light to import (no NumPy, no Arrow): the pipeline's first step parses
# the data checks' limits before anything is sharded. The comparisons import the
# statistics' modules when they run.

#: What the data checks may do when one fails: stop the run, report it, or not run at all.
DATA_CHECK_MODES = ("fail", "warn", "off")

#: The checks with a numeric limit, and what their value measures.
MEASURES = {
    "missing_rate": "change of the missing rate",
    "numeric_drift": "JS divergence",
    "categorical_drift": "L-inf distance",
    "label_drift": "L-inf distance of class frequencies (regression: JS divergence)",
}
#: The on/off checks.
SWITCHES = ("missing_columns", "new_columns", "retyped_columns", "label_classes")


class DataChecksFailed(DataError):
    """The new data failed a check (exit code 1, like other data that fails validation)."""


@dataclass(frozen=True)
class Limits:
    """The limit of every check (see the module docstring); None or False: not checked.

    Attributes:
        missing_columns, new_columns, retyped_columns, label_classes: on/off checks.
        missing_rate: the largest change of a column's missing rate that passes.
        numeric_drift: the largest Jensen-Shannon divergence (bits) that passes.
        categorical_drift: the largest L-infinity distance that passes.
        label_drift: the largest change of the label's distribution that passes: the
            L-infinity distance of its class frequencies, or for a regression label the
            Jensen-Shannon divergence of its histograms.
        columns: limits for single columns, ``{(check, column): limit}``.
    """

    missing_columns: bool = True
    new_columns: bool = True
    retyped_columns: bool = True
    label_classes: bool = True
    missing_rate: float | None = 0.05
    numeric_drift: float | None = 0.05
    categorical_drift: float | None = 0.1
    label_drift: float | None = 0.1
    columns: Mapping[tuple[str, str], float | None] = field(default_factory=dict)

    def limit(self, check: str, column: str) -> float | None:
        """The limit of a numeric check for ``column`` (None: not checked)."""
        if (check, column) in self.columns:
            return self.columns[(check, column)]
        value: float | None = getattr(self, check)
        return value

    @classmethod
    def parse(cls, text: str | None) -> Limits:
        """Limits from ``"check=value,check.column=value"`` (empty: the defaults).

        Raises:
            ConfigError: an unknown check, a value that is not a number >= 0 (or ``off``;
                ``on``/``off`` for the on/off checks), or a column limit of an on/off check.
        """
        values: dict[str, Any] = {}
        columns: dict[tuple[str, str], float | None] = {}
        for item in (text or "").split(","):
            item = item.strip()
            if not item:
                continue
            name, sep, raw = item.partition("=")
            check, _, column = name.strip().partition(".")
            raw = raw.strip().lower()
            if not sep or check not in (*SWITCHES, *MEASURES):
                raise ConfigError(
                    f"data check limit '{item}': expected CHECK=VALUE or CHECK.COLUMN=VALUE "
                    f"with CHECK one of {', '.join((*SWITCHES, *MEASURES))}"
                )
            if check in SWITCHES:
                if column or raw not in ("on", "off"):
                    raise ConfigError(f"data check limit '{item}': {check} is on or off")
                values[check] = raw == "on"
                continue
            value = _limit_value(item, raw)
            if column:
                columns[(check, column)] = value
            else:
                values[check] = value
        return cls(**values, columns=columns)

    def check_columns(self, known: Iterable[str], where: str) -> None:
        """Every column a limit names (``missing_rate.gold=0.2``) is one of ``known``: a
        misspelled column's limit would never apply.

        Raises:
            ConfigError: one line naming the unknown column(s) and listing the known ones.
        """
        names = set(known)
        unknown = sorted({column for _, column in self.columns if column not in names})
        if unknown:
            items = ", ".join(
                f"{check}.{column}" for check, column in sorted(self.columns) if column in unknown
            )
            raise ConfigError(
                f"data check limit(s) {items}: no column {', '.join(repr(c) for c in unknown)} "
                f"in {where} (its columns: {', '.join(sorted(names)) or 'none'})"
            )

    def describe(self) -> str:
        """The limits in the form :meth:`parse` reads."""
        parts = [
            f"{f.name}={_shown(getattr(self, f.name))}" for f in fields(self) if f.name != "columns"
        ]
        parts += [f"{c}.{col}={_shown(v)}" for (c, col), v in sorted(self.columns.items())]
        return ",".join(parts)


def _shown(value: bool | float | None) -> str:
    if value is True:
        return "on"
    return "off" if value is None or value is False else f"{value:g}"


def _limit_value(item: str, raw: str) -> float | None:
    if raw == "off":
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"data check limit '{item}': the value must be a number >= 0 or off")
    return value


@dataclass(frozen=True)
class Finding:
    """The outcome of one check on one column.

    Attributes:
        check: the check's name.
        column: the column.
        passed: whether the check holds.
        detail: what was found, in words (``JS divergence 0.62 > 0.1``, ``int → string``).
        value: the measured value of a numeric check (None for the on/off checks).
        limit: its limit.
    """

    check: str
    column: str
    passed: bool
    detail: str
    value: float | None = None
    limit: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Validation:
    """The outcome of :func:`validate`: every finding, and notes on what was not checked."""

    new: str
    baseline: str
    limits: Limits
    findings: tuple[Finding, ...]
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return all(f.passed for f in self.findings)

    @property
    def failures(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if not f.passed)

    def summary(self) -> str:
        """One line: what failed, by check, naming the columns (or that every check holds)."""
        if self.passed:
            return f"{self.new}: every data check holds against {self.baseline}"
        by_check: dict[str, list[str]] = {}
        for f in self.failures:
            by_check.setdefault(f.check, []).append(f"{f.column} ({f.detail})")
        text = "; ".join(f"{check}: {', '.join(cols)}" for check, cols in by_check.items())
        return f"{self.new}: data checks failed against {self.baseline}: {text}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "new": self.new,
            "baseline": self.baseline,
            "limits": self.limits.describe(),
            "failures": [f.to_dict() for f in self.failures],
            "findings": [f.to_dict() for f in self.findings],
            "notes": list(self.notes),
        }

    def to_markdown(self) -> str:
        """A readable report: the result, the failures, every column's figures, the notes."""
        out = [f"# Data checks: `{self.new}`", ""]
        out += [f"Against `{self.baseline}`.", ""]
        verdict = "passed" if self.passed else f"FAILED ({len(self.failures)} finding(s))"
        out += [f"**Result: {verdict}**", ""]
        out += [f"Limits: `{self.limits.describe()}`", ""]
        if self.failures:
            out += ["## Failures", ""]
            out += markdown_table(
                ["check", "column", "found"], [(f.check, f.column, f.detail) for f in self.failures]
            )
        measured = [f for f in self.findings if f.check in MEASURES]
        if measured:
            out += ["## Columns", ""]
            out += markdown_table(
                ["column", "check", "value", "limit", "result"],
                [
                    (f.column, f.check, fmt(f.value), fmt(f.limit), "ok" if f.passed else "FAILED")
                    for f in measured
                ],
            )
        if self.notes:
            out += ["## Notes", "", *(f"* {n}" for n in self.notes), ""]
        return "\n".join(out)


def validate(new: DataProfile, baseline: DataProfile, limits: Limits | None = None) -> Validation:
    """Compare ``new`` with ``baseline`` under ``limits`` (default: :class:`Limits`()).

    Raises:
        ConfigError: a limit names a column neither dataset has
            (:meth:`Limits.check_columns`).
    """
    limits = limits or Limits()
    findings: list[Finding] = []
    notes: list[str] = []
    a, b = new.metadata, baseline.metadata
    columns = {c.name for meta in (a, b) for c in meta.schema.columns} | {a.label, b.label}
    limits.check_columns(columns, new.uri or new.source)
    findings += _schema_findings(a, b, limits)
    findings += _label_findings(a, b, limits, notes)
    where = (new.source, baseline.source)
    findings += _label_drift(a, b, limits, notes, where)
    old_types = {c.name: c.type for c in b.schema.features}
    for column in a.schema.features:
        if old_types.get(column.name) != column.type:
            continue  # new or retyped: reported above
        st_new = a.stats.columns.get(column.name)
        st_old = b.stats.columns.get(column.name)
        if not st_new or not st_old or st_new.get("kind") != st_old.get("kind"):
            notes.append(f"{column.name}: no statistics on both sides; not compared")
            continue
        findings += _column_findings(column.name, st_new, st_old, limits, notes, where)
    return Validation(
        new=new.uri or new.source,
        baseline=baseline.source,
        limits=limits,
        findings=tuple(findings),
        notes=tuple(notes),
    )


def validate_uris(new: str, against: str, limits: Limits | None = None) -> Validation:
    """:func:`validate` the dataset at ``new`` against a dataset or model at ``against``.

    Raises:
        DataError, NotCommittedError: either is not a complete dataset or a model with
            its training data's statistics.
    """
    from shardtrain.data.profile import load_profile

    return validate(load_profile(new), load_profile(against), limits)


def write_json(validation: Validation, uri: str) -> None:
    """Write :meth:`Validation.to_dict` to ``uri``."""
    storage.write_json(uri, validation.to_dict())


def _written(meta: DatasetMetadata) -> dict[str, str]:
    return {c.name: c.type for c in meta.schema.written}


def _schema_findings(a: DatasetMetadata, b: DatasetMetadata, limits: Limits) -> list[Finding]:
    new, old = _written(a), _written(b)
    out = []
    if limits.missing_columns:
        out += [
            Finding("missing_columns", n, False, f"{t} column missing")
            for n, t in old.items()
            if n not in new
        ]
    if limits.new_columns:
        out += [
            Finding("new_columns", n, False, f"new {t} column")
            for n, t in new.items()
            if n not in old
        ]
    if limits.retyped_columns:
        out += [
            Finding("retyped_columns", n, False, f"{old[n]} → {t}")
            for n, t in new.items()
            if n in old and old[n] != t
        ]
    return out


def _label_findings(
    a: DatasetMetadata, b: DatasetMetadata, limits: Limits, notes: list[str]
) -> list[Finding]:
    if not limits.label_classes:
        return []
    if a.label != b.label:
        return [Finding("label_classes", a.label, False, f"the label was '{b.label}'")]
    if "regression" in (a.label_info.task, b.label_info.task):
        notes.append(f"label '{a.label}': a regression target has no classes to compare")
        return []
    new_counts = a.stats.label.get("counts", {})
    old_counts = b.stats.label.get("counts", {})
    if a.stats.label.get("many_values") or b.stats.label.get("many_values"):
        notes.append(f"label '{a.label}': too many values to compare classes")
        return []
    appeared = [c for c in new_counts if c not in old_counts]
    vanished = [c for c in old_counts if c not in new_counts]
    out = []
    if appeared:
        shown = ", ".join(f"'{c}' ({new_counts[c]:,} rows)" for c in appeared)
        out.append(Finding("label_classes", a.label, False, f"new class {shown}"))
    if vanished:
        shown = ", ".join(f"'{c}'" for c in vanished)
        out.append(Finding("label_classes", a.label, False, f"class {shown} vanished"))
    return out


def _label_drift(
    a: DatasetMetadata,
    b: DatasetMetadata,
    limits: Limits,
    notes: list[str],
    where: tuple[str, str],
) -> list[Finding]:
    """The change of the label's distribution (the label_classes check sees only classes
    appearing or vanishing, not a shift of their balance)."""
    limit = limits.limit("label_drift", a.label)
    if limit is None or a.label != b.label:
        return []
    new, old = a.stats.label, b.stats.label
    if "regression" in (a.label_info.task, b.label_info.task):
        sides = (new.get("numeric") or {}, old.get("numeric") or {})
        if not all(st.get("count") for st in sides):
            notes.append(f"label '{a.label}': no values on one side; distributions not compared")
            return []
        if not all(st.get("histogram") for st in sides):
            notes.append(f"label '{a.label}': no histogram on one side (sharded before them)")
            return []
        js = _js_divergence(f"label '{a.label}'", sides, where, notes)
        if js is None:
            return []
        value, measure = js, "JS divergence"
    else:
        if new.get("many_values") or old.get("many_values"):
            if not limits.label_classes:  # which says so otherwise
                notes.append(f"label '{a.label}': too many values to compare classes")
            return []
        counts = (new.get("counts", {}), old.get("counts", {}))
        totals = [sum(c.values()) for c in counts]
        if not all(totals):
            notes.append(f"label '{a.label}': no values on one side; classes not compared")
            return []
        from shardtrain.data.drift import linf_distance

        value = linf_distance(*counts, *totals)
        measure = "L-inf distance of class frequencies"
    finding = _numeric(a.label, "label_drift", value, limit, measure)
    return [finding] if finding else []


def _js_divergence(
    name: str,
    sides: tuple[Mapping[str, Any], Mapping[str, Any]],
    where: tuple[str, str],
    notes: list[str],
) -> float | None:
    """The JS divergence of two numeric statistics' histograms (new, baseline), read from
    ``where``; None when neither holds a value (noted: an all-null column has not drifted).

    Raises:
        DataError: statistics that are not what a dataset writes (a hand-edited or truncated
            ``training_data.json``), naming the file.
    """
    from shardtrain.data.drift import histogram_js_divergence
    from shardtrain.data.histogram import Histogram

    read = []
    for st, uri in zip(sides, where, strict=True):
        try:
            hist = Histogram.from_dict(st["histogram"])
            bounds = (float(st["min"]), float(st["max"]))
        except (KeyError, TypeError, ValueError) as e:
            raise DataError(f"{uri}: malformed statistics of {name}: {one_line(e)}") from None
        read.append((hist, bounds, uri))
    if not any(hist.total for hist, _, _ in read):
        notes.append(f"{name}: empty histograms on both sides; distributions not compared")
        return None
    for hist, _, uri in read:
        if not hist.total:
            raise DataError(f"{uri}: malformed statistics of {name}: values but an empty histogram")
    (a, a_range, _), (b, b_range, _) = read
    try:
        return histogram_js_divergence(a, b, a_range=a_range, b_range=b_range)
    except ValueError as e:
        raise DataError(f"{where[1]}: statistics of {name} not comparable: {one_line(e)}") from None


def _missing_rate(st: Mapping[str, Any]) -> float | None:
    absent = st.get("missing", 0) + st.get("nan", 0)
    total = st.get("count", 0) + absent
    return absent / total if total else None


def _numeric(
    name: str, check: str, value: float, limit: float | None, measure: str
) -> Finding | None:
    if limit is None:
        return None
    passed = value <= limit
    sign = "<=" if passed else ">"
    return Finding(check, name, passed, f"{measure} {fmt(value)} {sign} {limit:g}", value, limit)


def _column_findings(
    name: str,
    st_new: Mapping[str, Any],
    st_old: Mapping[str, Any],
    limits: Limits,
    notes: list[str],
    where: tuple[str, str],
) -> list[Finding]:
    out: list[Finding | None] = []
    kind = st_new.get("kind")
    if kind == "image":
        return []
    rate_new, rate_old = _missing_rate(st_new), _missing_rate(st_old)
    if rate_new is not None and rate_old is not None:
        out.append(
            _numeric(
                name,
                "missing_rate",
                abs(rate_new - rate_old),
                limits.limit("missing_rate", name),
                f"missing rate {rate_old:.2%} → {rate_new:.2%}, change",
            )
        )
    if not st_new.get("count") or not st_old.get("count"):
        notes.append(f"{name}: no values on one side; distributions not compared")
    elif kind == "numeric":
        if not st_new.get("histogram") or not st_old.get("histogram"):
            notes.append(f"{name}: no histogram on one side (sharded before histograms)")
        else:
            value = _js_divergence(f"column '{name}'", (st_new, st_old), where, notes)
            if value is not None:
                limit = limits.limit("numeric_drift", name)
                out.append(_numeric(name, "numeric_drift", value, limit, "JS divergence"))
    elif kind == "categorical":
        from shardtrain.data.drift import linf_distance

        value = linf_distance(
            {t["value"]: t["count"] for t in st_new.get("top", [])},
            {t["value"]: t["count"] for t in st_old.get("top", [])},
            st_new["count"],
            st_old["count"],
        )
        limit = limits.limit("categorical_drift", name)
        out.append(_numeric(name, "categorical_drift", value, limit, "L-inf distance"))
    return [f for f in out if f is not None]
