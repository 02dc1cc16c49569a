"""The training controller: the intervals around a step function, in plain Python.

Orbit-style (``tensorflow/models`` ``orbit.Controller``): the trainer supplies a *step
function* that runs ``n`` optimizer steps (on TensorFlow replicas, one ``tf.function`` call)
and reports the global step reached; :class:`Controller` decides everything around it:

* **how many steps a call runs**: ``steps_per_loop``, cut short so that a call ends exactly
  on every checkpoint step and on ``train_steps``;
* **summaries** of every call (loss, accuracy or a regression's RMSE, examples/s, learning
  rate) and the progress log line;
* **NaN checks**: a loss that is no longer finite stops training with a
  :class:`~shardtrain.errors.DataError`;
* **the stop vote**: after every call the replicas agree whether any of them received
  SIGTERM/SIGINT (:class:`StopFlag`); if so all checkpoint and training ends with
  :class:`~shardtrain.errors.TrainingInterrupted` (exit ``128 + signal``). The step function
  itself ends a call early, after the step during which a replica was signalled (all replicas
  at the same step), so the checkpoint follows the signal by about one step, not one loop;
* **checkpoints** every ``checkpoint_every`` steps and at ``train_steps``;
* **in-process evaluation** (the chief of a job without an evaluator replica) at the first
  checkpoint at least ``eval_every`` steps after the previous evaluation, and at the end;
* **the TrainJob's status** (the chief, under Trainer's ``TrainJobStatus`` gate): progress,
  ETA and the latest eval metrics, at a bounded rate (:mod:`shardtrain.train.status_report`);
* **the hand-off**: :meth:`Controller.run` returns once the final checkpoint (at
  ``train_steps`` exactly) is written, and the trainer exports from it.

Every replica runs the same controller with the same intervals, so all of them call the
step function, the vote and the checkpoint save in the same order: under
``MultiWorkerMirroredStrategy`` each is a collective operation that every replica must join.
Nothing here imports TensorFlow; the unit tests drive it with a fake step function.
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from shardtrain.errors import DataError, TrainingInterrupted
from shardtrain.train.status_report import StatusReport

#: The trainer's log lines keep one logger name, whichever of its modules they come from.
log = logging.getLogger("shardtrain.train.trainer")

#: The progress line is logged at least every this many steps (and at the end).
LOG_EVERY = 500
#: The all-reduce between replicas "dominates" a step above this share of the step's time.
COLLECTIVE_DOMINATES = 0.5


class StopFlag:
    """Remembers the first SIGTERM/SIGINT and tells the running training loop at once.

    A signal only sets the flag: the step running on the replicas is never interrupted
    midway. Python runs a signal handler only when the main thread is back in the interpreter,
    which it is not while a ``tf.function`` runs a loop of many steps; so :meth:`installed`
    also points Python's wakeup fd (written by the C-level handler the moment the signal
    arrives) at a socket that a watcher thread reads. Whichever sees the signal first records
    it and calls the listeners (:meth:`on_stop`): the trainer's sets the variable its loop
    reads every step (:func:`shardtrain.train.loop.stop_request_variable`).
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        self._listeners: list[Callable[[int], None]] = []
        self._lock = threading.Lock()

    def _handle(self, signum: int, _frame: Any) -> None:
        self._notify(signum)

    def _notify(self, signum: int) -> None:
        with self._lock:
            if self.signum is not None:
                return
            self.signum = signum
            listeners = list(self._listeners)
        log.warning(
            "received %s: checkpointing after the current step, then exiting",
            signal.Signals(signum).name,
        )
        for listener in listeners:
            try:
                listener(signum)
            except Exception:  # the vote after the loop still stops training
                log.exception("stop listener failed")

    def on_stop(self, listener: Callable[[int], None]) -> None:
        """Call ``listener(signum)`` on the first signal (now, if it already came), from
        whichever thread sees it first."""
        with self._lock:
            self._listeners.append(listener)
            signum = self.signum
        if signum is not None:
            listener(signum)

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopFlag]:
        """Handle SIGTERM and SIGINT with this flag inside the ``with`` block.

        The previous handlers come back at the end of the block unless a signal was received:
        then the process is on its way out with ``128 + signal`` and a second SIGTERM (the
        launcher stopping the job, the kubelet) must not turn that into a kill mid-exit.
        """
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
                self._previous[sig] = signal.signal(sig, self._handle)
        with self._watching():
            try:
                yield self
            finally:
                if self.signum is None:
                    for signum, handler in self._previous.items():
                        signal.signal(signum, handler)

    @contextlib.contextmanager
    def _watching(self) -> Iterator[None]:
        """A thread that hears signals through the wakeup fd while the main thread is busy."""
        if not self._previous:  # no handlers installed (not the main thread)
            yield
            return
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        try:
            previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        except ValueError:
            reader.close()
            writer.close()
            yield
            return

        def watch() -> None:
            while data := reader.recv(64):
                for signum in data:
                    if signum in self._previous:
                        self._notify(signum)

        watcher = threading.Thread(target=watch, name="shardtrain-signals", daemon=True)
        watcher.start()
        try:
            yield
        finally:
            signal.set_wakeup_fd(previous_fd)
            writer.close()  # the watcher's recv returns b"" and the thread ends
            watcher.join(timeout=5)
            reader.close()

    def reclaim(self) -> None:
        """Take SIGTERM and SIGINT back after TensorFlow took them (inside :meth:`installed`).

        Creating a ``MultiWorkerMirroredStrategy`` starts TensorFlow's coordination service,
        whose C++ preemption notifier (``preemption_notifier.cc``) installs its own SIGTERM
        handler with ``std::signal``: it replaces the one :meth:`installed` set, logs
        "SIGTERM caught" and nothing in Python ever hears of the signal. Setting the Python
        handler again afterwards is what TensorFlow's own ``PreemptionCheckpointHandler``
        does (``_start_watching_for_signal``); the handlers to restore on exit stay those
        found by :meth:`installed`.
        """
        for sig in self._previous:
            signal.signal(sig, self._handle)


