"""The ``shardtrain`` command line: a thin layer that parses arguments and calls the library.

Every command translates its options into one library call; no logic lives here. User
mistakes surface as :class:`~shardtrain.errors.ShardtrainError` and are printed as one line on
stderr with the error's exit code (see :mod:`shardtrain.errors`), never as a traceback. Set
``SHARDTRAIN_DEBUG=1`` to see the traceback anyway.
"""

from __future__ import annotations

import gc
import os
import sys
from typing import Any

import click

from shardtrain import __version__
from shardtrain.errors import ShardtrainError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="shardtrain")
@click.option("-v", "--verbose", is_flag=True, help="Log debug details.")
def cli(verbose: bool) -> None:
    """Shard data far larger than memory into TFRecords in object storage and train
    TensorFlow models on it with tf.distribute on Kubeflow."""
    from shardtrain.progress import setup_logging

    setup_logging(verbose)


# --------------------------------------------------------------------------------------------
# Data: generate, shard, finalize, inspect
# --------------------------------------------------------------------------------------------


@cli.group("gen-data")
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


@cli.command("shard")
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
        _echo_result(output, outcome.metadata or {}, outcome.seconds, outcome.bytes_read)


def _echo_result(output: str, meta: dict, seconds: float | None = None, nbytes: int = 0) -> None:
    splits = ", ".join(
        f"{n}: {s['num_records']:,} in {s['num_shards']} shards" for n, s in meta["splits"].items()
    )
    rate = f" in {seconds:.1f}s ({nbytes / 1e6 / seconds:,.1f} MB/s)" if seconds and nbytes else ""
    click.echo(
        f"sharded {meta['rows_read']:,} rows{rate} → {splits}; {meta['rows_rejected']:,} "
        f"rejected; committed {output}/metadata.json"
    )


@cli.command("finalize")
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


@cli.command("inspect")
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

    from shardtrain.data import sharding
    from shardtrain.data.report import render_dataset

    meta = sharding.load_metadata(uri)
    if as_json:
        click.echo(json.dumps(meta, indent=2))
        return
    rejects = list(sharding.iter_rejects(uri, meta, limit=show_rejects))
    render_dataset(uri, meta, rejects)


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


