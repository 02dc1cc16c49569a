"""The JSON documents shardtrain reads back, and one check of each against its shape.

Every document a run reads that another run (or a person, or a full disk) may have written
wrong -- a dataset's ``metadata.json``, a sharding run's ``_plan.json``, task manifests and
worker summaries, a shard worker's report, the checkpoint, export and serving pointers
(``latest.json``), ``blessing.json``, ``shardtrain_model.json``, a step's pointer artifact --
is checked whole by :func:`check` as soon as it is parsed: every required field present,
every field (nested ones too: ``splits.train.shards[3].bytes``) of its type. A wrong one is
one line naming the file and the field, never a traceback deeper in::

    s3://b/quest/metadata.json: field 'splits' must be an object, not a string

A shape is made of :data:`STR`, :data:`INT`, :data:`NUM`, :data:`BOOL`, :data:`ANY`,
:class:`Nullable`, :class:`ListOf`, :class:`MapOf`, :class:`Pair` and :class:`Obj` (required
and optional fields; fields a shape does not name are allowed, so that a document written by a
later version still reads). The shapes of the documents are here too, one place for all of
them; the readers keep their own parsing (defaults, conversions), and their tests check that
what the writers write fits these shapes.

Why not ``jsonschema``: it is a development dependency only, its messages name JSON pointers
and schema keywords rather than a field and what it must be, and the shapes here need four
constructs. This module imports nothing but the standard library and :mod:`shardtrain.errors`,
so that every reader, down to the pipeline's pointer artifacts, can use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from shardtrain.errors import DataError


class DocumentError(DataError):
    """A document does not have its shape: the message names the file and the field.

    Attributes:
        where: the document's URI (or path).
        field: the field, as a path (``splits.train.shards[0].bytes``; ``""``: the whole
            document).
    """

    def __init__(self, message: str, where: str = "", field: str = ""):
        super().__init__(message)
        self.where = where
        self.field = field


class Shape:
    """What a JSON value must be. :meth:`problem` says what is wrong with a value."""

    @property
    def what(self) -> str:
        """How a message names a value of this shape (``an object``, ``a string``)."""
        return "a value"

    def problem(self, value: Any, path: str) -> tuple[str, str] | None:
        """``(field, what is wrong)`` for the first wrong field of ``value`` (at ``path``),
        None when it fits."""
        raise NotImplementedError


@dataclass(frozen=True)
class _Scalar(Shape):
    name: str
    types: tuple[type, ...]

    @property
    def what(self) -> str:
        return self.name

    def problem(self, value: Any, path: str) -> tuple[str, str] | None:
        # bool is an int to Python, never to a document.
        if isinstance(value, self.types) and (bool in self.types or not isinstance(value, bool)):
            return None
        return path, f"must be {self.what}, not {describe(value)}"


#: A string.
STR: Shape = _Scalar("a string", (str,))
#: An integer (not a boolean).
INT: Shape = _Scalar("an integer", (int,))
#: A number: an integer or a float (not a boolean).
NUM: Shape = _Scalar("a number", (int, float))
#: ``true`` or ``false``.
BOOL: Shape = _Scalar("true or false", (bool,))


@dataclass(frozen=True)
class _Any(Shape):
    def problem(self, value: Any, path: str) -> tuple[str, str] | None:
        return None


#: Anything (a field that must only be present).
ANY: Shape = _Any()


@dataclass(frozen=True)
class Nullable(Shape):
    """``shape`` or ``null``."""

    shape: Shape

    @property
    def what(self) -> str:
        return f"{self.shape.what} or null"

    def problem(self, value: Any, path: str) -> tuple[str, str] | None:
        return None if value is None else self.shape.problem(value, path)


class _Container(Shape):
    """A list or an object (:attr:`TYPE`, named :attr:`WHAT`) whose content
    :meth:`content_problem` checks."""

    TYPE: ClassVar[type]
    WHAT: ClassVar[str]

    @property
    def what(self) -> str:
        return self.WHAT

    def problem(self, value: Any, path: str) -> tuple[str, str] | None:
        if not isinstance(value, self.TYPE):
            return path, f"must be {self.WHAT}, not {describe(value)}"
        return self.content_problem(value, path)

    def content_problem(self, value: Any, path: str) -> tuple[str, str] | None:
        """As :meth:`problem`, for a ``value`` of the right type."""
        raise NotImplementedError


@dataclass(frozen=True)
class ListOf(_Container):
    """A list whose every item is ``item``."""

    item: Shape

    TYPE: ClassVar[type] = list
    WHAT: ClassVar[str] = "a list"

    def content_problem(self, value: Any, path: str) -> tuple[str, str] | None:
        return first_problem((self.item, v, f"{path}[{i}]") for i, v in enumerate(value))


@dataclass(frozen=True)
class Pair(Shape):
    """A list of exactly ``len(items)`` values, each of its shape (a tuple in JSON)."""

    items: tuple[Shape, ...]

    @property
    def what(self) -> str:
        return f"a list of {len(self.items)} values"

    def problem(self, value: Any, path: str) -> tuple[str, str] | None:
        if not isinstance(value, list) or len(value) != len(self.items):
            return path, f"must be {self.what} ({', '.join(s.what for s in self.items)}), not " + (
                f"a list of {len(value)}" if isinstance(value, list) else describe(value)
            )
        return first_problem(
            (shape, v, f"{path}[{i}]")
            for i, (shape, v) in enumerate(zip(self.items, value, strict=True))
        )


@dataclass(frozen=True)
class MapOf(_Container):
    """An object whose keys are any names and whose every value is ``value``."""

    value: Shape

    TYPE: ClassVar[type] = Mapping
    WHAT: ClassVar[str] = "an object"

    def content_problem(self, value: Any, path: str) -> tuple[str, str] | None:
        return first_problem((self.value, v, _join(path, str(k))) for k, v in value.items())


@dataclass(frozen=True)
class Obj(_Container):
    """An object with ``required`` fields and ``optional`` ones (checked when present and not
    null: a field a writer sets to null means "not set"); other fields are allowed."""

    required: Mapping[str, Shape] = field(default_factory=dict)
    optional: Mapping[str, Shape] = field(default_factory=dict)

    TYPE: ClassVar[type] = Mapping
    WHAT: ClassVar[str] = "an object"

    def content_problem(self, value: Any, path: str) -> tuple[str, str] | None:
        for name, shape in self.required.items():
            where = _join(path, name)
            if name not in value:
                return where, "is missing"
            if (found := shape.problem(value[name], where)) is not None:
                return found
        return first_problem(
            (shape, value[name], _join(path, name))
            for name, shape in self.optional.items()
            if value.get(name) is not None
        )


def first_problem(checks: Iterable[tuple[Shape, Any, str]]) -> tuple[str, str] | None:
    """The first problem of the ``(shape, value, path)`` checks, in their order (checked
    lazily: none after it); None when every value has its shape."""
    for shape, value, path in checks:
        if (found := shape.problem(value, path)) is not None:
            return found
    return None


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def describe(value: Any) -> str:
    """What a JSON value is, for a message: ``a string``, ``null``, ``a list``..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def problem(doc: Any, shape: Shape) -> tuple[str, str] | None:
    """``(field, what is wrong)`` of the first field of ``doc`` that does not fit ``shape``;
    None when it fits."""
    return shape.problem(doc, "")


