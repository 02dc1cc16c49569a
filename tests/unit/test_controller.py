"""The training controller: intervals around a step function.

Most tests drive :class:`Controller` with a fake step function in plain Python (no
TensorFlow): which steps each call runs, when checkpoints and evaluations happen (also
resuming from a step between checkpoints), the stop vote after a signal, NaN losses, the
final checkpoint. The last test runs it on a tiny real Keras model under TensorFlow's
default strategy, with the trainer's own step function, checkpoints and restore.
"""

from __future__ import annotations

import logging
import math
import os
import signal

import pytest

from shardtrain.errors import DataError, TrainingInterrupted
from shardtrain.train.controller import Controller, LoopOutput, StopFlag

BATCH = 8


class FakeSteps:
    """A step function advancing a step counter; ``losses`` gives each call's mean loss."""

    def __init__(self, start: int = 0, losses=None, on_call=None):
        self.step = start
        self.calls: list[int] = []
        self.losses = list(losses or [])
        self.on_call = on_call

    def __call__(self, n: int) -> LoopOutput:
        self.calls.append(n)
        self.step += n
        loss = self.losses.pop(0) if self.losses else 0.5
        if self.on_call is not None:
            self.on_call(self.step)
        return LoopOutput(self.step, loss * n * BATCH, 0.75 * n * BATCH, 1e-3)


class Recorder:
    """The controller's callbacks and summaries, recording every call in order."""

    def __init__(self, others_stop_at: int | None = None):
        self.events: list[tuple] = []
        self.scalars_at: list[tuple[int, dict]] = []
        self.others_stop_at = others_stop_at

    def save(self, step: int) -> None:
        self.events.append(("save", step))

    def evaluate(self, step: int, final: bool) -> None:
        self.events.append(("eval", step, final))

    def vote(self, stopping: bool) -> bool:
        """This replica's wish, or another replica's from ``others_stop_at`` on."""
        self.events.append(("vote", stopping))
        step = self.scalars_at[-1][0] if self.scalars_at else 0
        return stopping or (self.others_stop_at is not None and step >= self.others_stop_at)

    def scalars(self, step: int, values: dict) -> None:
        self.scalars_at.append((step, values))

    def sync(self) -> None:
        self.events.append(("sync",))

    @property
    def saves(self) -> list[int]:
        return [e[1] for e in self.events if e[0] == "save"]

    @property
    def evals(self) -> list[tuple[int, bool]]:
        return [(e[1], e[2]) for e in self.events if e[0] == "eval"]


def make(steps, rec: Recorder, stop: StopFlag | None = None, *, evaluate=True, **intervals):
    settings = dict(train_steps=250, steps_per_loop=30, checkpoint_every=100, eval_every=200)
    settings.update(intervals)
    return Controller(
        steps,
        global_batch=BATCH,
        save=rec.save,
        vote=rec.vote,
        stop=stop or StopFlag(),
        evaluate=rec.evaluate if evaluate else None,
        summaries=rec,
        checkpoint_uri="file:///model/checkpoints",
        **settings,
    )


def test_calls_end_on_checkpoint_steps_and_evaluations_follow_eval_every():
    steps, rec = FakeSteps(), Recorder()
    assert make(steps, rec).run(0) == 250
    # 30-step calls, cut short at every checkpoint step (100, 200) and at train_steps.
    assert steps.calls == [30, 30, 30, 10, 30, 30, 30, 10, 30, 20]
    assert sum(steps.calls) == 250
    assert rec.saves == [100, 200, 250]
    # Evaluation only right after a checkpoint: the first at least eval_every steps in, and
    # the final one (with sample predictions).
    assert rec.evals == [(200, False), (250, True)]
    # Each save is followed by a summaries sync, then the evaluation of that checkpoint.
    i = rec.events.index(("save", 200))
    assert rec.events[i + 1 : i + 3] == [("sync",), ("eval", 200, False)]
    # Every call is voted on, and reported: per-example loss and accuracy, examples/s, lr.
    assert [e for e in rec.events if e[0] == "vote"] == [("vote", False)] * len(steps.calls)
    assert [s for s, _ in rec.scalars_at] == [30, 60, 90, 100, 130, 160, 190, 200, 230, 250]
    first = rec.scalars_at[0][1]
    assert first["loss"] == pytest.approx(0.5) and first["accuracy"] == pytest.approx(0.75)
    assert first["learning_rate"] == 1e-3 and first["examples_per_second"] > 0


