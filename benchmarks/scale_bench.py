"""A scale model of the pipeline's sharding: each phase measured on this machine, then the
critical path of ``plan_shards`` -> ``shard`` x N -> [settle] -> ``finalize_shards`` worked out
for N = 1 ... 64 workers on a modelled dataset.

Usage (from the repository root, in the project environment)::

    .venv/bin/python benchmarks/scale_bench.py                      # 1 GB, local disk + MinIO
    .venv/bin/python benchmarks/scale_bench.py --gb 0.05 --model-gb 1 --no-minio  # smoke run
    .venv/bin/python benchmarks/scale_bench.py --before before.json  # after a run --save'd so

Before and after a change, run it once with each checkout on ``PYTHONPATH`` (every phase is
a fresh process of the code found there), saving the first with ``--save`` and passing that
file to the second with ``--before``.

What is measured
----------------
On a quest-log CSV of ``--gb`` GB (``shardtrain gen-data quest`` columns, made once in
``--workdir`` and reused) and on its first eighth (the same rows, a second size), for local
disk and for MinIO (``--no-minio``: local only; on MinIO the CSV is uploaded and read from
there, and the dataset written there), with ``--measure-tasks`` tasks of the full file:

* **plan**: a fresh process calling :func:`shardtrain.kubeflow.steps.plan_step` (what the
  pipeline's ``plan_shards`` pod runs: it lists the sources and chooses the fan-out; each
  worker plans the run itself and stores ``_plan.json``);
* **worker** i of N: a fresh ``shardtrain shard ... --num-workers N --worker-index i
  --processes P`` after the plan step (the first stores the plan, the others find it), one
  after the other, for the small file with N = 2 and the full file with each N of
  ``--measure-workers``;
* **settle**, only where the sharder has one: the pipeline's ``settle_step`` (which commits
  the dataset when nothing runs again), else a callable ``settle`` in
  ``shardtrain.data.sharding.settle`` or ``shardtrain.data.sharding``, called with the run's
  ``ShardConfig``, or its output URI, when every worker is done); absent: reported absent;
* **finalize**: the pipeline's ``finalize_step`` (what the ``finalize_shards`` pod runs: it
  commits the dataset and points its output at it; or, given the settle step's ``settled``
  output, only writes what that step handed over; or, with a sharder older than that hand-over,
  loads ``metadata.json`` when the settle step committed it), or where the sharder has none,
  ``sharding.finalize``;
* **wide** (``--wide-workers`` N, default 64): the plan, settle and finalize steps again on
  the full file cut into as many tasks as the modelled dataset has, sharded by N workers
  (in one process, not measured): what those steps cost at the modelled scale, where they
  read one summary per worker and a small document per task.

Each phase's CPU seconds are user + system of its whole process tree (the
``RUSAGE_CHILDREN`` delta, which includes a worker's pool processes) and its wall seconds.
From them, least-squares fits, no term negative: plan CPU = fixed + per task planned, on
the full file's runs (the plan step lists the sources, and planning -- in each worker now --
reads a sample and a content tag of at most 4 MiB per file: nothing that grows with a file's
size past a GB; a plan that reads every byte, as before, is
fitted per GB of input instead); worker CPU = fixed + per GB of the worker's tasks (the
small run and all but the last ``--measure-workers`` run; the last is held out as the
model's check); settle and finalize CPU = fixed + per task + per worker (task manifests and
worker summaries read).

What is modelled
----------------
A dataset of ``--model-gb`` GB cut into tasks by the plan's rule (about ``--task-mb`` each,
each split getting a shard per task; ``--task-rule capped``: the rule before issue 29, never
more tasks than the smallest split has shards, ``--min-shards`` at least and one per
~128 MiB of the output, whose size is the measured runs' output/input ratio), sharded by
N workers of ``--cores-per-worker`` (c) cores each:

* plan = its fixed CPU + its per-GB CPU x GB / c (the per-GB part taken as spread perfectly
  over the plan pod's c cores: optimistic, so the plan's share is a lower bound) + its
  per-task CPU x tasks;
* worker = its fixed CPU + ceil(ceil(tasks / N) / c) x one task's CPU (tasks run one per
  process, c at a time); the critical path takes the busiest worker;
* settle and finalize = fixed + per-task CPU x tasks + per-worker CPU x workers, on one
  core;
* critical path = plan + busiest worker + settle + finalize + one pod start-up per stage
  (``--pod-start-s``, default 0: pod scheduling, image pull and start-up latency are not
  measured, only assumed);
* total work = all phases' CPU (plan, every worker's fixed part, every task, settle,
  finalize); work / N = total work / (N x c), the time N workers of c cores need for it
  perfectly spread; ratio = critical path / (work / N), with the targets at N = 16 (<= 1.25)
  and N = 64 (<= 1.5).

Not modelled: contention for object storage or the network (MinIO here is local), the
phases' I/O waits (the model takes CPU seconds; measured wall seconds are printed beside
them), skew between tasks beyond their byte sizes, and retries.

The check: for each measured N the model's per-worker CPU and critical path next to the
measured ones (the held-out N is predicted from the other runs). Figures go to stdout; record
them in benchmarks/RESULTS.md with the machine and its load.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shard_bench import REPO, _clear, _minio_env, compile_bytecode, generate, run_measured

MIB = 1 << 20
#: The sharder's defaults that the plan's rule for the number of tasks uses (see
#: :func:`shardtrain.data.sharding.plan.build_plan`).
SPLITS = (0.9, 0.1)
TARGET_SHARD_MB = 128
MAX_SHARDS_PER_TASK = 16
#: Worker counts of the scale table, and the targets of the ratio.
MODEL_WORKERS = (1, 2, 4, 8, 16, 32, 64)
TARGETS = {16: 1.25, 64: 1.5}
#: The quest logs' label and key (as shard_bench.py shards them).
LABEL, KEY = "cleared", "attempt_id"

_PLAN_CODE = """
import json, sys
try:  # what the plan_shards pod imports
    from shardtrain.kubeflow.shard_steps import plan_step
