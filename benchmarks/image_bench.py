"""Image sharding speed and memory: images/s, MB/s and peak RSS of the process tree.

Usage (from the repository root, in the project environment)::

    .venv/bin/python benchmarks/image_bench.py                # 3 GB of 224x224 images
    .venv/bin/python benchmarks/image_bench.py --gb 0.5 --keep

Generates a synthetic set of 224x224 JPEG/PNG images (``shardtrain gen-data images``) of about
``--gb`` GB, then shards it twice with ``shardtrain shard`` — as a directory tree and through
its manifest — each run a separate process sampled every 50 ms for the RSS of its whole
process tree (see shard_bench.py) — then trains the image model on the shards for
``--train-steps`` steps, measured the same way. Figures go to stdout; record them in
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shard_bench import run_measured


def _shardtrain(*args: str) -> list[str]:
    return [sys.executable, "-m", "shardtrain.cli", *args]


def generate(root: Path, gb: float, size: int) -> tuple[int, int]:
    """About ``gb`` GB of images in ``root`` (reused when already there); (count, bytes)."""
    from shardtrain.data import datagen

    marker = root / "_bench.json"
    if marker.exists():
        info = json.loads(marker.read_text())
        if info["gb"] == gb and info["size"] == size:
            return info["count"], info["bytes"]
        shutil.rmtree(root)
    probe = datagen.generate_images(str(root / "_probe"), 200, size=size, manifest=False)
    shutil.rmtree(root / "_probe")
    count = int(gb * 1e9 / (probe.bytes_written / probe.count))
    started = time.monotonic()
    summary = datagen.generate_images(str(root), count, size=size, threads=os.cpu_count() or 2)
    print(
        f"generated {count:,} images, {summary.bytes_written / 1e9:.2f} GB "
        f"in {time.monotonic() - started:.0f}s ({summary.formats})"
    )
    marker.write_text(
        json.dumps({"gb": gb, "size": size, "count": count, "bytes": summary.bytes_written})
    )
    return count, summary.bytes_written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=3.0, help="Total size of the image set.")
    parser.add_argument("--size", type=int, default=224, help="Image side in pixels.")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--workdir", default=None, help="Where to generate [default: a tmpdir].")
    parser.add_argument("--keep", action="store_true", help="Keep the images and shards.")
    parser.add_argument(
        "--train-steps",
        type=int,
        default=200,
        help="Then train the image model this many steps on the tree's shards (0: skip).",
    )
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    work = Path(args.workdir or tempfile.mkdtemp(prefix="image-bench-"))
    root = work / f"images-{args.gb:g}gb"
    count, nbytes = generate(root, args.gb, args.size)
    print(f"machine: {os.cpu_count()} CPUs; {args.processes} process(es)")
    runs = {
        "tree": ["shard", str(root), "--images"],
        "manifest": [
            "shard",
            str(root / "manifest.csv"),
            "--image-column",
            "image",
            "--label",
            "label",
        ],
    }
    try:
        for name, cmd in runs.items():
            out = work / f"shards-{name}"
            shutil.rmtree(out, ignore_errors=True)
            r = run_measured(
                _shardtrain(*cmd, "--output", str(out), "--processes", str(args.processes))
            )
            meta = json.loads((out / "metadata.json").read_text())
            assert meta["rows_accepted"] == count, (meta["rows_accepted"], count)
            print(
                f"{name:8s} {count:,} images, {nbytes / 1e9:.2f} GB in {r['seconds']:.1f}s: "
                f"{count / r['seconds']:,.0f} images/s, {nbytes / 1e6 / r['seconds']:,.1f} MB/s "
                f"({nbytes / 1e6 / r['cpu_seconds']:,.1f} MB/s per CPU-second); "
                f"peak RSS {r['peak_rss_tree_mb']:,.0f} MB (process tree), "
                f"{r['peak_rss_process_mb']:,.0f} MB (largest process)"
            )
        if args.train_steps:
            # Training streams the shards: decode/resize/augment in tf.data, the small CNN at
            # full size, one checkpoint and an export at the end, a bounded evaluation.
            model_dir = work / "model"
            shutil.rmtree(model_dir, ignore_errors=True)
            r = run_measured(
                _shardtrain(
                    "train",
                    "--data",
                    str(work / "shards-tree"),
                    "--model-dir",
                    str(model_dir),
                    "--image-size",
                    str(args.size),
                    "--hidden-units",
                    "16",
                    "--train-steps",
                    str(args.train_steps),
                    "--batch-size",
                    str(args.batch_size),
                    "--checkpoint-every",
                    str(args.train_steps),
                    "--eval-steps",
                    "20",
                )
            )
            images = args.train_steps * args.batch_size
            print(
                f"train    {args.train_steps} steps x {args.batch_size} images at "
                f"{args.size}px in {r['seconds']:.1f}s ({images / r['seconds']:,.1f} images/s "
                f"with start-up, eval and export); peak RSS {r['peak_rss_tree_mb']:,.0f} MB"
            )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
