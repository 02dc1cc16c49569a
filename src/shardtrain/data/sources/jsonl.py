"""Reading newline-delimited JSON (JSON lines, ``.jsonl``/``.ndjson``, plain or ``.gz``) for the
sharder: one JSON object per line, typed by a pass over all the data, malformed lines rejected.

* **Pieces.** Plain files are cut into byte ranges on line boundaries, as CSV files are: a line
  belongs to the range holding its first byte. A gzip file is one piece.
* **Rows.** Each non-blank line is one row: a JSON object whose keys are the columns. A key
  absent from a line, or ``null``, is a missing value. A line that is not valid JSON
  (``malformed_json``) or not an object (``not_an_object``) is rejected with its line number
  and text, like a CSV row with the wrong number of fields; so is a value of a type its column
  cannot hold (``bad_value``: only when a file changed after the plan) and a row without a
  label (``missing_label``).
* **Types: the whole data, not a sample.** JSON says what each value is, but not that a column
  keeps its type: a zip code is a number for 230,000 lines and then ``"K1A 0B1"``, a fee is
  ``0`` and then ``45.12``. So the plan reads *all* the data once (Arrow's JSON reader, block by
  block, types only) and gives each column the narrowest type that holds every value it has:

  ===================================  ==========================================================
  values of the column                 column type
  ===================================  ==========================================================
  integers (within int64)              ``int``
  integers and other numbers           ``float``
  true/false                           ``bool``
  strings only                         ``string`` (ISO dates stay text)
  anything else mixed, or an integer   ``string``: each value as its JSON text (``98115``,
  beyond int64                         ``K1A 0B1``, ``18446744073709551616``, ``true``): exact,
                                       and no valid row is ever rejected for its type
  only nulls                           ``string`` (with a warning)
  objects or arrays                    one error naming the file and the column (drop it with
                                       a ``--schema`` file)
  ===================================  ==========================================================

  This costs one extra read of the input at plan time (figures in ``benchmarks/RESULTS.md``).
  Floats are stored as float32, as CSV floats are.
* **Split hash.** The key's text, else the raw bytes of the whole line (as for CSV).

Blocks are parsed by Arrow's JSON reader with the planned types; a block it refuses (a
malformed line, a number in a string column, a duplicate key) is parsed line by line in
Python instead, which gives the same values and finds the lines to reject.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from shardtrain.data.schema import Column, ColumnType, Schema, SchemaOverrides
from shardtrain.data.sources import typed
from shardtrain.data.sources.base import (
    MAX_REJECT_TEXT,
    Batch,
    Piece,
    PlanInputs,
    Reject,
    SourceFile,
    SourceLayout,
    open_source,
)
from shardtrain.errors import DataError
from shardtrain.kernels import arrow, xxh64

log = logging.getLogger(__name__)

#: Bytes of JSON parsed at once by the plan's type pass.
SCAN_BLOCK_BYTES = 8 << 20

#: Kinds of JSON value the type pass tells apart (besides null).
_NESTED = "nested"
_BIGINT = "bigint"

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_BOM = b"\xef\xbb\xbf"

#: The longest line read (one JSON object): a file without newlines is one error, not a
#: read of the whole file into memory. As CSV's ``MAX_RECORD_BYTES``.
MAX_LINE_BYTES = 256 * 1024 * 1024


class _Number(str):
    """A JSON number kept as its text (``json.loads`` hooks): exact for any column type."""

    __slots__ = ()


class _Int(_Number):
    __slots__ = ()


class _Float(_Number):
    __slots__ = ()


def _loads(text: str) -> Any:
    return json.loads(text, parse_int=_Int, parse_float=_Float, parse_constant=_Float)


def _kind(value: Any) -> str | None:
    """The type-pass kind of one JSON value parsed by :func:`_loads`."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, _Int):
        return "int" if _INT64_MIN <= int(value) <= _INT64_MAX else _BIGINT
    if isinstance(value, _Float):
        return "float"
    if isinstance(value, str):
        return "string"
    return _NESTED


