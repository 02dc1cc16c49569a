"""What a label makes the model learn: a binary or multi-class classifier, or a regression.

:func:`choose_task` is the one rule. The sharder records its answer for ``--task auto`` in
``metadata.json`` (``label_info.task``); ``shardtrain train --task`` applies it again with the
user's choice, so an override never needs a new sharding run. Pure: the label's type and the
exact counts of its values (:class:`~shardtrain.data.statistics.LabelStats`) are all it reads.

The ``auto`` rule:

* a ``bool`` or ``string`` label is classes: two values make a *binary* task, more a
  *multiclass* one (at most :data:`MAX_CLASSES`);
* a numeric label with at most two distinct values is *binary* (``0``/``1``, ``-1``/``1``,
  ``0.0``/``1.0``);
* a ``float`` label holding a value that is not a whole number is a *regression*;
* an ``int`` label (or a ``float`` one of whole numbers, as a file with gaps in an integer
  column is often written) is *multiclass* when it looks like class ids: at most
  :data:`MAX_AUTO_CLASSES` distinct values, all of them between 0 and
  :data:`MAX_AUTO_CLASS_ID` (ratings 1-5, a class number 0-9); otherwise -- more distinct
  values, negative or large ones (minutes played, spend, a score) -- a *regression*.

``--task binary|multiclass|regression`` overrides the guess where the label allows it: a
``string`` or ``bool`` label cannot be a regression, binary needs exactly two classes,
multiclass three or more, and classes need their values counted (at most
:data:`MAX_CLASSES` distinct ones).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from shardtrain.errors import DataError

#: The tasks a model can be trained for (``auto`` picks one of them).
TASKS = ("binary", "multiclass", "regression")
#: Label values a classifier can have; the sharder counts at most this many distinct values
#: of a label (a regression label has millions).
MAX_CLASSES = 1000
#: ``auto``: an integer label is classes only with at most this many distinct values ...
MAX_AUTO_CLASSES = 20
#: ... each between 0 and this (class ids, ratings; not counts, amounts or years).
MAX_AUTO_CLASS_ID = 99

NUMERIC_LABEL_TYPES = ("int", "float")


@dataclass(frozen=True)
class TaskChoice:
    """The task a label is trained for, and why (one phrase, for the log).

    Attributes:
        task: ``binary``, ``multiclass`` or ``regression``.
        reason: why, e.g. ``"a float label with values that are not whole numbers"``.
    """

    task: str
    reason: str


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def choose_task(
    label: str,
    label_type: str,
    counts: Mapping[str, int] | None,
    requested: str = "auto",
    *,
    where: str = "dataset",
) -> TaskChoice:
    """The task for a label, by the ``auto`` rule (module docstring) or as ``requested``.

    Args:
        label: the label column's name (for messages).
        label_type: its schema type: ``int``, ``float``, ``bool`` or ``string``.
        counts: the exact count of every distinct label value (values as strings); None when
            the label has more than :data:`MAX_CLASSES` distinct values (the sharder stops
            counting them).
        requested: ``auto``, ``binary``, ``multiclass`` or ``regression``.
        where: the dataset URI, for messages.

    Returns:
        The task and the reason.

    Raises:
        DataError: the label cannot be trained for the requested task (one line: the label,
            what it holds, what to do), or has a single value.
    """
    if requested not in ("auto", *TASKS):
        raise DataError(f"{where}: unknown task '{requested}' (use auto, {', '.join(TASKS)})")
    numeric = label_type in NUMERIC_LABEL_TYPES
    values = None if counts is None else [v for v, n in counts.items() if n > 0]
    distinct = f"more than {MAX_CLASSES:,}" if values is None else f"{len(values):,}"
    what = f"label '{label}' ({label_type}, {distinct} distinct values)"
    if values is not None and len(values) < 2 and requested != "regression":
        raise DataError(
            f"{where}: {what} has {len(values)} value(s) in the data; a model needs at least 2"
        )
    if requested == "regression":
        if not numeric:
            raise DataError(
                f"{where}: {what} is not a number: it cannot be a regression target "
                "(use --task auto, binary or multiclass)"
            )
        return TaskChoice("regression", "--task regression")
    if requested in ("binary", "multiclass"):
        if values is None:
            raise DataError(
                f"{where}: {what} cannot be {requested} classes (at most {MAX_CLASSES:,}); "
                "use --task regression or auto"
            )
        if requested == "binary" and len(values) != 2:
            raise DataError(
                f"{where}: {what} is not binary (exactly 2 values); use --task "
                f"{'regression' if numeric else 'multiclass'} or auto"
            )
        if requested == "multiclass" and len(values) < 3:
            raise DataError(f"{where}: {what} has 2 classes: that is --task binary (or auto)")
        return TaskChoice(requested, f"--task {requested}")
    # auto
    if not numeric:
        if values is None:
            raise DataError(
                f"{where}: {what} has too many classes for a classifier (at most {MAX_CLASSES:,})"
            )
        task = "binary" if len(values) == 2 else "multiclass"
        return TaskChoice(task, f"a {label_type} label with {len(values)} classes")
    if values is not None and len(values) == 2:
        return TaskChoice("binary", "a numeric label with 2 distinct values")
    if values is None:
        return TaskChoice(
            "regression", f"a numeric label with more than {MAX_CLASSES:,} distinct values"
        )
    parsed = [_number(v) for v in values]
    numbers = [x for x in parsed if x is not None and x.is_integer()]
    if len(numbers) < len(parsed):
        return TaskChoice("regression", "a float label with values that are not whole numbers")
    if len(values) > MAX_AUTO_CLASSES:
        return TaskChoice(
            "regression",
            f"a numeric label with {len(values)} distinct whole values (more than "
            f"{MAX_AUTO_CLASSES}; --task multiclass to classify)",
        )
    low, high = min(numbers), max(numbers)
    if low < 0 or high > MAX_AUTO_CLASS_ID:
        return TaskChoice(
            "regression",
            f"a numeric label of values from {low:g} to {high:g} (class ids are 0-"
            f"{MAX_AUTO_CLASS_ID}; --task multiclass to classify)",
        )
    return TaskChoice(
        "multiclass",
        f"a numeric label with {len(values)} whole values from {low:g} to {high:g} "
        "(--task regression to predict the number)",
    )
