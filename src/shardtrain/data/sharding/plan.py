"""The plan of a sharding run: sources, schema, shard counts and tasks, identical on every
worker.

:func:`build_plan` asks the run's source what there is (:meth:`Source.plan_inputs`), chooses
the number of shards per split (``num_shards``, or about ``target_shard_bytes`` each and never
fewer than ``min_shards``) and cuts the input into *tasks*: runs of byte-range pieces of about
``task_bytes``. Each task owns a fixed range of shard indices of every split, so the layout
does not depend on how many workers run. The plan is stored as ``_plan.json``; its fingerprint
(a hash of everything that shapes the output) tells a resumed run from a different one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import zlib
from dataclasses import asdict, dataclass
from typing import Any

from shardtrain import documents, storage
from shardtrain.data import column_blocks, examples, task_rule
from shardtrain.data.histogram import HistogramBins, plan_bins
from shardtrain.data.metadata import FORMAT
from shardtrain.data.schema import Schema
from shardtrain.data.shard_config import ShardConfig
from shardtrain.data.sources.base import Piece, PlanInputs, SourceFile, SourceLayout, plan_pieces
from shardtrain.data.sources.csv.plan_options import VERIFY_TYPES_OPTION
from shardtrain.data.sources.jsonl import VERIFY_TYPES_OPTION as VERIFY_JSONL_TYPES_OPTION
from shardtrain.errors import ShardtrainError

PLAN_NAME = "_plan.json"

#: At most this many shards of one split are written by one task (bounds open uploads).
MAX_SHARDS_PER_TASK = task_rule.MAX_SHARDS_PER_TASK


@dataclass(frozen=True)
class Task:
    """A unit of work: consecutive pieces of input and the shard indices they fill."""

    index: int
    pieces: tuple[Piece, ...]
    #: For each split (in plan order): [first, end) of the global shard indices it writes.
    shard_ranges: tuple[tuple[int, int], ...]

    @property
    def input_bytes(self) -> int:
        return sum(p.end - p.start for p in self.pieces)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "pieces": [p.to_dict() for p in self.pieces],
            "shard_ranges": [list(r) for r in self.shard_ranges],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Task:
        return cls(
            index=d["index"],
            pieces=tuple(Piece.from_dict(p) for p in d["pieces"]),
            shard_ranges=tuple((a, b) for a, b in d["shard_ranges"]),
        )


#: Plan options added after datasets without them were written, which change how the shards
#: are laid out but not what they hold: ``row_order`` (columnar blocks in hash order, read
#: without a per-row permutation; absent: source order, read permuted). A *complete* dataset
#: whose plan differs only by them is kept as it is (see ``sharding.run``).
LATER_OPTIONS = ("row_order",)

#: Plan options of earlier versions that said where the planner cut the files, not what the
#: shards hold: ``csv_record_starts`` (CSV pieces were moved to record starts while
#: planning, by reading the files). See :meth:`Plan.same_but_alignment`.
ALIGNMENT_OPTIONS = ("csv_record_starts",)


@dataclass(frozen=True)
class Plan:
    """The deterministic layout of a sharding run; identical on every worker."""

    output: str
    sources: tuple[SourceFile, ...]
    schema: Schema
    splits: tuple[tuple[str, float], ...]
    num_shards: tuple[int, ...]  # per split
    tasks: tuple[Task, ...]
    compression: str
    options: dict[str, Any]
    estimated_rows: int
    fingerprint: str = ""
    #: The histogram bins of the numeric columns, label included
    #: (:mod:`shardtrain.data.histogram`), chosen from the planning sample. Not part of the
    #: fingerprint: they follow from the inputs, which it covers, and shape the statistics
    #: only, never the shards, so a dataset written before histograms existed is still the
    #: same dataset (complete: kept; half-written: resumed, its columns then without
    #: histograms, see ``NumericStats.merge``).
    histograms: dict[str, HistogramBins] = dataclasses.field(default_factory=dict)
    #: What the settle step (:mod:`.settle`) found out once every task was done, added to
    #: the dataset's options in ``metadata.json`` (for CSV whose types were the sample's
    #: guess: the types by all rows and their notes). Not part of the fingerprint: settling
    #: a plan whose guess held does not change what its tasks wrote.
    settled: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Per URI, ``{piece start: start of its first record}`` for the pieces whose reader
    #: guessed wrong where their first record begins (found by
    #: :func:`~shardtrain.data.sharding.alignment.settle_alignment` once every piece was
    #: read; the tasks read those pieces from there). Not part of the fingerprint: the
    #: pieces, hence the shards of a correct reading, stay the same, so the tasks that read
    #: right stay committed.
    record_starts: dict[str, dict[int, int]] = dataclasses.field(default_factory=dict)

    def shard_path(self, split_index: int, shard: int) -> str:
        """Path of a shard relative to the dataset URI."""
        name, _ = self.splits[split_index]
        total = self.num_shards[split_index]
        ext = ".tfrecord.gz" if self.compression == "gzip" else ".tfrecord"
        return f"{name}/part-{shard:05d}-of-{total:05d}{ext}"

    @property
    def layout(self) -> SourceLayout:
        """What the source's readers need from the plan."""
        return SourceLayout(self.sources, self.schema, self.options, self.record_starts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "fingerprint": self.fingerprint,
            "sources": [asdict(s) for s in self.sources],
            "schema": self.schema.to_dict(),
            "splits": [list(s) for s in self.splits],
            "num_shards": list(self.num_shards),
            "compression": self.compression,
            "options": self.options,
            "estimated_rows": self.estimated_rows,
            "tasks": [t.to_dict() for t in self.tasks],
            "histograms": {name: b.to_list() for name, b in self.histograms.items()},
            **({"settled": self.settled} if self.settled else {}),
            **(
                {
                    "record_starts": {
                        uri: {str(o): s for o, s in sorted(starts.items())}
                        for uri, starts in self.record_starts.items()
                    }
                }
                if self.record_starts
                else {}
            ),
        }

    def fingerprinted(self) -> Plan:
        """This plan with its fingerprint: a hash of everything but the fingerprint (and
        the histogram bins and the record starts, see :attr:`histograms`,
        :attr:`record_starts`)."""
        payload = self.to_dict()
        payload.pop("fingerprint")
        payload.pop("histograms")
        payload.pop("settled", None)
        payload.pop("record_starts", None)
        return Plan(**{**self.__dict__, "fingerprint": _fingerprint(payload)})

    def earlier_fingerprint(self) -> str | None:
        """The fingerprint this plan had before its :data:`LATER_OPTIONS` existed (None if it
        has none of them): what a dataset written by an earlier version carries."""
        if not any(k in self.options for k in LATER_OPTIONS):
            return None
        options = {k: v for k, v in self.options.items() if k not in LATER_OPTIONS}
        return Plan(**{**self.__dict__, "options": options}).fingerprinted().fingerprint

    def same_but_alignment(self, stored: dict[str, Any]) -> bool:
        """Whether a stored plan (``_plan.json``) was made by an earlier version from the
        same inputs and options as this one, its CSV pieces cut at record starts found while
        planning (:data:`ALIGNMENT_OPTIONS`): the same dataset, its rows spread over the
        shards by other tasks. Compared: sources, schema, splits, shard counts, compression
        and the other options (:data:`LATER_OPTIONS` aside)."""
        options = stored.get("options")
        if not isinstance(options, dict) or not any(k in options for k in ALIGNMENT_OPTIONS):
            return False
        ignored = (*ALIGNMENT_OPTIONS, *LATER_OPTIONS)

        def essence(d: dict[str, Any]) -> str:
            kept = {k: d.get(k) for k in ("sources", "schema", "splits", "num_shards")}
            kept["compression"] = d.get("compression")
            kept["options"] = {k: v for k, v in d.get("options", {}).items() if k not in ignored}
            return json.dumps(kept, sort_keys=True)

        return essence(stored) == essence(self.to_dict())

    @classmethod
    def from_dict(cls, output: str, d: dict[str, Any]) -> Plan:
        return cls(
            output=output,
            sources=tuple(SourceFile(**s) for s in d["sources"]),
            schema=Schema.from_dict(d["schema"]),
            splits=tuple((n, f) for n, f in d["splits"]),
            num_shards=tuple(d["num_shards"]),
            tasks=tuple(Task.from_dict(t) for t in d["tasks"]),
            compression=d["compression"],
            options=d["options"],
            estimated_rows=d["estimated_rows"],
            fingerprint=d["fingerprint"],
            histograms={
                name: HistogramBins.from_list(b) for name, b in d.get("histograms", {}).items()
            },
            settled=dict(d.get("settled") or {}),
            record_starts={
                uri: {int(o): int(s) for o, s in starts.items()}
                for uri, starts in d.get("record_starts", {}).items()
            },
        )