def test_resuming_between_checkpoints_keeps_the_cadence():
    """A restart from step 150 (checkpoint_every 100): the next call ends at 200, and the
    evaluation interval counts from the resumed step."""
    steps, rec = FakeSteps(start=150), Recorder()
    controller = make(
        steps, rec, train_steps=420, steps_per_loop=40, checkpoint_every=100, eval_every=100
    )
    assert controller.run(150) == 420
    assert steps.calls == [40, 10, 40, 40, 20, 40, 40, 20, 20]
    assert rec.saves == [200, 300, 400, 420]
    assert rec.evals == [(300, False), (400, False), (420, True)]


def test_the_final_checkpoint_is_at_train_steps_exactly():
    steps, rec = FakeSteps(), Recorder()
    controller = make(steps, rec, train_steps=95, steps_per_loop=20, checkpoint_every=50)
    assert controller.run(0) == 95
    assert steps.calls == [20, 20, 10, 20, 20, 5]
    assert rec.saves == [50, 95]
    assert rec.evals == [(95, True)]  # eval_every 200 > 95: only the final evaluation
    assert rec.events[-3:] == [("save", 95), ("sync",), ("eval", 95, True)]


def test_nothing_to_run_at_or_past_train_steps():
    steps, rec = FakeSteps(start=300), Recorder()
    assert make(steps, rec, train_steps=250).run(300) == 300
    assert steps.calls == [] and rec.events == []


def test_without_in_process_evaluation_only_checkpoints():
    """Workers, and the chief of a job with a sidecar evaluator, evaluate nothing."""
    steps, rec = FakeSteps(), Recorder()
    make(steps, rec, evaluate=False).run(0)
    assert rec.saves == [100, 200, 250] and rec.evals == []


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_pending_signal_stops_at_the_next_vote_after_a_checkpoint(signum, code):
    stop = StopFlag()

    def signal_during_call(step: int) -> None:
        if step == 60:  # arrives while the second call runs
            stop.signum = signum

    steps, rec = FakeSteps(on_call=signal_during_call), Recorder()
    with pytest.raises(TrainingInterrupted, match="stopped at step 60 on a signal") as info:
        make(steps, rec, stop).run(0)
    assert info.value.exit_code == code
    assert "file:///model/checkpoints; run again to resume" in str(info.value)
    assert steps.calls == [30, 30]  # no further call after the vote
    assert rec.events[-4:] == [("vote", False), ("vote", True), ("save", 60), ("sync",)]
    assert rec.evals == []


def test_another_replica_stopping_stops_this_one_too():
    """The vote is an all-reduce: a replica without a signal of its own stops as well, and
    exits as if it received SIGTERM."""
    steps, rec = FakeSteps(), Recorder(others_stop_at=90)
    with pytest.raises(TrainingInterrupted) as info:
        make(steps, rec).run(0)
    assert info.value.exit_code == 143
    assert steps.calls == [30, 30, 30] and rec.saves == [90]


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_loss_that_is_not_finite_is_a_data_error(bad):
    steps, rec = FakeSteps(losses=[0.5, 0.4, bad]), Recorder()
    with pytest.raises(DataError, match=f"the loss became {bad} at step 90; lower the learning"):
        make(steps, rec).run(0)
    assert steps.calls == [30, 30, 30]
    assert rec.saves == []  # no checkpoint of broken weights, no vote after it
    assert [e for e in rec.events if e[0] == "vote"] == [("vote", False)] * 2
    assert len(rec.scalars_at) == 3  # the summary of the failing call was still written


def test_progress_lines(caplog):
    steps, rec = FakeSteps(), Recorder()
    with caplog.at_level(logging.INFO, logger="shardtrain.train.trainer"):
        make(steps, rec, train_steps=1100, steps_per_loop=100, checkpoint_every=1000).run(0)
    lines = [r.getMessage() for r in caplog.records if r.name == "shardtrain.train.trainer"]
    # Every 500 steps (or every call, when calls are longer) and at the end.
    assert [line.split(":")[0] for line in lines] == [
        "step 500/1100",
        "step 1000/1100",
        "step 1100/1100",
    ]
    assert lines[0].startswith("step 500/1100: loss 0.5000, ")


