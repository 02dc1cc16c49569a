"""The processes that run a worker's tasks beside the parent, and the OS tuning they get."""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import queue as queue_module
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor

from shardtrain import storage
from shardtrain.data.shard_config import MIB, ShardConfig
from shardtrain.data.sharding.plan import Plan, Task
from shardtrain.data.sharding.signals import default_sigterm
from shardtrain.data.sharding.task import Progress, TaskResult, run_task
from shardtrain.data.sources.base import available_cpus
from shardtrain.errors import ShardingStopped

log = logging.getLogger(__name__)


class WorkerPool:
    """The processes that run tasks beside the parent: ``min(processes, tasks) - 1`` of them.

    Where it is safe they are *forked*, right after the parent has loaded the compiled
    kernels (:func:`_warm_up`): each child starts with everything imported and compiled,
    where a spawned interpreter would first import shardtrain and load the kernels from
    numba's cache (a noticeable share of a job's CPU; see benchmarks/RESULTS.md).
    Arrow, jemalloc, OpenBLAS and fsspec reset their own threads in a forked child. Forking
    is not safe when other threads may hold locks the child would need, so the pool spawns
    instead when the process runs threads of its own (fsspec's I/O thread and a lease's
    renewal aside) or has TensorFlow loaded, and where there is no ``fork`` (macOS, Windows).
    """

    def __init__(self, config: ShardConfig, tasks: int):
        self.workers = max(0, min(config.processes or available_cpus(), tasks) - 1)
        self.executor: ProcessPoolExecutor | None = None
        self.progress = None
        if self.workers:
            fork = _fork_is_safe()
            if fork:
                _warm_up(config)
                _import_clients(config)
            ctx = multiprocessing.get_context("fork" if fork else "spawn")
            log.debug("%d pool process(es), %s", self.workers, ctx.get_start_method())
            self.progress = ctx.SimpleQueue()  # (rows, bytes) per block from the processes
            self.executor = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=ctx,
                initializer=_init_pool_process,
                initargs=(self.progress, None if fork else config, os.getpid()),
            )
            # A forking executor starts all its processes at the first submission, a
            # spawning one a process per submission: either way, every process starts now.
            for _ in range(self.workers):
                self.executor.submit(int)

    @classmethod
    def before_storage(cls, config: ShardConfig) -> WorkerPool | None:
        """A pool forked now, before the run's first storage call, or None.

        Object storage clients start threads (s3fs' DNS resolver runs in an executor thread
        that may hold a lock of the C library when the process forks), after which
        :class:`WorkerPool` must spawn its processes: each then imports shardtrain and loads
        the kernels again (about 1.2 CPU-s per process on a shard worker reading MinIO; see
        benchmarks/RESULTS.md). Made before the listing, the plan and the lease, the pool can
        still fork. It has a process per CPU asked for but one, whatever the tasks turn out
        to be (an idle forked process costs next to nothing). None when forking is not safe
        already (the run then makes its pool later, sized by its tasks, as before) or when
        the run has one process.
        """
        processes = config.processes or available_cpus()
        if processes <= 1 or not _fork_is_safe():
            return None
        return cls(config, processes)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=True)


def run_tasks(
    plan: Plan,
    tasks: list[Task],
    config: ShardConfig,
    advance: Progress | None,
    pool: WorkerPool,
) -> list[TaskResult]:
    """Run tasks here and in the pool's processes, taking them in turn.

    The parent works too (it has the plan and its imports loaded already), so N processes
    cost N process footprints, not N + 1. Tasks are handed out one at a time from a shared
    queue: a process that finishes early simply takes the next task.
    """
    helpers = min(pool.workers, len(tasks) - 1)
    if helpers <= 0 or pool.executor is None:
        return [run_task(plan, t, config, advance) for t in tasks]
    executor = pool.executor
    todo: queue_module.Queue[Task] = queue_module.Queue()
    for t in tasks:
        todo.put(t)
    results: dict[int, TaskResult] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()
    local_advance = advance
    if advance is not None:

        def local_advance(rows: int, nbytes: int) -> None:
            with lock:
                advance(rows, nbytes)

    progress = pool.progress
    assert progress is not None  # a pool with processes has their progress queue

    def pump() -> None:
        while (item := progress.get()) is not None:
            if local_advance:
                local_advance(*item)

    def feed() -> None:
        plan_dict = plan.to_dict()
        while not errors:
            try:
                task = todo.get_nowait()
            except queue_module.Empty:
                return
            try:
                result = executor.submit(
                    _run_task_in_process, plan.output, plan_dict, task.index, config
                ).result()
                results[task.index] = result
            except BaseException as exc:  # re-raised by the caller
                errors.append(exc)

    pumper = threading.Thread(target=pump, daemon=True)
    pumper.start()
    try:
        feeders = [threading.Thread(target=feed, daemon=True) for _ in range(helpers)]
        for f in feeders:
            f.start()
        while not errors:
            try:
                task = todo.get_nowait()
            except queue_module.Empty:
                break
            try:
                results[task.index] = run_task(plan, task, config, local_advance)
            except BaseException as exc:
                errors.append(exc)
        for f in feeders:
            f.join()
    finally:
        progress.put(None)
        pumper.join()
    if errors:
        # A stop asked for (SIGTERM) first: the pool it stopped fails its tasks too.
        raise next((e for e in errors if isinstance(e, ShardingStopped)), errors[0])
    return [results[t.index] for t in tasks]


