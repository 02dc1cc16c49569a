"""Helpers shared by tests: reading shards back (without TensorFlow), running the CLI."""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from example_proto import iter_records, parse_example
from shardtrain import storage
from shardtrain.data import column_blocks, sharding
from shardtrain.data.metadata import DatasetMetadata

REPO = Path(__file__).resolve().parents[1]
#: Every column type, missing values, quotes: the small CSV many tests shard.
ALL_TYPES = REPO / "tests" / "data" / "all_types.csv"

#: Environment for trainer subprocesses in tests that assert a learned quality (AUC,
#: accuracy). The trainer seeds weights and shuffling (``--seed``, 0 by default), but its
#: input pipeline interleaves shard files with ``deterministic=False`` and runs the random
#: image augmentation in a parallel ``map``, so the batches reach the model in an order that
#: depends on thread scheduling: the same command gave AUC 0.8653 and then 0.8668. With
#: ``TF_DETERMINISTIC_OPS=1`` (what ``tf.config.experimental.enable_op_determinism()`` sets
#: from the environment; it overrides ``deterministic=False``) a run repeats exactly on one
#: machine, also with multiple workers. CPU kernels still differ between machines, so the
#: bars keep a measured margin as well (see each test).
DETERMINISTIC_TF = {"TF_DETERMINISTIC_OPS": "1"}


def read_examples(uri: str, split: str | None = None) -> list[dict]:
    """Every row of a committed dataset (or one split) as {feature: value or None}.

    Read without TensorFlow (see :mod:`example_proto`); s3:// shards are downloaded first.
    Per-row Examples give their features (an absent one: missing from the dict); columnar
    blocks (the default for tabular data) give each row of each block, its explicitly
    stored missing values (NaN, ``INT_MISSING``, ``b""``) as None, in shard and block
    order (rows in hash order inside a shard). A test that must tell a stored NaN or empty
    string from a missing value shards with ``record_format="example"``.
    """
    import tempfile

    meta = DatasetMetadata.load(uri)
    rows = []
    with tempfile.TemporaryDirectory(prefix="shardtrain-test-read-") as scratch:
        for name in meta.splits if split is None else [split]:
            for shard_uri in meta.shard_uris(uri, name):
                rows += _shard_rows(name, shard_uri, meta, scratch)
    return rows


def _shard_rows(name: str, shard_uri: str, meta: DatasetMetadata, scratch: str) -> list[dict]:
    """The rows of one shard (see read_examples); an object-store shard is read from scratch."""
    path = shard_uri
    if not storage.is_local(shard_uri):
        path = os.path.join(scratch, storage.basename(shard_uri))
        storage.download_file(shard_uri, path)
    rows: list[dict] = []
    for record in iter_records(storage.local_path(path), meta.compression == "GZIP"):
        if meta.record_format == column_blocks.COLUMNAR:
            rows += _block_rows(name, parse_example(record))
            continue
        row: dict = {"__split__": name}
        for key, values in parse_example(record).items():
            assert len(values) == 1, (key, values)
            row[key] = values[0]
        rows.append(row)
    if path != shard_uri:
        os.remove(path)
    return rows


def _block_rows(split: str, block: dict[str, list]) -> list[dict]:
    """The rows of one columnar block, its missing values as None (see read_examples)."""
    sizes = {len(values) for values in block.values()}
    assert len(sizes) == 1, sizes  # every column holds one value per row
    (n,) = sizes
    assert 1 <= n <= column_blocks.BLOCK_ROWS
    rows = []
    for i in range(n):
        row: dict = {"__split__": split}
        for key, values in block.items():
            value = values[i]
            if not (
                (isinstance(value, float) and math.isnan(value))
                or (isinstance(value, int) and value == column_blocks.INT_MISSING)
                or value == b""
            ):
                row[key] = value
        rows.append(row)
    return rows


