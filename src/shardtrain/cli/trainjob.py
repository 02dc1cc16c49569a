"""``shardtrain trainjob render|submit``: the training job as a Kubeflow Trainer v2 TrainJob
on our TensorFlow runtime (``k8s/trainer-v2``), and running it on a cluster.

Both commands take the settings of :class:`shardtrain.kubeflow.jobs.trainjob.TrainJobConfig`;
a setting left out keeps its default, which the option's help shows.
"""

from __future__ import annotations

from typing import Any

import click

from shardtrain.cli.jobs import (
    QUEUE_OPTION,
    SettingsOption,
    check_for_pods,
    decorate_with,
    job_to_submit,
    pod_options,
    preflight_job,
    submit_options,
)


def _settings() -> type:
    from shardtrain.kubeflow.jobs.trainjob import TrainJobConfig

    return TrainJobConfig


def _d(name: str, text: str) -> dict[str, Any]:
    return {"cls": SettingsOption, "default_of": name, "settings": _settings, "help": text}


def _trainjob_options(*, required: bool) -> Any:
    return decorate_with(
        [
            click.option("--name", default=None, **_d("name", "TrainJob name.")),
            click.option("--namespace", default=None, **_d("namespace", "Namespace.")),
            click.option("--image", default=None, **_d("image", "Project image.")),
            click.option(
                "--nodes",
                type=click.IntRange(min=1),
                default=None,
                **_d("nodes", "Training nodes (numNodes): node 0 is the chief, which evaluates."),
            ),
            click.option(
                "--gpus-per-node",
                type=click.IntRange(min=0),
                default=None,
                **_d("gpus_per_node", "nvidia.com/gpu of each node (0: CPU only)."),
            ),
            click.option(
                "--runtime",
                default=None,
                help="ClusterTrainingRuntime [default: shardtrain-tensorflow, with "
                "--gang-scheduler S shardtrain-tensorflow-S].",
            ),
            *pod_options(_d, required=required, per="node"),
            QUEUE_OPTION,
            click.option(
                "--gang-scheduler",
                type=click.Choice(["volcano", "coscheduling"]),
                default=None,
                help="Start all nodes together or none (the runtime variant's podGroupPolicy: "
                "Volcano, or the scheduler-plugins' coscheduling) [default: none].",
            ),
            click.option(
                "--priority-class",
                default=None,
                help="With a Kueue --queue: the job's WorkloadPriorityClass [default: none].",
            ),
        ]
    )


@click.group("trainjob")
def trainjob_group() -> None:
    """Kubeflow Trainer v2 TrainJobs: render the training job, or submit it and wait for it."""


@trainjob_group.command("render")
@_trainjob_options(required=True)
@click.argument("train_args", nargs=-1, type=click.UNPROCESSED)
def trainjob_render_cmd(train_args: tuple[str, ...], **settings: Any) -> None:
    """Print the TrainJob manifest (YAML) that trains on --data into --model-dir.

    TRAIN_ARGS (after `--`) go to `shardtrain train` on every node. Apply the output with
    `kubectl apply -f` once the runtime is installed (`kubectl apply --server-side -k
    k8s/trainer-v2`).

    Example: shardtrain trainjob render --data s3://b/q --model-dir s3://b/m -- --train-steps 5000
    """
    from shardtrain.kubeflow.jobs import trainjob

    config = trainjob.TrainJobConfig.from_overrides(train_args=train_args, **settings)
    check_for_pods(config)
    click.echo(trainjob.to_yaml(trainjob.build_trainjob(config)), nl=False)


@trainjob_group.command("submit")
@_trainjob_options(required=False)
@decorate_with(submit_options("TrainJob"))
@click.argument("train_args", nargs=-1, type=click.UNPROCESSED)
def trainjob_submit_cmd(
    manifest_file: str | None,
    wait_timeout: float,
    poll_interval: float,
    logs: bool,
    delete: bool,
    preflight: bool,
    train_args: tuple[str, ...],
    **settings: Any,
) -> None:
    """Create the TrainJob (kubeconfig or in-cluster credentials), stream the chief's log and
    wait until it ends; exit non-zero when it Failed or did not end within --wait-timeout.

    First (unless --no-preflight) the cluster is checked for what the job needs: Trainer v2
    and the runtime, the namespace, the service account, the storage Secret's keys, RBAC and
    URIs pods can read; every problem is listed with the command that fixes it, and nothing
    is created.

    Re-entrant: when the same TrainJob exists already (a repeated submit), it is attached to
    and waited for. A job in a Kueue queue (--queue) is reported as queued until admitted.

    Example: shardtrain trainjob submit --nodes 3 --data s3://b/quest --model-dir s3://b/m
    """
    from shardtrain.kubeflow.jobs import trainjob
    from shardtrain.kubeflow.jobs.manifests import load_manifest

    job = job_to_submit(
        manifest_file,
        train_args,
        settings,
        from_file=lambda path: load_manifest(path, trainjob.KIND),
        from_settings=lambda **s: trainjob.build_trainjob(
            check_for_pods(trainjob.TrainJobConfig.from_overrides(**s), uris=not preflight)
        ),
    )
    if preflight:
        trainjob.validate(job)  # the job's own faults first: they need no cluster
        preflight_job(job, logs=logs, delete=delete)
    trainjob.submit_and_wait(
        job,
        wait_timeout=wait_timeout,
        poll_interval=poll_interval,
        stream_logs=logs,
        delete_after=delete,
    )
