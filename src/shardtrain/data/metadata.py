"""``metadata.json``: the contract between sharding and training, typed.

A sharded dataset is committed by writing ``URI/metadata.json`` last (see
:mod:`shardtrain.data.sharding`). Everything downstream — the trainer's inputs and model
(:mod:`shardtrain.train.features`, :mod:`shardtrain.train.dataset`), ``shardtrain inspect``,
the pipeline's report — reads the dataset through :class:`DatasetMetadata`, the one reader and
writer of that file::

    meta = DatasetMetadata.load("s3://bucket/quest")      # NotCommittedError if unfinished
    meta.splits["train"].num_records, meta.label_info.classes, meta.schema.features
    meta.shard_uris("s3://bucket/quest", "eval")

The file carries a format tag, :data:`FORMAT` (``.../v1``). Fields added later are optional
when reading, so every file written since v1 reads back; a file of an unknown format is refused
with one line naming it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from shardtrain import documents, storage
from shardtrain.data.repair import repair_hint
from shardtrain.data.schema import TYPE_NOTES_OPTION, Schema
from shardtrain.data.sources.base import SourceFile
from shardtrain.errors import DataError, ShardtrainError, StorageError, one_line

METADATA_NAME = "metadata.json"
#: The format tag of ``metadata.json`` (and of ``_plan.json``).
FORMAT = "shardtrain.dataset/v1"
#: Formats this version reads.
READABLE_FORMATS = (FORMAT,)


@dataclass(frozen=True)
class ShardInfo:
    """One committed shard: its path relative to the dataset, records, bytes and CRC-32C
    (of the file's bytes, as 8 hex digits)."""

    path: str
    num_records: int
    bytes: int
    crc32c: str

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ShardInfo:
        return cls(
            path=d["path"], num_records=d["num_records"], bytes=d["bytes"], crc32c=d["crc32c"]
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "num_records": self.num_records,
            "bytes": self.bytes,
            "crc32c": self.crc32c,
        }


@dataclass(frozen=True)
class SplitInfo:
    """One split (``train``, ``eval``, ...): its fraction of the rows and its shards."""

    fraction: float
    num_records: int
    num_shards: int
    bytes: int
    shards: tuple[ShardInfo, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "fraction": self.fraction,
            "num_records": self.num_records,
            "num_shards": self.num_shards,
            "bytes": self.bytes,
            "shards": [s.to_dict() for s in self.shards],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SplitInfo:
        shards = tuple(ShardInfo.from_dict(s) for s in d["shards"])
        return cls(
            fraction=d["fraction"],
            num_records=d["num_records"],
            num_shards=d.get("num_shards", len(shards)),
            bytes=d.get("bytes", sum(s.bytes for s in shards)),
            shards=shards,
        )


@dataclass(frozen=True)
class LabelInfo:
    """The label's type, the task ``--task auto`` makes of it (``binary``, ``multiclass`` or
    ``regression``: :mod:`shardtrain.data.task`) and its distinct values (as strings, sorted
    numerically where they are numbers; empty when there are too many to count)."""

    type: str
    task: str
    classes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "task": self.task, "classes": list(self.classes)}


#: A label class is rare -- warned about at finalize and shown by ``inspect`` -- when it holds
#: less than :data:`RARE_CLASS_SHARE` of the rows, or fewer than :data:`RARE_CLASS_ROWS` of a
#: label with at least :data:`RARE_CLASS_MIN_TOTAL` rows (in a smaller file every class is
#: small): too few to learn, and often a stray value (a typo, a corrupt field), not a class.
RARE_CLASS_SHARE = 0.001
RARE_CLASS_ROWS = 10
RARE_CLASS_MIN_TOTAL = 1000


def rare_classes_note(label: str, counts: Mapping[str, int]) -> str | None:
    """One line naming the label's rare classes, e.g. ``label 'cleared': 1 rare class: '12abc'
    (1 of 49,978 rows, 0.002%); too few to learn; a stray value?``; None when it has none
    (or one class)."""
    total = sum(counts.values())
    if len(counts) < 2 or not total:
        return None
    rows = RARE_CLASS_ROWS if total >= RARE_CLASS_MIN_TOTAL else 0
    rare = [(k, n) for k, n in counts.items() if n < max(rows, RARE_CLASS_SHARE * total)]
    if not rare:
        return None
    shown = ", ".join(f"'{k}' ({n:,} of {total:,} rows, {n / total:.3%})" for k, n in rare[:5])
    more = f" and {len(rare) - 5} more" if len(rare) > 5 else ""
    return (
        f"label '{label}': {len(rare)} rare class{'es' if len(rare) > 1 else ''} "
        f"(under {RARE_CLASS_SHARE:.1%} of the rows or {RARE_CLASS_ROWS} rows): {shown}{more}; "
        "too few to learn; a stray value?"
    )


@dataclass(frozen=True)
class DatasetStats:
    """Statistics of the accepted rows.

    Attributes:
        columns: per feature column, what :mod:`shardtrain.data.statistics` writes: ``kind``
            (``numeric``, ``categorical``, ``image``) and its figures (count, missing, min,
            max, mean, std; top values; image sizes and formats).
        label: the label's distribution (:class:`~shardtrain.data.statistics.LabelStats`):
            ``{"counts": {value: n}, "missing": n}``, ``"many_values": true`` instead of the
            counts past 1,000 distinct values, and ``"numeric"`` (count, min, max, mean, std)
            for a numeric label.
        num_rows: accepted rows.
    """

    columns: dict[str, dict[str, Any]]
    label: dict[str, Any]
    num_rows: int

    def to_dict(self) -> dict[str, Any]:
        return {"columns": self.columns, "label": self.label, "num_rows": self.num_rows}


@dataclass(frozen=True)
class DatasetMetadata:
    """The committed description of a sharded dataset (``metadata.json``).

    Attributes:
        data_kind: ``tabular`` (CSV) or ``image``.
        tool_version: the shardtrain version that wrote it; ``created``: when (UTC, ISO 8601).
        plan: the fingerprint of the plan the shards were written by.
        label, key: the label column and the split-key column (None: whole rows were hashed).
        label_info: the label's type, task and classes.
        schema: every column with its type, in source order (dropped ones included).
        stats: statistics of the accepted rows.
        rows_read, rows_accepted, rows_rejected: ``read == accepted + rejected``.
        rejects_by_reason: rejected rows per reason (``bad_value``, ``wrong_field_count``, ...).
        blank_lines: blank lines skipped (neither rows nor rejects).
        rejects: the rejects file, relative to the dataset URI.
        compression: ``GZIP`` or ``NONE`` (TensorFlow's names).
        splits: the splits in order, with their shards.
        sources: the input files with the sizes and versions they had.
        options: the layout options of the run (part of the plan's fingerprint).
    """

    tool_version: str
    created: str
    plan: str
    label: str
    key: str | None
    label_info: LabelInfo
    schema: Schema
    stats: DatasetStats
    rows_read: int
    rows_accepted: int
    rows_rejected: int
    rejects_by_reason: dict[str, int]
    rejects: str
    compression: str
    splits: dict[str, SplitInfo]
    sources: tuple[SourceFile, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    blank_lines: int = 0
    data_kind: str = "tabular"
    format: str = FORMAT

    @property
    def record_format(self) -> str:
        """``example`` (one ``tf.train.Example`` per row) or ``columnar`` (one per block of
        rows: :mod:`shardtrain.data.column_blocks`); from ``options``, ``example`` if absent."""
        return str(self.options.get("record_format", "example"))

    @property
    def is_image(self) -> bool:
        return self.data_kind == "image"

    @property
    def type_notes(self) -> tuple[str, ...]:
        """What typing by all rows decided for columns of numbers holding values that are not
        numbers, one line per column (see :meth:`~shardtrain.data.schema.TypeTally.note`)."""
        return tuple(str(n) for n in self.options.get(TYPE_NOTES_OPTION, ()))

    @property
    def rare_classes(self) -> str | None:
        """One line naming the label's rare classes (:func:`rare_classes_note`), if any; a
        regression label has values, not classes, so never any."""
        if self.label_info.task == "regression":
            return None
        return rare_classes_note(self.label, self.stats.label.get("counts", {}))

    def split(self, name: str, uri: str = "dataset") -> SplitInfo:
        """The split called ``name``.

        Raises:
            ShardtrainError: the dataset at ``uri`` has no such split.
        """
        if name not in self.splits:
            raise ShardtrainError(f"{uri}: no split '{name}' (splits: {', '.join(self.splits)})")
        return self.splits[name]

    def shard_uris(self, uri: str, split: str) -> list[str]:
        """Absolute URIs of the shards of one split of the dataset at ``uri``."""
        return [storage.join(uri, s.path) for s in self.split(split, uri).shards]

    def iter_rejects(self, uri: str, limit: int = 10) -> Iterator[dict[str, Any]]:
        """The first ``limit`` rejected rows of the dataset at ``uri``."""
        if not self.rows_rejected:
            return
        with storage.open(storage.join(uri, self.rejects), "r") as f:
            for i, line in enumerate(f):
                if i >= limit:
                    return
                yield json.loads(line)

    # ----------------------------------------------------------------------------------------
    # The file
    # ----------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``metadata.json`` (keys in the order the file has always had)."""
        return {
            "format": self.format,
            **({"data_kind": self.data_kind} if self.data_kind != "tabular" else {}),
            "tool_version": self.tool_version,
            "created": self.created,
            "plan": self.plan,
            "label": self.label,
            "key": self.key,
            "label_info": self.label_info.to_dict(),
            "schema": self.schema.to_dict(),
            "stats": self.stats.to_dict(),
            "rows_read": self.rows_read,
            "rows_accepted": self.rows_accepted,
            "rows_rejected": self.rows_rejected,
            "rejects_by_reason": dict(self.rejects_by_reason),
            "blank_lines": self.blank_lines,
            "rejects": self.rejects,
            "compression": self.compression,
            "splits": {name: s.to_dict() for name, s in self.splits.items()},
            "sources": [{"uri": s.uri, "size": s.size, "version": s.version} for s in self.sources],
            "options": self.options,
        }

    @classmethod
    def from_dict(
        cls, d: Mapping[str, Any], where: str = "metadata.json", hint: str = ""
    ) -> DatasetMetadata:
        """Read the JSON of ``metadata.json``, checked whole first
        (:data:`shardtrain.documents.METADATA`).

        Args:
            d: the parsed file.
            where: its URI, named by errors.
            hint: what gets out of a damaged file
                (:func:`~shardtrain.data.repair.repair_hint`), added to errors.

        Raises:
            DataError: not a shardtrain dataset, an unknown format, a required field missing
                or a field of the wrong type (:class:`~shardtrain.documents.DocumentError`);
                the message names ``where`` and the field.
        """
        fmt = d.get("format") if isinstance(d, Mapping) else None
        if fmt not in READABLE_FORMATS:
            raise DataError(
                f"{where}: not a shardtrain dataset of a known format "
                f"(format {fmt!r}; this version reads {', '.join(READABLE_FORMATS)})"
                + (f"; {hint}" if hint else "")
            )
        documents.check(d, documents.METADATA, where, hint)
        try:
            stats = d["stats"]
            info = d["label_info"]
            return cls(
                format=fmt,
                data_kind=d.get("data_kind", "tabular"),
                tool_version=d.get("tool_version", ""),
                created=d.get("created", ""),
                plan=d.get("plan", ""),
                label=d["label"],
                key=d.get("key"),
                label_info=LabelInfo(
                    type=info["type"],
                    task=info["task"],
                    classes=tuple(str(c) for c in info["classes"]),
                ),
                schema=Schema.from_dict(d["schema"]),
                stats=DatasetStats(
                    columns=dict(stats["columns"]),
                    label=dict(stats.get("label", {})),
                    num_rows=stats.get("num_rows", d["rows_accepted"]),
                ),
                rows_read=d["rows_read"],
                rows_accepted=d["rows_accepted"],
                rows_rejected=d["rows_rejected"],
                rejects_by_reason=dict(d.get("rejects_by_reason", {})),
                blank_lines=d.get("blank_lines", 0),
                rejects=d.get("rejects", "rejects/rejects.jsonl"),
                compression=d.get("compression", "NONE"),
                splits={name: SplitInfo.from_dict(s) for name, s in d["splits"].items()},
                sources=tuple(
                    SourceFile(uri=s["uri"], size=s["size"], version=s["version"])
                    for s in d.get("sources", ())
                ),
                options=dict(d.get("options", {})),
            )
        except (KeyError, TypeError, ValueError, ShardtrainError) as exc:
            # What the shape leaves to the dataclasses: a column's unknown field, a schema
            # whose label is not one of its columns.
            raise DataError(
                f"{where}: not a shardtrain dataset's metadata ({one_line(exc)})"
                + (f"; {hint}" if hint else "")
            ) from exc

    @classmethod
    def load(cls, uri: str) -> DatasetMetadata:
        """The committed metadata of the dataset at ``uri``.

        Raises:
            NotCommittedError: the dataset is not complete (metadata.json missing).
            DataError: the file is not a shardtrain dataset's metadata (not JSON, not an
                object, a field missing or mistyped); the message says which command shards
                the dataset again over it (:func:`~shardtrain.data.repair.repair_hint`).
        """
        target = storage.join(uri, METADATA_NAME)
        try:
            doc = storage.read_committed(uri, name=METADATA_NAME)
        except StorageError as exc:
            if not _unreadable(exc):
                raise
            raise DataError(f"{exc}; {repair_hint(uri)}") from exc
        try:
            return cls.from_dict(doc, target)
        except DataError as exc:
            raise DataError(f"{exc}; {repair_hint(uri, doc)}") from exc

    def publish(self, uri: str) -> None:
        """Write ``metadata.json`` at ``uri``: the dataset's commit (see
        :func:`shardtrain.storage.publish`)."""
        storage.publish(uri, self.to_dict(), name=METADATA_NAME)


def _unreadable(exc: StorageError) -> bool:
    """Whether a read of a document failed on its content (not JSON, not an object), not on
    the storage (see :func:`shardtrain.storage.read_committed`)."""
    return "not valid JSON" in str(exc) or "is not a JSON object" in str(exc)