except ImportError:
    from shardtrain.kubeflow.steps import plan_step
print(json.dumps(plan_step(num_workers=int(sys.argv[2]), **json.loads(sys.argv[1]))))
"""

#: Not a phase: the task sizes of the run's plan -- the one stored at the output, else (a plan
#: step that only lists the sources, the workers planning the run themselves) the plan built
#: here from the run's parameters, not stored.
_PLAN_INFO_CODE = """
import json, sys
from shardtrain import storage
from shardtrain.data.sharding import PLAN_NAME, Plan, ShardConfig, build_plan
from shardtrain.options import from_params
out, params = sys.argv[1], json.loads(sys.argv[2])
uri = storage.join(out, PLAN_NAME)
if storage.exists(uri):
    d = storage.read_json(uri)
else:
    d = build_plan(ShardConfig(**from_params(ShardConfig, params))).to_dict()
try:
    sizes = [t.input_bytes for t in Plan.from_dict(out, d).tasks]
except Exception:  # a plan format this script does not know: equal tasks
    sizes = None
print(json.dumps({"tasks": len(d.get("tasks", ())), "task_bytes": sizes}))
"""

_SETTLE_CODE = """
import importlib, inspect, json, sys
from shardtrain.data.sharding import ShardConfig
from shardtrain.options import from_params
module, params, n = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
handover = sys.argv[4]  # the settled output's file, where the step has one
try:  # what the settle_shards pod imports
    from shardtrain.kubeflow import shard_steps as steps
except ImportError:
    from shardtrain.kubeflow import steps
if hasattr(steps, "settle_step"):  # what the pipeline's settle_shards pod runs
    if "settled" in inspect.signature(steps.settle_step).parameters:
        params["settled"] = handover
    print(steps.settle_step(**params, num_workers=n, worker_reports=[]))
    raise SystemExit(0)
settle = importlib.import_module(module).settle
config = ShardConfig(**from_params(ShardConfig, params), num_workers=n)
sig = inspect.signature(settle)
first = next(iter(sig.parameters.values()))
wants_config = first.name == "config" or "ShardConfig" in str(first.annotation)
extra = {"num_workers": n} if "num_workers" in sig.parameters else {}
print(repr(settle(config if wants_config else config.output, **extra))[:300])
"""

_FINALIZE_CODE = """
import inspect, os, sys, tempfile, types
out, handover = sys.argv[1], sys.argv[2]
try:  # what the finalize_shards pod imports
    from shardtrain.kubeflow import shard_steps as steps
    steps.finalize_step
except (ImportError, AttributeError):
    from shardtrain.kubeflow import steps
if hasattr(steps, "finalize_step"):  # what the pipeline's finalize_shards pod runs
    tmp = tempfile.mkdtemp()
    art = lambda name: types.SimpleNamespace(path=os.path.join(tmp, name), metadata={})
    extra = {}
    if "settled" in inspect.signature(steps.finalize_step).parameters:
        # The settle step's hand-over ('' when it committed nothing).
        extra["settled"] = open(handover).read() if os.path.exists(handover) else ""
        extra["data_checks_report"] = art("report.md")
    steps.finalize_step(dataset_uri=out, worker_reports=[], dataset=art("dataset"), **extra)
    raise SystemExit(0)
from shardtrain import storage
from shardtrain.data.metadata import DatasetMetadata
if storage.exists(storage.join(out, "metadata.json")):
    DatasetMetadata.load(out)
else:
    from shardtrain.data.sharding import finalize
    finalize(out)
