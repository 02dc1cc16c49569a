"""The kinds of JSON values and the type pass's rules over them: what makes a JSON-lines column
``int``, ``float``, ``bool`` or ``string`` (the table in :mod:`.jsonl`'s docstring).

Planning types the columns of a sample by these rules (:func:`sample_types`); the tasks count
the kinds of the values they read, per column (:data:`KINDS`), and the settle step decides
the types by all rows from those counts by the same rules (:func:`column_type`), as a pass
over all the data (:func:`.jsonl.scan_types`) would have.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from shardtrain.data.schema import ColumnType
from shardtrain.data.sources import typed
from shardtrain.errors import DataError

#: Kinds of JSON value the type pass tells apart (besides null).
NESTED = "nested"
BIGINT = "bigint"

#: The kinds a task counts per column when the plan's types are a guess (``Batch.type_counts``
#: column ``i`` counts ``KINDS[i]``); the counts' last row counts the values of keys the
#: schema does not have (column 0).
KINDS = ("int", "float", "bool", "string", BIGINT, NESTED)
KIND_CODE = {k: i for i, k in enumerate(KINDS)}

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class JsonNumber(str):
    """A JSON number kept as its text (``json.loads`` hooks): exact for any column type."""

    __slots__ = ()


class JsonInt(JsonNumber):
    __slots__ = ()


class JsonFloat(JsonNumber):
    __slots__ = ()


def loads(text: str) -> Any:
    return json.loads(text, parse_int=JsonInt, parse_float=JsonFloat, parse_constant=JsonFloat)


def json_kind(value: Any) -> str | None:
    """The type-pass kind of one JSON value parsed by :func:`_loads`."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, JsonInt):
        return "int" if INT64_MIN <= int(value) <= INT64_MAX else BIGINT
    if isinstance(value, JsonFloat):
        return "float"
    if isinstance(value, str):
        return "string"
    return NESTED


def arrow_kind(t: pa.DataType) -> str | None:
    """The type-pass kind of a column Arrow's JSON reader typed ``t``: the column type the
    typed sources map it to (:func:`typed.column_type`), or nested."""
    try:
        return typed.column_type(t)
    except typed.UnsupportedType:
        return NESTED


def column_type(kinds: set[str]) -> ColumnType | None:
    """The narrowest type holding every kind of value a column has (see the module docstring)."""
    if not kinds:
        return None
    for only in ("int", "float", "bool", "string"):
        if kinds == {only}:
            return only
    if kinds == {"int", "float"}:
        return "float"
    return "string"


#: The Arrow type the type pass reads a column of one kind with.
KIND_TYPES = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "string": pa.string()}


def has_huge_numbers(table: pa.Table) -> bool:
    """A float column holds a magnitude of 2**63 or more: maybe an integer beyond int64, which
    Arrow reads as a (rounded) double without a word."""
    for column in table.columns:
        if pa.types.is_floating(column.type) and column.null_count < len(column):
            top = pc.max(pc.abs(column)).as_py()
            if top is not None and top >= 2.0**63:
                return True
    return False


def scan_block(block: bytes, kinds: dict[str, set[str]], where: dict[str, str]) -> None:
    """Add the kinds of value of each column in ``block`` to ``kinds``.

    Columns of one kind so far are read with that kind's type (Arrow's fast typed read, which
    fails on a value of another kind), the others inferred; a block Arrow refuses either way
    (mixed kinds in one column, malformed lines), or with numbers that may be integers beyond
    int64, is classified line by line.
    """
    explicit = [
        (name, KIND_TYPES[k])
        for name, ks in kinds.items()
        if len(ks) == 1 and (k := next(iter(ks))) in KIND_TYPES
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
        if has_huge_numbers(table):
            break
        for f in table.schema:
            found = arrow_kind(f.type)
            column = kinds.setdefault(f.name, set())
            if found is not None:
                column.add(found)
        return
    for line in block.splitlines():
        if not line.strip():
            continue
        try:
            obj = loads(line.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            continue  # rejected when the line is read
        if not isinstance(obj, dict):
            continue
        for name, value in obj.items():
            column = kinds.setdefault(name, set())
            kind = json_kind(value)
            if kind is not None:
                column.add(kind)
                if kind == NESTED:
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


def sample_types(block: bytes, uri: str) -> TypePass | None:
    """The type pass over one block (the sample of ``uri``): its columns, in the order they
    appear, with the types of their values there; None when it holds no JSON object."""
    kinds: dict[str, set[str]] = {}
    where: dict[str, str] = {}
    scan_block(block, kinds, where)
    if not kinds:
        return None
    nested = {
        name: (uri, f"{where[name]} values" if name in where else "objects or arrays")
        for name, k in kinds.items()
        if NESTED in k
    }
    types = {name: column_type(k - {NESTED}) for name, k in kinds.items()}
    lines = block.count(b"\n") + (0 if block.endswith(b"\n") else 1)
    return TypePass(types, nested, lines, len(block))


__all__ = [
    "BIGINT",
    "KINDS",
    "KIND_CODE",
    "NESTED",
    "TypePass",
    "column_type",
    "has_huge_numbers",
    "json_kind",
    "loads",
    "sample_types",
    "scan_block",
]
