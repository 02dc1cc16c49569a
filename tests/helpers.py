"""Helpers shared by tests: reading shards back (without TensorFlow), running the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from example_proto import iter_records, parse_example
from shardtrain import storage
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
    """Every Example of a committed dataset (or one split) as {feature: value or None}.

    Read without TensorFlow (see :mod:`example_proto`); s3:// shards are downloaded first.
    """
    import tempfile

    meta = DatasetMetadata.load(uri)
    rows = []
    for name in meta.splits if split is None else [split]:
        for shard_uri in meta.shard_uris(uri, name):
            path = shard_uri
            if not storage.is_local(shard_uri):
                path = os.path.join(tempfile.mkdtemp(), storage.basename(shard_uri))
                storage.download_file(shard_uri, path)
            for record in iter_records(storage.local_path(path), meta.compression == "GZIP"):
                row: dict = {"__split__": name}
                for key, values in parse_example(record).items():
                    assert len(values) == 1, (key, values)
                    row[key] = values[0]
                rows.append(row)
    return rows


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
