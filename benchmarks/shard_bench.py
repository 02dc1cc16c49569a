"""Sharding speed and memory: CSV MB/s per core, rows/s, peak RSS, and the speed-up over the
plain-Python ``tf.train.Example``-per-row baseline.

Usage (from the repository root, in the project environment)::

    .venv/bin/python benchmarks/shard_bench.py                 # 1 GB, local disk + MinIO
    .venv/bin/python benchmarks/shard_bench.py --gb 0.1 --no-minio
    .venv/bin/python benchmarks/shard_bench.py --rss-scaling   # 0.1 GB vs 1 GB peak RSS
    .venv/bin/python benchmarks/shard_bench.py --formats       # CSV vs Parquet vs JSON lines
    .venv/bin/python benchmarks/shard_bench.py --no-minio --type-pass  # types by all rows
    .venv/bin/python benchmarks/shard_bench.py --gb 0.3 --no-minio --quoted \
        --compare-src /path/to/other/checkout/src            # quoted CSV; before vs after
    .venv/bin/python benchmarks/shard_bench.py --gb 0.3 --no-minio --semicolon \
        --compare-src /path/to/other/checkout/src            # ';' between fields too
    .venv/bin/python benchmarks/shard_bench.py --gb 0.3 --no-minio --decimal-comma

Each sharding run is a separate ``shardtrain shard`` process, sampled every 50 ms for the RSS
of its whole process tree (the parent plus its worker processes). Figures go to stdout; record
them in benchmarks/RESULTS.md with the machine they ran on.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
NUMERIC, CATEGORICAL = 30, 5


def _shardtrain(*args: str) -> list[str]:
    return [sys.executable, "-m", "shardtrain.cli", *args]


def compile_bytecode(src: str | Path | None = None) -> None:
    """Compile the measured shardtrain's modules to bytecode first, as ``pip install`` does
    for the image: an editable checkout run with ``PYTHONDONTWRITEBYTECODE`` set (as on the
    development machine) would otherwise compile every module in every process it starts,
    a tenth of a second each that no installed copy pays."""
    if src is None:
        import shardtrain

        src = Path(shardtrain.__file__).resolve().parents[1]
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(Path(src) / "shardtrain")],
        check=True,
        capture_output=True,
    )


def generate(path: Path, gb: float) -> tuple[int, int]:
    """A quest-log CSV of about ``gb`` GB with 30 numeric + 5 categorical columns + label."""
    from shardtrain.data import datagen

    probe = path.with_suffix(".probe.csv")
    s = datagen.generate_quest_logs(str(probe), 20_000, numeric=NUMERIC, categorical=CATEGORICAL)
    rows = int(gb * 1e9 / (s.bytes_written / s.rows))
    probe.unlink()
    if not path.exists() or path.stat().st_size < 0.95 * gb * 1e9:
        datagen.generate_quest_logs(str(path), rows, numeric=NUMERIC, categorical=CATEGORICAL)
    return rows, path.stat().st_size


#: Free text of the quoted case: commas, doubled quotes, line breaks.
_FREE_TEXT = (
    "Thanks!\nRegards, Bob",
    'fine, "really" fine',
    "line one\r\nline two, three\n\nafter a blank line",
)


def generate_quoted(path: Path, plain: Path, gb: float) -> tuple[int, int]:
    """The quest-log CSV ``plain`` plus a free-text ``comment`` column: in ~10% of the rows
    a quoted field with commas, quotes and line breaks, else one plain word (~``gb`` GB)."""
    counted = path.with_suffix(".rows")
    if path.exists() and counted.exists() and path.stat().st_size >= 0.95 * gb * 1e9:
        return int(counted.read_text()), path.stat().st_size
    rows = 0
    with plain.open("rb") as src, path.open("wb") as out:
        header = src.readline().rstrip(b"\n")
        out.write(header + b",comment\n")
        budget = gb * 1e9
        for i, line in enumerate(src):
            if i % 10 == 3:
                text = _FREE_TEXT[(i // 10) % len(_FREE_TEXT)]
                field = ('"' + text.replace('"', '""') + '"').encode()
            else:
                field = b"ok"
            out.write(line.rstrip(b"\n") + b"," + field + b"\n")
            rows += 1
            if out.tell() >= budget:
                break
    path.with_suffix(".rows").write_text(str(rows))
    return rows, path.stat().st_size


def generate_semicolon(plain: Path) -> dict[str, Path]:
    """The quest-log CSV ``plain`` with ``;`` between fields, numbers with a decimal point
    (``semi-point``) and with a decimal comma (``semi-comma``, ``--decimal ,``): the same
    values, both read by Arrow (not ``,``-delimited), so the pair isolates the decimal mark's
    cost. (The quest logs quote nothing and hold no ``.`` or ``,`` but in numbers.)"""
    paths = {
        name: plain.with_name(f"{plain.stem}-{name}.csv") for name in ("semi-point", "semi-comma")
    }
    if all(p.exists() and p.stat().st_size == plain.stat().st_size for p in paths.values()):
        return paths
    point, comma = bytes.maketrans(b",", b";"), bytes.maketrans(b",.", b";,")
    with (
        plain.open("rb") as src,
        paths["semi-point"].open("wb") as out_point,
        paths["semi-comma"].open("wb") as out_comma,
    ):
        while chunk := src.read(1 << 24):
            out_point.write(chunk.translate(point))
            out_comma.write(chunk.translate(comma))
    return paths


def run_measured(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, float]:
    """Run a command; return wall seconds and the peak RSS of its process tree."""
    started = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(
        cmd,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    root = psutil.Process(proc.pid)
    peak_tree = peak_single = 0
    while proc.poll() is None:
        try:
            procs = [root, *root.children(recursive=True)]
            rss = []
            for p in procs:
                with contextlib.suppress(psutil.Error):
                    rss.append(p.memory_info().rss)
            # The multiprocessing resource tracker / manager are tiny; count everything.
            peak_tree = max(peak_tree, sum(rss))
            peak_single = max(peak_single, max(rss, default=0))
        except psutil.Error:
            pass
        time.sleep(0.05)
    out, err = proc.communicate()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} failed:\n{err}")
    return {
        "seconds": time.monotonic() - started,
        "cpu_seconds": cpu,
        "peak_rss_tree_mb": peak_tree / 1e6,
        "peak_rss_process_mb": peak_single / 1e6,
        "stdout": out.strip(),
    }


def shard_run(
    src: Path,
    output: str,
    processes: int,
    compression: str | None,
    env: dict[str, str] | None = None,
    infer_types: str = "all",
    extra: tuple[str, ...] = (),
) -> dict[str, float]:
    """One ``shardtrain shard`` run of ``src`` (quest logs, optionally with a comment column),
    with the ``extra`` flags; ``compression`` None: the default record format and compression
    (no flag given)."""
    _clear(output, env)
    cmd = _shardtrain(
        "shard",
        str(src),
        "--output",
        output,
        "--label",
        "cleared",
        "--key",
        "attempt_id",
        *(("--compression", compression) if compression is not None else ()),
        "--processes",
        str(processes),
        # The default (all) is not named: a --compare-src checkout from before the option
        # then runs with its own default, so defaults are compared with defaults.
        *(("--infer-types", infer_types) if infer_types != "all" else ()),
        "--overwrite",
        *extra,
    )
    return run_measured(cmd, env)


def type_pass_runs(src: Path, work: Path, size: int, rounds: int) -> None:
    """The cost of typing every row (``--infer-types all``, the default): the tasks count the
    kinds of their fields as they parse and the run settles the types, so the cost is a
    shard run's with the default types minus one with ``--infer-types sample`` (no check),
    per GB and as a fraction of the run, with 1 and 2 processes (best of ``rounds``)."""
    gb = size / 1e9
    best: dict[str, dict[str, float]] = {}

    def keep(name: str, r: dict[str, float]) -> None:
        if name not in best or r["seconds"] < best[name]["seconds"]:
            best[name] = r

    for _ in range(rounds):
        for n in (1, 2):
            for types in ("sample", "all"):
                keep(
                    f"{types} {n}",
                    shard_run(src, str(work / "out-tp"), n, None, infer_types=types),
                )
    print(f"\ntypes by all rows, {gb:.2f} GB quest CSV, default layout (best of {rounds}):")
    print(f"{'what':<30}{'seconds':>9}{'CPU-s':>8}{'extra s':>9}{'extra CPU-s/GB':>16}")
    for n in (1, 2):
        sample, every = best[f"sample {n}"], best[f"all {n}"]
        for name, r in ((f"--infer-types sample, {n}p", sample), (f"all rows, {n}p", every)):
            extra = r["seconds"] - sample["seconds"]
            cpu = (r["cpu_seconds"] - sample["cpu_seconds"]) / gb
            print(
                f"{name:<30}{r['seconds']:>9.2f}{r['cpu_seconds']:>8.2f}{extra:>9.2f}{cpu:>16.2f}"
            )


def compare_summary(
    results: dict[str, dict], sizes: dict[str, tuple[int, int]], cores: int, rows: int, size: int
) -> None:
    """With ``--compare-src``: the median MB/s per core of this checkout's default flags
    against each run of the other checkout, over the rounds, and their ratio.

    The ratio is what carries from one machine to another: an absolute MB/s per core is this
    host's (the same command of the same checkout has differed by a third between the VMs
    of different days; benchmarks/RESULTS.md), while both sides of a ratio of interleaved
    runs share the host's state.
    """

    def median_mbps(prefix: str) -> float | None:
        runs = [
            sizes.get(name, (rows, size))[1] / 1e6 / r["seconds"] / cores
            for name, r in results.items()
            if name == prefix or name.startswith(prefix + "#")
        ]
        return statistics.median(runs) if runs else None

    ours = median_mbps("local-default")
    if ours is None:
        return
    print(f"\nthis checkout's default flags: {ours:.1f} MB/s per core (median); against the other:")
    for kind in ("default", "none", "gzip"):
        theirs = median_mbps(f"other-{kind}")
        if theirs:
            flags = "its default flags" if kind == "default" else f"--compression {kind}"
            print(f"  {flags:<24}{theirs:>7.1f} MB/s per core -> {ours / theirs:.2f}x")


def _clear(output: str, env: dict[str, str] | None) -> None:
    """Start from an empty output (a complete dataset would make the run a no-op)."""
    code = "import sys; from shardtrain import storage; storage.delete(sys.argv[1], recursive=True)"
    subprocess.run(
        [sys.executable, "-c", code, output], env={**os.environ, **(env or {})}, check=True
    )


def baseline_rows_per_second(src: Path, sample_rows: int = 20_000) -> float:
    """The plain-Python way: csv.DictReader → tf.train.Example per row → TFRecordWriter."""
    import tensorflow as tf

    from shardtrain.data.schema import infer_schema

    with open(src, "rb") as f:
        sample = f.read(4 * 1024 * 1024)
    sample = sample[: sample.rfind(b"\n") + 1]
    schema = infer_schema(sample, str(src), label="cleared")
    types = {c.name: c.type for c in schema.columns}
    out = Path(tempfile.mkdtemp()) / "baseline.tfrecord"
    started = time.monotonic()
    n = 0
    with open(src, newline="") as f, tf.io.TFRecordWriter(str(out)) as writer:
        for row in csv.DictReader(f):
            feats = {}
            for name, value in row.items():
                if value == "":
                    continue
                t = types[name]
                if t == "float":
                    feats[name] = tf.train.Feature(
                        float_list=tf.train.FloatList(value=[float(value)])
                    )
                elif t in ("int", "bool"):
                    v = int(value) if t == "int" else int(value == "true")
                    feats[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
                else:
                    feats[name] = tf.train.Feature(
                        bytes_list=tf.train.BytesList(value=[value.encode()])
                    )
            ex = tf.train.Example(features=tf.train.Features(feature=feats))
            writer.write(ex.SerializeToString())
            n += 1
            if n >= sample_rows:
                break
    return n / (time.monotonic() - started)


def convert_formats(src: Path, rows_per_group: int = 100_000) -> dict[str, Path]:
    """The CSV's rows as Parquet (snappy, ``rows_per_group`` rows per row group, as data
    lakes write them) and as JSON lines, next to it; made once."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    paths = {"parquet": src.with_suffix(".parquet"), "jsonl": src.with_suffix(".jsonl")}
    if not paths["parquet"].exists():
        reader = pacsv.open_csv(src, read_options=pacsv.ReadOptions(block_size=64 << 20))
        tmp = paths["parquet"].with_suffix(".tmp")
        with pq.ParquetWriter(tmp, reader.schema) as writer:
            for batch in reader:
                writer.write_batch(batch, row_group_size=rows_per_group)
        tmp.rename(paths["parquet"])
    if not paths["jsonl"].exists():
        tmp = paths["jsonl"].with_suffix(".tmp")
        pf = pq.ParquetFile(paths["parquet"])
        with open(tmp, "w") as f:
            for batch in pf.iter_batches(batch_size=50_000):
                f.writelines(json.dumps(row) + "\n" for row in batch.to_pylist())
        tmp.rename(paths["jsonl"])
    return paths


