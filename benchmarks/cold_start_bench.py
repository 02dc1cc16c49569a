"""Cold start: the first ``shardtrain shard`` in a fresh container against a warm run.

Runs in an image built without Docker by ``scripts/image-smoke-test --keep`` (the Dockerfile
replayed into a prefix; see that script), as the image's user (uid 10001) with the image's
environment. Each repetition gives the user a fresh, empty HOME -- a new pod -- and times
``shardtrain shard`` of the same CSV twice (wall time of the whole command, interpreter start
included):

* ``image``: as the image runs it: the kernels come from the cache the install shipped
  (``shardtrain warm-up`` at build time), copied to the user's cache on first use;
* ``no warm-up``: ``NUMBA_CACHE_DIR`` points at a fresh empty folder, so every kernel is
  compiled in the first run -- what every pod paid before the image warmed the cache.

Usage (as root)::

    scripts/image-smoke-test --keep            # prints the prefix it kept
    python benchmarks/cold_start_bench.py --prefix /tmp/shardtrain-image-XXXX [--rows 300000]
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import shutil
import statistics
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _smoke_module():
    """scripts/image-smoke-test as a module (its Dockerfile replay and uid runner)."""
    path = str(REPO / "scripts" / "image-smoke-test")
    loader = importlib.machinery.SourceFileLoader("image_smoke_test", path)
    spec = importlib.util.spec_from_loader("image_smoke_test", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--reps", type=int, default=3)
    opts = parser.parse_args()

    smoke = _smoke_module()
    image = smoke.Image(opts.prefix)
    smoke.replay(image, smoke.parse_dockerfile(REPO / "Dockerfile"), build=False)
    home = image.workdir
    results: dict[str, list[tuple[float, float]]] = {"image": [], "no warm-up": []}
    for rep in range(opts.reps):
        for mode in results:
            for child in home.iterdir():  # a fresh pod: an empty HOME
                shutil.rmtree(child) if child.is_dir() else child.unlink()
            user = smoke.Runner(image)
            env = {"NUMBA_CACHE_DIR": str(home / "empty-cache")} if mode == "no warm-up" else {}
            csv = f"{home}/quest.csv"
            user.shardtrain("gen-data", "quest", "--rows", str(opts.rows), "--output", csv)
            times = []
            for run in ("first", "second"):
                args = ["shard", csv, "--output", f"{home}/shards-{run}", "--label", "cleared",
                        "--key", "attempt_id"]  # fmt: skip
                times.append(user.shardtrain(*args, env=env)[1])
            results[mode].append((times[0], times[1]))
            print(f"rep {rep + 1} {mode:>10}: first {times[0]:.2f} s, second {times[1]:.2f} s")
    print(f"\n{opts.rows:,} rows, median of {opts.reps}:")
    for mode, pairs in results.items():
        first = statistics.median(p[0] for p in pairs)
        second = statistics.median(p[1] for p in pairs)
        print(f"{mode:>10}: first {first:.2f} s, second {second:.2f} s ({first / second:.2f}x)")


if __name__ == "__main__":
    main()