@cli.command("train")
@click.option("--data", default=None, help="Sharded dataset URI (holding metadata.json).")
@click.option("--model-dir", default=None, help="Checkpoints, summaries, export, metrics.")
@click.option("--config", "config_file", default=None, help="YAML/JSON training config file.")
@click.option(
    "--model",
    default=None,
    help="'auto', 'tabular', 'image' or MODULE:FUNCTION [default: auto, by the data].",
)
@click.option(
    "--backbone",
    default=None,
    help="Image model network: small_cnn, mobilenet_v3_small, mobilenet_v3_large, resnet50.",
)
@click.option("--image-size", type=click.IntRange(8, 4096), default=None, help="Image side.")
@click.option(
    "--mixed-precision",
    type=click.Choice(["auto", "on", "off"]),
    default=None,
    help="float16 compute [default: auto = image models on GPUs].",
)
@click.option("--train-steps", type=click.IntRange(min=1), default=None, help="Global steps.")
@click.option("--batch-size", type=click.IntRange(min=1), default=None, help="Global batch.")
@click.option("--learning-rate", type=click.FloatRange(min=0, min_open=True), default=None)
@click.option(
    "--lr-schedule",
    type=click.Choice(["constant", "cosine"]),
    default=None,
    help="Learning-rate schedule [default: constant].",
)
@click.option("--eval-every", type=click.IntRange(min=1), default=None, help="Steps between evals.")
@click.option(
    "--checkpoint-every",
    type=click.IntRange(min=1),
    default=None,
    help="Steps between checkpoints.",
)
@click.option("--steps-per-loop", type=click.IntRange(min=1), default=None)
@click.option("--eval-steps", type=click.IntRange(min=0), default=None, help="0: whole split.")
@click.option("--hidden-units", default=None, help="DNN widths, e.g. 128,64.")
@click.option("--dropout", type=click.FloatRange(0, 1, max_open=True), default=None)
@click.option("--exclude", multiple=True, help="Column to leave out of the model (repeatable).")
@click.option("--devices", type=click.IntRange(min=0), default=None, help="Devices per worker.")
@click.option("--seed", type=int, default=None)
@click.option("--cache-dir", default=None, help="Local staging for s3:// shards.")
@click.option("--cache-mb", type=click.IntRange(min=1), default=None, help="Staging bound.")
def train_cmd(config_file: str | None, exclude: tuple[str, ...], **flags) -> None:
    """Train and evaluate on a sharded dataset, Estimator style, from TF_CONFIG.

    Run the same command in every replica of a TFJob (chief, workers, evaluator); alone it
    trains and evaluates in one process. Defaults < --config file < flags; the resolved
    configuration is saved as MODEL_DIR/train_config.yaml.

    Exit codes: 0 done; 1 bad configuration or data (permanent); 3 storage unreachable;
    128+signal (143) after writing a checkpoint on SIGTERM (restart to resume).
    """
    from shardtrain.train.config import resolve_config
    from shardtrain.train.trainer import train_and_evaluate

    sections = {
        "model": "model.name",
        "hidden_units": "model.hidden_units",
        "dropout": "model.dropout",
        "backbone": "model.backbone",
        "image_size": "model.image_size",
        "mixed_precision": "model.mixed_precision",
        "cache_dir": "input.cache_dir",
        "cache_mb": "input.cache_mb",
    }
    overrides = {sections.get(k, k): v for k, v in flags.items()}
    if exclude:
        overrides["input.exclude_columns"] = list(exclude)
    result = train_and_evaluate(resolve_config(config_file, overrides))
    if result.status == "already-complete":
        click.echo(f"model already trained to step {result.step}; nothing to do")
    elif result.status == "evaluated":
        click.echo(f"evaluator done: last evaluated step {result.step}")
    else:
        click.echo(f"{result.role}: trained to step {result.step} (from {result.start_step})")
    if result.metrics:
        m = result.metrics
        click.echo(
            f"eval at step {m['step']}: auc {m['auc']:.4f}, accuracy {m['accuracy']:.4f}, "
            f"log_loss {m['log_loss']:.4f} ({m['num_examples']:,} examples)"
        )
    if result.export_uri:
        click.echo(f"exported SavedModel: {result.export_uri}")


@cli.command(
    "run-local",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="Worker replicas besides the chief.",
)
@click.option(
    "--evaluator/--no-evaluator", default=False, show_default=True, help="Add an evaluator replica."
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=None,
    help="Stop the job and fail after this many seconds.",
)
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=30,
    show_default=True,
    help="Seconds between SIGTERM and SIGKILL when stopping replicas.",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def run_local_cmd(
    workers: int, evaluator: bool, timeout: float | None, grace: float, command: tuple[str, ...]
) -> None:
    """Run `shardtrain COMMAND...` as a local TFJob: a chief, --workers workers and an
    optional evaluator, each a process with the TF_CONFIG the training operator would give it.
    Or run the replicas of a TFJob manifest (their command, args and env; variables the cluster
    takes from Secrets come from this environment): `shardtrain run-local job.yaml`.

    Example: shardtrain run-local --workers 2 --evaluator -- train --data DIR --model-dir DIR
    """
    import sys

    from shardtrain.kubeflow import launcher, tfjob

    if tfjob.is_manifest_path(command):
        ctx = click.get_current_context()
        if any(
            ctx.get_parameter_source(p) is click.core.ParameterSource.COMMANDLINE
            for p in ("workers", "evaluator")
        ):
            raise click.UsageError("a manifest sets its own replicas: drop --workers/--evaluator")
        replicas = tfjob.local_replicas(tfjob.load_manifest(command[0]))
    else:
        args = (sys.executable, "-m", "shardtrain.cli", *command)
        replicas = [launcher.Replica("chief", 1, args)]
        if workers:
            replicas.append(launcher.Replica("worker", workers, args))
        if evaluator:
            replicas.append(launcher.Replica("evaluator", 1, args))
    result = launcher.run_local(replicas, timeout=timeout, grace=grace)
    if not result.succeeded:
        click.secho(f"error: local job failed: {result.reason}", err=True, fg="red")
        sys.exit(result.exit_code)
    click.echo("local job succeeded")


# --------------------------------------------------------------------------------------------
# Kubernetes: TFJob manifests, submission
# --------------------------------------------------------------------------------------------


