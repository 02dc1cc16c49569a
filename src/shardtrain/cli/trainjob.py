"""``shardtrain trainjob render|submit``: the training job as a Kubeflow Trainer v2 TrainJob
on our TensorFlow runtime (``k8s/trainer-v2``), and running it on a cluster.

Both commands take the settings of :class:`shardtrain.kubeflow.jobs.trainjob.TrainJobConfig`;
a setting left out keeps its default, which the option's help shows.
"""

from __future__ import annotations

from typing import Any

import click

from shardtrain.cli.jobs import WAIT_OPTIONS, SettingsOption, decorate_with


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
            click.option("--data", required=required, help="Sharded dataset URI."),
            click.option("--model-dir", required=required, help="Model URI."),
            click.option(
                "--runtime",
                default=None,
                help="ClusterTrainingRuntime [default: shardtrain-tensorflow, with "
                "--gang-scheduler S shardtrain-tensorflow-S].",
            ),
            click.option(
                "--secret",
                default=None,
                **_d("secret", "Secret with the storage variables ('' for none, e.g. GCS)."),
            ),
            click.option(
                "--service-account",
                default=None,
                **_d("service_account", "The pods' service account."),
            ),
            click.option("--cpu", default=None, **_d("cpu", "CPU request per node.")),
            click.option("--memory", default=None, **_d("memory", "Memory per node.")),
            click.option(
                "--termination-grace-seconds",
                type=click.IntRange(min=0),
                default=None,
                **_d(
                    "termination_grace_seconds",
                    "Seconds between SIGTERM and SIGKILL: a node needs one training step plus "
                    "a checkpoint write to stop cleanly.",
                ),
            ),
            click.option(
                "--active-deadline-seconds",
                type=click.IntRange(min=1),
                default=None,
                help="Fail the job after this many seconds [default: no limit].",
            ),
            click.option(
                "--queue",
                default=None,
                help="Queue to wait in: a Kueue LocalQueue (label kueue.x-k8s.io/queue-name, "
                "created suspended until admitted), or with --gang-scheduler volcano a Volcano "
                "queue [default: none].",
            ),
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
    click.echo(trainjob.to_yaml(trainjob.build_trainjob(config)), nl=False)


@trainjob_group.command("submit")
@_trainjob_options(required=False)
@click.option(
    "-f",
    "--file",
    "manifest_file",
    default=None,
    help="Submit this TrainJob manifest instead of building one from the options.",
)
@decorate_with(WAIT_OPTIONS)
@click.argument("train_args", nargs=-1, type=click.UNPROCESSED)
def trainjob_submit_cmd(
    manifest_file: str | None,
    wait_timeout: float,
    poll_interval: float,
    logs: bool,
    delete: bool,
    train_args: tuple[str, ...],
    **settings: Any,
) -> None:
    """Create the TrainJob (kubeconfig or in-cluster credentials), stream the chief's log and
    wait until it ends; exit non-zero when it Failed or did not end within --wait-timeout.

    Re-entrant: when the same TrainJob exists already (a repeated submit), it is attached to
    and waited for. A job in a Kueue queue (--queue) is reported as queued until admitted.

    Example: shardtrain trainjob submit --nodes 3 --data s3://b/quest --model-dir s3://b/m
    """
    from shardtrain.kubeflow.jobs import trainjob
    from shardtrain.kubeflow.jobs.manifests import load_manifest

    if manifest_file is not None:
        if train_args or any(v is not None for v in settings.values()):
            raise click.UsageError("-f FILE cannot be combined with job options or train args")
        job = load_manifest(manifest_file, trainjob.KIND)
    else:
        config = trainjob.TrainJobConfig.from_overrides(train_args=train_args, **settings)
        job = trainjob.build_trainjob(config)
    trainjob.submit_and_wait(
        job,
        wait_timeout=wait_timeout,
        poll_interval=poll_interval,
        stream_logs=logs,
        delete_after=delete,
    )