def cli_exit_code(*args: str) -> int:
    """Run the ``shardtrain`` command in this process (as its console script does) and return
    its exit code; its output is left to pytest's capture (``capsys``)."""
    import pytest

    from shardtrain import cli

    with pytest.raises(SystemExit) as exit_info:
        cli.main(list(args))
    return exit_info.value.code or 0


def run_cli(*args: str, env: dict | None = None, check: bool = False, timeout: float = 600):
    """Run `shardtrain ARGS` in a subprocess; returns the CompletedProcess."""
    proc = subprocess.run(
        [sys.executable, "-m", "shardtrain.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"shardtrain {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def quoted_text_csv(n: int, seed: int = 0) -> str:
    """A tweet-like CSV of ``n`` rows (``id,user,text,retweets,label``) whose free-text column
    holds commas, doubled quotes and, in every tenth row, CRLF/LF line breaks and a blank line
    inside the quotes: the case that byte-range pieces must never split (issue 14)."""
    import random

    rng = random.Random(seed)
    words = ["fine", "Thanks!", "Regards, Bob", 'he said "hi"', "a,b,c", "ok\nnext line", "é✓"]
    lines = ["id,user,text,retweets,label"]
    for i in range(n):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))
        if i % 10 == 0:
            text += "\r\nsecond line, with a comma\n\nthird after a blank line"
        field = '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\n\r') else text
        lines.append(f"{i},u{rng.randint(1, 50)},{field},{rng.randint(0, 999)},{i % 2}")
    return "\n".join(lines) + "\n"


def random_quoted_csv(rng, rows: int) -> bytes:
    """``rows`` CSV records (``id,text,flag``, CRLF line ends) whose text fields hold commas,
    quotes and line breaks at random, as Python's csv module quotes them."""
    import csv
    import io

    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\r\n")  # quotes every field with \r or \n
    for i in range(rows):
        text = "".join(rng.choice('ab ,"\n\r') for _ in range(rng.randint(0, 12)))
        writer.writerow([i, text, rng.choice(["", "x", '"'])])
    return out.getvalue().encode()


def european_export_csv(path, rows: int, seed: int = 7, encoding: str = "cp1252"):
    """What pandas writes for European Excel: ``to_csv(sep=";", quoting=csv.QUOTE_ALL,
    encoding="cp1252", decimal=",")`` -- quoted multi-line notes (LF and CRLF), zip codes
    with leading zeros, fees in cents with some missing, full-precision floats, accented
    names; ``id,name,zip,notes,fee,amount,ratio,label``. Returns the written DataFrame."""
    import csv

    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    names = ["Müller", "Zoë; Ltd", "Šebestová", "Ørsted", "François", "Ångström", "Œuvre"]
    notes = ["", "plain", 'said "hi"', "€ 5, paid; late", "line one\nline two", "a\r\nb\nc"]
    fees = np.round(rng.exponential(40, rows), 2)
    fees[rng.random(rows) < 0.05] = np.nan
    fees[rng.random(rows) < 0.2] = 0.0
    frame = pd.DataFrame(
        {
            "id": np.arange(rows),
            "name": [names[i] for i in rng.integers(0, len(names), rows)],
            "zip": [f"{z:05d}" for z in rng.integers(0, 20000, rows)],
            "notes": [notes[i] for i in rng.integers(0, len(notes), rows)],
            "fee": fees,
            "amount": rng.integers(-1000, 1000, rows),
            "ratio": rng.normal(0, 1, rows) * 10.0 ** rng.integers(-8, 12, rows),
            "label": np.where(rng.random(rows) < 0.3, "yes", "no"),
        }
    )
    frame.to_csv(path, sep=";", quoting=csv.QUOTE_ALL, encoding=encoding, decimal=",", index=False)
    return frame