def _fingerprint(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def _output_ratio(
    inputs: PlanInputs,
    schema: Schema,
    gzip_level: int | None,
    record_format: str = column_blocks.EXAMPLE,
) -> float:
    """Bytes of (compressed) TFRecords per input byte: the source's figure, or measured by
    encoding its sample in the run's record format (columnar blocks are ~5x smaller than
    per-row Examples uncompressed: sizing them from per-row bytes made shards ~5x smaller
    than ``--target-shard-mb``)."""
    if inputs.output_ratio is not None:
        return inputs.output_ratio
    if inputs.sample is None or inputs.sample.num_rows == 0 or not inputs.sample_bytes:
        return 2.0
    sample = inputs.sample
    if record_format == column_blocks.COLUMNAR:
        framed, _ = column_blocks.encode_blocks(sample, schema, [(0, sample.num_rows)])
    else:
        framed, _ = examples.encode(sample, schema, framed=True)
    out = len(framed)
    if gzip_level is not None:
        # zlib whatever compresses the shards: the estimate sets the shard counts, which are
        # part of the plan, so it must not depend on whether isal is installed.
        out = len(zlib.compress(framed.tobytes(), gzip_level))
    return max(out / inputs.sample_bytes, 0.01)


def build_plan(config: ShardConfig, stored: dict[str, Any] | None = None) -> Plan:
    """List sources, settle the schema and lay out shards and tasks. Deterministic.

    ``stored``: the plan the source may take what it found from (:meth:`Source.recall`);
    None: the one stored at the output, if any.

    Raises:
        DataError: no sources match, a source is empty/unreadable, the label is missing.
        ConfigError: a schema file or an option is invalid.
    """
    source = config.source()
    if stored is None:
        stored = _stored_plan(config.output)
    source.recall(stored)
    inputs = source.plan_inputs()
    sources, schema, input_bytes = inputs.sources, inputs.schema, inputs.input_bytes
    ratio = _output_ratio(
        inputs, schema, config.compression_level if config.gzip else None, config.record_format
    )
    estimated_rows = inputs.estimated_rows

    num_shards, n_tasks = task_rule.counts(config, input_bytes, ratio)
    plain_bytes = sum(s.size for s in sources if not s.gzip)
    piece_bytes = task_rule.piece_bytes(plain_bytes, n_tasks)
    aligned = source.align_pieces(plan_pieces(sources, piece_bytes), inputs)
    pieces = aligned.pieces
    final = source.final_schema(pieces, dataclasses.replace(inputs, options=aligned.options))
    schema = final.schema  # e.g. CSV types by all rows
    n_tasks = min(n_tasks, len(pieces))
    groups = _group_pieces(pieces, n_tasks)
    tasks = tuple(
        Task(
            index=t,
            pieces=tuple(group),
            shard_ranges=tuple((m * t // n_tasks, m * (t + 1) // n_tasks) for m in num_shards),
        )
        for t, group in enumerate(groups)
    )
    options = {**config.plan_options(), **final.options}
    # The label's distribution is compared too (a regression label by its histogram).
    binned = {c.name: c.type for c in (*schema.features, schema.column(schema.label))}
    plan = Plan(
        output=config.output,
        sources=tuple(sources),
        schema=schema,
        splits=config.splits,
        num_shards=tuple(num_shards),
        tasks=tasks,
        compression=config.compression,
        options=options,
        estimated_rows=estimated_rows,
        histograms=plan_bins(binned, inputs.sample),
    ).fingerprinted()
    if stored is not None and stored.get("fingerprint") == plan.fingerprint:
        # The same plan: keep what running and settling it found (the record starts, the
        # types by all rows of a guess that held).
        with contextlib.suppress(KeyError, TypeError, ValueError, AttributeError):
            found = Plan.from_dict(config.output, stored)
            plan = dataclasses.replace(
                plan, record_starts=found.record_starts, settled=found.settled
            )
    return plan


#: The plan option of a guess its tasks check, which the settle step decides
#: (:mod:`.settle`): CSV types by the sample (see ``CsvPlanOptions.types_to_verify``), JSON
#: lines' (see ``jsonl.VERIFY_TYPES_OPTION``).
GUESS_OPTIONS = (VERIFY_TYPES_OPTION, VERIFY_JSONL_TYPES_OPTION)


def needs_settling(plan: Plan) -> bool:
    """Whether ``plan`` holds a guess (:data:`GUESS_OPTIONS`) no settle step has decided."""
    return not plan.settled and any(plan.options.get(k) for k in GUESS_OPTIONS)


def _stored_plan(output: str) -> dict[str, Any] | None:
    """The plan stored at ``output`` by an earlier run or another worker, if any and readable
    and of a plan's shape (a source may take what it found from it; see
    :meth:`Source.recall`)."""
    uri = storage.join(output, PLAN_NAME)
    try:
        doc = storage.read_json(uri) if storage.exists(uri) else None
        return documents.check(doc, documents.PLAN, uri) if doc is not None else None
    except (ShardtrainError, ValueError):
        return None


def _group_pieces(pieces: list[Piece], n_tasks: int) -> list[list[Piece]]:
    """Split pieces, in order, into ``n_tasks`` non-empty runs of about equal bytes."""
    total = sum(p.end - p.start for p in pieces) or 1
    groups: list[list[Piece]] = [[] for _ in range(n_tasks)]
    t, acc = 0, 0
    for i, piece in enumerate(pieces):
        remaining_pieces = len(pieces) - i
        remaining_tasks = n_tasks - t
        # Move on when this task has its share, or when every later task needs a piece.
        if (
            groups[t]
            and t < n_tasks - 1
            and (acc >= total * (t + 1) / n_tasks or remaining_pieces <= remaining_tasks - 1)
        ):
            t += 1
        groups[t].append(piece)
        acc += piece.end - piece.start
    return groups