def format_runs(src: Path, work: Path, processes: int, rows: int, size: int) -> None:
    """``--formats``: shard the same rows from Parquet and JSON lines; MB/s per core counts
    the *CSV's* bytes (input-equivalent rows), so the figures compare with the CSV runs'."""
    from shardtrain.data.sharding import ShardConfig, build_plan

    cores = min(processes, os.cpu_count() or 1)
    csv_run = shard_run(src, str(work / "fmt-csv"), processes, "none")
    results = {"csv": (src, csv_run)}
    for fmt, path in convert_formats(src).items():
        results[fmt] = (path, shard_run(path, str(work / f"fmt-{fmt}"), processes, "none"))
    print(f"\nformats: the same {rows:,} rows, --compression none, {cores} core(s)")
    print(
        f"{'format':<9}{'file MB':>9}{'seconds':>9}{'CSV-eq MB/s/core':>18}{'rows/s/core':>13}"
        f"{'CSV-eq MB/CPU-s':>17}{'plan s':>8}{'peak RSS tree':>15}"
    )
    for fmt, (path, r) in results.items():
        started = time.monotonic()
        build_plan(
            ShardConfig(
                sources=(str(path),),
                output=str(work / "fmt-plan"),
                label="cleared",
                key="attempt_id",
            )
        )
        plan_s = time.monotonic() - started
        print(
            f"{fmt:<9}{path.stat().st_size / 1e6:>9,.0f}{r['seconds']:>9.1f}"
            f"{size / 1e6 / r['seconds'] / cores:>18.1f}{rows / r['seconds'] / cores:>13,.0f}"
            f"{size / 1e6 / r['cpu_seconds']:>17.1f}{plan_s:>8.2f}"
            f"{r['peak_rss_tree_mb']:>12,.0f} MB"
        )


