"""Where a chief + worker training step goes: the step taken apart, piece by piece.

Usage (from the repository root, in the project environment)::

    .venv/bin/python benchmarks/multiworker_step_bench.py                 # every variant, 3 rounds
    .venv/bin/python benchmarks/multiworker_step_bench.py --variants full,allreduce --rounds 5
    .venv/bin/python benchmarks/multiworker_step_bench.py --trace /tmp/mw-trace   # + a profile

Each measurement starts ``--workers`` fresh processes on localhost (a ``TF_CONFIG`` cluster of
a chief and workers, ``MultiWorkerMirroredStrategy`` over gRPC, exactly as
``shardtrain run-local`` does) that train the tabular model of the quest dataset (30 numeric +
5 categorical columns, the input benchmark's data) on **one cached batch fed again and again**
(input excluded unless the variant says otherwise), and report milliseconds per step from the
chief: ``--steps`` steps in one ``tf.function`` call after a warm-up call.

Variants (each one removes a piece of the trainer's step, or keeps only one):

* ``full``: the trainer's own loop (``loop.build_train_loop``: forward, backward, gradient
  all-reduce and Adam inside ``apply_gradients``, the per-step all-reduce of loss, correct
  predictions and the stop flag, the global step);
* ``input``: ``full`` reading the real shards through ``loop.distributed_input``;
* ``no_metrics``: forward, backward, ``apply_gradients`` (with its all-reduce); no second
  all-reduce;
* ``no_apply``: forward, backward and the gradient all-reduce, no optimizer update;
* ``compute``: forward and backward only, no collective at all (what the two processes cost
  each other on shared cores);
* ``allreduce``: only ``loop.measure_all_reduce`` (now: the all-reduce of gradient-shaped
  zeros, then the 3-number one; before this change: the first alone);
* ``scalar``: only a 3-number all-reduce (the per-step metrics/stop all-reduce alone);
* ``empty``: ``strategy.run`` of nothing (the loop's own cost).

Environments (``--envs``) are applied to every process: ``default`` (the trainer's
``cluster.make_strategy``, which now binds co-located replicas to their own CPUs);
``unpinned`` (``MultiWorkerMirroredStrategy`` from ``TF_CONFIG``, no binding: the trainer
before); ``threads1`` (``TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1``); ``pinned``
(each process bound to its own core by the benchmark); ``ring``
(``CommunicationImplementation.RING``); ``pack`` (``bytes_per_pack`` 32 MB); ``nospin``
(``ConfigProto.experimental.disable_thread_spinning``, through a private TF attribute);
``compare`` (with ``--compare-src``: another checkout, e.g. main before this change).
``threads1`` and ``nospin`` are unpinned. ``--single`` adds one-process references: ``full``
under ``MirroredStrategy`` and under a one-worker ``MultiWorkerMirroredStrategy``.
``--e2e`` measures the whole trainer instead (``shardtrain run-local``, real input).

Rounds interleave every (variant, environment) pair; the table shows the median and the best
ms/step. Figures and the attribution go to benchmarks/RESULTS.md (issue 17, Multi-worker).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NUMERIC, CATEGORICAL = 30, 5
LABEL, KEY = "cleared", "attempt_id"
VARIANTS = ("full", "input", "no_metrics", "no_apply", "compute", "allreduce", "scalar", "empty")
ENVS = {
    "default": {},
    "unpinned": {"BENCH_UNPINNED": "1"},
    "threads1": {
        "TF_NUM_INTRAOP_THREADS": "1",
        "TF_NUM_INTEROP_THREADS": "1",
        "BENCH_UNPINNED": "1",
    },
    "pinned": {"BENCH_PIN": "1"},
    "ring": {"BENCH_IMPL": "RING"},
    "pack": {"BENCH_PACK": str(32 << 20)},
    "nospin": {"BENCH_NOSPIN": "1", "BENCH_UNPINNED": "1"},
}


# ------------------------------------------------------------------------------------------
# One replica (a child process)
# ------------------------------------------------------------------------------------------


def _strategy(kind: str):
    import tensorflow as tf

    if os.environ.get("BENCH_NOSPIN"):
        from tensorflow.core.protobuf import config_pb2
        from tensorflow.python.eager import context

        ctx = context.context()
        config = ctx._config or config_pb2.ConfigProto()
        config.experimental.disable_thread_spinning = True
        ctx._config = config

    if kind == "mirrored":
        return tf.distribute.MirroredStrategy()
    if kind == "multi1":  # a one-worker cluster (the trainer would pick MirroredStrategy)
        return tf.distribute.MultiWorkerMirroredStrategy()
    impl = os.environ.get("BENCH_IMPL")
    pack = int(os.environ.get("BENCH_PACK", "0"))
    if os.environ.get("BENCH_UNPINNED"):  # what make_strategy did before it bound CPUs
        return tf.distribute.MultiWorkerMirroredStrategy()
    if impl or pack:
        options = tf.distribute.experimental.CommunicationOptions(
            bytes_per_pack=pack,
            implementation=getattr(tf.distribute.experimental.CommunicationImplementation, impl)
            if impl
            else tf.distribute.experimental.CommunicationImplementation.AUTO,
        )
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    from shardtrain.train import cluster

    return cluster.make_strategy(cluster.resolve_role())


def replica(args: argparse.Namespace) -> None:
    """Build the model and the chosen step, time ``--steps`` steps, print JSON (the chief)."""
    if os.environ.get("BENCH_PIN"):
        index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        role_index = 0 if json.loads(os.environ["TF_CONFIG"])["task"]["type"] == "chief" else 1
        os.sched_setaffinity(0, {(role_index + index) % os.cpu_count()})
    strategy = _strategy(args.strategy)

    import keras
    import tensorflow as tf

    from shardtrain.data.metadata import DatasetMetadata
    from shardtrain.train import dataset
    from shardtrain.train.config import ModelConfig, TrainConfig
    from shardtrain.train.features import FeatureSpec
    from shardtrain.train.loop import (
        build_train_loop,
        distributed_input,
        measure_all_reduce,
        stop_request_variable,
    )
    from shardtrain.train.models import build_model, model_inputs

    batch = args.batch
    meta = DatasetMetadata.load(args.data)
    spec = FeatureSpec.from_metadata(meta)
    with strategy.scope():
        model = build_model("tabular", spec, ModelConfig().hparams())
        optimizer = keras.optimizers.Adam()
        optimizer.build(model.trainable_variables)
        step = tf.Variable(
            0,
            dtype=tf.int64,
            trainable=False,
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )
    if args.variant == "input":
        config = TrainConfig(data=args.data, model_dir="unused", batch_size=batch)
        iterator, _ = distributed_input(
            strategy, config, meta, spec, tempfile.mkdtemp(prefix="mwbench-"), seed=1
        )
    else:

        def one_batch(ctx):
            per_replica = ctx.get_per_replica_batch_size(batch)
            one = dataset.train_dataset(
                args.data, meta, spec, split="train", batch_size=per_replica
            )
            return one.take(1).cache().repeat()

        iterator = iter(strategy.distribute_datasets_from_function(one_batch))

    if args.variant == "allreduce":
        measure_all_reduce(strategy, model, repeats=2)  # warm-up
        seconds = measure_all_reduce(strategy, model, repeats=args.steps)
        _report(args, seconds)
        return

    loss_fn = keras.losses.BinaryCrossentropy(from_logits=True, reduction="none")

    def forward_backward(features, labels):
        with tf.GradientTape() as tape:
            logits = tf.reshape(model(model_inputs(model, features), training=True), [-1])
            per_example = loss_fn(tf.cast(labels, tf.float32)[:, None], logits[:, None])
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=batch)
        return loss, tape.gradient(loss, model.trainable_variables)

    def step_fn(features, labels):
        loss, grads = forward_backward(features, labels)
        if args.variant == "no_metrics":
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        elif args.variant == "no_apply":
            ctx = tf.distribute.get_replica_context()
            grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        return tf.add_n([tf.reduce_sum(g) for g in grads]) + loss

    def scalar_fn():
        return tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.SUM, tf.ones([3])
        )

    if args.variant in ("full", "input"):
        stop = stop_request_variable()
        loop = build_train_loop(strategy, model, optimizer, spec, batch, step, stop)

        def run(n):
            return loop(iterator, tf.constant(n, tf.int64))

    else:

        @tf.function
        def loop_fn(n):
            total = tf.constant(0.0)
            for _ in tf.range(n):
                if args.variant == "scalar":
                    out = strategy.run(scalar_fn)
                elif args.variant == "empty":
                    out = strategy.run(lambda: tf.constant(1.0))
                else:
                    out = strategy.run(step_fn, args=next(iterator))
                total += tf.reduce_sum(strategy.experimental_local_results(out)[0])
            return total

        def run(n):
            return loop_fn(tf.constant(n, tf.int64))

    run(max(5, args.steps // 10))  # trace and warm up
    if args.trace and _is_chief():
        tf.profiler.experimental.start(args.trace)
        run(args.trace_steps)
        tf.profiler.experimental.stop()
    elif args.trace:
        run(args.trace_steps)
    started = time.monotonic()
    out = run(args.steps)
    float(tf.nest.flatten(out)[0])  # wait for it
    _report(args, (time.monotonic() - started) / args.steps)


def _is_chief() -> bool:
    raw = os.environ.get("TF_CONFIG")
    return not raw or json.loads(raw)["task"]["type"] == "chief"


def _report(args: argparse.Namespace, seconds: float) -> None:
    if _is_chief():
        print("RESULT " + json.dumps({"ms": seconds * 1e3, "variant": args.variant}), flush=True)


# ------------------------------------------------------------------------------------------
# The driver
# ------------------------------------------------------------------------------------------


def collectives_in_trace(trace_dir: str, steps: int) -> list[str]:
    """Lines "N/step  M ms each  OP NAME": the collectives a profiler trace of ``steps`` steps
    ran (``vm.xplane.pb`` read with the ``xplane_pb2`` proto shipped inside TensorFlow)."""
    import collections
    import glob
    import re

    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    totals: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for path in glob.glob(os.path.join(trace_dir, "plugins/profile/*/*.xplane.pb")):
        space = xplane_pb2.XSpace()
        with open(path, "rb") as f:
            space.ParseFromString(f.read())
        for plane in space.planes:
            for line in plane.lines:
                if not line.name.startswith("collective_ops"):
                    continue
                for event in line.events:
                    name = plane.event_metadata[event.metadata_id].name
                    if ":Collective" in name:
                        op, kind = name.rsplit(":", 1)
                        entry = totals[(kind, re.sub(r"_\d+", "", op))]
                        entry[0] += 1
                        entry[1] += event.duration_ps / 1e9
    return [
        f"{count / steps:6.2f}/step {ms / count:7.3f} ms each  {kind} {op}"
        for (kind, op), (count, ms) in sorted(totals.items(), key=lambda kv: -kv[1][0])
    ]


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def measure(
    data: str, variant: str, env_name: str, workers: int, args, strategy: str = "multi"
) -> float:
    """ms/step on the chief of a chief + ``workers`` job (0: one process, ``strategy``)."""
    base = [sys.executable, __file__, "--replica", "--data", data, "--variant", variant]
    base += ["--batch", str(args.batch), "--steps", str(args.steps), "--strategy", strategy]
    if args.trace:
        base += ["--trace", os.path.join(args.trace, f"{variant}-{env_name}")]
    env = {**os.environ, **ENVS[env_name], "TF_CPP_MIN_LOG_LEVEL": "2"}
    procs = []
    if workers:
        addrs = [f"127.0.0.1:{p}" for p in _free_ports(workers + 1)]
        cluster = {"chief": addrs[:1], "worker": addrs[1:]}
        tasks = [("chief", 0)] + [("worker", i) for i in range(workers)]
    else:
        cluster, tasks = None, [("chief", 0)]
    for kind, index in tasks:
        child_env = dict(env)
        if cluster and strategy == "multi":
            child_env["TF_CONFIG"] = json.dumps(
                {"cluster": cluster, "task": {"type": kind, "index": index}}
            )
        elif strategy == "multi1":
            port = _free_ports(1)[0]
            child_env["TF_CONFIG"] = json.dumps(
                {"cluster": {"chief": [f"127.0.0.1:{port}"]}, "task": {"type": "chief", "index": 0}}
            )
        procs.append(
            subprocess.Popen(
                ["nice", "-n", "10", *base],
                env=child_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    for line in outputs[0].splitlines():
        if line.startswith("RESULT "):
            return float(json.loads(line[7:])["ms"])
    sys.stderr.write(f"{variant}/{env_name} failed:\n{outputs[0][-2000:]}\n")
    return float("nan")


def end_to_end(data: str, args: argparse.Namespace) -> None:
    """examples/s of the whole trainer (chief + workers), per checkout and batch size."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from input_bench import train_rate

    sources = {"this": os.environ.get("PYTHONPATH", "")}
    if args.compare_src:
        sources["compare"] = os.path.abspath(args.compare_src)
    batches = (128, 1024)
    results: dict[tuple[str, int], list[float]] = {(s, b): [] for s in sources for b in batches}
    for rnd in range(args.rounds):
        for (source, batch), rates in results.items():
            os.environ["PYTHONPATH"] = sources[source]
            steps = 3000 if batch < 1024 else 1000
            model_dir = tempfile.mkdtemp(prefix="mwstep-e2e-")
            rate, _, notes = train_rate(data, model_dir, batch, steps, args.workers)
            rates.append(rate)
            print(f"round {rnd + 1}: {source} batch {batch}: {rate:,.0f} examples/s  {notes}")
    print(f"\nchief + {args.workers} worker(s), `shardtrain train`, {args.rounds} rounds")
    for (source, batch), rates in results.items():
        good = [r for r in rates if r == r] or [float("nan")]
        print(
            f"{source:<8} batch {batch:>5}: median {statistics.median(good):>9,.0f}  "
            f"best {max(good):>9,.0f} examples/s"
        )