"""

#: Not a phase: a dataset of many tasks and workers sharded in one process (its workers one
#: after the other), for the settle and finalize steps to be measured on it.
_WIDE_CODE = """
import json, sys
from shardtrain.data.sharding import ShardConfig, shard
from shardtrain.options import from_params
params, n, processes = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    config = ShardConfig(
        **from_params(ShardConfig, params), num_workers=n, worker_index=i, processes=processes
    )
    shard(config)
"""

_UPLOAD_CODE = """
import sys
from shardtrain import storage
if not storage.exists(sys.argv[2]) or storage.size(sys.argv[2]) != int(sys.argv[3]):
    storage.upload_file(sys.argv[1], sys.argv[2])
"""


def measured_code() -> str:
    """Which sharder the phases run: its directory and, in a git checkout, its commit."""
    import shardtrain

    where = Path(shardtrain.__file__).resolve().parent
    git = ["git", "-C", str(where)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        return str(where)
    changed = subprocess.run([*git, "status", "--porcelain", "--", "."], capture_output=True)
    return f"{where} at {head.stdout.strip()}{' + changes' if changed.stdout else ''}"


def settle_module() -> str | None:
    """The module whose ``settle`` the pipeline would run between the workers and finalize,
    if the sharder on ``PYTHONPATH`` has one."""
    for name in ("shardtrain.data.sharding.settle", "shardtrain.data.sharding"):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue
        if callable(getattr(module, "settle", None)):
            return name
    return None


@dataclass
class Phase:
    """One measured process: a phase of one run."""

    phase: str  # plan, worker, settle, finalize
    cpu: float
    wall: float
    worker: int = -1
    gb: float = 0.0  # input GB the phase covers (a worker: its tasks')
    tasks: int = 0  # tasks the phase covers
    workers: int = 0  # workers whose tasks the phase covers (settle, finalize)


@dataclass
class Run:
    """One sharding of one file by N workers, phase by phase."""

    storage: str
    label: str
    num_workers: int
    processes: int
    gb: float
    tasks: int
    phases: list[Phase] = field(default_factory=list)
    settle_result: str = ""

    def of(self, phase: str) -> list[Phase]:
        return [p for p in self.phases if p.phase == phase]

    def critical_wall(self) -> float:
        """The measured critical path: workers run one after another here, so the busiest
        worker's wall stands for the fan-out's."""
        workers = self.of("worker")
        return sum(p.wall for p in self.phases if p.phase != "worker") + max(
            (p.wall for p in workers), default=0.0
        )


def shard_params(src: str, output: str, task_mb: float, min_shards: int) -> dict[str, Any]:
    """The pipeline's sharding parameters of a run (what plan_shards and every shard get)."""
    return {
        "sources": src,
        "dataset_uri": output,
        "label": LABEL,
        "key": KEY,
        "task_mb": task_mb,
        "min_shards": min_shards,
    }


def plan_info(output: str, params: dict[str, Any], env: dict[str, str] | None) -> dict[str, Any]:
    """The tasks of the run's plan and their input bytes (not measured)."""
    code = [sys.executable, "-c", _PLAN_INFO_CODE, output, json.dumps(params)]
    return json.loads(str(run_measured(code, env)["stdout"]))


def _handover_file() -> str:
    """A fresh path for the settle step's ``settled`` output (what the finalize step takes
    over when the settle step committed the dataset)."""
    path = os.path.join(tempfile.gettempdir(), f"scale-bench-settled-{os.getpid()}")
    if os.path.exists(path):
        os.remove(path)
    return path


def measure_run(
    *,
    storage: str,
    label: str,
    src: str,
    size: int,
    output: str,
    num_workers: int,
    processes: int,
    task_mb: float,
    min_shards: int,
    settle: str | None,
    env: dict[str, str] | None,
    expected_tasks: int,
) -> Run:
    """Plan, run every worker that has work, settle (if any) and finalize, each measured."""
    _clear(output, env)
    handover = _handover_file()
    params = shard_params(src, output, task_mb, min_shards)
    py = sys.executable
    plan = run_measured([py, "-c", _PLAN_CODE, json.dumps(params), str(num_workers)], env)
    info = plan_info(output, params, env)
    n_tasks = info["tasks"] or expected_tasks  # a plan that does not list its tasks (yet)
    task_bytes = info["task_bytes"] or [size / n_tasks] * n_tasks
    said = str(plan["stdout"])  # the step's return value, printed last
    workers = json.loads(said.splitlines()[-1]) if said else None
    if not (isinstance(workers, list) and all(isinstance(i, int) for i in workers)):
        workers = list(range(min(num_workers, n_tasks)))  # the step's answer changed form
    run = Run(storage, label, num_workers, processes, size / 1e9, n_tasks)
    run.phases.append(
        Phase("plan", plan["cpu_seconds"], plan["seconds"], gb=size / 1e9, tasks=n_tasks)
    )
    for i in workers:
        mine = [b for t, b in enumerate(task_bytes) if t % num_workers == i]
        r = run_measured(
            [
                py,
                "-m",
                "shardtrain.cli",
                "shard",
                src,
                "--output",
                output,
                "--label",
                LABEL,
                "--key",
                KEY,
                "--task-mb",
                str(task_mb),
                "--min-shards",
                str(min_shards),
                "--num-workers",
                str(num_workers),
                "--worker-index",
                str(i),
                "--processes",
                str(processes),
            ],
            env,
        )
        run.phases.append(
            Phase("worker", r["cpu_seconds"], r["seconds"], i, sum(mine) / 1e9, len(mine))
        )
    if settle is not None:
        try:
            r = run_measured(
                [py, "-c", _SETTLE_CODE, settle, json.dumps(params), str(num_workers), handover],
                env,
            )
        except SystemExit as e:  # called the wrong way: say so, and let finalize try
            run.settle_result = f"FAILED: {str(e).strip().splitlines()[-1]}"
        else:
            said = str(r["stdout"])
            run.settle_result = said.splitlines()[-1] if said else ""
            run.phases.append(_step_phase("settle", r, n_tasks, num_workers))
    # What the finalize_shards pod does: point at the dataset the settle step committed
    # (its hand-over), or commit it.
    r = run_measured([py, "-c", _FINALIZE_CODE, output, handover], env)
    run.phases.append(_step_phase("finalize", r, n_tasks, num_workers))
    return run


