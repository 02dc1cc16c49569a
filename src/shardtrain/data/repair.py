"""How a damaged dataset gets out: the ``shardtrain shard ... --overwrite`` that shards it
again over itself, spelled once for every error that names it (a ``metadata.json`` that does
not read, a shard missing, cut short or failing its CRC-32C, found by ``inspect --verify``,
before training or during it).

``--overwrite`` rewrites a dataset whatever state it is in (:mod:`shardtrain.data.sharding`),
so the repair is the command that made the dataset, with ``--overwrite``: its inputs, label,
key and splits, and the layout options it recorded that differ from the defaults
(``--num-shards``, ``--record-format``, ``--compression``, the shard and task sizes, the CSV
dialect, an image manifest's column and ``--resize``), plus a ``--max-bad-fraction`` that
admits the share of rows the dataset rejected, so that the repair rebuilds the same layout and
does not fail where the first run passed. They come from ``metadata.json`` as parsed, however
damaged, else from the run's ``_plan.json``; what neither says is left as a placeholder
(``SOURCES``, ``LABEL``).

Reads documents only through :mod:`shardtrain.storage` and never raises on their content:
this module runs when something is already wrong.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from shardtrain import storage
from shardtrain.errors import ShardtrainError, StorageFullError, StorageUnavailableError

#: The splits ``shardtrain shard`` writes unless told otherwise (``--split``).
_DEFAULT_SPLITS = [["train", 0.9], ["eval", 0.1]]
#: The dataset's commit and the sharding run's plan beside it (``metadata.METADATA_NAME``,
#: ``sharding.plan.PLAN_NAME``: both import this module, not the other way round).
_METADATA_NAME = "metadata.json"
_PLAN_NAME = "_plan.json"
#: ``--max-bad-fraction``'s default (the repair command says more only when needed).
_DEFAULT_BAD_FRACTION = 0.001


def repair_command(uri: str, doc: Mapping[str, Any] | None = None) -> str:
    """``shardtrain shard <sources> --output <uri> <options> --overwrite``: the command that
    shards the dataset at ``uri`` again, over whatever is there (complete, half-written,
    damaged), as it was sharded.

    Args:
        uri: the dataset.
        doc: its ``metadata.json`` as parsed (``DatasetMetadata.to_dict()``, or the raw JSON of
            a damaged file); None reads what is there.
    """
    if not isinstance(doc, Mapping) or not doc:
        doc = _raw_record(uri)
    plan = _plan_if_readable(uri)
    found: dict[str, Any] = {}
    for source in (doc, plan):
        if isinstance(source, Mapping):
            for name, value in _run_facts(source).items():
                found.setdefault(name, value)
    words = ["shardtrain", "shard", *(found.get("sources") or ["SOURCES"])]
    words += ["--output", uri, "--label", found.get("label") or "LABEL"]
    if found.get("key"):
        words += ["--key", found["key"]]
    splits = found.get("splits")
    if splits and splits != _DEFAULT_SPLITS:
        words += ["--split", ",".join(f"{n}={f:g}" for n, f in splits)]
    if found.get("image"):
        words.append("--images")
    options = doc.get("options")
    if not isinstance(options, Mapping) and isinstance(plan, Mapping):
        options = plan.get("options")
    options = options if isinstance(options, Mapping) else {}
    image = bool(found.get("image")) or options.get("data_kind") == "image"
    words += [*_option_words(options, image), *_bad_fraction_words(doc)]
    return shlex.join([*words, "--overwrite"])


def repair_hint(uri: str, doc: Any = None) -> str:
    """What a damaged dataset's error says gets out: ``the dataset is damaged: shard it again
    with `shardtrain shard ... --overwrite```."""
    return f"the dataset is damaged: shard it again with `{repair_command(uri, doc)}`"


def _plan_if_readable(uri: str) -> Any:
    try:
        target = storage.join(uri, _PLAN_NAME)
        return storage.read_json(target) if storage.exists(target) else None
    except ShardtrainError:
        return None


def _run_facts(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The sources, label, key, splits and kind of data of a ``metadata.json`` or a
    ``_plan.json``, those that are readable."""
    facts: dict[str, Any] = {}
    sources = doc.get("sources")
    if isinstance(sources, list) and sources:
        uris = [s.get("uri") for s in sources if isinstance(s, Mapping)]
        if all(isinstance(u, str) for u in uris) and len(uris) == len(sources):
            facts["sources"] = uris
    schema: Mapping[str, Any] = doc["schema"] if isinstance(doc.get("schema"), Mapping) else {}
    for name in ("label", "key"):
        for value in (doc.get(name), schema.get(name)):
            if isinstance(value, str) and value:
                facts.setdefault(name, value)
    splits = doc.get("splits")
    if isinstance(splits, Mapping):  # metadata.json: {name: {"fraction": ...}}
        splits = [[n, s.get("fraction")] for n, s in splits.items() if isinstance(s, Mapping)]
    if isinstance(splits, list) and all(
        isinstance(s, list) and len(s) == 2 and isinstance(s[0], str) and _is_number(s[1])
        for s in splits
    ):
        facts["splits"] = [list(s) for s in splits] or None
    options: Mapping[str, Any] = doc["options"] if isinstance(doc.get("options"), Mapping) else {}
    if doc.get("data_kind", options.get("data_kind")) == "image":
        facts["image"] = True
    return facts


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _raw_record(uri: str) -> dict[str, Any]:
    """``metadata.json``'s JSON object if it parses as one, else ``{}`` (storage that is away
    or full is raised: that is not a damaged dataset)."""
    try:
        doc = storage.read_json_if_exists(storage.join(uri, _METADATA_NAME))
    except (StorageUnavailableError, StorageFullError):
        raise
    except ShardtrainError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _option_words(options: Mapping[str, Any], image: bool) -> list[str]:
    """Flags for the recorded layout options that differ from what the defaults give (none
    when no options are recorded)."""
    if not options:
        return []
    from shardtrain.data.shard_config import ShardConfig
    from shardtrain.options import options as config_options

    by_field = {opt.path: opt for opt in config_options(ShardConfig)}
    words: list[str] = []

    def flag(name: str, value: Any) -> None:
        opt = by_field[name]
        user = opt.to_user(value)
        if isinstance(user, bool):
            words.extend([opt.flag] if user else [])
        elif isinstance(user, (list, tuple)):
            words.extend([opt.flag, ",".join(map(str, user))])
        elif isinstance(user, float):  # MB of a byte count: the shortest text giving it back
            texts = (f"{user:.{n}g}" for n in range(1, 18))
            words.extend([opt.flag, next(t for t in texts if opt.value(float(t)) == value)])
        else:
            words.extend([opt.flag, str(user)])

    layout = options.get("image", {}) if image else {}
    layout = layout if isinstance(layout, Mapping) else {}
    if image and isinstance(layout.get("image_column"), str):
        flag("image_column", layout["image_column"])
    resize = layout.get("resize")
    if image and isinstance(resize, list) and len(resize) == 2:
        words.extend(["--resize", f"{resize[0]}x{resize[1]}"])
    record_format = options.get("record_format", "example")
    if record_format in ("example", "columnar") and record_format != (
        "example" if image else "columnar"
    ):
        flag("record_format", record_format)
    compression = str(options.get("compression", "")).lower()
    if compression in ("gzip", "none") and compression != (
        "none" if record_format == "columnar" else "gzip"
    ):
        flag("compression", compression)
    for name in ("num_shards", "target_shard_bytes", "min_shards", "task_bytes"):
        value = options.get(name)
        if type(value) is int and value != by_field[name].default:
            flag(name, value)
    dialect = options.get("csv_dialect")
    if isinstance(dialect, Mapping):
        _dialect_flags(dialect, flag)
    return words


