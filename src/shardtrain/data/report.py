"""Human-readable summaries of sharded datasets (terminal tables, Markdown for the pipeline UI)."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.table import Table


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def render_dataset(
    uri: str, meta: dict[str, Any], rejects: list[dict[str, Any]], console: Console | None = None
) -> None:
    """Print splits, schema with statistics, label distribution and sample rejects."""
    # Wide enough for the statistics table when printed into a log or a pipe.
    console = console or Console(width=None if sys.stdout.isatty() else 150)
    console.print(
        f"[bold]{uri}[/bold]  ({meta['format']}, written by shardtrain "
        f"{meta['tool_version']} at {meta['created']})"
    )
    console.print(
        f"rows read {meta['rows_read']:,}  accepted {meta['rows_accepted']:,}  "
        f"rejected {meta['rows_rejected']:,}  blank lines {meta.get('blank_lines', 0):,}  "
        f"compression {meta['compression']}"
    )

    splits = Table(title="splits")
    for col in ("split", "fraction", "records", "shards", "MB"):
        splits.add_column(col, justify="right" if col != "split" else "left")
    for name, s in meta["splits"].items():
        splits.add_row(
            name,
            f"{s['fraction']:g}",
            f"{s['num_records']:,}",
            str(s["num_shards"]),
            f"{s['bytes'] / 1e6:,.1f}",
        )
    console.print(splits)

    label = meta["label_info"]
    counts = meta["stats"]["label"]["counts"]
    total = sum(counts.values()) or 1
    dist = ", ".join(f"{k}: {v:,} ({v / total:.1%})" for k, v in counts.items())
    console.print(f"label [bold]{meta['label']}[/bold] ({label['task']}, {label['type']}): {dist}")

    schema = Table(title="schema and statistics")
    for col in ("column", "type", "missing", "min", "max", "mean", "std", "distinct / top values"):
        schema.add_column(col)
    stats = meta["stats"]["columns"]
    for c in meta["schema"]["columns"]:
        name = c["name"]
        role = " (label)" if name == meta["label"] else " (key)" if name == meta.get("key") else ""
        if c["drop"]:
            schema.add_row(name, c["type"] + " (dropped)", "", "", "", "", "", "")
            continue
        st = stats.get(name)
        if st is None:
            schema.add_row(name + role, c["type"], "", "", "", "", "", "")
        elif st["kind"] == "numeric":
            schema.add_row(
                name + role,
                c["type"],
                _fmt(st["missing"]),
                _fmt(st["min"]),
                _fmt(st["max"]),
                _fmt(st["mean"]),
                _fmt(st["std"]),
                "",
            )
        elif st["kind"] == "image":
            h, w = st["height"], st["width"]
            formats = ", ".join(f"{k} ({v:,})" for k, v in st["formats"].items())
            schema.add_row(
                name + role,
                c["type"],
                "",
                f"{_fmt(w['min'])}x{_fmt(h['min'])}",
                f"{_fmt(w['max'])}x{_fmt(h['max'])}",
                f"{_fmt(w['mean'])}x{_fmt(h['mean'])}",
                "",
                f"{st['count']:,} images, {st['bytes'] / 1e6:,.1f} MB: {formats}",
            )
        else:
            top = ", ".join(f"{t['value']} ({t['count']:,})" for t in st["top"][:5])
            approx = "~" if st["approximate"] else ""
            schema.add_row(
                name + role,
                c["type"],
                _fmt(st["missing"]),
                "",
                "",
                "",
                "",
                f"{approx}{st['distinct']:,}: {top}",
            )
    console.print(schema)

    if meta["rows_rejected"]:
        reasons = ", ".join(f"{k}: {v:,}" for k, v in meta["rejects_by_reason"].items())
        console.print(f"rejected rows by reason: {reasons}  (all in {uri}/{meta['rejects']})")
        for r in rejects:
            where = r["source"] if r["line"] is None else f"{r['source']}:{r['line']}"
            console.print(
                f"  {where}  {r['reason']} ({r['detail']}): {r['text'][:100]!r}",
                markup=False,
                highlight=False,
            )
