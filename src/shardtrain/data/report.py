"""Summaries of sharded datasets: one model, two renderings.

:func:`summarize` turns a dataset's :class:`~shardtrain.data.metadata.DatasetMetadata` into a
:class:`DatasetSummary` — a few lines of text and titled tables of strings (splits, label
classes, numeric, categorical and image columns). ``shardtrain inspect`` prints it with rich
(:func:`render_terminal`); the pipeline's Markdown report embeds :func:`to_markdown`. Both show
the same rows, so they cannot drift apart.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from shardtrain.data.metadata import DatasetMetadata


def fmt(value: Any, digits: int = 4) -> str:
    """A number for people: ``1,234`` for integers, 4 significant digits for floats, ``n/a``
    for what is missing or not finite."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


@dataclass(frozen=True)
class SummaryTable:
    """A titled table of strings."""

    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class DatasetSummary:
    """What a person wants to know about a dataset, ready to render.

    Attributes:
        uri: the dataset.
        provenance: format, tool version and creation time.
        counts: rows read / accepted / rejected (by reason), blank lines, compression.
        records: the shards' record layout (columnar blocks or an Example per row) and
            what reads it.
        label, task, label_type, key: the label column, its task (binary, multiclass,
            regression) and type, and the split key (None: whole rows were hashed).
        tables: splits, label classes (a regression label: its range), then a table per kind
            of column.
        rejects: where the rejected rows are (empty when there are none).
        notes: what typing by all rows decided for columns of numbers holding values that
            are not numbers, and the label's rare classes, one line each.
    """

    uri: str
    provenance: str
    counts: str
    label: str
    task: str
    label_type: str
    key: str | None
    tables: tuple[SummaryTable, ...]
    rejects: str
    notes: tuple[str, ...] = ()
    records: str = ""


def records_line(record_format: str) -> str:
    """What the shards hold, by their ``record_format``, and what reads them."""
    from shardtrain.data.column_blocks import BLOCK_ROWS, COLUMNAR

    if record_format == COLUMNAR:
        return (
            f"records: columnar blocks of up to {BLOCK_ROWS} rows (a tf.train.Example per "
            "block, one list per column), read by `shardtrain train`; TFX, TFDV and per-row "
            "Example parsers need a dataset sharded with --record-format example"
        )
    return (
        "records: one tf.train.Example per row, read by `shardtrain train`, TFX, TFDV and "
        "any TFRecordDataset + tf.io.parse_example"
    )


def summarize(uri: str, meta: DatasetMetadata) -> DatasetSummary:
    """The summary of the dataset at ``uri``."""
    reasons = ", ".join(f"{k}: {fmt(v)}" for k, v in meta.rejects_by_reason.items())
    counts = (
        f"{fmt(meta.rows_read)} rows read, {fmt(meta.rows_accepted)} accepted, "
        f"{fmt(meta.rows_rejected)} rejected{f' ({reasons})' if reasons else ''}; "
        f"{fmt(meta.blank_lines)} blank lines; compression {meta.compression}"
    )
    tables = [
        SummaryTable(
            "splits",
            ("split", "fraction", "records", "shards", "MB"),
            tuple(
                (
                    n,
                    f"{s.fraction:g}",
                    fmt(s.num_records),
                    str(s.num_shards),
                    f"{s.bytes / 1e6:.1f}",
                )
                for n, s in meta.splits.items()
            ),
        )
    ]
    tables.append(_label_table(meta))
    tables += _column_tables(meta)
    return DatasetSummary(
        uri=uri,
        provenance=(
            f"{meta.format}, written by shardtrain {meta.tool_version or '?'} at "
            f"{meta.created or '?'}"
        ),
        counts=counts,
        records=records_line(meta.record_format),
        label=meta.label,
        task=meta.label_info.task,
        label_type=meta.label_info.type,
        key=meta.key,
        tables=tuple(tables),
        rejects=f"rejected rows: {uri.rstrip('/')}/{meta.rejects}" if meta.rows_rejected else "",
        notes=(*meta.type_notes, *([meta.rare_classes] if meta.rare_classes else [])),
    )


def _label_table(meta: DatasetMetadata) -> SummaryTable:
    """The label's classes with their rows and shares; a regression label's range instead."""
    label = meta.stats.label
    numeric = label.get("numeric") or {}
    if meta.label_info.task == "regression" and numeric:
        figures = (fmt(numeric.get(k)) for k in ("count", "min", "max", "mean", "std"))
        return SummaryTable(
            "label values",
            ("count", "missing", "min", "max", "mean", "std"),
            ((next(figures), fmt(label.get("missing")), *figures),),
        )
    label_counts = label.get("counts", {})
    total = sum(label_counts.values()) or 1
    return SummaryTable(
        "label classes",
        ("class", "rows", "share"),
        tuple((k, fmt(v), f"{v / total:.1%}") for k, v in label_counts.items()),
    )