def _step_phase(phase: str, measured: dict[str, Any], tasks: int, num_workers: int) -> Phase:
    """A settle or finalize step's measurement, with the tasks and worker summaries it read."""
    return Phase(
        phase,
        measured["cpu_seconds"],
        measured["seconds"],
        tasks=tasks,
        workers=min(num_workers, tasks),
    )


def measure_wide(
    *,
    storage: str,
    src: str,
    output: str,
    num_workers: int,
    processes: int,
    task_mb: float,
    settle: str | None,
    env: dict[str, str] | None,
) -> Run:
    """Plan ``src`` in tasks of ``task_mb`` (measured), shard it by ``num_workers`` workers in
    one process (not measured), then measure the settle and finalize steps on it as
    :func:`measure_run` does."""
    print(f"{storage}: wide ({num_workers} workers, tasks of {task_mb:.2f} MiB) ...", flush=True)
    _clear(output, env)
    handover = _handover_file()
    params = shard_params(src, output, task_mb, 1)
    py = sys.executable
    plan = run_measured([py, "-c", _PLAN_CODE, json.dumps(params), str(num_workers)], env)
    run_measured([py, "-c", _WIDE_CODE, json.dumps(params), str(num_workers), str(processes)], env)
    info = plan_info(output, params, env)
    size = sum(info["task_bytes"] or ())
    run = Run(storage, f"wide N={num_workers}", num_workers, processes, size / 1e9, info["tasks"])
    run.phases.append(
        Phase("plan", plan["cpu_seconds"], plan["seconds"], gb=size / 1e9, tasks=run.tasks)
    )
    if settle is not None:
        r = run_measured(
            [py, "-c", _SETTLE_CODE, settle, json.dumps(params), str(num_workers), handover],
            env,
        )
        said = str(r["stdout"])
        run.settle_result = said.splitlines()[-1] if said else ""
        run.phases.append(_step_phase("settle", r, run.tasks, num_workers))
    r = run_measured([py, "-c", _FINALIZE_CODE, output, handover], env)
    run.phases.append(_step_phase("finalize", r, run.tasks, num_workers))
    return run


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """``(fixed, slope)`` of the least-squares line through ``(x, y)`` points, neither
    negative; with a single distinct x, the line through the origin."""
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    if not points:
        return 0.0, 0.0
    sxx = sum(x * x for x in xs)
    through_origin = (sum(x * y for x, y in points) / sxx, 0.0) if sxx else (0.0, 0.0)
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var < 1e-12:
        return 0.0, through_origin[0] if sxx else my
    slope = sum((x - mx) * (y - my) for x, y in points) / var
    fixed = my - slope * mx
    if slope < 0:
        return my, 0.0
    if fixed < 0:
        return 0.0, through_origin[0]
    return fixed, slope


