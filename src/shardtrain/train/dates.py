"""ISO-8601 dates and timestamps read as time, not as a vocabulary of date strings.

The sharder stores a column of dates (``2007-11-11``, ``2026-11-26T13:05:00Z``) as a string
column, and a top-K vocabulary of date strings would only let a model memorise the most
frequent days. A string column whose most frequent values (the statistics' ``top``) are
all ISO-8601 dates or timestamps is therefore a **date feature**: the model sees, for each
value,

* its time in seconds since 1970-01-01 (standardised with the mean and spread of the top
  values, weighted by their counts),
* its day of the week as a point on a circle (sine and cosine of ``2π·day/7``, Monday 0),
* for timestamps (a top value with a time of day), its hour the same way (``2π·hour/24``).

Accepted forms: ``YYYY-MM-DD``, then optionally ``T`` or a space and ``hh:mm``, ``:ss``,
a fraction of a second and a zone (``Z`` or ``±hh:mm``, ``±hhmm``). The time of day is
read as written: a zone offset is ignored (a log's timestamps are usually in one zone).
A value that is not such a date (at serving, or beyond the top values) counts as missing;
a day past its month's end (``02-30``) rolls over into the next month.

:func:`date_stats` (statistics → the decision and the standardisation) imports nothing
heavy; :func:`time_parts` builds the TensorFlow ops.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping
from typing import Any

#: An ISO-8601 date or timestamp (groups: the date; the time of day, if any).
ISO_DATE = (
    r"(\d{4}-\d{2}-\d{2})"
    r"(?:[T ](\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)(?:Z|[+-]\d{2}:?\d{2})?)?"
)
_ISO = re.compile(ISO_DATE)
#: The derived model features of a date column: ``(suffix, needs a time of day)``.
PARTS = (
    ("seconds", False),
    ("day of week sin", False),
    ("day of week cos", False),
    ("hour sin", True),
    ("hour cos", True),
)
#: A date column needs at least this many distinct dates among its top values.
MIN_DISTINCT_DATES = 2


def _seconds(text: str) -> float | None:
    """Seconds since 1970-01-01 of an ISO-8601 date/timestamp (its zone ignored), or None."""
    match = _ISO.fullmatch(text)
    if not match:
        return None
    try:
        day = dt.date.fromisoformat(match.group(1))
    except ValueError:
        return None
    clock = (match.group(2) or "00:00").split(":")
    hours, minutes = int(clock[0]), int(clock[1])
    secs = float(clock[2]) if len(clock) > 2 else 0.0
    if hours > 23 or minutes > 59 or secs >= 61:
        return None
    days = (day - dt.date(1970, 1, 1)).days
    return days * 86400.0 + hours * 3600.0 + minutes * 60.0 + secs


def date_stats(stats: Mapping[str, Any] | None) -> tuple[float, float, bool] | None:
    """``(mean, std, with_time)`` of a column whose top values are all ISO-8601 dates, or
    None when it is not such a column.

    Args:
        stats: the column's entry in ``metadata.json``'s ``stats.columns`` (categorical).
    """
    if not stats or stats.get("kind") != "categorical":
        return None
    top = [t for t in stats.get("top") or () if str(t.get("value", "")) != ""]
    if len(top) < MIN_DISTINCT_DATES:
        return None
    values, weights, with_time = [], [], False
    for item in top:
        seconds = _seconds(str(item["value"]))
        if seconds is None:
            return None
        values.append(seconds)
        weights.append(max(int(item.get("count") or 1), 1))
        with_time |= bool(_ISO.fullmatch(str(item["value"])).group(2))  # type: ignore[union-attr]
    total = sum(weights)
    mean = sum(v * w for v, w in zip(values, weights, strict=True)) / total
    var = sum(w * (v - mean) ** 2 for v, w in zip(values, weights, strict=True)) / total
    std = math.sqrt(var)
    return mean, std if std > 0 else 1.0, with_time


def time_parts(text, *, mean: float, std: float, with_time: bool) -> list[Any]:
    """TensorFlow: a batch of strings → the float32 parts of :data:`PARTS` (NaN where a
    value is missing or not a date), in that order (the hour parts only ``with_time``).

    Days from the civil date: H. Hinnant's ``days_from_civil`` (exact for any year).
    """
    import tensorflow as tf

    valid = tf.strings.regex_full_match(text, ISO_DATE)
    safe = tf.where(valid, text, tf.fill(tf.shape(text), "1970-01-01"))
    # Every field in reach: a date alone reads as midnight, hh:mm alone as hh:mm:00.
    safe = tf.strings.join([safe, "T00:00:00"])

    def number(pos: int, size: int, default: str = "0"):
        part = tf.strings.substr(safe, pos, size)
        ok = tf.strings.regex_full_match(part, rf"\d{{{size}}}")
        return tf.strings.to_number(tf.where(ok, part, default), tf.int64)

    y, m, d = number(0, 4), number(5, 2), number(8, 2)
    hh, mm, ss = number(11, 2), number(14, 2), number(17, 2)
    in_range = (m >= 1) & (m <= 12) & (d >= 1) & (d <= 31) & (hh <= 23) & (mm <= 59)
    valid = valid & in_range & (ss <= 60)
    y = y - tf.cast(m <= 2, tf.int64)
    era = tf.math.floordiv(y, 400)
    yoe = y - era * 400
    shift = tf.where(m > 2, tf.constant(-3, tf.int64), tf.constant(9, tf.int64))
    doy = tf.math.floordiv(153 * (m + shift) + 2, 5) + d - 1
    doe = yoe * 365 + tf.math.floordiv(yoe, 4) - tf.math.floordiv(yoe, 100) + doy
    days = era * 146097 + doe - 719468
    seconds = tf.cast(days * 86400 + hh * 3600 + mm * 60 + ss, tf.float64)
    nan = tf.constant(float("nan"), tf.float32)

    def part(x):
        return tf.where(valid, tf.cast(x, tf.float32), nan)

    dow = tf.cast(tf.math.floormod(days + 3, 7), tf.float32)  # 1970-01-01 was a Thursday
    turn = 2 * math.pi
    out = [
        part((seconds - mean) / std),
        part(tf.sin(turn * dow / 7)),
        part(tf.cos(turn * dow / 7)),
    ]
    if with_time:
        hour = tf.cast(hh, tf.float32) + tf.cast(mm, tf.float32) / 60
        out += [part(tf.sin(turn * hour / 24)), part(tf.cos(turn * hour / 24))]
    return out
