"""``shardtrain train`` and ``run-local``: training, in one process or as a TFJob replica, and a
TFJob-shaped cluster of such processes on this machine.

``train`` is the command every replica of the TFJob runs (:mod:`shardtrain.train.trainer`; the
replica's role comes from ``TF_CONFIG``). ``run-local`` starts a chief, workers and an
evaluator as local processes with the ``TF_CONFIG`` the training operator would give their pods
(:mod:`shardtrain.kubeflow.launcher`), or runs the replicas of a rendered TFJob manifest.
"""

from __future__ import annotations

import click


@click.command("train")
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


@click.command(
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
