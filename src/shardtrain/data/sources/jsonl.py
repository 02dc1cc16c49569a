"""Reading newline-delimited JSON (JSON lines, ``.jsonl``/``.ndjson``, plain or ``.gz``) for the
sharder: one JSON object per line, typed by all the data, malformed lines rejected.

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
  ``0`` and then ``45.12``. So each column gets the narrowest type that holds every value it
  has in all the data (the rules: :mod:`.jsonl_types`):

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

  Planning reads no more than a sample (the first block of the first file): its types are a
  guess (:data:`VERIFY_TYPES_OPTION`) that every task checks as it reads, counting the kinds
  of the values of each column (``Batch.type_counts``) -- Arrow's reader or the line-by-line
  one already parsed them. Once every task is done, the settle step
  (:mod:`shardtrain.data.sharding.settle`) decides the types by all rows from those counts
  (:func:`verify_types`): the same as the guess, the usual case, and the tasks' shards stand;
  else the run is planned again with the types found (:data:`ALL_ROW_TYPES_OPTION`) and every
  task runs again. Either way the types are those a pass over all the data at planning
  (:func:`scan_types`) finds. That pass still runs when the sample lacks the label, the key
  or a column a ``--schema`` file names, and plans stored before the tasks checked types keep
  its result. The plan's sizes come from the listing (a gzip file counts
  :data:`~shardtrain.data.task_rule.GZIP_EXPANSION` times its size) and its rows from the
  sample's line length. Floats are stored as float32, as CSV floats are.
* **Split hash.** The key's text, else the raw bytes of the whole line (as for CSV).

Blocks are parsed by Arrow's JSON reader with the planned types; a block it refuses (a
malformed line, a number in a string column, a duplicate key) is parsed line by line in
Python instead, which gives the same values and finds the lines to reject.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterator, Mapping
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
    FinalSchema,
    Piece,
    PlanInputs,
    Reject,
    SourceFile,
    SourceLayout,
    dense_counts,
    open_source,
)
from shardtrain.data.sources.jsonl_types import (
    INT64_MAX,
    INT64_MIN,
    KIND_CODE,
    KIND_TYPES,
    KINDS,
    NESTED,
    JsonInt,
    JsonNumber,
    TypePass,
    arrow_kind,
    column_type,
    has_huge_numbers,
    json_kind,
    loads,
    sample_types,
    scan_block,
)
from shardtrain.data.task_rule import GZIP_EXPANSION
from shardtrain.errors import DataError
from shardtrain.kernels import arrow, xxh64

log = logging.getLogger(__name__)

#: Bytes of JSON parsed at once by the plan's type pass.
SCAN_BLOCK_BYTES = 8 << 20
#: Bytes of whole lines planning reads from the first file: the sample.
SAMPLE_BYTES = 1 << 20

#: The plan option marking the schema's types as the sample's guess, checked by the tasks
#: (``{"forced": {column: type}}``: the ``--schema`` file's types, re-applied to the types by
#: all rows).
VERIFY_TYPES_OPTION = "jsonl_types_to_verify"
#: The plan option of the types by all rows the tasks found (column -> type, None: only
#: nulls; before a ``--schema`` file's), which a plan made after a wrong guess is built on.
ALL_ROW_TYPES_OPTION = "jsonl_all_row_types"
#: The plan option of a type pass at planning (:class:`TypePass`): plans made before the
#: tasks checked the types, and runs whose sample cannot stand for the data.
TYPE_PASS_OPTION = "jsonl_types"


_BOM = b"\xef\xbb\xbf"

#: The longest line read (one JSON object): a file without newlines is one error, not a
#: read of the whole file into memory. As CSV's ``MAX_RECORD_BYTES``.
MAX_LINE_BYTES = 256 * 1024 * 1024


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
            scan_block(block, kinds, where)
        for name, kind_set in kinds.items():
            if NESTED in kind_set and name not in nested:
                what = "objects or arrays" if name not in where else f"{where[name]} values"
                nested[name] = (src.uri, what)
    if not kinds:
        raise DataError(f"{sources[0].uri}: no JSON object in the file(s)")
    types = {name: column_type(k - {NESTED}) for name, k in kinds.items()}
    return TypePass(types, nested, lines, total)


def _sample(src: SourceFile) -> bytes | None:
    """The planning sample: the first block of whole lines of ``src`` (about 1 MiB)."""
    return next(_iter_line_blocks(Piece(src.uri, 0, src.size, src.gzip), SAMPLE_BYTES), None)


def _stands_for_all(
    sample: TypePass, overrides: SchemaOverrides | None, label: str, key: str | None
) -> bool:
    """Whether the sample's columns can be the plan's guess: they hold the label, the key and
    every column a ``--schema`` file names (else the run is typed by a pass over all the
    data, which finds them or says which are missing, as before the tasks checked types)."""
    names = set(sample.types)
    named = set(overrides.types) | set(overrides.drop) if overrides else set()
    return label in names and (key is None or key in names) and named <= names


def schema_of(
    types: Mapping[str, ColumnType | None],
    overrides: SchemaOverrides | None,
    label: str,
    key: str | None,
    uri: str,
    *,
    warn: bool = False,
) -> Schema:
    """The schema of columns of these types (None: only nulls, typed string), with a
    ``--schema`` file's types and drops (``uri`` names the data in its errors)."""
    columns = []
    for name, t in types.items():
        if t is None and warn:
            log.warning("column '%s' holds only nulls in the JSON lines: treated as string", name)
        columns.append(Column(name, t or "string"))
    columns = typed.apply_overrides(columns, overrides, uri)
    return Schema(tuple(columns), label=label, key=key, null_values=())