def test_the_stop_flag_remembers_the_first_signal_and_restores_handlers():
    before = signal.getsignal(signal.SIGTERM)
    flag = StopFlag()
    with flag.installed():
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        assert flag.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


# --------------------------------------------------------------------------------------------
# A tiny real model under the default strategy
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def quest(tmp_path_factory):
    from shardtrain.data import datagen, sharding

    root = tmp_path_factory.mktemp("quest")
    csv = str(root / "quest.csv")
    datagen.generate_quest_logs(csv, 300, seed=4, numeric=3, categorical=2)
    meta = sharding.shard(
        sharding.ShardConfig(
            sources=(csv,),
            output=str(root / "ds"),
            label="cleared",
            key="attempt_id",
            compression="none",
            num_shards=1,
            processes=1,
        )
    ).metadata
    return str(root / "ds"), meta


def test_a_tiny_keras_model_trains_checkpoints_and_resumes(quest, tmp_path):
    import numpy as np
    import tensorflow as tf

    from shardtrain.train import loop
    from shardtrain.train.checkpoints import CheckpointStore
    from shardtrain.train.config import InputConfig, ModelConfig, TrainConfig
    from shardtrain.train.features import FeatureSpec

    uri, meta = quest
    spec = FeatureSpec.from_metadata(meta)
    config = TrainConfig(
        data=uri,
        model_dir=str(tmp_path / "model"),
        train_steps=7,
        batch_size=16,
        steps_per_loop=3,
        checkpoint_every=4,
        model=ModelConfig(name="tabular", hidden_units=[8], embedding_dim=2),
        input=InputConfig(shuffle_buffer=64, cycle_length=1),
    ).validate()
    strategy = tf.distribute.get_strategy()  # the default strategy: one replica

    def controller_for(state, store: CheckpointStore, rec: Recorder) -> Controller:
        iterator, _ = loop.distributed_input(strategy, config, meta, spec, str(tmp_path), seed=0)
        train_loop = loop.build_train_loop(
            strategy, state.model, state.optimizer, spec, config.batch_size, state.global_step
        )

        def save(step: int) -> None:
            state.checkpoint.write(store.local_prefix(step))
            store.publish(step, final=step >= config.train_steps)
            rec.save(step)

        return Controller(
            loop.DistributedSteps(train_loop, iterator, state),
            train_steps=config.train_steps,
            steps_per_loop=config.steps_per_loop,
            checkpoint_every=config.checkpoint_every,
            eval_every=config.eval_every,
            global_batch=config.batch_size,
            save=save,
            vote=loop.build_stop_vote(strategy),
            stop=StopFlag(),
            summaries=rec,
        )

    store = CheckpointStore(config.model_dir, str(tmp_path / "stage"))
    state = loop.build_training_state(strategy, config, spec, mixed=False)
    rec = Recorder()
    assert controller_for(state, store, rec).run(0) == 7
    assert int(state.global_step.numpy()) == 7
    assert rec.saves == [4, 7]
    assert [s for s, _ in rec.scalars_at] == [3, 4, 7]
    for _, values in rec.scalars_at:
        assert math.isfinite(values["loss"]) and 0 <= values["accuracy"] <= 1
        assert values["learning_rate"] == pytest.approx(config.learning_rate)
    latest = store.latest()
    assert (latest.step, latest.final) == (7, True)

    # A restart: a fresh state restores the final checkpoint exactly, then trains on.
    config.train_steps = 9
    again = loop.build_training_state(strategy, config, spec, mixed=False)
    reader = CheckpointStore(config.model_dir, str(tmp_path / "stage2"))
    again.checkpoint.read(reader.fetch(latest)).assert_existing_objects_matched()
    assert int(again.global_step.numpy()) == 7
    for a, b in zip(state.model.weights, again.model.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    rec2 = Recorder()
    assert controller_for(again, reader, rec2).run(7) == 9
    assert rec2.saves == [8, 9]