def _arrow_kind(t: pa.DataType) -> str | None:
    """The type-pass kind of a column Arrow's JSON reader typed ``t``: the column type the
    typed sources map it to (:func:`typed.column_type`), or nested."""
    try:
        return typed.column_type(t)
    except typed.UnsupportedType:
        return _NESTED


def _column_type(kinds: set[str]) -> ColumnType | None:
    """The narrowest type holding every kind of value a column has (see the module docstring)."""
    if not kinds:
        return None
    for only in ("int", "float", "bool", "string"):
        if kinds == {only}:
            return only
    if kinds == {"int", "float"}:
        return "float"
    return "string"


# --------------------------------------------------------------------------------------------
# Lines
# --------------------------------------------------------------------------------------------


def _iter_line_blocks(piece: Piece, block_bytes: int) -> Iterator[bytes]:
    """Yield blocks of whole lines owned by the piece (decompressed).

    A line belongs to the piece holding its first byte: a reader starting mid-file skips the
    line it lands in, and finishes the line that straddles its end.
    """
    with open_source(piece.uri, gzip=piece.gzip, block_size=block_bytes) as f:
        carry = b""  # the start of a line that begins at `pos` but is not complete yet
        if piece.start == 0:
            carry = f.read(len(_BOM))
            pos = 0
            if carry == _BOM:  # a UTF-8 byte order mark is no part of the first line
                carry, pos = b"", len(_BOM)
        else:
            # Land one byte early: if that byte is a line end, our first line starts exactly
            # at `start`; otherwise skip the rest of the line begun in the previous piece.
            f.seek(piece.start - 1)
            skipped = len(f.readline(MAX_LINE_BYTES + 1))
            if skipped > MAX_LINE_BYTES:
                raise DataError(
                    f"{piece.uri}: the line holding byte {piece.start - 1:,} is longer than "
                    f"{MAX_LINE_BYTES:,} bytes (not JSON lines? no newlines?)"
                )
            pos = piece.start - 1 + skipped
        end = math.inf if piece.gzip else piece.end
        if pos >= end:
            return
        carry_parts, carry_len = [carry], len(carry)
        while True:
            chunk = f.read(block_bytes)
            if not chunk:
                if carry_len:  # the last line, without a final newline
                    yield b"".join(carry_parts)
                return
            cut = chunk.rfind(b"\n")
            # A line spanning blocks (lines within a block are shorter than the limit).
            first_end = carry_len + (chunk.find(b"\n") + 1 if cut >= 0 else len(chunk))
            if cut < 0:  # the line goes on: keep the parts, join them once it ends
                carry_parts.append(chunk)
                carry_len += len(chunk)
            if first_end > MAX_LINE_BYTES and carry_len:
                raise DataError(
                    f"{piece.uri}: the line starting at byte {pos:,} is longer than "
                    f"{MAX_LINE_BYTES:,} bytes (not JSON lines? no newlines?)"
                )
            if cut < 0:
                continue
            complete = b"".join([*carry_parts, chunk[: cut + 1]])
            carry = chunk[cut + 1 :]
            carry_parts, carry_len = [carry], len(carry)
            if pos + len(complete) >= end:
                last_nl = complete.find(b"\n", int(end - pos) - 1)
                yield complete[: last_nl + 1]
                return
            yield complete
            pos += len(complete)


def _line_bounds(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (without ``\\r\\n``) of every line of a block."""
    nl = np.flatnonzero(arr == 10)
    starts = np.concatenate(([0], nl + 1)).astype(np.int64)
    ends = np.concatenate((nl, [arr.size])).astype(np.int64)
    if starts[-1] == arr.size:  # the block ends with a newline: no line after it
        starts, ends = starts[:-1], ends[:-1]
    cr = (ends > starts) & (arr[np.maximum(ends - 1, 0)] == 13)
    ends = ends - cr
    return starts, ends


def _blank(block: bytes, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Lines with nothing but spaces or tabs."""
    blank = ends <= starts
    arr = np.frombuffer(block, dtype=np.uint8)
    first = arr[np.minimum(starts, max(arr.size - 1, 0))] if arr.size else starts
    for i in np.flatnonzero(~blank & ((first == 32) | (first == 9))).tolist():
        if not block[starts[i] : ends[i]].strip(b" \t"):
            blank[i] = True
    return blank


# --------------------------------------------------------------------------------------------
# The type pass
# --------------------------------------------------------------------------------------------


#: The Arrow type the type pass reads a column of one kind with.
_KIND_TYPES = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "string": pa.string()}


