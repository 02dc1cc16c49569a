"""The compiled kernels' cache: ``shardtrain warm-up`` covers what jobs compile, portably.

Each test runs fresh interpreters (numba picks its target and cache when it starts) against a
numba cache in a temporary folder, and counts compilations the way numba does: its
dispatchers' cache hits and misses (:func:`shardtrain.kernels.cache.compile_stats`), and the
cache's files (numba saves after every compilation, in any process of a pool).
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import shardtrain.kernels
from helpers import quoted_text_csv

pytestmark = pytest.mark.slow

PORTABLE = {"NUMBA_CPU_NAME": "x86-64-v2", "NUMBA_CPU_FEATURES": ""}

# Run in a fresh interpreter: optionally pretend to be another CPU (before numba starts),
# run a CLI command in-process (or the CRC-32C kernel), then print the kernels' compile
# statistics as JSON.
_PROBE = """
import json, sys
if sys.argv[1] == "other-cpu":
    # Another x86-64 node: another CPU name and no AVX-512. llvmlite is where numba (and
    # shardtrain's target check) read the host CPU from.
    import llvmlite.binding as ll
    real = ll.get_host_cpu_features
    def features():
        f = real()
        for k in list(f):
            if k.startswith("avx512"):
                f[k] = False
        return f
    ll.get_host_cpu_features = features
    ll.get_host_cpu_name = lambda: "skylake"
if sys.argv[2] == "crc32c":  # one kernel alone: what the trainer checks shards with
    from shardtrain.kernels.crc32c import crc32c
    assert crc32c(b"123456789", 0) == 0xE3069283
else:
    from shardtrain.cli import main
    try:
        main(sys.argv[2:])
    except SystemExit as exc:
        assert not exc.code, exc.code
from shardtrain.kernels.cache import compile_stats
s = compile_stats()
print("STATS " + json.dumps({"compiled": s.compiled, "loaded": s.loaded}))
"""


def _run(cache: Path, env_extra: dict[str, str], *args: str, cpu: str = "host") -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), **env_extra}
    if "NUMBA_CPU_NAME" not in env_extra:
        env.pop("NUMBA_CPU_NAME", None)
        env.pop("NUMBA_CPU_FEATURES", None)
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, cpu, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("STATS "))
    return json.loads(line.removeprefix("STATS "))


def _cache_files(cache: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for p in cache.rglob("*.nb[ic]")}


#: Kernels the warm-up leaves out on purpose: the software CRC-32C runs only on CPUs without
#: SSE4.2, below the x86-64-v2 baseline the image compiles for; a histogram counted on its
#: own (jobs count it in the moments' pass, kernels.moments, which is tested against it).
_NOT_WARMED = {
    "shardtrain.kernels.crc32c._crc32c_buffer_sw",
    "shardtrain.kernels.histogram._add_counts",
}


def _every_kernel() -> set[str]:
    """Every compiled kernel of shardtrain.kernels that is compiled on its own (a kernel
    inlined into its callers, ``inline="always"``, is compiled as part of them)."""
    from numba.core.dispatcher import Dispatcher

    names = set()
    for info in pkgutil.iter_modules(shardtrain.kernels.__path__):
        module = importlib.import_module(f"shardtrain.kernels.{info.name}")
        for attr, value in vars(module).items():
            if (
                isinstance(value, Dispatcher)
                and value.__module__ == module.__name__
                and value.targetoptions.get("inline", "never") == "never"
            ):
                names.add(f"{module.__name__}.{attr}")
    return names


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A numba cache filled by ``shardtrain warm-up`` for the portable x86-64-v2 target."""
    cache = tmp_path_factory.mktemp("numba-cache")
    stats = _run(cache, PORTABLE, "warm-up")
    assert sum(stats["compiled"].values()) > 0  # it did compile: the cache was empty
    # Every kernel, also those only unusual data reaches (pruning the value counts).
    assert _every_kernel() - _NOT_WARMED <= set(stats["compiled"])
    return cache