# --------------------------------------------------------------------------------------------
# The source
# --------------------------------------------------------------------------------------------


class JsonLinesSource(typed.TypedFileSource):
    """Newline-delimited JSON files (plain or ``.gz``, local or in object storage).

    Arguments: see :class:`~shardtrain.data.sources.typed.TypedFileSource`.
    """

    def recall(self, stored: Mapping[str, Any] | None) -> None:
        """Keep a stored plan (``_plan.json``) for :meth:`plan_inputs`: the types by all rows
        of exactly these files (same URIs, sizes and versions) are taken from there."""
        self._stored = stored

    def plan_inputs(self) -> PlanInputs:
        """List the files and type the columns by the sample, the first block of the first
        file (see the module docstring): a guess the tasks check as they read, marked in the
        options (:data:`VERIFY_TYPES_OPTION`). Types by all rows are taken from a stored plan
        of exactly these files instead: those the tasks of a wrong guess found
        (:data:`ALL_ROW_TYPES_OPTION`), or a type pass's (:data:`TYPE_PASS_OPTION`, as the
        plan stored them, estimates and all). The type pass runs here only when the sample
        cannot stand for the data: it holds no object, lacks the label or key, or lacks a
        column the ``--schema`` file names."""
        from shardtrain.data.sources.csv.listing import list_sources

        sources = list_sources(self.patterns)
        overrides = SchemaOverrides.load(self.schema_file) if self.schema_file else None
        found = self._stored_pass(sources)
        if found is not None:
            log.info("types of the JSON lines taken from the stored plan (same files)")
            found.check_nested(overrides.drop if overrides else ())
            return self._planned(sources, overrides, found.types, found, {})
        first = _sample(sources[0])
        types = self._stored_types(sources)
        if types is not None:
            log.info("types by all rows of the JSON lines taken from the stored plan (same files)")
            return self._planned(sources, overrides, types, None, {}, first)
        guess = sample_types(first, sources[0].uri) if first else None
        if guess is None or not _stands_for_all(guess, overrides, self.label, self.key):
            found = scan_types(sources)
            found.check_nested(overrides.drop if overrides else ())
            return self._planned(sources, overrides, found.types, found, {}, first)
        guess.check_nested(overrides.drop if overrides else ())
        forced = dict(overrides.types) if overrides else {}
        return self._planned(
            sources, overrides, guess.types, None, {VERIFY_TYPES_OPTION: {"forced": forced}}, first
        )

    def _planned(
        self,
        sources: list[SourceFile],
        overrides: SchemaOverrides | None,
        types: Mapping[str, ColumnType | None],
        found: TypePass | None,
        guess: Mapping[str, Any],
        first: bytes | None = None,
    ) -> PlanInputs:
        """The plan's inputs with these types: the type pass's estimates and options when
        ``found``, else the listing's and the sample's, with the options of ``guess`` (empty:
        the types are by all rows)."""
        typed.check_label_and_key(list(types), self.label, self.key, sources[0].uri)
        uri = sources[0].uri
        schema = schema_of(types, overrides, self.label, self.key, uri, warn=not guess)
        if first is None:
            first = _sample(sources[0])
        sample = parse_block(first, schema, lines_before=0).table if first else None
        if found is not None:
            input_bytes, rows = found.bytes, found.lines
            options: dict[str, Any] = {TYPE_PASS_OPTION: found.to_dict()}
        else:
            input_bytes = sum(s.size * (GZIP_EXPANSION if s.gzip else 1) for s in sources)
            lines = first.count(b"\n") + (0 if first.endswith(b"\n") else 1) if first else 1
            rows = int(input_bytes * lines / max(len(first or b""), 1))
            options = {**guess} if guess else {ALL_ROW_TYPES_OPTION: dict(types)}
        return PlanInputs(
            sources=sources,
            schema=schema,
            input_bytes=input_bytes,
            estimated_rows=rows,
            options={"format": "jsonl", **options},
            sample=sample,
            sample_bytes=len(first) if first else 0,
        )

    def _stored_pass(self, sources: list[SourceFile]) -> TypePass | None:
        """The type pass of a stored plan of these files, if it holds one."""
        stored = getattr(self, "_stored", None)
        if not stored:
            return None
        try:
            same = [SourceFile(**d) for d in stored["sources"]] == sources
            return TypePass.from_dict(stored["options"][TYPE_PASS_OPTION]) if same else None
        except (KeyError, TypeError, ValueError, IndexError):
            return None  # another kind of plan, or another version's: read the files

    def _stored_types(self, sources: list[SourceFile]) -> dict[str, ColumnType | None] | None:
        """The types by all rows the tasks found, of a stored plan of these files built on
        them (not those of a guess that held, in its ``settled`` part: that plan is made
        again from its sample, the same plan)."""
        stored = getattr(self, "_stored", None)
        if not stored:
            return None
        try:
            same = [SourceFile(**d) for d in stored["sources"]] == sources
            types = stored["options"].get(ALL_ROW_TYPES_OPTION)
            if not same or not isinstance(types, dict):
                return None
            if not all(t is None or t in KIND_TYPES for t in types.values()):
                return None
            return {str(n): t for n, t in types.items()}
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def read_piece(self, piece: Piece, layout: SourceLayout, block_bytes: int) -> Iterator[Batch]:
        count = bool(layout.options.get(VERIFY_TYPES_OPTION))
        return read_piece(piece, layout.schema, block_bytes=block_bytes, count_types=count)

    def _warm_up_rows(self, schema: Schema) -> pa.Table:
        """The two rows read from JSON lines (loads the block reader's compiled code)."""
        return parse_block(
            b'{"f": 1.5, "i": 2, "s": "x", "label": 1}\n'
            b'{"f": -0.25, "i": 3, "s": "y", "label": 0}\n',
            schema,
            lines_before=0,
        ).table