def fit_plane(points: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """``(fixed, per_a, per_b)`` of the least-squares plane ``y = fixed + per_a a + per_b b``
    through ``(a, b, y)`` points, none negative: the best fit among the planes whose
    negative terms are dropped (a phase that does not grow with ``b`` gets ``per_b`` 0)."""
    if not points:
        return 0.0, 0.0, 0.0
    ys = np.array([y for *_, y in points])
    columns = np.array([[1.0, a, b] for a, b, _ in points])
    best: tuple[float, tuple[float, float, float]] | None = None
    for keep in ((0, 1, 2), (0, 1), (0, 2), (1, 2), (0,), (1,), (2,)):
        coef, *_ = np.linalg.lstsq(columns[:, keep], ys, rcond=None)
        if (coef < 0).any():
            continue
        full = [0.0, 0.0, 0.0]
        for k, c in zip(keep, coef, strict=True):
            full[k] = float(c)
        err = float(((columns @ np.array(full) - ys) ** 2).sum())
        if best is None or err < best[0] - 1e-12:
            best = (err, (full[0], full[1], full[2]))
    return best[1] if best else (0.0, 0.0, 0.0)


@dataclass
class Costs:
    """One storage's fitted costs: CPU seconds fixed and per GB (plan, worker), or fixed, per
    task and per worker (settle, finalize: task manifests and worker summaries read); a
    phase the sharder does not have is None."""

    plan: tuple[float, float]
    worker: tuple[float, float]
    settle: tuple[float, float, float] | None
    finalize: tuple[float, float, float]
    output_ratio: float  # output bytes per input byte (the plan's shard counts)
    plan_per_task: float = 0.0  # the plan's CPU per task it plans (its JSON, its tasks)


def fit_costs(runs: list[Run], held_out: Run | None, output_ratio: float) -> Costs:
    """The cost lines from the runs (the worker line without ``held_out``'s workers)."""

    def points(phase: str, x: str, runs: list[Run]) -> list[tuple[float, float]]:
        return [(getattr(p, x), p.cpu) for r in runs for p in r.of(phase)]

    def planes(phase: str) -> list[tuple[float, float, float]]:
        return [(p.tasks, p.workers, p.cpu) for r in runs for p in r.of(phase)]

    fitting = [r for r in runs if r is not held_out]
    settle = planes("settle")
    # The plan reads the listing, a sample and, per local file, a content tag of at most 64
    # blocks of 64 KiB: nothing that grows with a file's size past the full file's (1 GB),
    # only with the tasks it plans. So: fixed + per task, on the full file's runs (the wide
    # one has the modelled task count). A sharder whose plan still reads the data (before)
    # is fitted per GB, on both sizes.
    full = max((r.gb for r in runs), default=0.0)
    at_full = [(p.tasks, p.cpu) for r in runs if r.gb == full for p in r.of("plan")]
    per_gb = fit(points("plan", "gb", runs))
    plan_fixed, plan_per_task = fit(at_full) if at_full else (0.0, 0.0)
    reads_data = per_gb[1] > 0.5  # CPU-s per GB: a plan that reads every byte
    return Costs(
        plan=per_gb if reads_data else (plan_fixed, 0.0),
        plan_per_task=0.0 if reads_data else plan_per_task,
        worker=fit(points("worker", "gb", fitting)),
        settle=fit_plane(settle) if settle else None,
        finalize=fit_plane(planes("finalize")),
        output_ratio=output_ratio,
    )


def model_tasks(
    gb: float, task_mb: float, ratio: float, min_shards: int, shard_per_task: bool = True
) -> int:
    """Tasks of a ``gb`` GB input by the plan's rule: ~``task_mb`` each, every task owning a
    shard of every split. With ``shard_per_task`` (the rule since issue 29) a split gets a
    shard per task; without (before), the smallest split's shard count capped the tasks."""
    size = gb * 1e9
    shards = [
        max(min_shards, math.ceil(size * ratio * f / (TARGET_SHARD_MB * MIB))) for f in SPLITS
    ]
    wanted = max(
        math.ceil(size / (task_mb * MIB)), *(math.ceil(m / MAX_SHARDS_PER_TASK) for m in shards)
    )
    if shard_per_task:
        shards = [max(m, wanted) for m in shards]
    return max(1, min(wanted, min(shards)))


@dataclass
class CriticalPath:
    """The modelled critical path of one N (seconds)."""

    n: int
    workers: int
    tasks_per_worker: int
    plan: float
    worker: float
    settle: float
    finalize: float
    pods: float
    total_cpu: float
    cores: int

    @property
    def critical(self) -> float:
        return self.plan + self.worker + self.settle + self.finalize + self.pods

    @property
    def ideal(self) -> float:
        return self.total_cpu / (self.n * self.cores)

    @property
    def ratio(self) -> float:
        return self.critical / self.ideal


def model(
    costs: Costs, gb: float, tasks: int, n: int, cores: int, pod_start: float
) -> CriticalPath:
    """The critical path of ``tasks`` equal tasks of a ``gb`` GB input on ``n`` workers of
    ``cores`` cores (see the module docstring)."""
    task_cpu = costs.worker[1] * gb / tasks
    workers = min(n, tasks)
    per_worker = math.ceil(tasks / n)
    settle = (
        costs.settle[0] + costs.settle[1] * tasks + costs.settle[2] * workers
        if costs.settle
        else 0.0
    )
    finalize = costs.finalize[0] + costs.finalize[1] * tasks + costs.finalize[2] * workers
    plan_cpu = costs.plan[0] + costs.plan[1] * gb + costs.plan_per_task * tasks
    stages = 4 if costs.settle else 3
    return CriticalPath(
        n=n,
        workers=workers,
        tasks_per_worker=per_worker,
        plan=costs.plan[0] + costs.plan[1] * gb / cores + costs.plan_per_task * tasks,
        worker=costs.worker[0] + math.ceil(per_worker / cores) * task_cpu,
        settle=settle,
        finalize=finalize,
        pods=stages * pod_start,
        total_cpu=plan_cpu + workers * costs.worker[0] + tasks * task_cpu + settle + finalize,
        cores=cores,
    )


def output_bytes(path: Path) -> int:
    """The shards' bytes of a local dataset."""
    return sum(f.stat().st_size for f in path.rglob("*") if ".tfrecord" in f.name)


def head_file(src: Path, fraction: float) -> tuple[Path, int]:
    """The first ``fraction`` of ``src``, cut after a whole line, next to it (made once)."""
    want = int(src.stat().st_size * fraction)
    head = src.with_name(f"{src.stem}-head{fraction:g}.csv")
    if not head.exists() or abs(head.stat().st_size - want) > 1 << 20:
        with src.open("rb") as f:
            data = f.read(want)
        head.write_bytes(data[: data.rfind(b"\n") + 1])
    return head, head.stat().st_size


# --------------------------------------------------------------------------------------------
# Printing
# --------------------------------------------------------------------------------------------


def print_runs(runs: list[Run]) -> None:
    print(
        f"\n{'storage':<8}{'run':<12}{'phase':<10}{'worker':>7}{'tasks':>6}{'GB':>8}"
        f"{'CPU-s':>8}{'wall-s':>8}{'CPU/wall':>9}"
    )
    for r in runs:
        for p in r.phases:
            worker = str(p.worker) if p.worker >= 0 else ""
            tasks = p.tasks or (r.tasks if p.phase == "plan" else 0)
            print(
                f"{r.storage:<8}{r.label:<12}{p.phase:<10}{worker:>7}{tasks:>6}{p.gb:>8.3f}"
                f"{p.cpu:>8.2f}{p.wall:>8.2f}{p.cpu / max(p.wall, 1e-9):>9.2f}"
            )
        if r.settle_result:
            print(f"{'':<20}settle returned {r.settle_result}")


def print_costs(storage: str, costs: Costs, settle: str | None) -> None:
    print(f"\n{storage}: fitted CPU costs (fixed + proportional)")
    print(
        f"  plan       {costs.plan[0]:7.2f} s + {costs.plan[1]:6.2f} CPU-s per GB of input + "
        f"{costs.plan_per_task:6.4f} per task"
    )
    print(
        f"  worker     {costs.worker[0]:7.2f} s + {costs.worker[1]:6.2f} CPU-s per GB of its tasks"
    )
    if costs.settle is None:
        print("  settle     absent (no shardtrain.data.sharding settle entry point)")
    else:
        fixed, per_task, per_worker = costs.settle
        print(
            f"  settle     {fixed:7.2f} s + {per_task:7.4f} CPU-s per task + {per_worker:7.4f} "
            f"per worker ({settle})"
        )
    fixed, per_task, per_worker = costs.finalize
    print(
        f"  finalize   {fixed:7.2f} s + {per_task:7.4f} CPU-s per task + {per_worker:7.4f} "
        "per worker"
    )
    print(f"  output/input bytes {costs.output_ratio:.3f}")


def print_check(costs: Costs, runs: list[Run], held_out: Run | None) -> None:
    """Measured per-worker CPU and critical path next to the model's, for each full run."""
    for r in runs:
        tag = " (held out: predicted)" if r is held_out else " (in the fit)"
        print(f"\n{r.storage} {r.label}: N = {r.num_workers}, {r.processes} process(es){tag}")
        print(
            f"  {'worker':>6}{'tasks':>6}{'GB':>7}{'CPU meas':>10}{'model':>8}"
            f"{'wall meas':>11}{'model':>8}"
        )
        task_cpu = costs.worker[1] * r.gb / r.tasks
        for p in r.of("worker"):
            cpu = costs.worker[0] + costs.worker[1] * p.gb
            wall = costs.worker[0] + math.ceil(p.tasks / r.processes) * task_cpu
            print(
                f"  {p.worker:>6}{p.tasks:>6}{p.gb:>7.3f}{p.cpu:>10.2f}{cpu:>8.2f}"
                f"{p.wall:>11.2f}{wall:>8.2f}"
            )
        m = model(costs, r.gb, r.tasks, r.num_workers, r.processes, 0.0)
        print(
            f"  critical path (plan + busiest worker + settle + finalize): measured "
            f"{r.critical_wall():.2f} s wall, model {m.critical:.2f} s"
        )


def scale_table(costs: Costs, args: argparse.Namespace) -> list[dict[str, Any]]:
    tasks = model_tasks(
        args.model_gb,
        args.task_mb,
        costs.output_ratio,
        args.min_shards,
        shard_per_task=args.task_rule == "shard-per-task",
    )
    rows = []
    for n in MODEL_WORKERS:
        m = model(costs, args.model_gb, tasks, n, args.cores_per_worker, args.pod_start_s)
        rows.append(
            {
                **asdict(m),
                "critical": m.critical,
                "ideal": m.ideal,
                "ratio": m.ratio,
                "tasks": tasks,
            }
        )
    return rows


def print_scale(title: str, rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    tasks = rows[0]["tasks"]
    print(
        f"\n{title}: {args.model_gb:g} GB in {tasks} tasks (~{args.model_gb * 1e3 / tasks:,.0f} MB "
        f"each), {args.cores_per_worker} cores per worker, pod start-up {args.pod_start_s:g} s "
        f"per stage (assumed)"
    )
    print(
        f"{'N':>4}{'busy':>5}{'tasks/w':>8}{'plan s':>9}{'worker s':>10}{'settle s':>9}"
        f"{'final s':>9}{'pods s':>7}{'critical s':>11}{'plan share':>11}{'work/N s':>10}"
        f"{'ratio':>7}"
    )
    print(
        "  (busy: workers with tasks; plan share: of the critical path; work/N: all phases' "
        "CPU-s / (N x c); ratio: critical / work/N)"
    )
    for r in rows:
        print(
            f"{r['n']:>4}{r['workers']:>5}{r['tasks_per_worker']:>8}{r['plan']:>9.1f}"
            f"{r['worker']:>10.1f}"
            f"{r['settle']:>9.1f}{r['finalize']:>9.1f}{r['pods']:>7.1f}{r['critical']:>11.1f}"
            f"{r['plan'] / r['critical']:>11.1%}{r['ideal']:>10.1f}{r['ratio']:>7.2f}"
        )
    for n, target in TARGETS.items():
        row = next(r for r in rows if r["n"] == n)
        verdict = "met" if row["ratio"] <= target else "NOT met"
        print(f"  target N = {n}: ratio <= {target}: {row['ratio']:.2f} -> {verdict}")
    cores = args.cores_per_worker
    if tasks < max(MODEL_WORKERS) * cores:
        print(
            f"  note: {tasks} tasks: N workers of {cores} cores are all busy only with "
            f">= N x {cores} tasks"
        )


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def measure_storage(
    storage: str,
    files: dict[str, tuple[str, int]],
    work: Path,
    out_base: str,
    args: argparse.Namespace,
    settle: str | None,
    env: dict[str, str] | None,
) -> tuple[list[Run], Run | None]:
    """The small run (N = 2) and a full run per ``--measure-workers`` N on one storage."""
    processes = min(args.cores_per_worker, os.cpu_count() or 1)
    full_size = files["full"][1]
    task_mb = round(full_size / args.measure_tasks / MIB, 4)
    runs = []
    cases = [("small", 2), *((f"full N={n}", n) for n in args.measure_workers)]
    for label, n in cases:
        src, size = files["small" if label == "small" else "full"]
        output = f"{out_base}/out-{'small' if label == 'small' else 'full'}"
        print(f"{storage}: {label} ({size / 1e6:,.0f} MB, {n} workers) ...", flush=True)
        runs.append(
            measure_run(
                storage=storage,
                label=label,
                src=src,
                size=size,
                output=output,
                num_workers=n,
                processes=processes,
                task_mb=task_mb,
                min_shards=args.measure_tasks,
                settle=settle,
                env=env,
                expected_tasks=args.measure_tasks if label != "small" else 4,
            )
        )
        if storage == "local" and label != "small":
            ratio = output_bytes(Path(output)) / full_size
            args.measured_ratio = ratio
    held_out = runs[-1] if len(args.measure_workers) > 1 else None
    if args.wide_workers:
        # The settle and finalize steps of the modelled run's shape: as many tasks, as many
        # workers (so as many worker summaries) as the largest N of the model.
        tasks = model_tasks(args.model_gb, args.task_mb, args.measured_ratio, args.min_shards)
        runs.append(
            measure_wide(
                storage=storage,
                src=files["full"][0],
                output=f"{out_base}/out-wide",
                num_workers=args.wide_workers,
                processes=processes,
                task_mb=round(full_size / tasks / MIB, 4),
                settle=settle,
                env=env,
            )
        )
    if not args.keep and storage == "local":
        for name in ("out-small", "out-full", "out-wide"):
            shutil.rmtree(work / name, ignore_errors=True)
    return runs, held_out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=1.0, help="measured CSV size in GB")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "scale-bench"))
    parser.add_argument("--no-minio", action="store_true", help="local disk only")
    parser.add_argument("--keep", action="store_true", help="keep the local datasets made")
    parser.add_argument(
        "--measure-workers",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[4, 16],
        help="worker counts of the measured full runs, comma-separated; the last is held "
        "out of the fit as the model's check [default: 4,16]",
    )
    parser.add_argument(
        "--measure-tasks", type=int, default=32, help="tasks of the measured full file [32]"
    )
    parser.add_argument(
        "--wide-workers",
        type=int,
        default=64,
        help="also measure the settle and finalize steps on the full file cut into the "
        "modelled run's number of tasks, sharded by this many workers (0: not) [64]",
    )
    parser.add_argument("--model-gb", type=float, default=100.0, help="modelled GB [100]")
    parser.add_argument(
        "--task-mb", type=float, default=128.0, help="modelled task size, MiB [128: the default]"
    )
    parser.add_argument(
        "--min-shards", type=int, default=8, help="modelled --min-shards [8: the default]"
    )
    parser.add_argument(
        "--task-rule",
        choices=("shard-per-task", "capped"),
        default="shard-per-task",
        help="the plan's task rule modelled: a shard of every split per task (now), or tasks "
        "capped by the smallest split's shards (before issue 29) [shard-per-task]",
    )
    parser.add_argument("--cores-per-worker", type=int, default=2, help="c [2]")
    parser.add_argument(
        "--pod-start-s", type=float, default=0.0, help="assumed start-up of each stage's pods [0]"
    )
    parser.add_argument("--save", help="write the measurements and the scale table as JSON")
    parser.add_argument("--before", help="a --save'd JSON of an earlier run: print its table too")
    args = parser.parse_args()
    args.measured_ratio = 0.0
    started = time.monotonic()

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    src = work / f"quest-{args.gb:g}gb.csv"
    rows, size = generate(src, args.gb)
    small, small_size = head_file(src, 1 / 8)
    settle = settle_module()
    # Compile the kernels first (into numba's cache): no measured phase pays for that.
    subprocess.run(
        [sys.executable, "-m", "shardtrain.cli", "warm-up"], check=True, capture_output=True
    )
    code = measured_code()
    compile_bytecode()
    print(
        f"input: {src} {size / 1e6:,.0f} MB, {rows:,} rows (and its first eighth, "
        f"{small_size / 1e6:,.0f} MB); code: {code}; "
        f"settle phase: {settle or 'absent'}; machine: {os.cpu_count()} CPUs, load "
        f"{os.getloadavg()[0]:.1f}, {psutil.virtual_memory().total / 2**30:.0f} GiB"
    )

    local_files = {"full": (str(src), size), "small": (str(small), small_size)}
    results: dict[str, tuple[list[Run], Run | None]] = {
        "local": measure_storage("local", local_files, work, str(work), args, settle, None)
    }
    if not args.no_minio:
        state = work / "minio-state"
        env = _minio_env(state)
        try:
            files = {}
            for name, (path, n) in local_files.items():
                uri = f"s3://bench/{Path(path).name}"
                subprocess.run(
                    [sys.executable, "-c", _UPLOAD_CODE, path, uri, str(n)],
                    env={**os.environ, **env},
                    check=True,
                )
                files[name] = (uri, n)
            results["minio"] = measure_storage(
                "minio", files, work, "s3://bench", args, settle, env
            )
        finally:
            subprocess.run(
                [str(REPO / "scripts" / "minio-down")],
                env={**os.environ, "SHARDTRAIN_MINIO_STATE": str(state)},
                check=False,
            )

    all_runs = [r for runs, _ in results.values() for r in runs]
    print_runs(all_runs)
    saved: dict[str, Any] = {"args": {k: v for k, v in vars(args).items()}, "storages": {}}
    before = json.loads(Path(args.before).read_text()) if args.before else None
    for storage, (runs, held_out) in results.items():
        costs = fit_costs(runs, held_out, args.measured_ratio)
        print_costs(storage, costs, settle)
        print_check(costs, [r for r in runs if r.label.startswith("full")], held_out)
        table = scale_table(costs, args)
        if before and storage in before["storages"]:
            # The earlier code's costs, modelled with this run's settings.
            saved_costs = before["storages"][storage]["costs"]
            for phase in ("settle", "finalize"):  # saved before the per-worker term
                if saved_costs[phase] is not None:
                    saved_costs[phase] = [*saved_costs[phase], 0.0][:3]
            earlier = Costs(**saved_costs)
            title = f"{storage}, BEFORE ({before.get('code', '?')})"
            print_scale(title, scale_table(earlier, args), args)
        print_scale(f"{storage}, this code", table, args)
        saved["storages"][storage] = {
            "runs": [asdict(r) for r in runs],
            "costs": asdict(costs),
            "table": table,
        }
    saved["code"] = code
    if args.save:
        Path(args.save).write_text(json.dumps(saved, indent=1))
        print(f"\nsaved to {args.save}")
    print(f"\n{time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    main()
