"""``shardtrain gen-data``, ``shard``, ``finalize``, ``inspect``: make, shard and look at datasets.

Synthetic data for demos, tests and benchmarks (:mod:`shardtrain.data.datagen`); CSV files or
images → TFRecord shards (:mod:`shardtrain.data.sharding`), in one run or as one of N workers
followed by ``finalize``; and the summary of a committed dataset (:mod:`shardtrain.data.report`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from shardtrain.data.metadata import DatasetMetadata


@click.group("gen-data")
def gen_data() -> None:
    """Generate synthetic datasets for demos, tests and benchmarks."""


@gen_data.command("quest")
@click.option("--rows", type=click.IntRange(min=1), required=True, help="Data rows to write.")
@click.option("--output", "-o", required=True, help="CSV path or URI ('.gz' → gzip).")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed.")
@click.option(
    "--bad-fraction",
    type=click.FloatRange(0, 0.5),
    default=0.0,
    show_default=True,
    help="Fraction of malformed rows (wrong field count, unparsable numbers).",
)
@click.option(
    "--numeric",
    type=click.IntRange(min=1),
    default=12,
    show_default=True,
    help="Numeric feature columns.",
)
@click.option(
    "--categorical",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Categorical feature columns.",
)
def gen_data_quest(
    rows: int, output: str, seed: int, bad_fraction: float, numeric: int, categorical: int
) -> None:
    """Synthetic game quest logs: one row per quest attempt, label `cleared` (0/1)."""
    from shardtrain.data import datagen
    from shardtrain.progress import RateProgress

    with RateProgress(f"writing {output}", None) as bar:
        summary = datagen.generate_quest_logs(
            output,
            rows,
            seed=seed,
            bad_fraction=bad_fraction,
            numeric=numeric,
            categorical=categorical,
            progress=bar.advance_to,
        )
    bad = sum(summary.bad_rows_by_kind.values())
    click.echo(
        f"wrote {summary.rows:,} rows ({summary.bytes_written / 1e6:,.1f} MB, {bad:,} malformed) "
        f"to {output}; label 'cleared' positive rate {summary.positive_rate:.3f}"
    )


@gen_data.command("images")
@click.option("--count", type=click.IntRange(min=1), required=True, help="Images to write.")
@click.option("--output", "-o", required=True, help="Directory or URI (DIR/<class>/*.jpg|png).")
@click.option("--size", type=click.IntRange(min=16), default=224, show_default=True, help="Side.")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed.")
@click.option(
    "--classes",
    type=click.IntRange(2, 6),
    default=3,
    show_default=True,
    help="Shape classes (circle, square, triangle, cross, diamond, ring).",
)
@click.option(
    "--manifest/--no-manifest",
    default=True,
    show_default=True,
    help="Also write DIR/manifest.csv (columns image, label).",
)
def gen_data_images(
    count: int, output: str, size: int, seed: int, classes: int, manifest: bool
) -> None:
    """Synthetic labelled images: coloured shapes on noisy backgrounds, JPEG and PNG."""
    from shardtrain.data import datagen
    from shardtrain.progress import RateProgress

    with RateProgress(f"writing {output}", None) as bar:
        summary = datagen.generate_images(
            output,
            count,
            size=size,
            seed=seed,
            classes=classes,
            manifest=manifest,
            progress=bar.advance_to,
        )
    per_class = ", ".join(f"{k}={v:,}" for k, v in sorted(summary.classes.items()))
    click.echo(
        f"wrote {summary.count:,} images ({summary.bytes_written / 1e6:,.1f} MB; {per_class}) "
        f"to {output}" + (f"; manifest {summary.manifest}" if summary.manifest else "")
    )


@click.command("shard")
@click.argument("sources", nargs=-1, required=True)
@click.option("--output", "-o", required=True, help="Dataset URI (local path, s3://, gs://).")
@click.option("--label", default=None, help="Label column [images tree: label].")
@click.option("--key", default=None, help="Column hashed for the split [default: whole row].")
@click.option(
    "--split",
    "splits",
    default="train=0.9,eval=0.1",
    show_default=True,
    help="Named splits and fractions.",
)
@click.option(
    "--schema",
    "schema_file",
    default=None,
    help="YAML/JSON file overriding inferred types and dropping columns.",
)
@click.option(
    "--compression",
    type=click.Choice(["gzip", "none"]),
    default="gzip",
    show_default=True,
    help="Shard compression.",
)
@click.option(
    "--compression-level",
    type=click.IntRange(1, 9),
    default=1,
    show_default=True,
    help="gzip level (1 is fastest).",
)
@click.option(
    "--num-shards",
    type=click.IntRange(min=1),
    default=None,
    help="Shards per split [default: from the data size].",
)
@click.option(
    "--target-shard-mb",
    type=click.FloatRange(min=1),
    default=128,
    show_default=True,
    help="Aimed-at shard size when --num-shards is not given.",
)
@click.option(
    "--min-shards",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Never fewer shards per split.",
)
@click.option(
    "--task-mb",
    type=click.FloatRange(min=0.01),
    default=128,
    show_default=True,
    help="Input MB per task (unit of parallelism and resume).",
)
@click.option(
    "--max-bad-fraction",
    type=click.FloatRange(0, 1),
    default=0.001,
    show_default=True,
    help="Fail when more rows than this are rejected.",
)
@click.option(
    "--top-k",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="Vocabulary entries kept per categorical column in the statistics.",
)
@click.option(
    "--worker-index",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    envvar="SHARDTRAIN_WORKER_INDEX",
    help="This worker's index.",
)
@click.option(
    "--num-workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    envvar="SHARDTRAIN_NUM_WORKERS",
    help="Workers sharing the job.",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=None,
    help="Local processes [default: CPU count].",
)
@click.option("--overwrite", is_flag=True, help="Replace a different dataset at --output.")
@click.option("--images", is_flag=True, help="SOURCE is an image tree ROOT/<class>/*.jpg|png.")
@click.option(
    "--image-column", default=None, help="SOURCES are manifests; this column has image paths."
)
@click.option("--resize", default=None, metavar="WxH", help="Re-encode images to this size.")
def shard_cmd(
    sources: tuple[str, ...],
    output: str,
    label: str,
    key: str | None,
    splits: str,
    schema_file: str | None,
    compression: str,
    compression_level: int,
    num_shards: int | None,
    target_shard_mb: float,
    min_shards: int,
    task_mb: float,
    max_bad_fraction: float,
    top_k: int,
    worker_index: int,
    num_workers: int,
    processes: int | None,
    overwrite: bool,
    images: bool,
    image_column: str | None,
    resize: str | None,
) -> None:
    """Shard CSV SOURCES (files or globs) into TFRecord shards at --output.

    Images: `shard ROOT --images` for a tree ROOT/<class>/*.{jpg,jpeg,png} (label: the class
    folder), or `shard manifest.csv --image-column image --label label` for a CSV of image
    paths (relative to the manifest, or URIs) and labels. One Example per image.

    With --num-workers N, run N copies with --worker-index 0..N-1 (on any machines), then
    `shardtrain finalize OUTPUT`. Re-running after a crash resumes; after success it does
    nothing.
    """
    from shardtrain.data import sharding
    from shardtrain.data.sources import images as image_source
    from shardtrain.progress import RateProgress

    config = sharding.ShardConfig(
        sources=sources,
        output=output,
        label=label or "",
        key=key,
        splits=sharding.parse_splits(splits),
        schema_file=schema_file,
        compression=compression,
        compression_level=compression_level,
        num_shards=num_shards,
        target_shard_bytes=int(target_shard_mb * 1024 * 1024),
        min_shards=min_shards,
        task_bytes=int(task_mb * 1024 * 1024),
        max_bad_fraction=max_bad_fraction,
        top_k=top_k,
        worker_index=worker_index,
        num_workers=num_workers,
        processes=processes,
        overwrite=overwrite,
        images=images,
        image_column=image_column,
        resize=image_source.parse_resize(resize),
    )
    sharding.tune_process_memory()
    outcome = sharding.shard(config, lambda total: RateProgress("sharding", total))
    if outcome.status == "already-complete":
        click.echo(f"{output} is already complete (metadata.json present); nothing to do")
    elif outcome.status == "worker-done":
        click.echo(
            f"worker {worker_index}/{num_workers}: {outcome.tasks_run} task(s) committed "
            f"({outcome.tasks_skipped} done earlier); run `shardtrain finalize {output}` "
            "when every worker has finished"
        )
    else:
        assert outcome.metadata is not None
        _echo_result(output, outcome.metadata, outcome.seconds, outcome.bytes_read)


def _echo_result(
    output: str, meta: DatasetMetadata, seconds: float | None = None, nbytes: int = 0
) -> None:
    splits = ", ".join(
        f"{n}: {s.num_records:,} in {s.num_shards} shards" for n, s in meta.splits.items()
    )
    rate = f" in {seconds:.1f}s ({nbytes / 1e6 / seconds:,.1f} MB/s)" if seconds and nbytes else ""
    click.echo(
        f"sharded {meta.rows_read:,} rows{rate} → {splits}; {meta.rows_rejected:,} "
        f"rejected; committed {output}/metadata.json"
    )


@click.command("finalize")
@click.argument("output")
@click.option(
    "--max-bad-fraction",
    type=click.FloatRange(0, 1),
    default=None,
    help="Fail when more rows than this were rejected [default: what the workers used].",
)
@click.option(
    "--top-k",
    type=click.IntRange(min=1),
    default=None,
    help="Vocabulary entries kept per categorical column [default: what the workers used].",
)
def finalize_cmd(output: str, max_bad_fraction: float | None, top_k: int | None) -> None:
    """Merge the workers' committed tasks at OUTPUT into metadata.json."""
    from shardtrain.data import sharding

    meta = sharding.finalize(output, max_bad_fraction=max_bad_fraction, top_k=top_k)
    _echo_result(output, meta)


@click.command("inspect")
@click.argument("uri")
@click.option(
    "--rejects",
    "show_rejects",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="Rejected rows to show.",
)
@click.option("--json", "as_json", is_flag=True, help="Print metadata.json as is.")
def inspect_cmd(uri: str, show_rejects: int, as_json: bool) -> None:
    """Summarise the sharded dataset at URI: splits, schema, statistics, rejects."""
    import json

    from shardtrain.data.metadata import DatasetMetadata
    from shardtrain.data.report import render_dataset

    meta = DatasetMetadata.load(uri)
    if as_json:
        click.echo(json.dumps(meta.to_dict(), indent=2))
        return
    render_dataset(uri, meta, meta.iter_rejects(uri, limit=show_rejects))
