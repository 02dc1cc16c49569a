"""``shardtrain train``, ``evaluate`` and ``run-local``: training, in one process or as a TFJob
replica; the candidate scored against the served model (blessing); and a TFJob-shaped cluster
of such processes on this machine.

``train`` is the command every replica of the TFJob runs (:mod:`shardtrain.train.trainer`; the
replica's role comes from ``TF_CONFIG``). ``run-local`` starts a chief, workers and an
evaluator as local processes with the ``TF_CONFIG`` the training operator would give their pods
(:mod:`shardtrain.kubeflow.local.processes`), or runs the replicas of a rendered TFJob manifest.
"""

from __future__ import annotations

from typing import Any

import click

from shardtrain.commands import config_command, train_command


@train_command
def train_cmd(config_file: str | None, options: dict[str, Any]) -> None:
    """Train and evaluate on a sharded dataset, Estimator style, from TF_CONFIG.

    Run the same command in every replica of a TFJob (chief, workers, evaluator); alone it
    trains and evaluates in one process. Defaults < --config file < flags (the file nests
    the model and input flags in sections `model:` and `input:`); the resolved configuration
    is saved as MODEL_DIR/train_config.yaml.

    Exit codes: 0 done; 1 bad configuration or data (permanent); 3 storage unreachable;
    128+signal (143) after writing a checkpoint on SIGTERM (restart to resume).
    """
    from shardtrain.train.config import resolve_config
    from shardtrain.train.evaluation import headline
    from shardtrain.train.trainer import train_and_evaluate

    result = train_and_evaluate(resolve_config(config_file, options))
    if result.status == "already-complete":
        click.echo(f"model already trained to step {result.step}; nothing to do")
    elif result.status == "evaluated":
        click.echo(f"evaluator done: last evaluated step {result.step}")
    else:
        click.echo(f"{result.role}: trained to step {result.step} (from {result.start_step})")
    if result.metrics:
        m = result.metrics
        click.echo(f"eval at step {m['step']}: {headline(m)} ({m['num_examples']:,} examples)")
    if result.export_uri:
        click.echo(f"exported SavedModel: {result.export_uri}")


@config_command("evaluate", "shardtrain.train.blessing:EvaluateConfig")
def evaluate_cmd(options: dict[str, Any]) -> None:
    """Score a trained model and the served one on the same eval split; bless it or not.

    The candidate is MODEL_DIR's newest export, the baseline the model published at
    --serving-uri (its latest.json). Both are scored through their serving signatures on the
    eval split of --data; the candidate is blessed only if every --thresholds clause holds
    (relative clauses are skipped without a baseline). Writes MODEL_DIR/eval/blessing.json,
    with --slice-by the metrics per value into MODEL_DIR/eval/metrics.json, and the HTML
    report MODEL_DIR/eval/report.html (see `shardtrain report`), whose path it prints.

    Exit codes: 0 blessed; 1 not blessed (one line names the failing threshold), or bad
    input.
    """
    import sys

    from shardtrain.train.blessing import EvaluateConfig, evaluate_model
    from shardtrain.train.evaluation import headline

    config = EvaluateConfig(**options)
    blessing = evaluate_model(config)
    info = blessing.baseline_info
    click.echo(f"candidate {blessing.export}: {headline(blessing.candidate)}")
    if blessing.baseline is not None and info is not None:
        click.echo(f"baseline {info['uri']}: {headline(blessing.baseline)}")
    elif info is not None and info.get("error"):
        click.echo(f"baseline {info['uri']} cannot score this data: {info['error']}")
    for check in blessing.decision.checks:
        click.echo(f"  {check.describe()}")
    for column, rows in (blessing.candidate.get("slices") or {}).items():
        click.echo(f"slices by {column}:")
        for row in rows:
            click.echo(f"  {row['value']}: {headline(row)} ({row['num_examples']:,} examples)")
    from shardtrain.htmlreport.build import try_write_report

    report = try_write_report(config.data, model_dir=config.model_dir, against=config.serving_uri)
    if report:
        click.echo(f"report: {report}")
    if not blessing.blessed:
        click.secho(blessing.summary(), err=True, fg="red")
        sys.exit(1)
    click.echo(blessing.summary())


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

    from shardtrain.kubeflow.jobs import tfjob
    from shardtrain.kubeflow.local import processes

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
        replicas = [processes.Replica("chief", 1, args)]
        if workers:
            replicas.append(processes.Replica("worker", workers, args))
        if evaluator:
            replicas.append(processes.Replica("evaluator", 1, args))
    result = processes.run_local(replicas, timeout=timeout, grace=grace)
    click.echo(
        "replica exit codes: "
        + ", ".join(
            f"{r.name}={'running' if r.exit_code is None else r.exit_code}" for r in result.replicas
        ),
        err=not result.succeeded,
    )
    if not result.succeeded:
        click.secho(f"error: local job failed: {result.reason}", err=True, fg="red")
        sys.exit(result.exit_code)
    click.echo("local job succeeded")
