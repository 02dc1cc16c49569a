"""Reports of float values beyond float32's range (stored as ±inf or zero), per block: the
rows the kernel flagged while it converted, or candidates found vectorised in a block Arrow
converted, each checked against its text."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

import numpy as np
import pyarrow as pa

from shardtrain.data.csv_dialect import CsvDialect
from shardtrain.kernels import arrow, csv_records

log = logging.getLogger(__name__)

_INF_WORDS = {"inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"}


#: Zero values looked at again per column and block for underflow (a block of scientific
#: data full of zeros must not be re-read row by row).
MAX_ZERO_CHECKS = 1000


@dataclass(frozen=True)
class BlockRows:
    """Where the rows of a parsed block are written: to look at a value's text again and to
    name its line.

    Attributes:
        block: the block's bytes.
        starts, ends: each record's bounds.
        row_records: the record of each row.
        line_of: the line of the block (0-based) a record starts on.
        lines_before: lines of the piece before the block.
        source: names the file.
        dialect: how the block is written.
    """

    block: bytes
    starts: np.ndarray
    ends: np.ndarray
    row_records: np.ndarray
    line_of: Callable[[int], int]
    lines_before: int
    source: str
    dialect: CsvDialect

    def line(self, row: int) -> int:
        """The line of the piece (1-based) a row starts on."""
        return self.lines_before + self.line_of(int(self.row_records[row])) + 1

    def text(self, row: int) -> str:
        """A row's raw text (invalid UTF-8 replaced)."""
        record = self.row_records[row]
        return bytes(self.block[self.starts[record] : self.ends[record]]).decode("utf-8", "replace")


def warn_float32_overflow(
    floats: list[tuple[int, str, pa.Array]],
    where: BlockRows,
    rows: np.ndarray | None = None,
    scan: np.ndarray | None = None,
) -> None:
    """Log the values of the float columns ``(index, name, values)`` beyond float32's range:
    stored as ±inf (``1e39``) or as zero (``1e-50``).

    ``rows``, when given, are the only rows that can hold such a value apart from those of
    ``scan``: the compiled parser flags them while it converts
    (:attr:`csv_parse.FastColumns.out_of_range`), so a block without any costs nothing here,
    and ``scan`` holds the rows Arrow converted (the quoted records of a mixed block). Without
    ``rows`` (a block Arrow parsed) this runs over the whole block, so the work is vectorised
    and only candidate rows are looked at again:
    infinities whose text is not an ``inf`` spelling, and zeros whose record holds a
    negative exponent (``e-``, the one way to write such a small number short of 46 zeros;
    one compiled test for the block) and whose text is not zero (the first
    :data:`MAX_ZERO_CHECKS` per block).
    """
    if not floats or (rows is not None and rows.size == 0 and (scan is None or not scan.size)):
        return
    data = [arrow.to_numpy(values) for _, _, values in floats]  # views
    n = len(data[0])
    if rows is None:
        candidates = _range_candidates(data, np.arange(n), where)
    else:
        candidates = np.zeros(n, dtype=bool)
        candidates[rows] = True
        if scan is not None and scan.size:
            candidates |= _range_candidates(data, scan, where)
    _report_float32_overflow(floats, data, candidates, where)


def _range_candidates(data: list[np.ndarray], subset: np.ndarray, where: BlockRows) -> np.ndarray:
    """The rows among ``subset`` (row indices) that may hold a float beyond float32's range:
    an infinity, or a zero whose record holds ``e-`` (the first :data:`MAX_ZERO_CHECKS`)."""
    out = np.zeros(len(data[0]), dtype=bool)
    any_inf = np.zeros(subset.size, dtype=bool)
    any_zero = np.zeros(subset.size, dtype=bool)
    for d in data:
        values = d[subset]
        any_inf |= np.isinf(values)
        any_zero |= values == 0
    out[subset[any_inf]] = True
    zero_rows = subset[any_zero]
    if zero_rows.size:
        zero_rows = zero_rows[
            csv_records.has_negative_exponent(
                where.block, where.starts, where.ends, where.row_records[zero_rows]
            )
        ][:MAX_ZERO_CHECKS]
        out[zero_rows] = True
    return out


def _report_float32_overflow(
    floats: list[tuple[int, str, pa.Array]],
    data: list[np.ndarray],
    rows: np.ndarray,
    where: BlockRows,
) -> None:
    """Log, per float column, its ±inf or zero values in the candidate ``rows`` (a bool mask)
    whose text is neither an ``inf`` spelling nor zero."""
    if not rows.any():
        return
    dialect = where.dialect
    for (index, name, values), d in zip(floats, data, strict=True):
        candidates = rows & (np.isinf(d) | (d == 0))
        if not candidates.any():
            continue
        found = []
        for i in np.flatnonzero(candidates & arrow.valid_mask(values)).tolist():
            fields = next(iter(dialect.python_reader(where.text(i))), [])
            field = fields[index].strip() if index < len(fields) else ""
            if field.lower() in _INF_WORDS:
                continue
            try:
                if d[i] == 0 and Decimal(field.replace(dialect.decimal, ".")) == 0:
                    continue
            except (InvalidOperation, ValueError):
                continue
            found.append((where.line(i), field))
        if found:
            line, field = found[0]
            log.warning(
                "%s: %d value(s) of column '%s' beyond the float32 range stored as ±inf or 0 "
                "(first: line %d, %s); make the column a string in --schema to keep them exact",
                where.source,
                len(found),
                name,
                line,
                field[:40],
            )