def read_piece(
    piece: Piece, schema: Schema, *, block_bytes: int = 4 << 20, count_types: bool = False
) -> Iterator[Batch]:
    """Stream one piece as typed batches with rejects; see the module docstring. With
    ``count_types`` each batch counts the kinds of its values (:func:`parse_block`)."""
    lines_before = 0
    for block in _iter_line_blocks(piece, block_bytes):
        batch = parse_block(
            block, schema, lines_before=lines_before, source=piece.uri, count_types=count_types
        )
        lines_before += batch.lines
        yield batch


def verify_types(
    layout: SourceLayout,
    pieces: list[Piece],
    counts: list[list[list[int]]],
    *,
    max_bad_fraction: float = 0.0,
) -> FinalSchema | None:
    """The types by all rows of a plan whose types are the sample's guess
    (:data:`VERIFY_TYPES_OPTION`; None for any other plan), from what it stores alone: the
    kinds its tasks counted, ``counts[i]`` those of ``pieces[i]`` (see :data:`KINDS`), by the
    type pass's rules, so the same types as :func:`scan_types` over the same files. Pieces
    that hold keys the plan's schema does not have are read again by the type pass, which
    finds those columns (in the order they appear) and their kinds. The schema is the plan's
    when the guess held; the options record the types by all rows
    (:data:`ALL_ROW_TYPES_OPTION`), which a plan made again takes (:meth:`JsonLinesSource.recall`).
    ``max_bad_fraction`` is unused: a JSON value's kind is what it is.

    Raises:
        DataError: a column the sample did not have holds objects or arrays.
        ConfigError: the ``--schema`` file forces a column to a type its values do not take.
    """
    guess = layout.options.get(VERIFY_TYPES_OPTION)
    if not guess:
        return None
    schema = layout.schema
    total = new_counts(schema)
    for c in counts:
        total += dense_counts(c, len(schema.columns) + 1, len(KINDS))
    kinds = {
        col.name: {KINDS[k] for k in np.flatnonzero(total[i]).tolist()}
        for i, col in enumerate(schema.columns)
    }
    nested: dict[str, tuple[str, str]] = {}
    for piece, c in zip(pieces, counts, strict=True):
        if not any(column == len(schema.columns) for column, _, n in c if n):
            continue
        where: dict[str, str] = {}
        for block in _iter_line_blocks(piece, SCAN_BLOCK_BYTES):
            scan_block(block, kinds, where)
        for name, found in kinds.items():
            if NESTED in found and name not in nested and name not in schema.names:
                what = f"{where[name]} values" if name in where else "objects or arrays"
                nested[name] = (piece.uri, what)
    dropped = tuple(col.name for col in schema.columns if col.drop)
    TypePass({}, nested, 0, 0).check_nested(dropped)
    types = {name: column_type(k - {NESTED}) for name, k in kinds.items()}
    overrides = SchemaOverrides(types=dict(guess.get("forced") or {}), drop=dropped)
    uri = layout.sources[0].uri if layout.sources else "JSON lines"
    final = schema_of(types, overrides, schema.label, schema.key, uri)
    return FinalSchema(final, {"format": "jsonl", ALL_ROW_TYPES_OPTION: types})


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