def check(doc: Any, shape: Shape, where: str, hint: str = "") -> Any:
    """``doc`` (a parsed JSON document read from ``where``) when it has ``shape``.

    Args:
        doc: the parsed document.
        shape: what it must be.
        where: its URI or path, named by the message.
        hint: what gets out, appended to the message after ``; ``.

    Returns:
        ``doc``, unchanged.

    Raises:
        DocumentError: the first field that does not fit, e.g. ``s3://b/q/metadata.json:
            field 'splits' must be an object, not a string``.
    """
    found = shape.problem(doc, "")
    if found is None:
        return doc
    path, wrong = found
    if path:
        message = f"{where}: field '{path}' {wrong}"
    else:
        message = f"{where}: not {shape.what} ({describe(doc)})"
    raise DocumentError(f"{message}; {hint}" if hint else message, where, path)


# ------------------------------------------------------------------------------------------
# The documents
# ------------------------------------------------------------------------------------------

_COLUMN = Obj({"name": STR, "type": STR}, {"drop": BOOL})
_SCHEMA = Obj(
    {"columns": ListOf(_COLUMN), "label": STR},
    {"key": STR, "null_values": ListOf(STR)},
)
_SOURCE_FILE = Obj({"uri": STR, "size": INT, "version": STR})
_SHARD = Obj({"path": STR, "num_records": INT, "bytes": INT, "crc32c": STR})
_OPTIONAL_NUMBER = Nullable(NUM)
_HISTOGRAM = Obj({"edges": ListOf(NUM), "counts": ListOf(INT)})
_STATS_FIELDS: dict[str, Shape] = {
    "count": INT,
    "missing": INT,
    "nan": INT,
    "distinct": INT,
    "approximate": BOOL,
    "min": _OPTIONAL_NUMBER,
    "max": _OPTIONAL_NUMBER,
    "mean": _OPTIONAL_NUMBER,
    "std": _OPTIONAL_NUMBER,
    "m2": _OPTIONAL_NUMBER,
    "histogram": _HISTOGRAM,
    "top": ListOf(Obj({"value": ANY, "count": INT})),
}
#: A column's statistics (:mod:`shardtrain.data.statistics`): numeric, categorical, image.
_COLUMN_STATS = Obj({"kind": STR}, _STATS_FIELDS)
#: A numeric label's figures (``kind`` may be absent).
_LABEL_NUMBERS = Obj({}, _STATS_FIELDS)