def tune_process_memory() -> None:
    """Have glibc keep freed memory for reuse instead of returning it to the OS at once.

    A block allocates and frees tens of MB of NumPy buffers. With glibc's defaults a freed
    buffer is often given back (``munmap``, or trimming the heap top) and the next block's
    comes back as fresh pages that the kernel must zero. Raising the mmap and trim thresholds
    keeps them in the heap: fewer page faults and less system time for a little more RSS
    per process (figures in benchmarks/RESULTS.md). Process-wide, so the CLI and the
    pipeline's shard step call it for their own process; library callers decide for theirs.
    No-op without glibc.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
        libc.mallopt(m_mmap_threshold, 64 * MIB)
        libc.mallopt(m_trim_threshold, 256 * MIB)
    except (OSError, AttributeError):
        pass


def _fork_is_safe() -> bool:
    """Whether this process can fork pool processes (see :class:`WorkerPool`)."""
    if "fork" not in multiprocessing.get_all_start_methods() or "tensorflow" in sys.modules:
        return False
    main = threading.main_thread()
    # fsspec's I/O loop and a lease's renewal hold no lock a child would take.
    harmless = ("fsspecIO", "lease-renewal")
    return all(t is main or t.name in harmless for t in threading.enumerate())


def _die_with_parent(parent: int) -> None:
    """Make a pool process exit when its parent, pid ``parent``, dies (kill -9 of the CLI).

    A watcher thread polls the parent pid. (``PR_SET_PDEATHSIG`` would be simpler but fires
    when the *thread* that spawned the process exits, and the pool spawns processes from its
    feeder threads, which end early: that killed healthy workers with 3+ processes.) The
    parent's pid comes from the parent: a spawned process takes a second to start, and one
    whose parent died meanwhile, reading its parent pid itself, would watch its new parent
    (init) forever -- blocked on the progress queue nobody reads.
    """
    if os.getppid() != parent:
        os._exit(137)

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(137)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


_progress_queue = None


def _init_pool_process(queue, warm_up: ShardConfig | None, parent: int) -> None:
    """Set up a pool process of the pool made by process ``parent``; a spawned one
    (``warm_up`` given) also loads the source's kernels (a forked one has them from the
    parent)."""
    global _progress_queue
    default_sigterm()
    _die_with_parent(parent)
    _progress_queue = queue
    logging.basicConfig(level=logging.WARNING)
    if warm_up is not None:
        _warm_up(warm_up)


def _warm_up(config: ShardConfig) -> None:
    """Load the source's compiled kernels (:meth:`Source.warm_up`) before the first task."""
    try:
        config.source().warm_up()
    except Exception:  # only a head start: the first task loads what it needs anyway
        log.debug("warm-up failed", exc_info=True)


def _import_clients(config: ShardConfig) -> None:
    """Import the object stores' client libraries the run will use, before the fork
    (:func:`shardtrain.storage.import_client`), so that the processes share them."""
    for uri in (*config.sources, config.output):
        try:
            storage.import_client(uri)
        except Exception:  # only a head start: the run reports a bad URI itself
            log.debug("no client imported for %s", uri, exc_info=True)


def _run_task_in_process(
    output: str, plan_dict: dict, index: int, config: ShardConfig
) -> TaskResult:
    plan = Plan.from_dict(output, plan_dict)
    queue = _progress_queue

    def report(rows: int, nbytes: int) -> None:
        if queue is not None:
            queue.put((rows, nbytes))

    return run_task(plan, plan.tasks[index], config, report)