def _minio_env(state: Path) -> dict[str, str]:
    env = {**os.environ, "SHARDTRAIN_MINIO_STATE": str(state), "MINIO_BUCKET": "bench"}
    out = subprocess.run(
        [str(REPO / "scripts" / "minio-up")], env=env, check=True, capture_output=True, text=True
    ).stdout
    parsed = {}
    for line in out.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        parsed[name] = shlex.split(value)[0]
    return parsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=1.0, help="CSV size in GB")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "shard-bench"))
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-minio", action="store_true")
    parser.add_argument(
        "--quoted",
        action="store_true",
        help="also shard the file with a quoted free-text column (line breaks in ~10%% of "
        "rows; with --compare-src: both ways)",
    )
    parser.add_argument(
        "--semicolon",
        action="store_true",
        help="also shard the same rows with ';' between fields (with --compare-src: both ways)",
    )
    parser.add_argument(
        "--compare-src",
        help="another checkout's src/ directory: shard the unquoted file with it too, "
        "alternating with this one (before/after in the same machine state)",
    )
    parser.add_argument(
        "--decimal-comma",
        action="store_true",
        help="also shard the file with ; between fields, numbers with a decimal point and "
        "with a decimal comma (--decimal ,)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="repeat the local runs")
    parser.add_argument(
        "--type-pass",
        action="store_true",
        help="only measure the cost of typing every row (default types vs --infer-types sample)",
    )
    parser.add_argument(
        "--rss-scaling",
        action="store_true",
        help="also shard a 10x smaller file and compare peak RSS",
    )
    parser.add_argument(
        "--formats",
        action="store_true",
        help="only shard the same rows from CSV, Parquet and JSON lines and compare",
    )
    args = parser.parse_args()

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    src = work / f"quest-{args.gb:g}gb.csv"
    rows, size = generate(src, args.gb)
    cores = min(args.processes, os.cpu_count() or 1)
    results: dict[str, dict] = {}
    print(
        f"input: {src} {size / 1e6:,.0f} MB, {rows:,} rows; {cores} core(s), "
        f"{args.processes} process(es); machine: {os.cpu_count()} CPUs, "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB"
    )

    if args.formats:
        format_runs(src, work, args.processes, rows, size)
        return
    if args.type_pass:
        type_pass_runs(src, work, size, args.rounds)
        return

    quoted = None
    if args.quoted:
        quoted = generate_quoted(work / f"quoted-{args.gb:g}gb.csv", src, args.gb)
        print(f"quoted input: {quoted[1] / 1e6:,.0f} MB, {quoted[0]:,} rows")
    semicolon = generate_semicolon(src) if args.decimal_comma or args.semicolon else {}
    other = {"PYTHONPATH": args.compare_src} if args.compare_src else None
    compile_bytecode()
    if args.compare_src:
        compile_bytecode(args.compare_src)
    sizes: dict[str, tuple[int, int]] = {}
    for round_ in range(args.rounds):
        tag = f"#{round_ + 1}" if args.rounds > 1 else ""
        # Every flag at its default (record format, compression, types by all rows).
        r = shard_run(src, str(work / "out-default"), args.processes, None)
        results[f"local-default{tag}"] = r
        sizes[f"local-default{tag}"] = (rows, size)
        if other is not None:
            r = shard_run(src, str(work / "out-default"), args.processes, None, other)
            results[f"other-default{tag}"] = r
            sizes[f"other-default{tag}"] = (rows, size)
        for compression in ("none", "gzip"):
            r = shard_run(src, str(work / f"out-{compression}"), args.processes, compression)
            results[f"local-{compression}{tag}"] = r
            sizes[f"local-{compression}{tag}"] = (rows, size)
            if other is not None:
                r = shard_run(
                    src, str(work / f"out-{compression}"), args.processes, compression, other
                )
                results[f"other-{compression}{tag}"] = r
                sizes[f"other-{compression}{tag}"] = (rows, size)
            if quoted is not None:
                for name, env in (("quoted", None), ("other-quoted", other)):
                    if name == "other-quoted" and other is None:
                        continue
                    r = shard_run(
                        work / f"quoted-{args.gb:g}gb.csv",
                        str(work / f"out-quoted-{compression}"),
                        args.processes,
                        compression,
                        env,
                    )
                    results[f"{name}-{compression}{tag}"] = r
                    sizes[f"{name}-{compression}{tag}"] = quoted
            for name, path in semicolon.items():
                if name == "semi-comma" and not args.decimal_comma:
                    continue
                extra = ("--decimal", ",") if name == "semi-comma" else ()
                runs: list[tuple[str, dict[str, str] | None]] = [(name, None)]
                if args.semicolon and other is not None and name == "semi-point":
                    runs.append((f"other-{name}", other))  # ';': this branch and the other
                for label, env in runs:
                    out = str(work / f"out-{name}-{compression}")
                    r = shard_run(path, out, args.processes, compression, env, extra=extra)
                    results[f"{label}-{compression}{tag}"] = r
                    sizes[f"{label}-{compression}{tag}"] = (rows, size)
    if not args.no_minio:
        state = work / "minio-state"
        env = _minio_env(state)
        try:
            for compression in ("none", "gzip"):
                results[f"minio-{compression}"] = shard_run(
                    src, f"s3://bench/out-{compression}", args.processes, compression, env
                )
        finally:
            subprocess.run(
                [str(REPO / "scripts" / "minio-down")],
                env={**os.environ, "SHARDTRAIN_MINIO_STATE": str(state)},
                check=False,
            )

    baseline = baseline_rows_per_second(src)
    print(f"\nplain-Python baseline (csv + tf.train.Example per row): {baseline:,.0f} rows/s")
    print(
        f"{'run':<18}{'seconds':>9}{'MB/s':>9}{'MB/s/core':>11}{'rows/s/core':>13}"
        f"{'x baseline':>12}{'MB/CPU-s':>10}{'peak RSS tree':>15}{'per process':>13}"
    )
    for name, r in results.items():
        n_rows, n_bytes = sizes.get(name, (rows, size))
        mbps = n_bytes / 1e6 / r["seconds"]
        rows_core = n_rows / r["seconds"] / cores
        print(
            f"{name:<18}{r['seconds']:>9.1f}{mbps:>9.1f}{mbps / cores:>11.1f}"
            f"{rows_core:>13,.0f}{rows_core / baseline:>12.1f}"
            f"{n_bytes / 1e6 / r['cpu_seconds']:>10.1f}"
            f"{r['peak_rss_tree_mb']:>12,.0f} MB{r['peak_rss_process_mb']:>10,.0f} MB"
        )

    if other is not None:
        compare_summary(results, sizes, cores, rows, size)

    if args.rss_scaling:
        # One process each, so the comparison is about input size, not process count.
        small = work / f"quest-{args.gb / 10:g}gb.csv"
        generate(small, args.gb / 10)
        r_small = shard_run(small, str(work / "out-small"), 1, "none")
        r_big = shard_run(src, str(work / "out-big"), 1, "none")
        ratio = r_big["peak_rss_tree_mb"] / r_small["peak_rss_tree_mb"]
        print(
            f"\none process: {args.gb / 10:g} GB input peak RSS "
            f"{r_small['peak_rss_tree_mb']:,.0f} MB vs {args.gb:g} GB input "
            f"{r_big['peak_rss_tree_mb']:,.0f} MB → ratio {ratio:.2f}; "
            f"{size / 1e6 / r_big['seconds']:.1f} MB/s wall, "
            f"{size / 1e6 / r_big['cpu_seconds']:.1f} MB per CPU-second"
        )
    print(
        json.dumps(
            {k: {kk: vv for kk, vv in v.items() if kk != "stdout"} for k, v in results.items()},
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
