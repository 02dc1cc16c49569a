"""What a CSV run stores in its plan: the typed record behind ``_plan.json``'s CSV options.

The tasks read every piece with the plan's dialect; a later run over the same files (a resume,
another worker once the plan is written) takes the all-rows types from
the stored plan instead of reading the files again (:meth:`CsvSource.recall`), deciding the
types of the columns holding values that are not numbers again from their stored evidence
under its own ``--max-bad-fraction``.

The stored layout is flat, one key per part (``csv_dialect``, ``csv_record_starts``,
``csv_all_row_types``, ``csv_all_row_types_basis``, ``csv_type_evidence``, ``type_notes``,
``csv_types_to_verify``;
a part with nothing to say is left out): version 1, which carries no version key,
so that plans written before this record existed keep their bytes and their fingerprint. A
later layout writes ``csv_options_version``; a plan of a version this code does not know is
read as no plan (the files are read again).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shardtrain.data.csv_dialect import CsvDialect
from shardtrain.data.schema import TYPE_NOTES_OPTION, ColumnType, Schema, TypeTally

#: The layout of :class:`CsvPlanOptions` this code writes and reads.
PLAN_OPTIONS_VERSION = 1

#: The stored keys (see the module docstring).
VERSION_OPTION = "csv_options_version"
DIALECT_OPTION = "csv_dialect"
RECORD_STARTS_OPTION = "csv_record_starts"
TYPES_OPTION = "csv_all_row_types"
TYPES_BASIS_OPTION = "csv_all_row_types_basis"
#: The key of :attr:`CsvPlanOptions.type_evidence`. The notes' key,
#: :data:`~shardtrain.data.schema.TYPE_NOTES_OPTION`, is shared with ``metadata.json``.
TYPE_EVIDENCE_OPTION = "csv_type_evidence"
#: The key of :attr:`CsvPlanOptions.types_to_verify`.
VERIFY_TYPES_OPTION = "csv_types_to_verify"

#: What the type pass may find for a column (None: only nulls).
_TABULAR_TYPES = (None, "int", "float", "bool", "string")

#: The dialect of a plan that stores none: RFC 4180 with a comma.
DEFAULT_DIALECT = CsvDialect(delimiter=",")


@dataclass(frozen=True)
class AllRowTypes:
    """Every column's type by all of its values (``--infer-types all``; None: only nulls),
    and what they were found under besides the files and the dialect.

    Attributes:
        types: column -> type, in the schema's column order.
        null_values: the null words the pass skipped.
        pass_version: the version of the type pass's rules.
    """

    types: Mapping[str, ColumnType | None]
    null_values: tuple[str, ...]
    pass_version: int

    def fits(self, schema: Schema, pass_version: int) -> bool:
        """Whether these types can stand for a pass over ``schema``'s columns now: the same
        columns in order, found with the same null words by the same version of the pass (a
        ``--schema`` file's ``null_values`` changed between runs: the types are found again)."""
        return (
            list(self.types) == schema.names
            and self.null_values == tuple(schema.null_values)
            and self.pass_version == pass_version
            and all(t in _TABULAR_TYPES for t in self.types.values())
        )


@dataclass(frozen=True)
class CsvPlanOptions:
    """The CSV part of a plan's options.

    Attributes:
        dialect: how every task reads the files.
        record_starts: per URI cut into several pieces, ``(offset, start)`` for each piece
            boundary: the first record start at or after the offset, as plans of earlier
            versions stored them (their planner read the files to cut them at record starts;
            now each piece finds its records when read, and the plan's
            ``Plan.record_starts`` holds only the corrections of wrong guesses). Read, never
            written any more.
        all_row_types: the types by all rows, with ``--infer-types all``.
        type_evidence: the tallies of the columns whose values that are not numbers decided
            their type (:meth:`~shardtrain.data.schema.TypeTally.noteworthy`). They do not
            depend on ``--max-bad-fraction``: a recalled plan decides those columns again
            under the run's, so changing it between runs changes the plan only when it
            changes a type.
        type_notes: a line per such column saying what was decided
            (:func:`~shardtrain.data.schema.type_notes`; none for a column a ``--schema``
            file types), shown by ``inspect``.
        types_to_verify: the schema's types are the sample's, a guess that the tasks check
            as they read (``--infer-types all`` without types already found by all rows):
            every task counts the kinds of its fields as the type pass does, and the run's
            settle step (:mod:`shardtrain.data.sharding.settle`) decides the types by all
            rows from those counts -- the same types when the guess was right (the tasks'
            shards stand), else a plan with ``all_row_types`` whose tasks run again.
        forced: with ``types_to_verify``, the columns a ``--schema`` file types (their
            types are not guessed: they stay whatever the rows hold).
        version: the stored layout's version.
    """

    dialect: CsvDialect
    record_starts: Mapping[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    all_row_types: AllRowTypes | None = None
    type_evidence: Mapping[str, TypeTally] = field(default_factory=dict)
    type_notes: tuple[str, ...] = ()
    types_to_verify: bool = False
    forced: tuple[str, ...] = ()
    version: int = PLAN_OPTIONS_VERSION

    def known_starts(self) -> dict[str, dict[int, int]]:
        """The record starts per URI as offset -> start."""
        return {uri: dict(pairs) for uri, pairs in self.record_starts.items()}

    def to_dict(self) -> dict[str, Any]:
        """The stored form (JSON types; see the module docstring)."""
        d: dict[str, Any] = {DIALECT_OPTION: self.dialect.to_dict()}
        if self.version != 1:
            d[VERSION_OPTION] = self.version
        if self.record_starts:
            d[RECORD_STARTS_OPTION] = {
                uri: [[o, b] for o, b in pairs] for uri, pairs in self.record_starts.items()
            }
        if self.all_row_types is not None:
            d[TYPES_OPTION] = dict(self.all_row_types.types)
            d[TYPES_BASIS_OPTION] = {
                "null_values": list(self.all_row_types.null_values),
                "pass": self.all_row_types.pass_version,
            }
        if self.type_evidence:
            d[TYPE_EVIDENCE_OPTION] = {n: t.to_dict() for n, t in self.type_evidence.items()}
        if self.type_notes:
            d[TYPE_NOTES_OPTION] = list(self.type_notes)
        if self.types_to_verify:
            d[VERIFY_TYPES_OPTION] = {"forced": list(self.forced)}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CsvPlanOptions:
        """Read the stored form (other keys of the plan's options are ignored).

        Raises:
            ValueError: a version this code does not know, or a malformed part.
        """
        version = d.get(VERSION_OPTION, 1)
        if version != PLAN_OPTIONS_VERSION:
            raise ValueError(f"CSV plan options of version {version}")
        try:
            stored = d.get(DIALECT_OPTION)
            dialect = CsvDialect.from_dict(stored) if stored else DEFAULT_DIALECT
            starts = {
                str(uri): tuple((int(o), int(b)) for o, b in pairs)
                for uri, pairs in (d.get(RECORD_STARTS_OPTION) or {}).items()
            }
            types = d.get(TYPES_OPTION)
            all_row_types = None
            if types is not None:
                basis = d[TYPES_BASIS_OPTION]
                all_row_types = AllRowTypes(
                    types=dict(types),
                    null_values=tuple(basis["null_values"]),
                    pass_version=int(basis["pass"]),
                )
            evidence = {
                str(n): TypeTally.from_dict(t)
                for n, t in (d.get(TYPE_EVIDENCE_OPTION) or {}).items()
            }
            notes = tuple(str(n) for n in d.get(TYPE_NOTES_OPTION) or ())
            verify = d.get(VERIFY_TYPES_OPTION) or {}
            forced = tuple(str(n) for n in verify.get("forced", ()))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"malformed CSV plan options ({exc})") from exc
        return cls(dialect, starts, all_row_types, evidence, notes, bool(verify), forced, version)


__all__ = ["PLAN_OPTIONS_VERSION", "AllRowTypes", "CsvPlanOptions"]
