"""``shardtrain pipeline params|compile|submit|run-local`` and ``demo``: the Kubeflow pipeline
``csv_to_model`` from the command line.

Each command is one call into :mod:`shardtrain.kubeflow.client`; ``-p NAME=VALUE`` pairs are
typed by the pipeline's own parameters (:func:`shardtrain.kubeflow.client.parse_arguments`).
``demo`` runs the pipeline on this machine on generated data (:mod:`shardtrain.demo`).
"""

from __future__ import annotations

import click

#: The ``-p NAME=VALUE`` option of the pipeline commands.
_pipeline_params = click.option(
    "-p",
    "--param",
    "params",
    multiple=True,
    metavar="NAME=VALUE",
    help="A pipeline argument (repeatable; lists as a,b). `shardtrain pipeline params` lists them.",
)


def _checked(arguments: dict, *, cluster: bool) -> dict:
    """``arguments``, once every value a step would refuse is refused here
    (:func:`shardtrain.kubeflow.parameters.check_arguments`, ``train_flags`` by
    ``shardtrain train``'s own parser), before a run starts or a YAML is written.

    Args:
        arguments: typed pipeline arguments.
        cluster: the run goes to a cluster (compile, submit): locations must be URIs pods
            can read; ``run-local`` runs here and takes local paths.
    """
    from shardtrain.kubeflow.parameters import check_arguments

    check_arguments(arguments, cluster=cluster)
    return arguments


@click.group("pipeline")
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
@click.option("--output", "-o", default=None, help="The pipeline YAML to write.")
@click.option(
    "--all-to",
    default=None,
    metavar="DIR",
    help="Write DIR/pipelines/csv_to_model.yaml and DIR/components/<step>.yaml instead.",
)
@_pipeline_params
def pipeline_compile_cmd(output: str | None, all_to: str | None, params: tuple[str, ...]) -> None:
    """Compile csv_to_model to the YAML to upload in the Kubeflow Pipelines UI.

    -p NAME=VALUE changes a parameter's default in the YAML (e.g. -p image=REGISTRY/IMAGE:TAG).
    --all-to DIR also writes each component's YAML (for kfp.components.load_component_from_file).
    """
    from shardtrain.kubeflow import client

    if (output is None) == (all_to is None):
        raise click.UsageError("give exactly one of --output and --all-to")
    if all_to is not None:
        if params:
            raise click.UsageError("-p applies to --output only")
        for path in client.compile_definitions(all_to):
            click.echo(f"wrote {path}")
        return
    assert output is not None
    client.compile_pipeline(output, _checked(client.parse_arguments(params), cluster=True))
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
@click.option(
    "--preflight/--no-preflight",
    default=True,
    show_default=True,
    help="Before creating the run, check the server's version and that the cluster of "
    "kubeconfig has what the run needs (job API and runtime, namespaces, service accounts, "
    "the storage Secret with every key, the runner's RBAC) and list every problem.",
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
    preflight: bool,
) -> None:
    """Create a csv_to_model run on a Kubeflow Pipelines server.

    First (unless --no-preflight) the server's version and the cluster of kubeconfig are
    checked for what the run needs (as the runner: --service-account, else pipeline-runner);
    every problem is listed with the command that fixes it, and no run is created.

    Example: shardtrain pipeline submit --host http://localhost:8080 -p sources=s3://b/q.csv
    -p dataset_uri=s3://b/quest -p model_dir=s3://b/models/quest -p serving_uri=s3://b/serving
    """
    from shardtrain.kubeflow import client

    run = client.submit(
        host,
        _checked(client.parse_arguments(params), cluster=True),
        experiment=experiment,
        run_name=run_name,
        namespace=namespace,
        service_account=service_account,
        wait=wait,
        wait_timeout=wait_timeout,
        preflight=preflight,
    )
    click.echo(f"run {run.run_id}{' ' + run.state if run.state else ''}: {run.url}")


def _echo_local_run(run) -> None:
    from shardtrain.train.evaluation import headline

    metrics = headline(run.metrics)
    published = run.served or "nothing: not blessed (eval/blessing.json in the model dir)"
    click.echo(
        f"\nmodel dir:    {run.model_dir}\nSavedModel:   {run.export}\npublished:    {published}"
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

    arguments = _checked(client.parse_arguments(params), cluster=False)
    run = client.run_local(arguments, pipeline_root=pipeline_root)
    _echo_local_run(run)


@click.command("demo")
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
    from shardtrain.data.report import render_dataset
    from shardtrain.demo import run_demo

    result = run_demo(workdir, rows=rows, train_steps=train_steps)
    rejects = result.metadata.iter_rejects(result.dataset, limit=3)
    render_dataset(result.dataset, result.metadata, rejects)
    click.echo(
        f"\ninput CSV:    {result.csv}\ndataset:      {result.dataset} "
        f"(inspect it with `shardtrain inspect {result.dataset}`)"
    )
    _echo_local_run(result.run)
    if result.html_report:
        click.echo(f"HTML report:  {result.html_report}")
