"""A per-row dataset written when per-row Examples were the default, re-run with the same
command now that columnar blocks are: kept (complete) or resumed (partly written) per row."""

from __future__ import annotations

import logging

import pytest

from helpers import ALL_TYPES, cli_exit_code, dataset_files, read_examples, shard_config
from shardtrain.data import sharding
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.errors import DataError


def _per_row(out, **kw) -> DatasetMetadata:
    """A dataset as the default made it before: one gzip Example per row."""
    outcome = sharding.shard(
        shard_config([ALL_TYPES], out, key="id", record_format="example", **kw)
    )
    return outcome.metadata


def test_a_default_run_is_columnar(tmp_path):
    meta = sharding.shard(shard_config([ALL_TYPES], tmp_path / "ds", key="id")).metadata
    assert meta.record_format == "columnar" and meta.compression == "NONE"
    assert all(not s.path.endswith(".gz") for info in meta.splits.values() for s in info.shards)


def test_rerunning_the_old_default_command_keeps_a_complete_per_row_dataset(tmp_path, caplog):
    out = tmp_path / "ds"
    _per_row(out)
    before = dataset_files(out)
    config = sharding.keep_stored_layout(shard_config([ALL_TYPES], out, key="id"))
    assert (config.record_format, config.compression) == ("example", "gzip")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        outcome = sharding.shard(
            sharding.keep_stored_layout(shard_config([ALL_TYPES], out, key="id"))
        )
    assert outcome.status == "already-complete"
    assert outcome.metadata is not None and outcome.metadata.record_format == "example"
    assert dataset_files(out) == before  # every byte as it was
    (line,) = [r.getMessage() for r in caplog.records if "per-row" in r.getMessage()]
    assert str(out) in line and "--record-format example" in line and "--overwrite" in line


def test_a_partly_written_per_row_dataset_is_resumed_per_row(tmp_path):
    out, whole = tmp_path / "ds", tmp_path / "whole"
    _per_row(out)
    _per_row(whole)
    (out / "metadata.json").unlink()  # as if killed before finalize
    outcome = sharding.shard(sharding.keep_stored_layout(shard_config([ALL_TYPES], out, key="id")))
    assert outcome.status == "complete" and outcome.metadata.record_format == "example"
    assert sorted(map(repr, read_examples(str(out)))) == sorted(
        map(repr, read_examples(str(whole)))
    )


def test_the_stored_layout_is_kept_only_when_the_format_was_left_to_auto(tmp_path):
    out = tmp_path / "ds"
    _per_row(out)
    # Said columnar: another dataset than the one there.
    said = shard_config([ALL_TYPES], out, key="id", record_format="columnar")
    assert sharding.keep_stored_layout(said) is said
    with pytest.raises(DataError, match="sharded from other inputs or options"):
        sharding.shard(said)
    # Other options too: the run's own comparison says so, as before.
    other = sharding.keep_stored_layout(shard_config([ALL_TYPES], out, key="id", min_shards=3))
    assert other.record_format == "columnar"
    with pytest.raises(DataError, match="sharded from other inputs or options"):
        sharding.shard(other)
    # A per-row dataset without gzip, re-run with the defaults: its compression differs.
    plain = tmp_path / "plain"
    _per_row(plain, compression="none")
    defaults = sharding.keep_stored_layout(shard_config([ALL_TYPES], plain, key="id"))
    assert defaults.record_format == "columnar"
    kept = sharding.keep_stored_layout(
        shard_config([ALL_TYPES], plain, key="id", compression="none")
    )
    assert (kept.record_format, kept.compression) == ("example", "none")


def test_overwrite_reshards_a_per_row_dataset_as_columnar_blocks(tmp_path):
    out = tmp_path / "ds"
    _per_row(out)
    config = sharding.keep_stored_layout(shard_config([ALL_TYPES], out, key="id", overwrite=True))
    meta = sharding.shard(config).metadata
    assert meta.record_format == "columnar" and meta.compression == "NONE"


def test_the_shard_command_keeps_a_per_row_dataset(tmp_path, capsys):
    out = str(tmp_path / "ds")
    args = ["shard", str(ALL_TYPES), "-o", out, "--label", "cleared", "--key", "id"]
    assert cli_exit_code(*args, "--processes", "1", "--record-format", "example") == 0
    capsys.readouterr()
    assert cli_exit_code(*args, "--processes", "1") == 0
    assert "already complete" in capsys.readouterr().out
    assert DatasetMetadata.load(out).record_format == "example"
