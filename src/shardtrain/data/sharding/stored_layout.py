"""A dataset at the output written per row when per-row Examples were the default: kept so.

``--record-format auto`` (the default) means columnar blocks for tabular data; it meant
one ``tf.train.Example`` per row before. Re-running a command that gave neither
``--record-format`` nor ``--compression`` into an output that holds such a per-row dataset
would plan columnar blocks, which are another layout: its plan's fingerprint would differ and
the run would fail as "sharded from other inputs or options", although the command is the
same. :func:`keep_stored_layout` settles ``auto`` to the stored layout instead: a complete
dataset is left as it is, a partly written one is resumed in its own layout (resuming it in
another would mix both), and one line says how to get columnar blocks.
"""

from __future__ import annotations

import dataclasses
import logging

from shardtrain import storage
from shardtrain.data import column_blocks
from shardtrain.data.shard_config import ShardConfig
from shardtrain.data.sharding.plan import PLAN_NAME
from shardtrain.errors import ShardtrainError

log = logging.getLogger(__name__)


def keep_stored_layout(config: ShardConfig, stored_options: dict | None = None) -> ShardConfig:
    """``config``, or ``config`` with per-row Examples when its record format was defaulted
    and the output holds a per-row dataset whose plan options are this run's but for the
    record format (and the compression, when that was defaulted too).

    Anything else is left to the run's own comparison: a stored plan that differs by other
    options still fails as one sharded from other options, and ``--overwrite`` re-shards in
    the default layout. ``stored_options``: the stored plan's options when the caller has read
    them already (not read again).
    """
    if (
        "record_format" not in config.auto_resolved
        or config.record_format != column_blocks.COLUMNAR
        or config.overwrite
    ):
        return config
    stored = stored_options if stored_options is not None else _stored_options(config.output)
    if stored is None or stored.get("record_format", column_blocks.EXAMPLE) != (
        column_blocks.EXAMPLE
    ):
        return config
    per_row = dataclasses.replace(
        config,
        record_format=column_blocks.EXAMPLE,
        compression="auto" if "compression" in config.auto_resolved else config.compression,
    )
    wanted = per_row.plan_options()
    if any(stored.get(name) != value for name, value in wanted.items()):
        return config
    log.warning(
        "%s: holds per-row tf.train.Examples, written when they were the default: kept in "
        "that layout (say --record-format example to keep it; --overwrite re-shards it as "
        "columnar blocks, the default now)",
        config.output,
    )
    return per_row


def _stored_options(output: str) -> dict | None:
    """The plan options stored at ``output``, None if there is no readable plan there."""
    uri = storage.join(output, PLAN_NAME)
    try:
        doc = storage.read_json(uri)
    except (FileNotFoundError, ShardtrainError, ValueError):
        return None
    options = doc.get("options") if isinstance(doc, dict) else None
    return options if isinstance(options, dict) else None
