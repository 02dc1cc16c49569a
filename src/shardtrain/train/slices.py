"""Slices of the eval split: which values of a categorical column get metrics of their own.

``--slice-by difficulty,platform`` evaluates the model once per value of each named column,
as TFMA's slicing specs do. A column may hold thousands of values (a user id), so each column
gets at most ``max_values`` slices: its most frequent values in the dataset's statistics
(``metadata.json``, counted over every accepted row), and one more, :data:`OTHER`, for every
other value and for missing values. The eval split is a hash sample of the rows, so the most
frequent values there are the dataset's.

Only categorical (string) columns can be sliced by: a numeric column has no values to count in
the statistics (bucket it into a string column before sharding to slice by it).

Pure Python over the dataset's metadata: the scoring pass (:mod:`shardtrain.train.scoring`)
does the counting.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from shardtrain.errors import ConfigError

if TYPE_CHECKING:
    from shardtrain.data.metadata import DatasetMetadata

#: The slice of every value beyond a column's most frequent ones, and of missing values.
OTHER = "(other)"
#: Slices per column by default (the most frequent values; the rest is :data:`OTHER`).
MAX_SLICES = 10


def parse_columns(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """``"difficulty, platform"`` → ``("difficulty", "platform")`` (``""``/None: none)."""
    items = text.split(",") if isinstance(text, str) else list(text or ())
    names = []
    for item in (str(i).strip() for i in items):
        if item and item not in names:
            names.append(item)
    return tuple(names)


def slice_values(
    meta: DatasetMetadata, columns: Sequence[str], *, where: str, max_values: int = MAX_SLICES
) -> dict[str, tuple[str, ...]]:
    """The values each column is sliced by: its ``max_values`` most frequent, in order.

    Args:
        meta: the dataset's metadata (its schema and statistics).
        columns: the columns to slice by.
        where: the dataset's URI, for messages.
        max_values: slices per column besides :data:`OTHER`.

    Raises:
        ConfigError: a column the dataset does not have, or one that is not categorical.
    """
    if max_values < 1:
        raise ConfigError(f"--max-slices must be at least 1, not {max_values}")
    names = [c.name for c in meta.schema.written]
    out: dict[str, tuple[str, ...]] = {}
    for column in columns:
        if column not in names:
            shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
            raise ConfigError(f"--slice-by: {where} has no column '{column}' (columns: {shown})")
        if column == meta.label:
            raise ConfigError(
                f"--slice-by: '{column}' is the label of {where}: slices split the rows by a "
                "feature; slice by a string feature column"
            )
        stats = meta.stats.columns.get(column) or {}
        if meta.schema.column(column).type != "string" or stats.get("kind") != "categorical":
            kind = meta.schema.column(column).type
            raise ConfigError(
                f"--slice-by: column '{column}' of {where} is {kind}, not categorical "
                "(slice by a string column)"
            )
        top = [str(t["value"]) for t in stats.get("top") or () if str(t["value"]) != OTHER]
        out[column] = tuple(top[:max_values])
    return out