class _TFJobOption(click.Option):
    """An option whose help ends with its JobConfig default (the base manifest's value).

    The default is looked up when help is shown, not when the CLI is defined: that reads
    the base manifest with PyYAML, ~30 ms added to every command's start-up otherwise.
    """

    def __init__(self, *args: Any, default_of: str, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.default_of = default_of

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        if self.default_of:
            from shardtrain.kubeflow.tfjob import JobConfig

            value = JobConfig.default(self.default_of)
            if isinstance(value, bool) or value is None:
                value = {None: "none", True: "yes", False: "no"}[value]
            self.help = f"{self.help} [default: {value}]"
            self.default_of = ""
        return super().get_help_record(ctx)


def _tfjob_help(name: str, text: str) -> dict[str, Any]:
    """Keyword arguments of ``click.option`` for help ``text`` + the default of ``name``."""
    return {"cls": _TFJobOption, "default_of": name, "help": text}


def _tfjob_options(*, required: bool):
    """The TFJob settings of `tfjob render` and `tfjob submit`; None means the default."""
    d = _tfjob_help
    options = [
        click.option("--name", default=None, **d("name", "TFJob name.")),
        click.option("--namespace", default=None, **d("namespace", "Namespace.")),
        click.option("--image", default=None, **d("image", "Project image.")),
        click.option(
            "--workers",
            type=click.IntRange(min=0),
            default=None,
            **d("workers", "Worker replicas besides the chief."),
        ),
        click.option(
            "--gpus-per-worker",
            type=click.IntRange(min=0),
            default=None,
            **d("gpus_per_worker", "nvidia.com/gpu of the chief and each worker (0: CPU only)."),
        ),
        click.option(
            "--evaluator/--no-evaluator",
            default=None,
            **d("evaluator", "Add an evaluator replica."),
        ),
        click.option("--data", required=required, help="Sharded dataset URI."),
        click.option("--model-dir", required=required, help="Model URI."),
        click.option(
            "--secret",
            default=None,
            **d("secret", "Secret with the storage variables ('' for none, e.g. GCS)."),
        ),
        click.option(
            "--service-account",
            default=None,
            **d("service_account", "The pods' service account."),
        ),
        click.option("--cpu", default=None, **d("cpu", "CPU request per pod.")),
        click.option("--memory", default=None, **d("memory", "Memory per pod.")),
        click.option(
            "--backoff-limit",
            type=click.IntRange(min=0),
            default=None,
            **d("backoff_limit", "Pod restarts before the job fails."),
        ),
        click.option(
            "--ttl-seconds-after-finished",
            type=click.IntRange(min=0),
            default=None,
            **d("ttl_seconds_after_finished", "Seconds a finished job is kept."),
        ),
        click.option(
            "--clean-pod-policy",
            type=click.Choice(["None", "Running", "All"]),
            default=None,
            **d("clean_pod_policy", "Pods deleted when the job ends."),
        ),
        click.option(
            "--active-deadline-seconds",
            type=click.IntRange(min=1),
            default=None,
            help="Fail the job after this many seconds [default: no limit].",
        ),
    ]

    def decorate(func):
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


@cli.group("tfjob")
def tfjob_group() -> None:
    """Kubeflow TFJobs: render the training job's manifest, or submit it and wait for it."""


@tfjob_group.command("render")
@_tfjob_options(required=True)
@click.argument("train_args", nargs=-1, type=click.UNPROCESSED)
def tfjob_render_cmd(train_args: tuple[str, ...], **settings) -> None:
    """Print the TFJob manifest (YAML) that trains on --data into --model-dir.

    TRAIN_ARGS (after `--`) go to `shardtrain train` in every replica. Apply the output with
    `kubectl apply -f`, or run it locally with `shardtrain run-local FILE`.

    Example: shardtrain tfjob render --data s3://b/quest --model-dir s3://b/m -- --train-steps 5000
    """
    from shardtrain.kubeflow import tfjob

    config = tfjob.JobConfig.from_overrides(train_args=train_args, **settings)
    click.echo(tfjob.to_yaml(tfjob.build_tfjob(config)), nl=False)


@tfjob_group.command("submit")
@_tfjob_options(required=False)
@click.option(
    "-f",
    "--file",
    "manifest_file",
    default=None,
    help="Submit this TFJob manifest instead of building one from the options.",
)
@click.option(
    "--wait-timeout",
    type=click.FloatRange(min=1),
    default=86400,
    show_default=True,
    help="Seconds to wait for the job to end, in total.",
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=1),
    default=15,
    show_default=True,
    help="Seconds between status polls.",
)
@click.option("--logs/--no-logs", default=True, show_default=True, help="Stream the chief's log.")
@click.option(
    "--delete/--no-delete", default=False, show_default=True, help="Delete the job when it ends."
)
@click.argument("train_args", nargs=-1, type=click.UNPROCESSED)
def tfjob_submit_cmd(
    manifest_file: str | None,
    wait_timeout: float,
    poll_interval: float,
    logs: bool,
    delete: bool,
    train_args: tuple[str, ...],
    **settings,
) -> None:
    """Create the TFJob (kubeconfig or in-cluster credentials), stream the chief's log and wait
    until it ends; exit non-zero when it Failed or did not end within --wait-timeout.

    Example: shardtrain tfjob submit --data s3://b/quest --model-dir s3://b/m --delete
    """
    from shardtrain.kubeflow import tfjob

    if manifest_file is not None:
        if train_args or any(v is not None for v in settings.values()):
            raise click.UsageError("-f FILE cannot be combined with job options or train args")
        job = tfjob.from_manifest(tfjob.load_manifest(manifest_file))
    else:
        config = tfjob.JobConfig.from_overrides(train_args=train_args, **settings)
        job = tfjob.build_tfjob(config)
    tfjob.submit_and_wait(
        job,
        wait_timeout=wait_timeout,
        poll_interval=poll_interval,
        stream_logs=logs,
        delete_after=delete,
    )


