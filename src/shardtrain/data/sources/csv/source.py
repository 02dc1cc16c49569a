"""The CSV source: the hooks of the sharder's :class:`~shardtrain.data.sources.base.Source`
seam, each computing from its arguments (and the stored plan it was given) and returning what
it found as a :class:`~.plan_options.CsvPlanOptions`, stored in the plan."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import Any, Unpack

from shardtrain.data.csv_dialect import CsvDialect, detect_delimiter
from shardtrain.data.schema import (
    SAMPLE_BYTES,
    ColumnType,
    Schema,
    SchemaOverrides,
    TypeTally,
    infer_schema,
    type_notes,
)
from shardtrain.data.sources.base import (
    AlignedPieces,
    Batch,
    FinalSchema,
    Piece,
    PlanInputs,
    SourceFile,
    SourceLayout,
    TabularSettings,
    TabularSource,
    dense_counts,
)
from shardtrain.data.sources.csv.align import PieceExtent, cut_pieces
from shardtrain.data.sources.csv.listing import list_sources, read_sample
from shardtrain.data.sources.csv.parse import parse_block, read_piece
from shardtrain.data.sources.csv.plan_options import DIALECT_OPTION, AllRowTypes, CsvPlanOptions
from shardtrain.data.sources.csv.types import (
    TYPE_PASS_VERSION,
    apply_all_row_types,
    decide_types,
    type_pass,
)
from shardtrain.data.task_rule import GZIP_EXPANSION
from shardtrain.kernels import csv_types

log = logging.getLogger(__name__)


class CsvSource(TabularSource):
    """CSV files (plain or ``.gz``, local or in object storage), in one dialect.

    Args:
        patterns: files or globs.
        label: the label column.
        key: the column hashed for the split; None hashes the whole row.
        schema_file: YAML/JSON overrides of the inferred types (see
            :class:`~shardtrain.data.schema.SchemaOverrides`).
        dialect: delimiter, quoting, encoding, header, null values (see
            :class:`~shardtrain.data.csv_dialect.CsvDialect`); None: the defaults,
            with the delimiter detected.
        infer_types: ``all`` (the default) types each column by all of its values: the
            sample's types are a guess the tasks check as they read, and the settle step
            decides (:meth:`final_schema`); ``sample`` types them from the first 4 MB of the
            first file (a later value that does not fit is rejected as ``bad_value``).
        processes: threads of the type pass of ``--skip-initial-space`` files (None: the
            CPUs this process may use).
        max_bad_fraction: the run's ``--max-bad-fraction``: with ``infer_types='all'``, a
            column of numbers may hold this fraction of values that are not numbers (none
            shaped like a code) and stay numeric, their rows rejected (see
            :func:`~.types.type_pass`).
    """

    def __init__(
        self,
        patterns: tuple[str, ...] | list[str],
        *,
        dialect: CsvDialect | None = None,
        infer_types: str = "all",
        processes: int | None = None,
        max_bad_fraction: float = 0.0,
        **settings: Unpack[TabularSettings],
    ):
        super().__init__(patterns, **settings)
        self.dialect = dialect or CsvDialect()
        self.infer_types = infer_types
        self.processes = processes
        self.max_bad_fraction = max_bad_fraction
        self._stored: Mapping[str, Any] | None = None
        self._extents: dict[Piece, PieceExtent] = {}

    def recall(self, stored: Mapping[str, Any] | None) -> None:
        """Keep a stored plan (``_plan.json``): when it was made from exactly these files
        (same URIs, sizes and versions) in the same dialect, with the same label and key,
        :meth:`final_schema` takes its all-rows types instead of reading the files again."""
        self._stored = stored

    @cached_property
    def _overrides(self) -> SchemaOverrides | None:
        return SchemaOverrides.load(self.schema_file) if self.schema_file else None

    def _recalled(self, sources: list[SourceFile], dialect: CsvDialect) -> CsvPlanOptions | None:
        """The stored plan's CSV options when they describe these files read this way, else
        None (no plan, another kind of plan, or a layout this version cannot read); with what
        settling the plan found (its ``settled`` part: the types by all rows of a plan whose
        types were a guess)."""
        stored = self._stored
        if not stored:
            return None
        try:
            options = stored["options"]
            recalled = CsvPlanOptions.from_dict({**options, **(stored.get("settled") or {})})
            same = (
                [SourceFile(**d) for d in stored["sources"]] == sources
                and options.get(DIALECT_OPTION) == dialect.to_dict()
                and options.get("label") == self.label
                and options.get("key") == self.key
            )
        except (KeyError, TypeError, AttributeError, ValueError):
            return None
        return recalled if same else None

    def plan_inputs(self) -> PlanInputs:
        """List the files, settle the dialect and infer the schema from a sample of the first.

        Gzip files count four times their size (their uncompressed size is unknown up front;
        4x is typical for CSV); rows are estimated from the sample's mean line length.
        The schema here is the sample's; with ``infer_types='all'``, :meth:`final_schema`
        types the columns by all rows once the pieces are known.
        """
        sources = list_sources(self.patterns)
        dialect = self.dialect
        sample = read_sample(sources[0], SAMPLE_BYTES, dialect)
        if dialect.delimiter is None:
            candidates = dialect.candidate_delimiters
            found = detect_delimiter(sample.decode("utf-8", "replace"), candidates)
            dialect = dataclasses.replace(dialect, delimiter=found or candidates[0])
        overrides = self._overrides
        if overrides is not None and not dialect.header and not dialect.columns:
            dialect = dataclasses.replace(dialect, columns=tuple(overrides.types))
        schema = infer_schema(
            sample,
            sources[0].uri,
            label=self.label,
            key=self.key,
            overrides=overrides,
            dialect=dialect,
        )
        input_bytes = sum(s.size * (GZIP_EXPANSION if s.gzip else 1) for s in sources)
        sample_lines = max(sample.count(b"\n") - 1, 1)
        body = sample[sample.find(b"\n") + 1 :] if dialect.header else sample
        parsed = (
            parse_block(body, schema, lines_before=1, dialect=dialect, report=False).table
            if body
            else None
        )
        return PlanInputs(
            sources=sources,
            schema=schema,
            input_bytes=input_bytes,
            estimated_rows=int(input_bytes / (len(sample) / (sample_lines + 1))),
            options=CsvPlanOptions(dialect).to_dict(),
            sample=parsed,
            sample_bytes=len(body),
        )

    def align_pieces(self, pieces: list[Piece], inputs: PlanInputs) -> AlignedPieces:
        """The planned pieces as they are (:func:`~.align.cut_pieces`: gzip files whole, a
        file in an encoding that cannot be cut in one piece): each piece finds its records
        when it is read (:meth:`read_piece`), so planning reads no data for them."""
        options = CsvPlanOptions.from_dict(inputs.options)
        return AlignedPieces(cut_pieces(pieces, options.dialect), inputs.options)

    def final_schema(self, pieces: list[Piece], inputs: PlanInputs) -> FinalSchema:
        """With ``infer_types='all'``: the sample's schema with every column typed by all of
        its values (not those a ``--schema`` file sets) when they are known: taken from a
        stored plan of the same files (:meth:`recall`; the columns whose values that are not
        numbers decided their type decided again from the stored evidence under this run's
        ``max_bad_fraction``), or, with ``--skip-initial-space`` only, found by
        :func:`~.types.type_pass` over the pieces. The options returned hold the types,
        that evidence and a note per such column (logged when the type pass ran, except for
        the columns a ``--schema`` file types).

        Otherwise planning reads nothing more: the schema is the sample's, marked as a
        guess (``types_to_verify``) that every task checks as it reads by counting the kinds
        of its fields (:func:`~.parse.count_block_types`), and :func:`verify_types` decides
        from those counts once all tasks are done."""
        if self.infer_types != "all":
            return FinalSchema(inputs.schema, inputs.options)
        schema = inputs.schema
        mbf = self.max_bad_fraction
        options = CsvPlanOptions.from_dict(inputs.options)
        recalled = self._recalled(inputs.sources, options.dialect)
        stored = recalled.all_row_types if recalled is not None else None
        evidence: dict[str, TypeTally] = {}
        passed = False  # whether the type pass ran here (its notes are logged)
        forced = self._overrides.types if self._overrides is not None else {}
        if recalled is not None and stored is not None and stored.fits(schema, TYPE_PASS_VERSION):
            evidence = dict(recalled.type_evidence)
            types: dict[str, ColumnType | None] = {
                **stored.types,
                **{n: t.type(mbf) for n, t in evidence.items()},
            }
            log.info(
                "CSV types by all rows taken from the stored plan (same files%s)",
                f"; {len(evidence)} column note(s), see inspect" if evidence else "",
            )
            if recalled.types_to_verify:
                # A guess its tasks confirmed: the same plan, unless this run's
                # max_bad_fraction decides a column otherwise.
                kept = {n: t for n, t in types.items() if n not in forced}
                if apply_all_row_types(schema, kept, self._overrides) == schema:
                    return FinalSchema(schema, _guess(options, schema, forced).to_dict())
        elif options.dialect.skip_initial_space:
            # Read by Python's csv module: typed up front (all_row_types), not by the tasks.
            types = type_pass(
                pieces,
                schema,
                options.dialect,
                threads=self.processes,
                max_bad_fraction=mbf,
                found=evidence,
            )
            passed = True
        else:
            # The sample's types, checked by the tasks as they read (verify_types): planning
            # reads no more than the sample.
            return FinalSchema(schema, _guess(options, schema, forced).to_dict())
        return with_types(
            schema,
            options,
            types,
            evidence,
            forced=tuple(forced),
            max_bad_fraction=mbf,
            log_notes=passed,
        )

    def read_piece(self, piece: Piece, layout: SourceLayout, block_bytes: int) -> Iterator[Batch]:
        """The records that begin in the piece (from the start the layout knows for it, if
        any); where the reading began and stopped is kept for :meth:`piece_extent`."""
        options = CsvPlanOptions.from_dict(layout.options)
        extent = PieceExtent()
        self._extents[piece] = extent
        return read_piece(
            piece,
            layout.schema,
            block_bytes=block_bytes,
            dialect=options.dialect,
            known_start=layout.record_starts.get(piece.uri, {}).get(piece.start),
            extent=extent,
            count_types=options.types_to_verify,
        )

    def piece_extent(self, piece: Piece) -> dict[str, int]:
        """Where the last reading of ``piece`` began (``first``) and stopped (``stop``)."""
        extent = self._extents.pop(piece, None)
        if extent is None or extent.first is None or extent.stop is None:
            return {}
        return {"first": extent.first, "stop": extent.stop}

    def warm_up(self) -> None:
        """Load the compiled CSV, statistics and encoding kernels from numba's cache by
        parsing, describing and encoding two rows of every column type in memory."""
        from shardtrain.data import examples

        sample = b'f,i,b,s,label\n1.5,2,true,x,1\n-0.25,3,false,"y",0\n'
        schema = infer_schema(sample, "warm-up", label="label")
        for block in (sample, sample.replace(b'"y"', b"y")):
            batch = parse_block(block[block.index(b"\n") + 1 :], schema, lines_before=1)
        for name, stats in self.new_statistics(schema).items():
            stats.update_table(batch.table, name)
        examples.encode(batch.table, schema, framed=True)


def _guess(options: CsvPlanOptions, schema: Schema, forced: Mapping[str, Any]) -> CsvPlanOptions:
    """``options`` marking the sample's types of ``schema`` as a guess the tasks check (the
    ``forced`` columns, typed by a ``--schema`` file, are not guessed)."""
    return dataclasses.replace(
        options, types_to_verify=True, forced=tuple(n for n in schema.names if n in forced)
    )


def with_types(
    schema: Schema,
    options: CsvPlanOptions,
    types: Mapping[str, ColumnType | None],
    evidence: dict[str, TypeTally],
    *,
    forced: tuple[str, ...],
    max_bad_fraction: float,
    log_notes: bool,
) -> FinalSchema:
    """The sample's ``schema`` with the types by all rows (but for the ``forced`` columns, a
    ``--schema`` file's), and ``options`` recording them: the evidence and a note per column
    whose non-numbers decided its type (logged with ``log_notes``)."""
    mbf = max_bad_fraction
    noted = {n: t for n, t in evidence.items() if n not in forced}
    if log_notes:
        for name, tally in noted.items():  # a --schema type is what it is: nothing to say
            level = logging.WARNING if tally.junk_numeric(mbf) else logging.INFO
            log.log(level, tally.note(name, mbf))
    options = dataclasses.replace(
        options,
        all_row_types=AllRowTypes(types, tuple(schema.null_values), TYPE_PASS_VERSION),
        type_evidence=evidence,
        type_notes=tuple(type_notes(noted, mbf)),
        types_to_verify=False,
        forced=(),
    )
    kept = {n: t for n, t in types.items() if n not in forced}
    final = apply_all_row_types(schema, {**kept, **{n: schema.column(n).type for n in forced}})
    return FinalSchema(final, options.to_dict())


def verify_types(
    layout: SourceLayout,
    pieces: list[Piece],
    counts: list[list[list[int]]],
    *,
    max_bad_fraction: float,
) -> FinalSchema | None:
    """The settle step's verdict on a CSV plan (``verify_plan_types`` of
    :mod:`shardtrain.data.sharding.settle`): with types to verify
    (:meth:`CsvSource.final_schema` guessed the sample's), the types by all rows from the
    tasks' counts (:func:`~.types.decide_types`, the type pass's rules), as a pass over the
    data would have found them; None when the plan's types are not a guess. The options are
    the plan's with the types by all rows recorded (:meth:`CsvSource.recall` takes them
    back)."""
    options = CsvPlanOptions.from_dict(layout.options)
    if not options.types_to_verify:
        return None
    evidence: dict[str, TypeTally] = {}
    width = len(layout.schema.columns)
    types = decide_types(
        pieces,
        [dense_counts(c, width, csv_types.N_CODES) for c in counts],
        layout.schema,
        options.dialect,
        max_bad_fraction=max_bad_fraction,
        found=evidence,
    )
    return with_types(
        layout.schema,
        options,
        types,
        evidence,
        forced=options.forced,
        max_bad_fraction=max_bad_fraction,
        log_notes=True,
    )


def plan_dialect(options: Mapping[str, Any]) -> CsvDialect:
    """The dialect a plan's options (or a :class:`PlanInputs`' options) read the files in."""
    return CsvPlanOptions.from_dict(options).dialect


__all__ = ["CsvSource", "plan_dialect", "verify_types", "with_types"]
