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
import threading
import time

import pytest

from shardtrain.errors import DataError, TrainingInterrupted
from shardtrain.train.controller import Controller, LoopOutput, StopFlag
from training_fakes import Recorder

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


def test_a_regression_reports_its_training_rmse_instead_of_accuracy():
    def steps(n: int) -> LoopOutput:
        # Squared errors of 4.0 per example in the label's units: RMSE 2.
        return LoopOutput(n, 0.5 * n * BATCH, None, 1e-3, squared_error=4.0 * n * BATCH)

    rec = Recorder()
    make(steps, rec, train_steps=30, checkpoint_every=30).run(0)
    values = rec.scalars_at[0][1]
    assert values["rmse"] == pytest.approx(2.0) and "accuracy" not in values
    assert values["loss"] == pytest.approx(0.5)


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


def test_a_call_cut_short_by_a_signal_checkpoints_at_the_step_reached():
    """The step function leaves its loop early once a replica is signalled: the checkpoint is
    at that step, not at the loop's end, and the summaries count only the steps that ran."""
    stop = StopFlag()

    class CutShort(FakeSteps):
        def __call__(self, n: int) -> LoopOutput:
            if self.step + n > 47:  # the signal arrives during the step to 47
                stop.signum = signal.SIGTERM
                n = 47 - self.step
            return super().__call__(n)

    steps, rec = CutShort(), Recorder()
    with pytest.raises(TrainingInterrupted, match="stopped at step 47 on a signal"):
        make(steps, rec, stop).run(0)
    assert steps.calls == [30, 17] and rec.saves == [47]
    step, values = rec.scalars_at[-1]
    assert step == 47 and values["loss"] == pytest.approx(0.5)  # over 17 steps' examples
    assert values["accuracy"] == pytest.approx(0.75)


def test_the_stop_flag_hears_a_signal_while_the_main_thread_is_busy():
    """Python runs a handler only when the main thread is back in the interpreter (not while a
    tf.function runs a loop): the wakeup-fd watcher thread calls the listeners right away."""
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    flag = StopFlag()
    flag._handle = lambda signum, frame: None  # type: ignore[method-assign]  # busy main thread
    heard: list[tuple[int, str]] = []
    done = threading.Event()

    def listener(signum: int) -> None:
        heard.append((signum, threading.current_thread().name))
        done.set()

    flag.on_stop(listener)
    try:
        with flag.installed():
            os.kill(os.getpid(), signal.SIGTERM)
            assert done.wait(5)
            assert flag.signum == signal.SIGTERM
            os.kill(os.getpid(), signal.SIGTERM)  # a second signal: listeners ran once
            time.sleep(0.2)
        assert heard == [(signal.SIGTERM, "shardtrain-signals")]
        late: list[int] = []
        flag.on_stop(late.append)  # registered after the signal: called at once
        assert late == [signal.SIGTERM]
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


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


def test_the_stop_flag_remembers_the_first_signal_and_keeps_handling_while_exiting():
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    flag = StopFlag()
    try:
        with flag.installed():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)
            assert flag.signum == signal.SIGTERM
        # On its way out with 143: a second SIGTERM must not kill the process mid-exit.
        assert signal.getsignal(signal.SIGTERM) == flag._handle
        os.kill(os.getpid(), signal.SIGTERM)
        assert flag.signum == signal.SIGTERM
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def test_the_stop_flag_restores_handlers_when_no_signal_came():
    before = signal.getsignal(signal.SIGTERM)
    with StopFlag().installed():
        pass
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_stop_flag_reclaims_signals_taken_by_someone_else():
    """What MultiWorkerMirroredStrategy's preemption notifier does to SIGTERM, undone."""
    before = signal.getsignal(signal.SIGTERM)
    flag = StopFlag()
    with flag.installed():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # TF's notifier, in C++, takes it
        flag.reclaim()
        os.kill(os.getpid(), signal.SIGTERM)
        assert flag.signum == signal.SIGTERM
        flag.signum = None  # so that the block restores the handlers
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_collective_that_dominates_the_step_is_reported_once(caplog):
    """Steps of 10 ms (a fake clock) and an all-reduce of 8 ms: warned once, after the first
    call (whose time includes tracing); 3 ms: not warned."""
    for collective, warned in ((0.008, 1), (0.003, 0)):
        now = [0.0]

        def tick(n: int, now=now) -> None:
            now[0] += 0.010 * n

        class ClockedSteps(FakeSteps):
            def __call__(self, n: int) -> LoopOutput:
                tick(n)
                return super().__call__(n)

        steps, rec = ClockedSteps(), Recorder()
        controller = make(steps, rec, train_steps=200, steps_per_loop=20, checkpoint_every=100)
        controller.collective_seconds = collective
        controller._clock = lambda now=now: now[0]
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="shardtrain.train.trainer"):
            controller.run(0)
        lines = [r.getMessage() for r in caplog.records if "all-reduce" in r.getMessage()]
        assert len(lines) == warned, lines
        if warned:
            assert (
                "8.0 ms of each 10.0 ms step (80%)" in lines[0]
                and "--batch-size (now 8)" in lines[0]
            )