def pandas_examples(frame, types: dict[str, str]) -> list[dict]:
    """The Examples the sharder should write for the rows of a typed pandas ``frame`` (as
    :func:`read_examples` returns them, without ``__split__``): floats as float32, strings
    as UTF-8 bytes, missing values absent."""
    import math

    import numpy as np

    out = []
    for record in frame.astype(object).to_dict("records"):
        row = {}
        for k, v in record.items():
            if isinstance(v, float) and math.isnan(v):
                continue  # missing: an absent feature
            if types[k] == "float":
                v = float(np.float32(v))
            elif types[k] == "string":
                v = v.encode()
            row[k] = v
        out.append(row)
    return out


def committed_tasks(out: str) -> int:
    try:
        return sum(1 for u in storage.ls(storage.join(out, "_tasks")) if u.endswith(".json"))
    except Exception:
        return 0


#: A lease time to live for runs a test kills -9 on an object store, whose re-run waits for the
#: dead owner's lease to expire (``shardtrain.storage.lease``; the default is 60 s).
SHORT_LEASE = {"SHARDTRAIN_LEASE_TTL": "6"}


def kill_then_resume(src: str, out: str, csv_path, kill_when: int) -> dict:
    """Shard the quest CSV ``src`` to ``out``, kill -9 the run after ``kill_when`` committed
    tasks, re-run it, and check every row landed exactly once."""
    args = [
        "shard",
        src,
        "-o",
        out,
        "--label",
        "cleared",
        "--key",
        "attempt_id",
        "--task-mb",
        "1",
        "--min-shards",
        "16",
        "--processes",
        "1",
    ]
    # On an object store the killed run's lease blocks the re-run until it expires (a minute
    # by default): a short time to live keeps that wait, and the takeover, to seconds.
    env = {**os.environ, **SHORT_LEASE}
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardtrain.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if storage.exists(storage.join(out, "_plan.json")) and committed_tasks(out) >= kill_when:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not storage.exists(storage.join(out, "metadata.json"))
    done_before = committed_tasks(out)
    rerun = run_cli(*args, check=True, env=SHORT_LEASE)
    assert "sharded" in rerun.stdout
    meta = DatasetMetadata.load(out).to_dict()
    keys = [r["attempt_id"] for r in read_examples(out)]
    with open(csv_path) as f:
        expected = {line.split(",", 1)[0].encode() for line in list(f)[1:]}
    assert len(keys) == len(set(keys)), "a row was written twice"
    assert set(keys) == expected, "a row was lost"
    assert meta["rows_read"] == len(expected) == meta["rows_accepted"]
    return {
        "done_before_kill": done_before,
        "tasks": len(
            sharding.Plan.from_dict(out, storage.read_json(storage.join(out, "_plan.json"))).tasks
        ),
    }


def shard_config(sources, output, **kw) -> sharding.ShardConfig:
    """A run over ``sources`` with the label ``cleared`` in one process, unless ``kw`` says."""
    kw.setdefault("label", "cleared")
    kw.setdefault("processes", 1)
    return sharding.ShardConfig(sources=tuple(map(str, sources)), output=str(output), **kw)


def shard(sources, output, **kw) -> dict:
    """Shard ``sources`` (see :func:`shard_config`) and return the metadata as a dict."""
    return sharding.shard(shard_config(sources, output, **kw)).metadata.to_dict()


def read_rejects(out) -> list[dict]:
    """The rejects a dataset at ``out`` recorded."""
    import json

    path = out / "rejects" / "rejects.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def dataset_files(root) -> dict[str, bytes | dict]:
    """Every file of a dataset; JSON files parsed, without timings and the creation time."""
    import json

    files: dict[str, bytes | dict] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            rel = str(path.relative_to(root))
            data = path.read_bytes()
            if rel.endswith(".json"):
                doc = json.loads(data)
                # A worker summary holds its tasks' manifests, timings and all.
                for part in (doc, *doc.get("manifests", ())):
                    for volatile in ("created", "seconds"):
                        part.pop(volatile, None)
                files[rel] = doc
            else:
                files[rel] = data
    return files


