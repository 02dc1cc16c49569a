"""``shardtrain gen-data``, ``shard``, ``finalize``, ``inspect``, ``validate``: make, shard, look
at and check datasets.

Synthetic data for demos, tests and benchmarks (:mod:`shardtrain.data.datagen`); CSV files or
images → TFRecord shards (:mod:`shardtrain.data.sharding`), in one run or as one of N workers
followed by ``finalize``; the summary of a committed dataset (:mod:`shardtrain.data.report`);
and its checks against another dataset or a model's training data
(:mod:`shardtrain.data.validation`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from shardtrain.commands import config_command

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


@config_command("shard", "shardtrain.data.shard_config:ShardConfig")
def shard_cmd(options: dict[str, Any]) -> None:
    """Shard CSV SOURCES (files or globs) into TFRecord shards at --output.

    Tabular rows are written as columnar blocks (a tf.train.Example per block of up to 256
    rows), what `shardtrain train` reads fastest; --record-format example writes one
    tf.train.Example per row, for TFX, TFDV and your own TFRecordDataset readers.

    Images: `shard ROOT --images` for a tree ROOT/<class>/*.{jpg,jpeg,png} (label: the class
    folder), or `shard manifest.csv --image-column image --label label` for a CSV of image
    paths (relative to the manifest, or URIs) and labels. One Example per image.

    With --num-workers N, run N copies with --worker-index 0..N-1 (on any machines), then
    `shardtrain finalize OUTPUT` (when CSV column types guessed from the first rows turn out
    wrong, it asks for `shardtrain settle` with the same arguments first). Re-running after a
    crash resumes; after success it does nothing.
    """
    from shardtrain.data import sharding
    from shardtrain.data.sharding.signals import stop_on_sigterm
    from shardtrain.progress import RateProgress

    # A defaulted record format keeps a per-row dataset already at --output per row.
    config = sharding.ShardConfig(**options)  # shard() keeps a stored per-row layout
    sharding.tune_process_memory()
    with stop_on_sigterm():  # a stopped run releases its lease: a re-run starts at once
        outcome = sharding.shard(config, lambda total: RateProgress("sharding", total))
    if outcome.status == "already-complete":
        click.echo(f"{config.output} is already complete (metadata.json present); nothing to do")
    elif outcome.status == "worker-done":
        click.echo(
            f"worker {config.worker_index}/{config.num_workers}: {outcome.tasks_run} task(s) "
            f"committed ({outcome.tasks_skipped} done earlier); run `shardtrain finalize "
            f"{config.output}` when every worker has finished"
        )
    else:
        assert outcome.metadata is not None
        _echo_result(config.output, outcome.metadata, outcome.seconds, outcome.bytes_read)


@config_command("settle", "shardtrain.data.shard_config:ShardConfig")
def settle_cmd(options: dict[str, Any]) -> None:
    """After the workers of a run (`shard --num-workers N`) have finished: decide what they
    checked as they read (CSV column types guessed from the first 4 MB) and run here, in
    --processes processes, the tasks that must run again (all of them when a column's type
    changed). Give the run's own arguments. Then `shardtrain finalize OUTPUT`."""
    from shardtrain.data import sharding
    from shardtrain.data.sharding.lease import take_lease
    from shardtrain.data.sharding.signals import stop_on_sigterm

    config = sharding.ShardConfig(**options)
    # Every task's lease (no worker of the run still writes), released when stopped.
    with stop_on_sigterm(), take_lease(config.output, 0, 1):
        ran, _ = sharding.settle_and_redo(config)
    again = f"; {len(ran)} task(s) ran again" if ran else "; nothing ran again"
    click.echo(f"{config.output}: settled{again}; now `shardtrain finalize {config.output}`")


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
@click.option(
    "--verify",
    is_flag=True,
    help="Instead of the summary, check every shard against metadata.json: present, of its "
    "recorded size and CRC-32C (reads every byte, streamed). Names each damaged file and the "
    "command that repairs the dataset; exits 1 if any is damaged.",
)
def inspect_cmd(uri: str, show_rejects: int, as_json: bool, verify: bool) -> None:
    """Summarise the sharded dataset at URI: splits, schema, statistics, rejects.

    The summary reads metadata.json only: it does not check the shards (nor does
    `validate`). `inspect --verify URI` does: every shard present, of the size and CRC-32C
    metadata.json records; one line per damaged file, then the `shardtrain shard ...
    --overwrite` command that rebuilds the dataset (exit 1); one summary line if all is well.
    """
    import json

    from shardtrain.data.metadata import DatasetMetadata
    from shardtrain.data.report import render_dataset

    if verify:
        if as_json:
            raise click.UsageError("--verify and --json do not go together")
        _verify(uri)
        return
    meta = DatasetMetadata.load(uri)
    if as_json:
        click.echo(json.dumps(meta.to_dict(), indent=2))
        return
    render_dataset(uri, meta, meta.iter_rejects(uri, limit=show_rejects), extra=_inputs(uri, meta))


def _verify(uri: str) -> None:
    """``inspect --verify``: a line per damaged file, then the verdict (an error, exit 1)."""
    from shardtrain.data.verify import verify_dataset
    from shardtrain.errors import DataError

    result = verify_dataset(uri)
    if result.ok:
        click.echo(result.summary())
        return
    for line in result.lines():
        click.echo(line)
    raise DataError(result.summary())


def _inputs(uri: str, meta: Any) -> list[Any]:
    """The "model inputs" table of ``inspect`` (none when the dataset cannot be trained on
    as it is, e.g. a one-class label: ``train`` says why)."""
    from shardtrain.errors import ShardtrainError
    from shardtrain.train.features import FeatureSpec, inputs_table

    try:
        spec = FeatureSpec.from_metadata(meta, where=uri)
    except ShardtrainError:
        return []
    return [inputs_table(spec)] if spec.image is None else []


@click.command("warm-up")
def warm_up_cmd() -> None:
    """Compile every kernel that sharding and training use, once, into numba's cache.

    Run at install time (the Dockerfile and `make env` do) so that no job compiles: the
    first `shard` in a fresh environment otherwise spends ~20 s of CPU compiling. Use the
    same NUMBA_CPU_NAME / NUMBA_CPU_FEATURES as the jobs (the image sets x86-64-v2 and no
    extra features: a cache valid on any x86-64-v2 node).
    """
    import logging

    from shardtrain.data.warm_up import warm_up

    if not logging.getLogger("shardtrain").isEnabledFor(logging.DEBUG):  # unless --verbose
        logging.getLogger("shardtrain.data").setLevel(logging.WARNING)  # its sample runs
    report = warm_up()
    stats, target = report.stats, report.target
    kind = (
        "portable" if target.portable else "this host only: set NUMBA_CPU_NAME for a portable one"
    )
    click.echo(
        f"warm-up: {sum(stats.compiled.values())} kernel signature(s) compiled, "
        f"{sum(stats.loaded.values())} loaded from the cache; CPU {target.cpu_name} ({kind}); "
        f"cache in {', '.join(stats.cache_dirs) or '-'}"
    )


@click.command("validate")
@click.argument("new_dataset")
@click.option(
    "--against",
    required=True,
    help="The baseline: a dataset, or a model (a SavedModel version, a serving location with "
    "latest.json, or a model directory) whose training data's statistics it carries.",
)
@click.option(
    "--limits",
    default="",
    help="Limits of the checks, e.g. 'numeric_drift=0.05,new_columns=off,missing_rate.gold=0.2' "
    "(CHECK=VALUE or CHECK.COLUMN=VALUE; off disables) [default: missing_rate=0.05, "
    "numeric_drift=0.05, categorical_drift=0.1, label_drift=0.1, the column and label checks "
    "on].",
)
@click.option("--json-report", default=None, help="Also write the outcome as JSON to this URI.")
def validate_cmd(new_dataset: str, against: str, limits: str, json_report: str | None) -> None:
    """Check NEW_DATASET against a dataset or a model's training data: new, missing or
    retyped columns, label classes and their balance, missing rates, numeric and categorical
    drift.

    Prints a report; exits 0 when every check holds, 1 with one line naming the failing
    columns and checks otherwise. It compares the statistics metadata.json records and does
    not read the shards: `shardtrain inspect --verify` checks those.
    """
    from shardtrain.data import validation

    result = validation.validate_uris(new_dataset, against, validation.Limits.parse(limits))
    click.echo(result.to_markdown())
    if json_report:
        validation.write_json(result, json_report)
    if not result.passed:
        raise validation.DataChecksFailed(result.summary())
    click.echo(result.summary())
