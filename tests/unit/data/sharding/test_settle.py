"""Settling a run: the sample's CSV types checked by the tasks, decided once they are done."""

from __future__ import annotations

import importlib

import pytest

from helpers import copy_of_run, late_code_csv
from shardtrain import storage
from shardtrain.data import datagen, sharding
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.data.sharding.plan import PLAN_NAME, needs_settling
from shardtrain.data.sources.csv.plan_options import TYPES_OPTION
from shardtrain.errors import DataError

# The module (the package exports its function of the same name).
settle_module = importlib.import_module("shardtrain.data.sharding.settle")


def _config(path, out, **kw) -> sharding.ShardConfig:
    return sharding.ShardConfig(
        sources=(str(path),), output=str(out), **{"label": "label", "task_bytes": 1 << 20, **kw}
    )


def test_a_guess_that_holds_is_recorded_and_nothing_runs_again(tmp_path):
    path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(path), 5_000, seed=3)
    out = tmp_path / "ds"
    config = _config(path, out, label="cleared", task_bytes=128 * 1024)
    outcome = sharding.shard(config)
    assert outcome.status == "complete" and outcome.tasks_run == len(outcome_plan(out).tasks)
    stored = storage.read_json(str(out / PLAN_NAME))
    assert stored["options"]["csv_types_to_verify"] == {"forced": []}
    settled = stored["settled"][TYPES_OPTION]
    assert settled["player_level"] == "int" and settled["player_class"] == "string"
    again = sharding.settle(config)  # idempotent: nothing to run, the plan unchanged
    assert again.redo == () and storage.read_json(str(out / PLAN_NAME)) == stored
    meta = DatasetMetadata.load(str(out))
    assert meta.options[TYPES_OPTION] == settled  # the types by all rows, with the dataset


def outcome_plan(out):
    return settle_module.stored_plan(str(out))


@pytest.fixture(scope="module")
def zips_by_two_workers(tmp_path_factory):
    """:func:`late_code_csv` sharded by two workers whose guessed type of ``zip`` fails: the
    source and the run, which each test copies (:func:`helpers.copy_of_run`) before settling it."""
    tmp = tmp_path_factory.mktemp("zips")
    path = late_code_csv(tmp / "zips.csv")
    for w in range(2):
        sharding.shard(_config(path, tmp / "ds", num_workers=2, worker_index=w))
    return path, tmp / "ds"


def test_a_crash_while_settling_a_wrong_guess_resumes(tmp_path, monkeypatch, zips_by_two_workers):
    """Killed after the old tasks were uncommitted but before the new plan was stored: the
    same command runs the tasks again (with the guess, which settles the same way) and ends
    with the types by all rows; nothing is half-written."""
    path = zips_by_two_workers[0]  # the source only: this run is a new one, in one worker
    out = tmp_path / "ds"
    uncommit = settle_module._uncommit

    def crash(old, new):
        uncommit(old, new)
        raise KeyboardInterrupt  # the process dies here

    monkeypatch.setattr(settle_module, "_uncommit", crash)
    with pytest.raises(KeyboardInterrupt):
        sharding.shard(_config(path, out))
    plan = outcome_plan(out)
    assert needs_settling(plan) and plan.schema.column("zip").type == "int"
    assert not list((out / "_tasks").glob("task-*.json"))  # uncommitted: none stands
    monkeypatch.undo()

    outcome = sharding.shard(_config(path, out))
    assert outcome.status == "complete"
    meta = outcome.metadata
    assert meta.schema.column("zip").type == "string"
    assert meta.rows_accepted == 400_000 and meta.rows_rejected == 0
    assert sharding.shard(_config(path, out)).status == "already-complete"


def test_settling_a_wrong_guess_takes_the_runs_own_options(tmp_path, zips_by_two_workers):
    path, out = copy_of_run(zips_by_two_workers, tmp_path)
    with pytest.raises(DataError, match="the options given differ"):
        sharding.settle(_config(path, out, splits=(("train", 0.5), ("eval", 0.5))))
    with pytest.raises(DataError, match=r"zip int -> string.*shardtrain settle"):
        sharding.finalize(str(out))  # finalize cannot run the tasks again itself
    settled = sharding.settle(_config(path, out, num_workers=2))
    assert settled.redo and settled.workers(2) == [0, 1]
    assert outcome_plan(out).schema.column("zip").type == "string"


def test_many_values_beyond_the_guess_do_not_stop_a_task_before_settling(tmp_path):
    """A zip column of numbers for the first 4 MB, then one code in five rows: 20,000 rows
    a task reads as bad values of the guessed int -- far more than the reject budget allows
    -- become valid rows once settling finds the column a string."""
    rows = 400_000
    lines = ["id,zip,label"]
    for i in range(rows):
        late_code = i >= 300_000 and i % 5 == 0
        zip_code = f"98{i % 1000:03d}-4820" if late_code else str(10_000 + (i * 7919) % 80_000)
        lines.append(f"{i},{zip_code},{i % 2}")
    path = tmp_path / "zips.csv"
    path.write_text("\n".join(lines) + "\n")
    outcome = sharding.shard(_config(path, tmp_path / "ds", task_bytes=8 << 20))
    meta = outcome.metadata
    assert meta.schema.column("zip").type == "string"
    assert meta.rows_accepted == rows and meta.rows_rejected == 0


def test_settling_again_before_the_reset_tasks_ran_hands_them_out(tmp_path, zips_by_two_workers):
    """A settle step retried (or `shardtrain settle` re-run) after an earlier one stored the
    types by all rows but before the reset tasks ran: they are handed out again, not an
    error; settling then goes on."""
    path, out = copy_of_run(zips_by_two_workers, tmp_path)
    first = sharding.settle(_config(path, out, num_workers=2))
    assert first.redo
    again = sharding.settle(_config(path, out, num_workers=2))  # the pod died: a retry
    assert again.redo == first.redo and again.workers(2) == [0, 1]
    ran, settled = sharding.settle_and_redo(_config(path, out, num_workers=2))
    assert sorted(r.task for r in ran) == list(first.redo) and settled.redo == ()
    meta = sharding.finalize(str(out))
    assert meta.schema.column("zip").type == "string" and meta.rows_rejected == 0


def test_finalize_decides_types_with_the_workers_max_bad_fraction(tmp_path):
    """finalize's --max-bad-fraction is the reject check's: the types by all rows follow the
    fraction the workers ran with (a looser one would keep a column of junk numeric)."""
    rows = 420_000
    lines = ["id,code,label"]
    for i in range(rows):
        junk = i >= 330_000 and i % 50 == 0  # ~0.4% of all values: junk, not codes
        lines.append(f"{i},{'12abc' if junk else (i * 37) % 1000},{i % 2}")
    path = tmp_path / "junk.csv"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "ds"
    for w in range(2):
        sharding.shard(_config(path, out, num_workers=2, worker_index=w))
    with pytest.raises(DataError, match=r"code int -> string"):
        sharding.finalize(str(out), max_bad_fraction=0.05)  # decided with the workers' 0.001
    sharding.settle_and_redo(_config(path, out, num_workers=2))
    meta = sharding.finalize(str(out), max_bad_fraction=0.05)
    assert meta.schema.column("code").type == "string" and meta.rows_rejected == 0