def _read_arrow(
    block: bytes, schema: Schema, rows: int, counts: np.ndarray | None = None
) -> pa.Table | None:
    """Arrow's typed read of a block, or None when it refuses the block or its rows are not
    the block's non-blank lines.

    A string column that also holds integers (zip codes, ids) fails the typed read: it is
    read again with those columns inferred, and integers are turned into their text, which
    is their JSON text. Anything else Arrow refuses goes line by line.

    With ``counts`` (the plan's types are a guess), the kinds of the block's values are
    added to it (:func:`_count_table`); the keys the schema does not type are read too, and
    a block whose kinds the table cannot tell goes line by line.
    """
    unexpected = "ignore" if counts is None else "infer"
    table = _read_json(block, _arrow_schema(schema), unexpected)
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
    if counts is not None:
        found = _count_table(table, schema)
        if found is None:
            return None
        counts += found
    missing = [f for f in _arrow_schema(schema) if f.name not in table.column_names]
    for f in missing:  # a column absent from every line of the block
        table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    return table


def new_counts(schema: Schema) -> np.ndarray:
    """Empty kind counts of a block of ``schema`` (see :data:`KINDS`)."""
    return np.zeros((len(schema.columns) + 1, len(KINDS)), dtype=np.int64)


def _count_table(table: pa.Table, schema: Schema) -> np.ndarray | None:
    """The kinds of the values of a block Arrow read (see :data:`KINDS`), or None when the
    table cannot tell them: a float column holding a magnitude of 2**63 or more (maybe an
    integer beyond int64, a kind of its own).

    A typed column's values are of its type: the typed read refuses any other, but for a
    float column's integers, counted as floats (and a string column's integers, turned into
    text): the type by all rows is the same either way, float or string. Other columns
    (dropped ones, keys the schema does not have) are typed by Arrow as the type pass types
    them."""
    counts = new_counts(schema)
    index = {c.name: i for i, c in enumerate(schema.columns)}
    if has_huge_numbers(table):
        return None
    for name, column in zip(table.column_names, table.columns, strict=True):
        i = index.get(name)
        if i is None:
            counts[-1, 0] += 1  # a key the schema does not have, maybe with nulls only
            continue
        values = len(column) - column.null_count
        kind = schema.columns[i].type if not schema.columns[i].drop else arrow_kind(column.type)
        if kind is not None and values:
            counts[i, KIND_CODE[kind]] += values
    return counts


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
    if isinstance(value, JsonInt) and t == "int":
        n = int(value)
        return (n, True) if INT64_MIN <= n <= INT64_MAX else (None, False)
    if isinstance(value, JsonNumber) and t == "float":
        return value, True  # its text: converted column-wise by _to_array
    return None, False