def test_warm_up_compiles_every_signature_a_sharding_job_uses(warm_cache, tmp_path):
    """After warm-up, sharding CSV (plain and gzip, malformed rows, key and whole-row
    splits, ``;`` between fields, quoted multi-line fields cut into pieces, columnar
    records), Parquet, JSON lines
    and images compiles nothing, in the
    parent or in its pool's processes."""
    from shardtrain.data import datagen

    csv = tmp_path / "q.csv"
    datagen.generate_quest_logs(str(csv), 20_000, seed=7, bad_fraction=0.01)
    datagen.generate_quest_logs(str(tmp_path / "q2.csv.gz"), 3000, seed=8)
    datagen.generate_images(str(tmp_path / "img"), 8, size=24, seed=3, threads=1)
    (tmp_path / "tweets.csv").write_text(quoted_text_csv(3000, seed=5), encoding="utf-8")
    # The same rows as Parquet (several row groups) and JSON lines.
    table = pacsv.read_csv(str(tmp_path / "q2.csv.gz"))
    pq.write_table(table, tmp_path / "q.parquet", row_group_size=500)
    with open(tmp_path / "q.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row, default=str) + "\n" for row in table.to_pylist())
    (tmp_path / "semi.csv").write_bytes(csv.read_bytes().replace(b",", b";"))
    before = _cache_files(warm_cache)
    runs = [
        ["shard", str(csv), str(tmp_path / "q2.csv.gz"), "-o", str(tmp_path / "a"),
         "--label", "cleared", "--key", "attempt_id", "--processes", "2", "--task-mb", "0.5",
         "--max-bad-fraction", "0.1"],  # 5 tasks: a pool process beside the parent
        ["shard", str(csv), "-o", str(tmp_path / "b"), "--label", "cleared",
         "--compression", "none", "--processes", "1", "--max-bad-fraction", "0.1"],
        ["shard", str(tmp_path / "semi.csv"), "-o", str(tmp_path / "s"), "--label", "cleared",
         "--max-bad-fraction", "0.1"],  # ';' detected: the compiled parser, another delimiter
        ["shard", str(tmp_path / "tweets.csv"), "-o", str(tmp_path / "t"), "--label", "label",
         "--key", "id", "--task-mb", "0.05"],  # quoted multi-line fields, cut into pieces
        ["shard", str(csv), "-o", str(tmp_path / "col"), "--label", "cleared",
         "--record-format", "columnar", "--max-bad-fraction", "0.1"],
        ["shard", str(tmp_path / "q.parquet"), "-o", str(tmp_path / "pq"), "--label", "cleared",
         "--key", "attempt_id", "--task-mb", "0.05"],
        ["shard", str(tmp_path / "q.jsonl"), "-o", str(tmp_path / "js"), "--label", "cleared",
         "--key", "attempt_id", "--task-mb", "0.05"],
        ["shard", str(tmp_path / "img"), "--images", "-o", str(tmp_path / "c"),
         "--label", "label", "--resize", "20x20"],
    ]  # fmt: skip
    for args in runs:
        stats = _run(warm_cache, PORTABLE, *args)
        assert stats["compiled"] == {}, args
        assert sum(stats["loaded"].values()) > 0
    assert _cache_files(warm_cache) == before  # no process saved a new compilation


def test_portable_cache_is_used_on_another_cpu(warm_cache, tmp_path):
    """A cache built for x86-64-v2 here is loaded, not recompiled, on a node with another
    CPU; a cache built for this host's CPU (numba's default) is not."""
    datagen_args = ["gen-data", "quest", "--rows", "500", "-o", str(tmp_path / "q.csv")]
    _run(warm_cache, PORTABLE, *datagen_args)
    shard = ["shard", str(tmp_path / "q.csv"), "-o", str(tmp_path / "out"), "--label", "cleared"]
    stats = _run(warm_cache, PORTABLE, *shard, cpu="other-cpu")
    assert stats["compiled"] == {}
    assert sum(stats["loaded"].values()) > 0

    # The control: numba's default target is the host's CPU, and so is its cache key.
    host_cache = tmp_path / "host-cache"
    assert _run(host_cache, {}, "crc32c")["compiled"]  # compiled here, for this CPU
    assert _run(host_cache, {}, "crc32c")["compiled"] == {}  # same CPU: loaded
    assert _run(host_cache, {}, "crc32c", cpu="other-cpu")["compiled"]  # another: compiled