def _has_huge_numbers(table: pa.Table) -> bool:
    """A float column holds a magnitude of 2**63 or more: maybe an integer beyond int64, which
    Arrow reads as a (rounded) double without a word."""
    for column in table.columns:
        if pa.types.is_floating(column.type) and column.null_count < len(column):
            top = pc.max(pc.abs(column)).as_py()
            if top is not None and top >= 2.0**63:
                return True
    return False


def _scan_block(block: bytes, kinds: dict[str, set[str]], where: dict[str, str]) -> None:
    """Add the kinds of value of each column in ``block`` to ``kinds``.

    Columns of one kind so far are read with that kind's type (Arrow's fast typed read, which
    fails on a value of another kind), the others inferred; a block Arrow refuses either way
    (mixed kinds in one column, malformed lines), or with numbers that may be integers beyond
    int64, is classified line by line.
    """
    explicit = [
        (name, _KIND_TYPES[k])
        for name, ks in kinds.items()
        if len(ks) == 1 and (k := next(iter(ks))) in _KIND_TYPES
    ]
    attempts = [pa.schema(explicit), None] if explicit else [None]
    for schema in attempts:
        try:
            table = pajson.read_json(
                pa.py_buffer(block),
                read_options=pajson.ReadOptions(use_threads=False, block_size=len(block) + 1),
                parse_options=pajson.ParseOptions(
                    explicit_schema=schema, unexpected_field_behavior="infer"
                ),
            )
        except pa.ArrowInvalid:
            continue  # a value of another kind: infer, or find out line by line
        if _has_huge_numbers(table):
            break
        for f in table.schema:
            found = _arrow_kind(f.type)
            column = kinds.setdefault(f.name, set())
            if found is not None:
                column.add(found)
        return
    for line in block.splitlines():
        if not line.strip():
            continue
        try:
            obj = _loads(line.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            continue  # rejected when the line is read
        if not isinstance(obj, dict):
            continue
        for name, value in obj.items():
            column = kinds.setdefault(name, set())
            kind = _kind(value)
            if kind is not None:
                column.add(kind)
                if kind == _NESTED:
                    where.setdefault(name, type(value).__name__)


@dataclass(frozen=True)
class TypePass:
    """What the type pass found: each column's type (None: only nulls), the columns holding
    objects or arrays (with the first file and what), and the lines and bytes read.

    Stored in the plan's options, so that a later run over the same files (a resume, another
    worker once the plan is written) takes it from there instead of reading everything again.
    """

    types: dict[str, ColumnType | None]
    nested: dict[str, tuple[str, str]]
    lines: int
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "types": self.types,
            "nested": {k: list(v) for k, v in self.nested.items()},
            "lines": self.lines,
            "bytes": self.bytes,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TypePass:
        return cls(
            types=dict(d["types"]),
            nested={k: (v[0], v[1]) for k, v in d["nested"].items()},
            lines=int(d["lines"]),
            bytes=int(d["bytes"]),
        )

    def check_nested(self, drop: tuple[str, ...]) -> None:
        """Raise the one-line error for the first column of objects/arrays not dropped."""
        for name, (uri, what) in self.nested.items():
            if name not in drop:
                raise DataError(
                    f"{uri}: column '{name}' holds JSON {what}, which shardtrain cannot "
                    f"store (only numbers, strings, booleans and nulls); drop it with "
                    f"'drop: [{name}]' in a --schema file"
                )


def scan_types(sources: list[SourceFile]) -> TypePass:
    """The type pass: every column's type over all the data (see the module docstring).

    Raises:
        DataError: no file holds a JSON object.
    """
    kinds: dict[str, set[str]] = {}
    nested: dict[str, tuple[str, str]] = {}
    lines = 0
    total = 0
    for src in sources:
        where: dict[str, str] = {}
        for block in _iter_line_blocks(Piece(src.uri, 0, src.size, src.gzip), SCAN_BLOCK_BYTES):
            lines += block.count(b"\n") + (0 if block.endswith(b"\n") else 1)
            total += len(block)
            _scan_block(block, kinds, where)
        for name, kind_set in kinds.items():
            if _NESTED in kind_set and name not in nested:
                what = "objects or arrays" if name not in where else f"{where[name]} values"
                nested[name] = (src.uri, what)
    if not kinds:
        raise DataError(f"{sources[0].uri}: no JSON object in the file(s)")
    types = {name: _column_type(k - {_NESTED}) for name, k in kinds.items()}
    return TypePass(types, nested, lines, total)


# --------------------------------------------------------------------------------------------
# The source
# --------------------------------------------------------------------------------------------


class JsonLinesSource(typed.TypedFileSource):
    """Newline-delimited JSON files (plain or ``.gz``, local or in object storage).

    Arguments: see :class:`~shardtrain.data.sources.typed.TypedFileSource`.
    """

    def recall(self, stored: Mapping[str, Any] | None) -> None:
        """Keep the type pass of a stored plan (``_plan.json``) for :meth:`plan_inputs`."""
        self._stored = stored

    def plan_inputs(self) -> PlanInputs:
        """List the files and type every column by reading all of them (see the module
        docstring), unless the stored plan holds the type pass of exactly these files (same
        URIs, sizes and versions)."""
        from shardtrain.data.sources.csv.listing import list_sources

        sources = list_sources(self.patterns)
        overrides = SchemaOverrides.load(self.schema_file) if self.schema_file else None
        found = self._stored_pass(sources)
        if found is None:
            found = scan_types(sources)
        else:
            log.info("types of the JSON lines taken from the stored plan (same files)")
        found.check_nested(overrides.drop if overrides else ())
        typed.check_label_and_key(list(found.types), self.label, self.key, sources[0].uri)
        columns = []
        for name, t in found.types.items():
            if t is None:
                log.warning(
                    "column '%s' holds only nulls in the JSON lines: treated as string", name
                )
            columns.append(Column(name, t or "string"))
        columns = typed.apply_overrides(columns, overrides, sources[0].uri)
        schema = Schema(tuple(columns), label=self.label, key=self.key, null_values=())
        first = next(
            _iter_line_blocks(Piece(sources[0].uri, 0, sources[0].size, sources[0].gzip), 1 << 20),
            None,
        )
        sample = parse_block(first, schema, lines_before=0).table if first else None
        return PlanInputs(
            sources=sources,
            schema=schema,
            input_bytes=found.bytes,
            estimated_rows=found.lines,
            options={"format": "jsonl", "jsonl_types": found.to_dict()},
            sample=sample,
            sample_bytes=len(first) if first else 0,
        )

    def _stored_pass(self, sources: list[SourceFile]) -> TypePass | None:
        stored = getattr(self, "_stored", None)
        if not stored:
            return None
        try:
            same = [SourceFile(**d) for d in stored["sources"]] == sources
            return TypePass.from_dict(stored["options"]["jsonl_types"]) if same else None
        except (KeyError, TypeError, ValueError, IndexError):
            return None  # another kind of plan, or another version's: read the files

    def read_piece(self, piece: Piece, layout: SourceLayout, block_bytes: int) -> Iterator[Batch]:
        return read_piece(piece, layout.schema, block_bytes=block_bytes)

    def _warm_up_rows(self, schema: Schema) -> pa.Table:
        """The two rows read from JSON lines (loads the block reader's compiled code)."""
        return parse_block(
            b'{"f": 1.5, "i": 2, "s": "x", "label": 1}\n'
            b'{"f": -0.25, "i": 3, "s": "y", "label": 0}\n',
            schema,
            lines_before=0,
        ).table


def read_piece(piece: Piece, schema: Schema, *, block_bytes: int = 4 << 20) -> Iterator[Batch]:
    """Stream one piece as typed batches with rejects; see the module docstring."""
    lines_before = 0
    for block in _iter_line_blocks(piece, block_bytes):
        batch = parse_block(block, schema, lines_before=lines_before, source=piece.uri)
        lines_before += batch.lines
        yield batch


# --------------------------------------------------------------------------------------------
# Parsing one block
# --------------------------------------------------------------------------------------------


def _arrow_schema(schema: Schema) -> pa.Schema:
    return pa.schema([(c.name, c.arrow_type) for c in schema.columns if not c.drop])


def _read_json(block: bytes, explicit: pa.Schema, unexpected: str) -> pa.Table | None:
    try:
        return pajson.read_json(
            pa.py_buffer(block),
            read_options=pajson.ReadOptions(use_threads=False, block_size=len(block) + 1),
            parse_options=pajson.ParseOptions(
                explicit_schema=explicit, unexpected_field_behavior=unexpected
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


#: ``-0`` as a JSON value: the one integer whose text Arrow's int64 → string cast changes.
_MINUS_ZERO = re.compile(rb"[:\[,]\s*-0\s*[,}\]]")


def _read_arrow(block: bytes, schema: Schema, rows: int) -> pa.Table | None:
    """Arrow's typed read of a block, or None when it refuses the block or its rows are not
    the block's non-blank lines.

    A string column that also holds integers (zip codes, ids) fails the typed read: it is
    read again with those columns inferred, and integers are turned into their text, which
    is their JSON text. Anything else Arrow refuses goes line by line.
    """
    table = _read_json(block, _arrow_schema(schema), "ignore")
    if table is None:
        strings = {c.name for c in schema.columns if c.type == "string" and not c.drop}
        if not strings or _MINUS_ZERO.search(block):
            return None
        others = pa.schema([f for f in _arrow_schema(schema) if f.name not in strings])
        table = _read_json(block, others, "infer")
        if table is None:
            return None
        for name in strings:
            if name not in table.column_names:
                continue
            column = table.column(name)
            if pa.types.is_integer(column.type) or pa.types.is_null(column.type):
                column = pc.cast(column, pa.string())
            elif column.type != pa.string():
                return None  # floats, booleans, timestamps: their exact text, line by line
            table = table.set_column(table.column_names.index(name), name, column)
    if table.num_rows != rows:
        return None
    missing = [f for f in _arrow_schema(schema) if f.name not in table.column_names]
    for f in missing:  # a column absent from every line of the block
        table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    return table


def _convert(value: Any, column: Column) -> tuple[Any, bool]:
    """One parsed JSON value as ``column``'s Python value; ``(None, False)`` when it does not
    fit the column's type."""
    if value is None:
        return None, True
    t = column.type
    if t == "string":
        if isinstance(value, bool):
            return ("true" if value else "false"), True
        if isinstance(value, str):  # strings, and numbers as their JSON text
            return str(value), True
        return None, False
    if t == "bool":
        return (value, True) if isinstance(value, bool) else (None, False)
    if isinstance(value, _Int) and t == "int":
        n = int(value)
        return (n, True) if _INT64_MIN <= n <= _INT64_MAX else (None, False)
    if isinstance(value, _Number) and t == "float":
        return value, True  # its text: converted column-wise by _to_array
    return None, False


def _to_array(values: list[Any], column: Column) -> pa.Array:
    if column.type == "float":
        # From the numbers' text, as Arrow's reader converts them (no double rounding).
        text = pa.array([None if v is None else str(v) for v in values], pa.string())
        return pc.cast(text, pa.float32())
    return pa.array(values, type=column.arrow_type)


def _read_python(
    block: bytes, schema: Schema, starts: np.ndarray, ends: np.ndarray, rows: np.ndarray
) -> tuple[pa.Table, np.ndarray, list[tuple[int, str, str]]]:
    """Line-by-line read: the table of good rows, their line indices, and the rejects
    ``(line index, reason, detail)``."""
    written = [c for c in schema.columns if not c.drop]
    values: list[list[Any]] = [[] for _ in written]
    good: list[int] = []
    bad: list[tuple[int, str, str]] = []
    for li in rows.tolist():
        raw = block[starts[li] : ends[li]]
        try:
            obj = _loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            bad.append((li, "malformed_json", f"not UTF-8 (byte {exc.start})"))
            continue
        except ValueError as exc:
            bad.append((li, "malformed_json", str(exc).splitlines()[0]))
            continue
        if not isinstance(obj, dict):
            bad.append((li, "not_an_object", f"a JSON {type(obj).__name__}, not an object"))
            continue
        row = []
        for c in written:
            v, ok = _convert(obj.get(c.name), c)
            if not ok:
                bad.append((li, "bad_value", f"column '{c.name}' is not {c.type}"))
                break
            row.append(v)
        else:
            good.append(li)
            for out, v in zip(values, row, strict=True):
                out.append(v)
    arrays = {c.name: _to_array(v, c) for c, v in zip(written, values, strict=True)}
    n = len(good)
    table = pa.Table.from_arrays(
        [arrays[c.name] if not c.drop else pa.nulls(n, c.arrow_type) for c in schema.columns],
        names=schema.names,
    )
    return table, np.asarray(good, dtype=np.int64), bad


def parse_block(
    block: bytes, schema: Schema, *, lines_before: int, source: str = "JSON lines"
) -> Batch:
    """Parse a block of whole JSON lines into a :class:`Batch` (see the module docstring).

    Args:
        block: whole lines.
        schema: the columns and their types.
        lines_before: lines of the piece before this block (for reject line numbers).
        source: names the file in messages.
    """
    arr = np.frombuffer(block, dtype=np.uint8)
    starts, ends = _line_bounds(arr)
    blank = _blank(block, starts, ends)
    rows = np.flatnonzero(~blank)
    table = _read_arrow(block, schema, rows.size)
    rejects: list[Reject] = []
    if table is not None:
        row_lines = rows
        table = pa.Table.from_arrays(
            [
                arrow.contiguous(table.column(c.name))
                if not c.drop
                else pa.nulls(table.num_rows, c.arrow_type)
                for c in schema.columns
            ],
            names=schema.names,
        )
    else:
        table, row_lines, bad = _read_python(block, schema, starts, ends, rows)
        for li, reason, detail in bad:
            rejects.append(
                Reject(
                    line=lines_before + li + 1,
                    reason=reason,
                    detail=detail,
                    text=block[starts[li] : ends[li]].decode("utf-8", "replace")[:MAX_REJECT_TEXT],
                )
            )
    texts = None
    label_missing = arrow.to_bools(table.column(schema.label).is_null())
    if label_missing.any():
        texts = [
            block[starts[li] : ends[li]].decode("utf-8", "replace") for li in row_lines.tolist()
        ]
    kept, keep, label_rejects = typed.split_missing_labels(
        table, schema, 0, lines=(lines_before + li + 1 for li in row_lines.tolist()), texts=texts
    )
    rejects.extend(label_rejects)
    rejects.sort(key=lambda r: r.line or 0)
    if schema.key is not None:
        row_hash = typed.hash_strings(arrow.contiguous(table.column(schema.key)))[keep]
    else:
        lines = row_lines[keep]
        row_hash = xxh64.hash_slices(arr, starts[lines], ends[lines])
    return Batch(
        table=kept,
        row_hash=row_hash,
        rejects=rejects,
        rows_read=int(rows.size),
        blank_lines=int(blank.sum()),
        lines=int(starts.size),
        bytes_read=len(block),
    )


__all__ = ["JsonLinesSource", "parse_block", "read_piece", "scan_types"]