# --------------------------------------------------------------------------------------------
# Kubeflow pipeline
# --------------------------------------------------------------------------------------------

_pipeline_params = click.option(
    "-p",
    "--param",
    "params",
    multiple=True,
    metavar="NAME=VALUE",
    help="A pipeline argument (repeatable; lists as a,b). `shardtrain pipeline params` lists them.",
)


@cli.group("pipeline")
def pipeline_group() -> None:
    """The Kubeflow pipeline csv_to_model (shard → TFJob → evaluate → export): compile it for
    the UI, submit it to a Kubeflow Pipelines server, or run it on this machine."""


@pipeline_group.command("params")
def pipeline_params_cmd() -> None:
    """List the pipeline's parameters: type, default, meaning."""
    from shardtrain.kubeflow import client

    for p in client.parameters():
        default = "required" if p.required else f"default: {p.default!r}"
        click.echo(f"{p.name} ({p.type}, {default})\n    {p.description}")


@pipeline_group.command("compile")
@click.option("--output", "-o", required=True, help="The pipeline YAML to write.")
@_pipeline_params
def pipeline_compile_cmd(output: str, params: tuple[str, ...]) -> None:
    """Compile csv_to_model to the YAML to upload in the Kubeflow Pipelines UI.

    -p NAME=VALUE changes a parameter's default in the YAML (e.g. -p image=REGISTRY/IMAGE:TAG).
    """
    from shardtrain.kubeflow import client

    client.compile_pipeline(output, client.parse_arguments(params))
    click.echo(f"wrote {output}: upload it in the Kubeflow Pipelines UI (Pipelines → Upload)")


@pipeline_group.command("submit")
@click.option("--host", required=True, help="Kubeflow Pipelines API, e.g. http://localhost:8080.")
@_pipeline_params
@click.option("--experiment", default="shardtrain", show_default=True, help="Experiment name.")
@click.option("--run-name", default=None, help="Run name [default: KFP's].")
@click.option("--namespace", default=None, help="Kubeflow profile namespace (multi-user).")
@click.option("--service-account", default=None, help="The run's Kubernetes service account.")
@click.option("--wait/--no-wait", default=False, show_default=True, help="Wait for the run.")
@click.option(
    "--wait-timeout",
    type=click.FloatRange(min=1),
    default=86400,
    show_default=True,
    help="Seconds to wait with --wait.",
)
def pipeline_submit_cmd(
    host: str,
    params: tuple[str, ...],
    experiment: str,
    run_name: str | None,
    namespace: str | None,
    service_account: str | None,
    wait: bool,
    wait_timeout: float,
) -> None:
    """Create a csv_to_model run on a Kubeflow Pipelines server.

    Example: shardtrain pipeline submit --host http://localhost:8080 -p sources=s3://b/q.csv
    -p dataset_uri=s3://b/quest -p model_dir=s3://b/models/quest -p serving_uri=s3://b/serving
    """
    from shardtrain.kubeflow import client

    run = client.submit(
        host,
        client.parse_arguments(params),
        experiment=experiment,
        run_name=run_name,
        namespace=namespace,
        service_account=service_account,
        wait=wait,
        wait_timeout=wait_timeout,
    )
    click.echo(f"run {run.run_id}{' ' + run.state if run.state else ''}: {run.url}")