def _column_tables(meta: DatasetMetadata) -> list[SummaryTable]:
    numeric, categorical, images, other = [], [], [], []
    stats = meta.stats.columns
    for column in meta.schema.columns:
        name = column.name
        if column.drop:
            other.append((name, column.type, "dropped"))
            continue
        st = stats.get(name)
        if st is None:  # the label and the key have no column statistics
            role = "label" if name == meta.label else "key" if name == meta.key else ""
            other.append((name, column.type, role))
        elif st["kind"] == "numeric":
            figures = (fmt(st[k]) for k in ("missing", "min", "max", "mean", "std"))
            numeric.append((name, column.type, *figures))
        elif st["kind"] == "categorical":
            top = ", ".join(f"{t['value']} ({fmt(t['count'])})" for t in st["top"][:5])
            distinct = ("~" if st.get("approximate") else "") + fmt(st["distinct"])
            categorical.append((name, fmt(st["missing"]), distinct, top))
        elif st["kind"] == "image":
            h, w = st["height"], st["width"]
            formats = ", ".join(f"{k} ({fmt(v)})" for k, v in st["formats"].items())
            images.append(
                (
                    name,
                    fmt(st["count"]),
                    f"{fmt(w['min'])}x{fmt(h['min'])}",
                    f"{fmt(w['max'])}x{fmt(h['max'])}",
                    f"{fmt(w['mean'])}x{fmt(h['mean'])}",
                    f"{st['bytes'] / 1e6:.1f}",
                    formats,
                )
            )
        else:  # a kind this version does not know: still listed
            other.append((name, column.type, str(st.get("kind"))))
    tables: list[SummaryTable] = []
    columns: tuple[str, ...]
    if numeric:
        columns = ("column", "type", "missing", "min", "max", "mean", "std")
        tables.append(SummaryTable("numeric columns", columns, tuple(numeric)))
    if categorical:
        columns = ("column", "missing", "distinct", "top values")
        tables.append(SummaryTable("categorical columns", columns, tuple(categorical)))
    if images:
        columns = ("column", "images", "min WxH", "max WxH", "mean WxH", "MB", "formats")
        tables.append(SummaryTable("image columns", columns, tuple(images)))
    if other:
        tables.append(SummaryTable("other columns", ("column", "type", "role"), tuple(other)))
    return tables


# --------------------------------------------------------------------------------------------
# Renderings
# --------------------------------------------------------------------------------------------


def render_terminal(
    summary: DatasetSummary, rejects: Iterable[dict[str, Any]] = (), console: Console | None = None
) -> None:
    """Print the summary with rich, then a few sample rejects."""
    from rich.console import Console
    from rich.table import Table

    # Wide enough for the statistics tables when printed into a log or a pipe.
    console = console or Console(width=None if sys.stdout.isatty() else 150)
    console.print(f"[bold]{summary.uri}[/bold]  ({summary.provenance})")
    console.print(summary.counts, markup=False, highlight=False)
    if summary.records:
        console.print(summary.records, markup=False, highlight=False)
    key = f"[bold]{summary.key}[/bold]" if summary.key else "the whole row"
    console.print(
        f"label [bold]{summary.label}[/bold] ({summary.task}, {summary.label_type}); "
        f"split by the hash of {key}"
    )
    for t in summary.tables:
        table = Table(title=t.title)
        for i, col in enumerate(t.header):
            cells = [row[i] for row in t.rows]
            table.add_column(col, justify="right" if i and all(map(_numeric, cells)) else "left")
        for row in t.rows:
            table.add_row(*row)
        console.print(table)
    for note in summary.notes:
        console.print(f"note: {note}", markup=False, highlight=False)
    if summary.rejects:
        console.print(summary.rejects, markup=False, highlight=False)
        for r in rejects:
            where = r["source"] if r["line"] is None else f"{r['source']}:{r['line']}"
            console.print(
                f"  {where}  {r['reason']} ({r['detail']}): {r['text'][:100]!r}",
                markup=False,
                highlight=False,
            )


def _numeric(cell: str) -> bool:
    """A cell of figures (``1,234``, ``0.5``, ``45.0%``, ``32x48``, ``~12``, ``n/a``)."""
    return cell == "n/a" or bool(_NUMERIC_CELL.fullmatch(cell))


_NUMERIC_CELL = re.compile(r"~?[-+]?[\d,.]+(e[-+]?\d+)?%?(x[\d,.]+)?")


def markdown_table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    """A Markdown table (pipes and newlines in cells escaped), then a blank line."""
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def to_markdown(summary: DatasetSummary, heading: str = "###") -> list[str]:
    """The summary as Markdown lines (tables under ``heading``-level titles)."""
    key = f"`{summary.key}`" if summary.key else "the whole row"
    out = [f"`{summary.uri}`: {summary.counts}.", ""]
    if summary.records:
        out += [f"{summary.records[0].upper()}{summary.records[1:]}.", ""]
    out += [
        f"Label `{summary.label}` ({summary.task}, {summary.label_type}); split by the hash of "
        f"{key}.",
        "",
    ]
    for t in summary.tables:
        out += [f"{heading} {t.title[0].upper()}{t.title[1:]}", ""]
        out += markdown_table(t.header, t.rows)
    if summary.notes:
        out += [f"{heading} Notes", "", *(f"- {note}" for note in summary.notes), ""]
    if summary.rejects:
        out += [f"{summary.rejects}", ""]
    return out


def render_dataset(
    uri: str,
    meta: DatasetMetadata,
    rejects: Iterable[dict[str, Any]] = (),
    console: Console | None = None,
    extra: Iterable[SummaryTable] = (),
) -> None:
    """Print the dataset at ``uri`` (``shardtrain inspect``), with ``extra`` tables after
    the column tables (the training layer's view of the columns)."""
    summary = summarize(uri, meta)
    summary = replace(summary, tables=summary.tables + tuple(extra))
    render_terminal(summary, rejects, console)