def late_code_csv(path, rows: int = 400_000):
    """A zip column of numbers whose one code comes after the first 4 MB (the sample that
    types the plan): the sample's type (int) is wrong for the whole file."""
    lines = ["id,zip,label"]
    for i in range(rows):
        zip_code = "98115-4820" if i == rows - 10 else str(10_000 + (i * 7919) % 80_000)
        lines.append(f"{i},{zip_code},{i % 2}")
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size > 5 * 1024 * 1024  # the code lies beyond the 4 MB sample
    return path


def wide_csv(path, rows: int = 20_000) -> None:
    """Thirty one-digit columns under long names: a per-row Example repeats every name, so
    its output is ~20x its input."""
    names = [f"a_rather_long_column_name_{i:02d}" for i in range(30)]
    lines = [",".join([*names, "label"])]
    lines += [
        ",".join([*(str((r * 7 + i) % 10) for i in range(30)), str(r % 2)]) for r in range(rows)
    ]
    path.write_text("\n".join(lines) + "\n")


def run_cli_here(
    *args: str, env: dict | None = None, check: bool = False
) -> subprocess.CompletedProcess:
    """Run `shardtrain ARGS` in this process; returns what :func:`run_cli` returns (args,
    returncode, stdout, stderr as text) without a Python start-up and pyarrow/numba loading.

    For a test whose subject is the command's output, error line, exit code or files. Not
    where a process is the point: signals, ``os._exit`` codes (>= 128, which only the console
    script takes), ``python -m``, the environment read at import time, pool processes that
    inherit the parent's state (log lines of forked pool processes are lost here), or
    stdout being a pipe: those keep :func:`run_cli`. ``env`` holds for the run only
    (:meth:`click.testing.CliRunner.isolation`); ``check`` as in :func:`run_cli`. Log lines
    go to the returned stderr as the console script logs them: pytest's own handlers on the
    root logger make ``logging.basicConfig`` (``setup_logging``) a no-op here, so a handler
    with its format and level (DEBUG with a leading ``-v``) writes to the isolated stderr
    during the run.
    """
    import logging

    from click.testing import CliRunner

    from shardtrain import cli
    from shardtrain.progress import LOG_DATE_FORMAT, LOG_FORMAT

    verbose = any(a in ("-v", "--verbose") for a in _leading_options(args))
    root = logging.getLogger()
    with CliRunner().isolation(env=env) as (out, err, _):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT, LOG_DATE_FORMAT))
        level = logging.DEBUG if verbose else logging.INFO
        handler.setLevel(level)
        saved_level = root.level
        root.addHandler(handler)
        root.setLevel(level)
        code: int | str | None = 0
        try:
            cli.main(list(args))
        except SystemExit as exc:
            code = exc.code
            if isinstance(code, str):  # sys.exit("message"): printed, exit status 1
                print(code, file=sys.stderr)
                code = 1
        finally:
            root.removeHandler(handler)
            root.setLevel(saved_level)
            sys.stdout.flush()
            sys.stderr.flush()
        # As text=True decodes a pipe: UTF-8, universal newlines.
        stdout, stderr = (
            s.getvalue().decode().replace("\r\n", "\n").replace("\r", "\n") for s in (out, err)
        )
    if check and code:
        raise AssertionError(f"shardtrain {' '.join(args)} failed:\n{stderr}")
    return subprocess.CompletedProcess(list(args), code or 0, stdout, stderr)


def _leading_options(args) -> list[str]:
    """The options before the first command word of a ``shardtrain`` command line."""
    lead = []
    for arg in args:
        if not arg.startswith("-"):
            break
        lead.append(arg)
    return lead


def copy_of_run(run: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """The sharded source and a copy of its run under ``tmp_path`` (a module fixture's run,
    copied so each test may settle or damage it; nothing in a run names its own path)."""
    source, template = run
    out = tmp_path / "ds"
    shutil.copytree(template, out)
    return source, out