@dataclass(frozen=True)
class LoopOutput:
    """What one call of the step function did.

    Attributes:
        step: the global step after the call.
        loss_sum: the per-example loss summed over every example of the call.
        correct: the number of correct predictions among them (None for a regression).
        learning_rate: the optimizer's learning rate after the call.
        squared_error: a regression's squared errors in the label's units, summed over the
            examples (None for a classifier).
    """

    step: int
    loss_sum: float
    correct: float | None
    learning_rate: float
    squared_error: float | None = None


#: ``step_fn(n)`` runs ``n`` training steps on every replica and reports them.
StepFunction = Callable[[int], LoopOutput]


class ScalarSummaries(Protocol):
    """Where the controller writes training scalars (TensorBoard in the trainer)."""

    def scalars(self, step: int, values: dict[str, float]) -> None: ...

    def sync(self) -> None: ...


class _NoSummaries:
    def scalars(self, step: int, values: dict[str, float]) -> None:
        pass

    def sync(self) -> None:
        pass


class Controller:
    """Runs a step function to ``train_steps`` with checkpoints, evaluation and a stop vote.

    Args:
        step_fn: runs ``n`` steps on every replica (see :data:`StepFunction`).
        train_steps: the global step at which training ends.
        steps_per_loop: the most steps one call of ``step_fn`` runs.
        checkpoint_every: a checkpoint is saved at every multiple of this step.
        eval_every: the least number of steps between two in-process evaluations.
        global_batch: examples per step over all replicas (for the per-example summaries).
        save: ``save(step)`` writes the checkpoint of ``step`` (every replica calls it: it
            may be collective); the summaries are synced after it.
        vote: ``vote(stopping)`` takes this replica's wish to stop and returns whether any
            replica wants to (a collective on a cluster).
        stop: the flag set by SIGTERM/SIGINT.
        evaluate: ``evaluate(step, final)`` evaluates the checkpoint just saved at ``step``;
            None when this replica does not evaluate (a worker, or a sidecar evaluator exists).
        summaries: where training scalars go (none by default).
        checkpoint_uri: where checkpoints are published, for the interruption message.
        clock: a monotonic clock in seconds (for examples/s).
        collective_seconds: what a step's all-reduces between the replicas take
            (measured by :func:`shardtrain.train.loop.measure_all_reduce`; 0: no collective).
            When it exceeds :data:`COLLECTIVE_DOMINATES` of a step, a warning says so once.
        status: where the chief reports progress, ETA and eval metrics (its TrainJob's
            status, :mod:`shardtrain.train.status_report`); none by default.
    """

    def __init__(
        self,
        step_fn: StepFunction,
        *,
        train_steps: int,
        steps_per_loop: int,
        checkpoint_every: int,
        eval_every: int,
        global_batch: int,
        save: Callable[[int], None],
        vote: Callable[[bool], bool],
        stop: StopFlag,
        evaluate: Callable[[int, bool], Any] | None = None,
        summaries: ScalarSummaries | None = None,
        checkpoint_uri: str = "",
        clock: Callable[[], float] = time.monotonic,
        collective_seconds: float = 0.0,
        status: StatusReport | None = None,
    ):
        if steps_per_loop < 1:
            raise ValueError(f"steps_per_loop must be >= 1, got {steps_per_loop}")
        self.step_fn = step_fn
        self.train_steps = train_steps
        self.steps_per_loop = steps_per_loop
        self.checkpoint_every = checkpoint_every
        self.eval_every = eval_every
        self.global_batch = global_batch
        self._save = save
        self._vote = vote
        self._stop = stop
        self._evaluate = evaluate
        self.summaries: ScalarSummaries = summaries or _NoSummaries()
        self.checkpoint_uri = checkpoint_uri
        self._clock = clock
        self.collective_seconds = collective_seconds
        self._calls = 0
        self._warned_collective = False
        self.status = status or StatusReport(None)

    def loop_steps(self, step: int) -> int:
        """Steps of the next call from ``step``: at most ``steps_per_loop``, ending on the
        next checkpoint step or on ``train_steps``, whichever comes first."""
        next_checkpoint = (step // self.checkpoint_every + 1) * self.checkpoint_every
        return min(self.steps_per_loop, self.train_steps - step, next_checkpoint - step)

    def run(self, step: int) -> int:
        """Train from global step ``step`` (a restored checkpoint's, or 0) to ``train_steps``.

        Returns:
            The global step reached: ``train_steps``, whose checkpoint has been saved.

        Raises:
            DataError: the loss is no longer finite (NaN or infinite).
            TrainingInterrupted: a replica received SIGTERM/SIGINT; a checkpoint was saved.
        """
        last_eval = step
        while step < self.train_steps:
            n = self.loop_steps(step)
            started = self._clock()
            out = self.step_fn(n)
            seconds = self._clock() - started
            # A signal ends a call early (at a step all replicas agree on): fewer than n steps.
            n = out.step - step if 0 < out.step - step < n else n
            step = out.step
            self._report(step, n, out, seconds)
            if self._vote(self._stop.signum is not None):
                self._checkpoint(step)
                raise TrainingInterrupted(
                    f"train: stopped at step {step} on a signal; checkpoint written to "
                    f"{self.checkpoint_uri}; run again to resume",
                    self._stop.signum or signal.SIGTERM,
                )
            final = step >= self.train_steps
            if step % self.checkpoint_every == 0 or final:
                self._checkpoint(step)
                eval_due = step - last_eval >= self.eval_every or final
                if self._evaluate is not None and eval_due:
                    if isinstance(result := self._evaluate(step, final), dict):
                        self.status.evaluated(result)
                    last_eval = step
        self.status.finish(step, self.train_steps)
        return step

    def _report(self, step: int, n: int, out: LoopOutput, seconds: float) -> None:
        """Summaries and the progress line of one call; fail on a loss that is not finite."""
        examples = n * self.global_batch
        rate = examples / max(seconds, 1e-9)
        self._calls += 1
        if self._calls > 1:  # the first call's time includes tracing the step function
            self._check_collective(seconds / max(n, 1))
        values = {"loss": out.loss_sum / examples}
        if out.correct is not None:
            values["accuracy"] = out.correct / examples
        if out.squared_error is not None:
            values["rmse"] = math.sqrt(max(out.squared_error, 0.0) / examples)
        values.update(examples_per_second=rate, learning_rate=out.learning_rate)
        self.summaries.scalars(step, values)
        if not math.isfinite(out.loss_sum):
            raise DataError(
                f"train: the loss became {out.loss_sum} at step {step}; lower the learning rate "
                "or check the data for extreme values"
            )
        if step % max(self.steps_per_loop, LOG_EVERY) < n or step >= self.train_steps:
            log.info(
                "step %d/%d: loss %.4f, %.0f examples/s",
                step,
                self.train_steps,
                out.loss_sum / examples,
                rate,
            )
        self.status.progress(step, self.train_steps, values)

    def _check_collective(self, step_seconds: float) -> None:
        """Warn once when the all-reduce between replicas takes most of each step."""
        share = self.collective_seconds / max(step_seconds, 1e-9)
        if self._warned_collective or share <= COLLECTIVE_DOMINATES:
            return
        self._warned_collective = True
        log.warning(
            "the all-reduce between replicas takes %.1f ms of each %.1f ms step (%.0f%%): the "
            "replicas mostly wait on each other, not compute; a larger --batch-size (now %d) "
            "spreads that fixed cost over more examples",
            self.collective_seconds * 1e3,
            step_seconds * 1e3,
            min(share, 1.0) * 100,
            self.global_batch,
        )

    def _checkpoint(self, step: int) -> None:
        self._save(step)
        self.summaries.sync()
