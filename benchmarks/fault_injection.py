"""Faults on purpose: kill -9 / SIGTERM at random points of sharding and training, MinIO outages.

Each trial runs the real CLI in its own processes, injects one fault at a random moment, then
does what an operator (or a TFJob restart) would do — run the same command again — and checks
the result against the input:

* **shard-kill** (local disk and MinIO, 1 or 2 processes): ``kill -9`` of the sharding process
  tree at a random point, then the same command again. Every input row must be in exactly one
  shard: no row lost, none duplicated, ``rows_read`` = the CSV's rows.
* **minio-outage**: MinIO is SIGKILLed at a random point of a sharding run and restarted 1-5 s
  later (inside the retry window): the run must complete (or, if it gave up, the re-run must),
  every row exactly once.
* **concurrent**: a second identical ``shard`` run started at a random point of the first
  (local disk and MinIO): it waits for the first run's lease or stops with one line (exit 3);
  the first run completes and the dataset holds every row exactly once.
* **disk-full**: sharding into a tmpfs of 10-90 % of the dataset's size ends in one line
  naming the object (exit 3); after the tmpfs is grown the same command completes, every row
  exactly once. (Needs ``mount``, i.e. root; reported as skipped otherwise.)
* **train-kill** (one process; chief + worker with ``run-local``): ``kill -9`` or SIGTERM of a
  replica at a random step, then the same command again until it succeeds (at most 3 times):
  training must finish at exactly ``--train-steps`` with the final checkpoint and metrics.
* **damaged** (local disk and MinIO): on a committed dataset, one shard truncated, garbled
  (one byte flipped, same size) or deleted, or one required ``metadata.json`` field garbled
  (a value of the wrong type) or deleted. ``shardtrain inspect --verify`` must exit 1 naming
  exactly that file (the shard, or ``metadata.json`` and the field) without a traceback and
  print the repair command; that command is run as printed; ``inspect --verify`` is then
  clean and the dataset holds every row exactly once.

Usage (from the repository root, in the project environment)::

    .venv/bin/python benchmarks/fault_injection.py                 # 24 trials, ~10 minutes
    .venv/bin/python benchmarks/fault_injection.py --trials 8 --seed 3
    .venv/bin/python benchmarks/fault_injection.py --kinds concurrent,disk-full --trials 8
    .venv/bin/python benchmarks/fault_injection.py --kinds damaged --trials 10

Prints one line per trial and a summary; exits 1 if any trial lost or duplicated a row or
ended training at the wrong step. Record the summary in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from shard_bench import _minio_env  # noqa: E402  (the benchmarks' private MinIO)

TRAIN_STEPS = 120


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "shardtrain.cli", *args]


@dataclass
class Trial:
    kind: str
    detail: str
    ok: bool = False
    facts: dict = field(default_factory=dict)

    def line(self) -> str:
        facts = ", ".join(f"{k}={v}" for k, v in self.facts.items())
        return f"{'ok  ' if self.ok else 'FAIL'} {self.kind:<13} {self.detail:<34} {facts}"


def _kill_tree(proc: psutil.Process | subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    parent = psutil.Process(proc.pid)
    for p in [*parent.children(recursive=True), parent]:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(sig)


def _rows_in_dataset(uri: str, env: dict[str, str]) -> tuple[int, int, int]:
    """(rows, distinct attempt_ids, rows_read) of a committed dataset's shards."""
    code = """
import json, sys
import tensorflow as tf
from shardtrain import storage
from shardtrain.data.metadata import DatasetMetadata
uri = sys.argv[1]
meta = DatasetMetadata.load(uri)
keys = []
# A list per record: one value (per-row Examples) or a block's values (columnar blocks).
spec = {"attempt_id": tf.io.RaggedFeature(tf.string)}
for split in meta.splits:
    for shard in meta.shard_uris(uri, split):
        path = shard
        if not storage.tf_can_open(shard):
            import tempfile, os
            path = os.path.join(tempfile.mkdtemp(), "s")
            storage.download_file(shard, path)
        ds = tf.data.TFRecordDataset(path, compression_type=meta.compression)
        for batch in ds.batch(4096):
            ids = tf.io.parse_example(batch, spec)["attempt_id"]
            keys.extend(ids.flat_values.numpy().tolist())
print(json.dumps([len(keys), len(set(keys)), meta.rows_read]))
"""
    out = subprocess.run(
        [sys.executable, "-c", code, uri],
        env={**env, "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True,
        text=True,
        check=True,
    )
    rows, distinct, read = json.loads(out.stdout.strip().splitlines()[-1])
    return rows, distinct, read


def shard_kill(rng, csv_path: Path, rows, out: str, env, processes: int, seconds: float):
    trial = Trial("shard-kill", f"{'minio' if out.startswith('s3') else 'local'}, {processes}p")
    args = [
        "shard", str(csv_path), "-o", out, "--label", "cleared", "--key", "attempt_id",
        "--task-mb", "1", "--min-shards", "16", "--processes", str(processes),
        "--max-bad-fraction", "0.01",
    ]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.Popen(
        _cli(*args), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    delay = rng.uniform(0.1, 0.9) * seconds
    while time.monotonic() - started < delay and proc.poll() is None:
        time.sleep(0.02)
    killed = proc.poll() is None
    if killed:
        _kill_tree(proc)
    proc.wait()
    trial.facts["killed_at_s"] = f"{delay:.1f}" if killed else "finished first"
    rerun = subprocess.run(_cli(*args), env=env, capture_output=True, text=True)
    trial.facts["rerun_exit"] = rerun.returncode
    if rerun.returncode == 0:
        got, distinct, read = _rows_in_dataset(out, env)
        trial.facts.update(rows=f"{got}/{rows[1]}", duplicated=got - distinct)
        trial.ok = (read, got) == rows and got == distinct
    return trial


def _shard_args(csv_path: Path, out: str, processes: int) -> list[str]:
    return [
        "shard", str(csv_path), "-o", out, "--label", "cleared", "--key", "attempt_id",
        "--task-mb", "1", "--min-shards", "16", "--processes", str(processes),
        "--max-bad-fraction", "0.01",
    ]  # fmt: skip


def _one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def concurrent_run(rng, csv_path: Path, rows, out: str, env, seconds: float):
    """Two identical shard runs on one output, the second started at a random point of the
    first: the second waits for the first's lease (then finds the dataset complete) or, when
    its wait runs out, stops with one line (exit 3); no live temporary is deleted, and the
    dataset holds every row exactly once."""
    trial = Trial("concurrent", f"{'minio' if out.startswith('s3') else 'local'}, 2 runs")
    args = _shard_args(csv_path, out, 1)
    first = subprocess.Popen(
        _cli(*args), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    time.sleep(rng.uniform(0.0, 0.6) * seconds)
    wait = rng.choice(["0", "600"])  # refuse at once, or wait for the first run
    second = subprocess.run(
        _cli(*args), env={**env, "SHARDTRAIN_LEASE_WAIT": wait}, capture_output=True, text=True
    )
    _, err1 = first.communicate()
    trial.facts.update(first_exit=first.returncode, second_exit=second.returncode, wait=wait)
    refused = second.returncode == 3 and "another run is writing" in _one_line(second.stderr)
    clean = "Traceback" not in err1 + second.stderr
    if first.returncode == 0 and (second.returncode == 0 or refused) and clean:
        got, distinct, read = _rows_in_dataset(out, env)
        trial.facts.update(rows=f"{got}/{rows[1]}", duplicated=got - distinct)
        trial.ok = (read, got) == rows and got == distinct
    else:
        trial.facts["error"] = _one_line(err1 + second.stderr)[:120]
    return trial


def disk_full(rng, csv_path: Path, rows, where: Path, env, dataset_bytes: int):
    """Shard into a tmpfs too small for the dataset (10-90 % of it): one line naming the
    object, exit 3; then the space is freed (the tmpfs grown) and the same command resumes,
    every row exactly once."""
    fraction = rng.uniform(0.1, 0.9)
    trial = Trial("disk-full", f"local tmpfs, {fraction:.0%} of the dataset")
    where.mkdir(parents=True, exist_ok=True)
    size = max(1 << 20, int(dataset_bytes * fraction))
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        trial.facts["skipped"] = f"cannot mount a tmpfs: {_one_line(mounted.stderr)}"
        trial.ok = True
        return trial
    try:
        out = str(where / "out")
        args = _shard_args(csv_path, out, 2)
        full = subprocess.run(_cli(*args), env=env, capture_output=True, text=True)
        line = _one_line(full.stderr)
        trial.facts.update(full_exit=full.returncode)
        one_line = "no space left" in line and "Traceback" not in full.stderr
        if full.returncode == 0:
            one_line = True  # it fitted after all (a small fraction of rejects, gzip)
        grow = subprocess.run(["mount", "-o", f"remount,size={4 * dataset_bytes}", str(where)])
        assert grow.returncode == 0
        rerun = subprocess.run(_cli(*args), env=env, capture_output=True, text=True)
        trial.facts["rerun_exit"] = rerun.returncode
        if rerun.returncode == 0 and one_line and full.returncode in (0, 3):
            got, distinct, read = _rows_in_dataset(out, env)
            trial.facts.update(rows=f"{got}/{rows[1]}", duplicated=got - distinct)
            trial.ok = (read, got) == rows and got == distinct
        else:
            trial.facts["error"] = line[:120]
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
    return trial


def minio_outage(rng, csv_path, rows, out, env, state: Path, seconds: float):
    trial = Trial("minio-outage", "kill -9 of MinIO, restart 1-5 s later")
    args = [
        "shard", str(csv_path), "-o", out, "--label", "cleared", "--key", "attempt_id",
        "--task-mb", "1", "--min-shards", "16", "--processes", "1",
        "--max-bad-fraction", "0.01",
    ]  # fmt: skip
    proc = subprocess.Popen(_cli(*args), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(rng.uniform(0.1, 0.7) * seconds)
    pid = int((state / "pid").read_text())
    os.kill(pid, signal.SIGKILL)
    down = rng.uniform(1.0, 5.0)
    time.sleep(down)
    subprocess.run(
        [str(REPO / "scripts" / "minio-up")],
        env={**env, "SHARDTRAIN_MINIO_STATE": str(state), "SHARDTRAIN_MINIO_RESUME": "1"},
        check=True,
        capture_output=True,
    )
    _, err = proc.communicate(timeout=600)
    trial.facts.update(down_s=f"{down:.1f}", first_exit=proc.returncode)
    code = proc.returncode
    if code != 0:
        trial.facts["first_error"] = err.decode().strip().splitlines()[-1][:80] if err else ""
        code = subprocess.run(_cli(*args), env=env, capture_output=True).returncode
        trial.facts["rerun_exit"] = code
    if code == 0:
        got, distinct, read = _rows_in_dataset(out, env)
        trial.facts.update(rows=f"{got}/{rows[1]}", duplicated=got - distinct)
        trial.ok = (read, got) == rows and got == distinct
    return trial


#: Damages a committed dataset (run in a subprocess with the store's environment): prints
#: what ``inspect --verify`` must name, as JSON ``[uri, what]``.
_DAMAGE = """
import json, random, sys
from shardtrain import storage
uri, how, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(seed)
target = storage.join(uri, "metadata.json")
doc = storage.read_json(target)
if how in ("truncate", "garble", "delete"):
    shards = [s for split in doc["splits"].values() for s in split["shards"] if s["bytes"] > 0]
    shard = rng.choice(shards)
    target = storage.join(uri, shard["path"])
    if how == "delete":
        storage.delete(target)
        print(json.dumps([target, "missing"]))
        sys.exit()
    raw = bytearray(storage.read_bytes(target))
    if how == "truncate":
        raw = raw[: rng.randrange(len(raw))]
        what = f"size {len(raw):,} != recorded {shard['bytes']:,} bytes"
    else:
        raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        what = "CRC-32C mismatch"
    storage.write_bytes(target, bytes(raw))
    print(json.dumps([target, what]))
    sys.exit()
# A field every reader needs: a value of the wrong type, or none.
fields = ["label", "label_info", "schema", "stats", "splits", "rows_read", "rows_accepted",
          "rows_rejected"]
field = rng.choice(fields + ["sources"] if how == "garble-field" else fields)
if how == "garble-field":
    doc[field] = {"label": 7, "rows_read": "many"}.get(field, "x")
else:
    del doc[field]
storage.write_json(target, doc)
print(json.dumps([target, field]))
"""
#: How ``damaged`` trials damage a dataset.
DAMAGES = ("truncate", "garble", "delete", "garble-field", "delete-field")


def _verify(out: str, env) -> subprocess.CompletedProcess:
    return subprocess.run(_cli("inspect", "--verify", out), env=env, capture_output=True, text=True)


def damaged(rng, csv_path: Path, rows, out: str, env, reference: Path):
    """A committed dataset damaged one way (:data:`DAMAGES`); ``inspect --verify`` names the
    file and prints the repair command, which rebuilds it exactly."""
    how = rng.choice(DAMAGES)
    trial = Trial("damaged", f"{'minio' if out.startswith('s3') else 'local'}, {how}")
    if out.startswith("s3://"):  # a dataset sharded there, as the other MinIO kinds do
        subprocess.run(_cli(*_shard_args(csv_path, out, 1)), env=env, check=True,
                       capture_output=True)  # fmt: skip
    else:
        shutil.copytree(reference, out)
    damage = subprocess.run(
        [sys.executable, "-c", _DAMAGE, out, how, str(rng.randrange(1 << 30))],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    target, what = json.loads(damage.stdout.strip().splitlines()[-1])
    found = _verify(out, env)
    named = [ln for ln in found.stdout.splitlines() if ln.strip()]
    line = _one_line(found.stderr)
    trial.facts.update(verify_exit=found.returncode, named=len(named))
    if how.endswith("field"):
        right = len(named) == 1 and named[0].startswith(f"{target}: ") and what in named[0]
    else:
        right = named == [f"{target}: {what}"] or (
            len(named) == 1 and named[0].startswith(f"{target}: {what} (")
        )
    if found.returncode != 1 or not right or "Traceback" in found.stderr or "repair: " not in line:
        trial.facts["error"] = (named[:2], line[:160])
        return trial
    repair = shlex.split(line.split("repair: ", 1)[1])
    started = time.monotonic()
    fixed = subprocess.run(_cli(*repair[1:]), env=env, capture_output=True, text=True)
    trial.facts.update(repair_exit=fixed.returncode, repair_s=f"{time.monotonic() - started:.1f}")
    if fixed.returncode != 0 or "nothing to do" in fixed.stdout:
        trial.facts["error"] = _one_line(fixed.stdout + fixed.stderr)[:160]
        return trial
    again = _verify(out, env)
    trial.facts["verify_after"] = again.returncode
    if again.returncode == 0:
        got, distinct, read = _rows_in_dataset(out, env)
        trial.facts.update(rows=f"{got}/{rows[1]}", duplicated=got - distinct)
        trial.ok = (read, got) == rows and got == distinct
    return trial


def _final_step(model_dir: Path) -> tuple[int | None, int | None]:
    latest = model_dir / "checkpoints" / "latest.json"
    metrics = model_dir / "eval" / "metrics.json"
    step = json.loads(latest.read_text())["step"] if latest.exists() else None
    evaluated = json.loads(metrics.read_text())["step"] if metrics.exists() else None
    return step, evaluated


def _train_command(data: str, model_dir: Path, workers: int) -> list[str]:
    train = [
        "train", "--data", data, "--model-dir", str(model_dir), "--train-steps",
        str(TRAIN_STEPS), "--batch-size", "64", "--checkpoint-every", "20",
        "--steps-per-loop", "5", "--hidden-units", "16",
    ]  # fmt: skip
    return _cli("run-local", "--workers", str(workers), "--", *train) if workers else _cli(*train)


def _clean_seconds(cmd: list[str], env) -> float:
    """Wall seconds of a run without faults (the scale of the random fault times)."""
    started = time.monotonic()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return time.monotonic() - started


def train_kill(rng, data: str, model_dir: Path, env, workers: int, sig: int, seconds: float):
    name = "SIGTERM" if sig == signal.SIGTERM else "kill -9"
    trial = Trial("train-kill", f"{name}, {'chief + worker' if workers else 'one process'}")
    cmd = _train_command(data, model_dir, workers)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    delay = rng.uniform(0.3, 0.9) * seconds
    started = time.monotonic()
    while time.monotonic() - started < delay and proc.poll() is None:
        time.sleep(0.05)
    if proc.poll() is None:
        victim = psutil.Process(proc.pid)
        if workers:  # a replica of the local TFJob: the worker or the chief, at random
            replicas = [p for p in victim.children(recursive=True) if "train" in p.cmdline()]
            victim = rng.choice(replicas) if replicas else victim
        step, _ = _final_step(model_dir)
        trial.facts["signal_at_ckpt"] = step
        victim.send_signal(sig)
    try:
        proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
        proc.wait()
        trial.facts["hung"] = True
    trial.facts["first_exit"] = proc.returncode
    for attempt in range(3):
        rerun = subprocess.run(cmd, env=env, capture_output=True, timeout=900)
        trial.facts["reruns"] = attempt + 1
        if rerun.returncode == 0:
            break
    step, evaluated = _final_step(model_dir)
    trial.facts.update(final_step=step, eval_step=evaluated)
    trial.ok = rerun.returncode == 0 and step == TRAIN_STEPS and evaluated == TRAIN_STEPS
    return trial


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--trials", type=int, default=24, help="total trials (rounds of every kind chosen)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rows", type=int, default=400_000, help="rows of the sharded CSV")
    parser.add_argument("--workdir", default=None)
    parser.add_argument(
        "--kinds",
        default=None,
        help="comma-separated kinds to run (shard-kill, minio-outage, train-kill, concurrent, "
        "disk-full, damaged); default: all",
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="fault-injection-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SHARDTRAIN_STORAGE_BACKOFF": "0.5"}
    csv_path = work / "quest.csv"
    subprocess.run(
        _cli("gen-data", "quest", "--rows", str(args.rows), "--output", str(csv_path),
             "--bad-fraction", "0.001", "--seed", str(args.seed)),
        env=env, check=True, capture_output=True,
    )  # fmt: skip
    state = work / "minio-state"
    minio = {**env, **_minio_env(state)}
    data = str(work / "train-data")
    shard_seconds = _clean_seconds(
        _cli("shard", str(csv_path), "-o", data, "--label", "cleared", "--key", "attempt_id",
             "--num-shards", "4", "--max-bad-fraction", "0.01", "--processes", "1"),
        env,
    )  # fmt: skip
    # The reference, from that run without faults: (rows read, rows accepted).
    meta = json.loads((Path(data) / "metadata.json").read_text())
    rows = (meta["rows_read"], meta["rows_accepted"])
    kinds = set(args.kinds.split(",")) if args.kinds else None
    one = two = 0.0
    if kinds is None or "train-kill" in kinds:
        one = _clean_seconds(_train_command(data, work / "m-clean-1", 0), env)
        two = _clean_seconds(_train_command(data, work / "m-clean-2", 1), env)
    print(
        f"{csv_path}: {rows[0]:,} rows read, {rows[1]:,} accepted without faults, "
        f"sharded in {shard_seconds:.1f} s; training {TRAIN_STEPS} steps takes {one:.1f} s "
        f"(one process), {two:.1f} s (chief + worker)"
    )
    t = shard_seconds
    dataset_bytes = sum(p.stat().st_size for p in Path(data).rglob("*") if p.is_file())
    trials: list[Trial] = []
    try:
        names = ["shard-kill"] * 4 + ["minio-outage"] + ["train-kill"] * 3
        names += ["concurrent"] * 2 + ["disk-full"] * 2 + ["damaged"] * 2
        per_round = sum(1 for n in names if kinds is None or n in kinds)
        for r in range(max(1, args.trials // max(1, per_round))):
            plan = [
                lambda i: shard_kill(rng, csv_path, rows, str(work / f"l-{i}"), env, 1, t),
                lambda i: shard_kill(rng, csv_path, rows, str(work / f"l2-{i}"), env, 2, t / 2),
                lambda i: shard_kill(rng, csv_path, rows, f"s3://bench/k-{i}", minio, 1, 2 * t),
                lambda i: shard_kill(rng, csv_path, rows, f"s3://bench/k2-{i}", minio, 2, t),
                lambda i: minio_outage(rng, csv_path, rows, f"s3://bench/o-{i}", minio, state, t),
                lambda i: train_kill(rng, data, work / f"mk-{i}", env, 0, signal.SIGKILL, one),
                lambda i: train_kill(rng, data, work / f"mt-{i}", env, 1, signal.SIGTERM, two),
                lambda i: train_kill(rng, data, work / f"mk2-{i}", env, 1, signal.SIGKILL, two),
                lambda i: concurrent_run(rng, csv_path, rows, str(work / f"c-{i}"), env, t),
                lambda i: concurrent_run(rng, csv_path, rows, f"s3://bench/c-{i}", minio, 2 * t),
                lambda i: disk_full(rng, csv_path, rows, work / f"full-{i}", env, dataset_bytes),
                lambda i: disk_full(rng, csv_path, rows, work / f"full2-{i}", env, dataset_bytes),
                lambda i: damaged(rng, csv_path, rows, str(work / f"d-{i}"), env, Path(data)),
                lambda i: damaged(rng, csv_path, rows, f"s3://bench/d-{i}", minio, Path(data)),
            ]
            chosen = [p for p, n in zip(plan, names, strict=True) if kinds is None or n in kinds]
            for step in chosen:
                trial = step(r)
                trials.append(trial)
                print(trial.line(), flush=True)
    finally:
        subprocess.run(
            [str(REPO / "scripts" / "minio-down")],
            env={**env, "SHARDTRAIN_MINIO_STATE": str(state)},
            check=False,
            capture_output=True,
        )
    failed = [t for t in trials if not t.ok]
    print(f"\n{len(trials) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