def _echo_local_run(run) -> None:
    m = run.metrics
    metrics = ", ".join(f"{k} {m[k]:.4f}" for k in ("auc", "accuracy", "log_loss") if k in m)
    click.echo(
        f"\nmodel dir:    {run.model_dir}\nSavedModel:   {run.export}\npublished:    {run.served}"
        f"\nmetrics:      {metrics or 'n/a'} (eval/metrics.json in the model dir)"
        f"\nreport:       {run.report}\nTensorBoard:  tensorboard --logdir {run.tensorboard}"
        f"\ntask outputs: {run.pipeline_root}"
    )


@pipeline_group.command("run-local")
@_pipeline_params
@click.option(
    "--pipeline-root",
    default="pipeline-runs",
    show_default=True,
    help="Directory for the tasks' artifacts and outputs.",
)
def pipeline_run_local_cmd(params: tuple[str, ...], pipeline_root: str) -> None:
    """Run the whole pipeline on this machine with kfp.local: steps as subprocesses, the TFJob
    as local processes. Storage: local paths, or s3:// (MinIO) and gs:// with the usual
    environment variables.

    Example: shardtrain pipeline run-local -p sources=q.csv -p dataset_uri=ds -p model_dir=m
    -p serving_uri=serving -p secret_name= -p gpus_per_worker=0 -p train_steps=300
    """
    from shardtrain.kubeflow import client

    run = client.run_local(client.parse_arguments(params), pipeline_root=pipeline_root)
    _echo_local_run(run)


@cli.command("demo")
@click.option(
    "--workdir",
    default="demo-output",
    show_default=True,
    help="Local directory for everything the demo writes.",
)
@click.option(
    "--rows",
    type=click.IntRange(min=1000),
    default=50_000,
    show_default=True,
    help="Quest attempts to generate.",
)
@click.option(
    "--train-steps",
    type=click.IntRange(min=1),
    default=400,
    show_default=True,
    help="Global training steps.",
)
def demo_cmd(workdir: str, rows: int, train_steps: int) -> None:
    """Run the main job end to end on local storage (no server needed): quest logs → the
    csv_to_model pipeline with kfp.local (2 shard workers, a local TFJob with a chief, a worker
    and an evaluator, evaluation, export)."""
    from shardtrain.data import sharding
    from shardtrain.data.report import render_dataset
    from shardtrain.demo import run_demo

    result = run_demo(workdir, rows=rows, train_steps=train_steps)
    rejects = list(sharding.iter_rejects(result.dataset, result.metadata, limit=3))
    render_dataset(result.dataset, result.metadata, rejects)
    click.echo(
        f"\ninput CSV:    {result.csv}\ndataset:      {result.dataset} "
        f"(inspect it with `shardtrain inspect {result.dataset}`)"
    )
    _echo_local_run(result.run)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: user errors become one line on stderr and an exit code."""
    try:
        cli.main(args=argv, prog_name="shardtrain", standalone_mode=True)
    except ShardtrainError as exc:
        if os.environ.get("SHARDTRAIN_DEBUG"):
            raise
        click.secho(f"error: {exc}", err=True, fg="red")
        sys.exit(exc.exit_code)
    finally:
        if argv is None:
            # The console script: the process ends here. Spare the interpreter's last cyclic
            # collection over every object of numba, Arrow (and TensorFlow) -- 0.3 s after a
            # sharding run, 0.7 s with TensorFlow loaded; the memory goes back to the OS with
            # the process anyway. (Callers that pass ``argv`` carry on: nothing is frozen.)
            gc.freeze()


if __name__ == "__main__":
    main()