#: A dataset's ``metadata.json`` (:class:`shardtrain.data.metadata.DatasetMetadata`).
METADATA = Obj(
    {
        "format": STR,
        "label": STR,
        "label_info": Obj({"type": STR, "task": STR, "classes": ListOf(ANY)}),
        "schema": _SCHEMA,
        "stats": Obj(
            {"columns": MapOf(_COLUMN_STATS)},
            {
                "label": Obj({}, {"missing": INT, "counts": MapOf(INT), "numeric": _LABEL_NUMBERS}),
                "num_rows": INT,
            },
        ),
        "rows_read": INT,
        "rows_accepted": INT,
        "rows_rejected": INT,
        "splits": MapOf(
            Obj(
                {"fraction": NUM, "num_records": INT, "shards": ListOf(_SHARD)},
                {"num_shards": INT, "bytes": INT},
            )
        ),
    },
    {
        "data_kind": STR,
        "tool_version": STR,
        "created": STR,
        "plan": STR,
        "key": STR,
        "rejects_by_reason": MapOf(INT),
        "blank_lines": INT,
        "rejects": STR,
        "compression": STR,
        "sources": ListOf(_SOURCE_FILE),
        "options": MapOf(ANY),
    },
)

_PIECE = Obj({"uri": STR, "start": INT, "end": INT}, {"gzip": BOOL})

#: A sharding run's ``_plan.json`` (:class:`shardtrain.data.sharding.plan.Plan`).
PLAN = Obj(
    {
        "format": STR,
        "fingerprint": STR,
        "sources": ListOf(_SOURCE_FILE),
        "schema": _SCHEMA,
        "splits": ListOf(Pair((STR, NUM))),
        "num_shards": ListOf(INT),
        "compression": STR,
        "options": MapOf(ANY),
        "estimated_rows": INT,
        "tasks": ListOf(
            Obj({"index": INT, "pieces": ListOf(_PIECE), "shard_ranges": ListOf(Pair((INT, INT)))})
        ),
    },
    {
        "histograms": MapOf(ListOf(NUM)),
        "settled": MapOf(ANY),
        "record_starts": MapOf(MapOf(INT)),
    },
)