def _to_array(values: list[Any], column: Column) -> pa.Array:
    if column.type == "float":
        # From the numbers' text, as Arrow's reader converts them (no double rounding).
        text = pa.array([None if v is None else str(v) for v in values], pa.string())
        return pc.cast(text, pa.float32())
    return pa.array(values, type=column.arrow_type)


def _read_python(
    block: bytes,
    schema: Schema,
    starts: np.ndarray,
    ends: np.ndarray,
    rows: np.ndarray,
    counts: np.ndarray | None = None,
    source: str = "JSON lines",
) -> tuple[pa.Table, np.ndarray, list[tuple[int, str, str]]]:
    """Line-by-line read: the table of good rows, their line indices, and the rejects
    ``(line index, reason, detail)``; with ``counts``, the kinds of every object's values
    are added to it (:func:`_count_object`)."""
    written = [c for c in schema.columns if not c.drop]
    index = {c.name: i for i, c in enumerate(schema.columns)}
    values: list[list[Any]] = [[] for _ in written]
    good: list[int] = []
    bad: list[tuple[int, str, str]] = []
    for li in rows.tolist():
        raw = block[starts[li] : ends[li]]
        try:
            obj = loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            bad.append((li, "malformed_json", f"not UTF-8 (byte {exc.start})"))
            continue
        except ValueError as exc:
            bad.append((li, "malformed_json", str(exc).splitlines()[0]))
            continue
        if not isinstance(obj, dict):
            bad.append((li, "not_an_object", f"a JSON {type(obj).__name__}, not an object"))
            continue
        if counts is not None:
            _count_object(obj, schema, index, counts, source)
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


def _count_object(
    obj: dict[str, Any], schema: Schema, index: dict[str, int], counts: np.ndarray, source: str
) -> None:
    """Add the kinds of one object's values to ``counts`` (rejected rows' too: a value its
    planned column cannot hold is what makes the guess wrong).

    Raises:
        DataError: a column that is not dropped holds an object or an array (as the type
            pass at planning said).
    """
    for name, value in obj.items():
        i = index.get(name)
        if i is None:
            counts[-1, 0] += 1
            continue
        kind = json_kind(value)
        if kind is None:
            continue
        counts[i, KIND_CODE[kind]] += 1
        if kind == NESTED and not schema.columns[i].drop:
            TypePass({}, {name: (source, f"{type(value).__name__} values")}, 0, 0).check_nested(())


def parse_block(
    block: bytes,
    schema: Schema,
    *,
    lines_before: int,
    source: str = "JSON lines",
    count_types: bool = False,
) -> Batch:
    """Parse a block of whole JSON lines into a :class:`Batch` (see the module docstring).

    Args:
        block: whole lines.
        schema: the columns and their types.
        lines_before: lines of the piece before this block (for reject line numbers).
        source: names the file in messages.
        count_types: count the kinds of the values as the type pass tells them apart, per
            column (``Batch.type_counts``, see :data:`KINDS`): the plan's types are a guess,
            decided by :func:`verify_types` once every task is done.

    Raises:
        DataError: with ``count_types``, a column not dropped holds objects or arrays.
    """
    arr = np.frombuffer(block, dtype=np.uint8)
    starts, ends = _line_bounds(arr)
    blank = _blank(block, starts, ends)
    rows = np.flatnonzero(~blank)
    counts = new_counts(schema) if count_types else None
    table = _read_arrow(block, schema, rows.size, counts)
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
        table, row_lines, bad = _read_python(block, schema, starts, ends, rows, counts, source)
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
        type_counts=counts,
    )


__all__ = [
    "ALL_ROW_TYPES_OPTION",
    "VERIFY_TYPES_OPTION",
    "JsonLinesSource",
    "parse_block",
    "read_piece",
    "scan_types",
    "verify_types",
]
