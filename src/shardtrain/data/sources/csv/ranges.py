"""Reports of float values beyond float32's range (stored as ±inf or zero), per block: the
rows the kernel flagged while it converted, or candidates found vectorised in a block Arrow
converted, each checked against its text."""

from __future__ import annotations

import logging
from collections.abc import Callable
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


def warn_float32_overflow(
    floats: list[tuple[int, str, pa.Array]],
    block: bytes,
    starts: np.ndarray,
    ends: np.ndarray,
    row_lines: np.ndarray,
    dialect: CsvDialect,
    source: str,
    lines_before: int,
    line_of: Callable[[int], int],
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
        candidates = _range_candidates(data, np.arange(n), block, starts, ends, row_lines)
    else:
        candidates = np.zeros(n, dtype=bool)
        candidates[rows] = True
        if scan is not None and scan.size:
            candidates |= _range_candidates(data, scan, block, starts, ends, row_lines)
    _report_float32_overflow(
        floats, data, candidates, block, starts, ends, row_lines, dialect, source, lines_before,
        line_of,
    )  # fmt: skip


def _range_candidates(
    data: list[np.ndarray],
    subset: np.ndarray,
    block: bytes,
    starts: np.ndarray,
    ends: np.ndarray,
    row_lines: np.ndarray,
) -> np.ndarray:
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
            csv_records.has_negative_exponent(block, starts, ends, row_lines[zero_rows])
        ][:MAX_ZERO_CHECKS]
        out[zero_rows] = True
    return out


def _report_float32_overflow(
    floats: list[tuple[int, str, pa.Array]],
    data: list[np.ndarray],
    rows: np.ndarray,
    block: bytes,
    starts: np.ndarray,
    ends: np.ndarray,
    row_lines: np.ndarray,
    dialect: CsvDialect,
    source: str,
    lines_before: int,
    line_of: Callable[[int], int],
) -> None:
    """Log, per float column, its ±inf or zero values in the candidate ``rows`` (a bool mask)
    whose text is neither an ``inf`` spelling nor zero."""
    if not rows.any():
        return
    for (index, name, values), d in zip(floats, data, strict=True):
        candidates = rows & (np.isinf(d) | (d == 0))
        if not candidates.any():
            continue
        found = []
        for i in np.flatnonzero(candidates & arrow.valid_mask(values)).tolist():
            record = row_lines[i]
            text = bytes(block[starts[record] : ends[record]]).decode("utf-8", "replace")
            fields = next(iter(dialect.python_reader(text)), [])
            field = fields[index].strip() if index < len(fields) else ""
            if field.lower() in _INF_WORDS:
                continue
            try:
                if d[i] == 0 and Decimal(field.replace(dialect.decimal, ".")) == 0:
                    continue
            except (InvalidOperation, ValueError):
                continue
            found.append((lines_before + line_of(int(record)) + 1, field))
        if found:
            line, field = found[0]
            log.warning(
                "%s: %d value(s) of column '%s' beyond the float32 range stored as ±inf or 0 "
                "(first: line %d, %s); make the column a string in --schema to keep them exact",
                source,
                len(found),
                name,
                line,
                field[:40],
            )