def _dialect_flags(dialect: Mapping[str, Any], flag: Callable[[str, Any], None]) -> None:
    """``flag`` each CSV dialect option that differs from the defaults (a detected ``,`` is
    left to be detected again)."""
    if dialect.get("delimiter") not in (None, ","):
        flag("delimiter", dialect["delimiter"])
    if dialect.get("quote_char", '"') != '"':
        flag("quote_char", dialect["quote_char"])
    if dialect.get("escape_char") is not None:
        flag("escape_char", dialect["escape_char"])
    if dialect.get("encoding", "utf-8") not in ("utf-8", "utf8"):
        flag("encoding", dialect["encoding"])
    if dialect.get("header") is False:
        flag("no_header", True)
    if isinstance(dialect.get("columns"), list):
        flag("columns", tuple(dialect["columns"]))
    if isinstance(dialect.get("null_values"), list):
        flag("null_values", tuple(dialect["null_values"]))
    if dialect.get("skip_initial_space"):
        flag("skip_initial_space", True)
    if dialect.get("decimal", ".") != ".":
        flag("decimal", dialect["decimal"])


def _bad_fraction_words(raw: Mapping[str, Any]) -> list[str]:
    """``--max-bad-fraction`` when the dataset rejected more rows than the default allows
    (the run's own value is not recorded; this is the recorded share, rounded up)."""
    read, rejected = raw.get("rows_read"), raw.get("rows_rejected")
    if not isinstance(read, int) or not isinstance(rejected, int) or read <= 0:
        return []
    share = rejected / read
    if share <= _DEFAULT_BAD_FRACTION:
        return []
    digits = max(0, 1 - math.floor(math.log10(share)))  # two significant digits
    return ["--max-bad-fraction", f"{math.ceil(share * 10**digits) / 10**digits:g}"]