def _dataset(work: Path, rows: int) -> str:
    from shardtrain.data import datagen, sharding
    from shardtrain.data.metadata import DatasetMetadata

    out = work / "ds"
    try:
        DatasetMetadata.load(str(out))
        return str(out)
    except Exception:  # not there yet
        pass
    work.mkdir(parents=True, exist_ok=True)
    csv = work / "quest.csv"
    datagen.generate_quest_logs(str(csv), rows, numeric=NUMERIC, categorical=CATEGORICAL, seed=5)
    sharding.shard(sharding.ShardConfig(sources=(str(csv),), output=str(out), label=LABEL, key=KEY))
    return str(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replica", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--variant", default="full", help=argparse.SUPPRESS)
    parser.add_argument("--strategy", default="multi", help=argparse.SUPPRESS)
    parser.add_argument("--trace-steps", type=int, default=50, help=argparse.SUPPRESS)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--envs", default="default")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--single", action="store_true", help="add one-process references")
    parser.add_argument("--batch", type=int, default=128, help="global batch (examples)")
    parser.add_argument("--steps", type=int, default=300, help="steps timed per figure")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument(
        "--e2e",
        action="store_true",
        help="instead: examples/s of `shardtrain run-local --workers N -- train` (the real "
        "trainer, real input) at batch 128 and 1024, for this checkout and --compare-src",
    )
    parser.add_argument("--trace", help="write a TF profiler trace of the chief here")
    parser.add_argument(
        "--compare-src",
        help="another checkout's src/ (e.g. main's): adds the environment 'compare', every "
        "process importing shardtrain from there (before/after in the same rounds)",
    )
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "mwstep-bench"))
    args = parser.parse_args()
    if args.replica:
        replica(args)
        return

    if args.compare_src:
        ENVS["compare"] = {"PYTHONPATH": os.path.abspath(args.compare_src)}
    data = _dataset(Path(args.workdir), args.rows)
    if args.e2e:
        end_to_end(data, args)
        return
    runs = [
        (v, e, args.workers, "multi")
        for v in args.variants.split(",")
        for e in args.envs.split(",")
    ]
    if args.single:
        runs += [(v, "default", 0, s) for v in ("full",) for s in ("mirrored", "multi1")]
    results: dict[tuple, list[float]] = {r: [] for r in runs}
    for rnd in range(args.rounds):
        for run in runs:
            ms = measure(data, run[0], run[1], run[2], args, strategy=run[3])
            results[run].append(ms)
            print(f"round {rnd + 1}: {run} {ms:.2f} ms/step", flush=True)
            if args.trace and run[2]:
                trace = os.path.join(args.trace, f"{run[0]}-{run[1]}")
                for line in collectives_in_trace(trace, args.trace_steps):
                    print("    " + line, flush=True)
    print(f"\nbatch {args.batch}, {args.steps} steps per figure, {args.rounds} rounds")
    print(f"{'variant':<12} {'env':<10} {'procs':>5} {'strategy':<9} {'median':>8} {'best':>8}")
    for (variant, env_name, workers, strategy), values in results.items():
        good = [v for v in values if v == v] or [float("nan")]
        print(
            f"{variant:<12} {env_name:<10} {workers + 1:>5} {strategy:<9} "
            f"{statistics.median(good):>8.2f} {min(good):>8.2f}"
        )


if __name__ == "__main__":
    main()