_MANIFEST_FIELDS: dict[str, Shape] = {
    "plan": STR,
    "task": INT,
    "rows_read": INT,
    "rows_accepted": INT,
    "rows_rejected": INT,
    "rejects_by_reason": MapOf(INT),
    "blank_lines": INT,
    "pieces": ListOf(
        Obj(
            {"uri": STR, "start": INT, "end": INT},
            {"gzip": BOOL, "first": INT, "stop": INT, "lines": INT, "type_counts": ListOf(ANY)},
        )
    ),
    "shards": ListOf(Obj({"split": STR, "index": INT, **_SHARD.required})),
    "stats": MapOf(Obj({"kind": STR})),
    "label": MapOf(ANY),
}
_MANIFEST_OPTIONAL: dict[str, Shape] = {
    "max_bad_fraction": NUM,
    "top_k": INT,
    "bytes_read": INT,
    "seconds": NUM,
}

#: A task's manifest, ``_tasks/task-NNNNN.json``
#: (:func:`shardtrain.data.sharding.task.task_manifest`).
TASK_MANIFEST = Obj(_MANIFEST_FIELDS, _MANIFEST_OPTIONAL)

#: A worker's summary, ``_tasks/summary-IIIII-of-NNNNN.json``
#: (:mod:`shardtrain.data.sharding.summary`): its manifests carry no categorical statistics
#: (merged apart), so their ``stats`` is only a map.
WORKER_SUMMARY = Obj(
    {
        "version": INT,
        "plan": STR,
        "worker": INT,
        "num_workers": INT,
        "manifests": ListOf(Obj({**_MANIFEST_FIELDS, "stats": MapOf(ANY)}, _MANIFEST_OPTIONAL)),
        "categorical": MapOf(MapOf(ANY)),
        "histograms": MapOf(Obj({"count": INT, "nan": INT}, {"histogram": MapOf(ANY)})),
    }
)

#: A shard worker's report, a step output (:func:`shardtrain.kubeflow.shard_steps.shard_step`).
WORKER_REPORT = Obj(
    {"worker": INT, "status": STR},
    {
        "tasks_run": INT,
        "tasks_skipped": INT,
        "rows_read": INT,
        "bytes_read": INT,
        "seconds": NUM,
    },
)

#: What the settle step hands the finalize step
#: (:func:`~shardtrain.kubeflow.shard_steps.settle_step`).
SETTLED_HANDOVER = Obj({"dataset_uri": STR, "facts": MapOf(ANY), "report": STR})

#: ``MODEL_DIR/checkpoints/latest.json`` (:class:`shardtrain.train.checkpoints.CheckpointStore`).
CHECKPOINT_POINTER = Obj(
    {"step": INT, "prefix": STR, "files": ListOf(STR)},
    {
        "final": BOOL,
        "time": NUM,
        "history": ListOf(Obj({"step": INT, "files": ListOf(STR)})),
    },
)

#: ``MODEL_DIR/export/latest.json`` (:func:`shardtrain.train.export.latest_export`).
EXPORT_POINTER = Obj({"path": STR}, {"step": INT, "time": NUM})

#: ``SERVING_URI/latest.json``, the served model (:func:`shardtrain.train.blessing.find_baseline`):
#: a ``path`` or a ``version`` (older pointers) names its folder.
SERVING_POINTER = Obj({}, {"path": STR, "version": ANY, "step": INT, "source": STR})

#: ``MODEL_DIR/eval/blessing.json`` (:class:`shardtrain.train.blessing.Blessing`).
BLESSING = Obj(
    {"blessed": BOOL},
    {
        "summary": STR,
        "candidate": Obj({}, {"export": STR}),
        "baseline": Obj({}, {"version": ANY, "source": STR}),
    },
)

#: ``shardtrain_model.json`` beside an export (:func:`shardtrain.train.export.export_model`).
MODEL_INFO = Obj(
    {"inputs": ListOf(Obj({"input": STR, "column": STR}))},
    {
        "feature_spec": Obj(
            {},
            {"label": STR, "task": STR, "classes": ListOf(ANY)},
        ),
    },
)

#: ``MODEL_DIR/eval/metrics.json``, as the readers of its step use it.
METRICS = Obj({}, {"step": INT, "task": STR, "data_plan": STR})

#: A pipeline step's pointer artifact (:mod:`shardtrain.kubeflow.pointers`).
ARTIFACT_POINTER = Obj({"uri": STR})
