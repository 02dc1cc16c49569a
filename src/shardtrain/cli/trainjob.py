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
    JobCommands,
    SettingsOption,
    add_job_commands,
    count_option,
    decorate_with,
    identity_options,
    pod_options,
)


def _settings() -> type:
    from shardtrain.kubeflow.jobs.trainjob import TrainJobConfig

    return TrainJobConfig


def _d(name: str, text: str) -> dict[str, Any]:
    return {"cls": SettingsOption, "default_of": name, "settings": _settings, "help": text}


def _trainjob_options(*, required: bool) -> Any:
    return decorate_with(
        [
            *identity_options(_d, "TrainJob"),
            count_option(
                "--nodes",
                1,
                _d("nodes", "Training nodes (numNodes): node 0 is the chief, which evaluates."),
            ),
            count_option(
                "--gpus-per-node",
                0,
                _d("gpus_per_node", "nvidia.com/gpu of each node (0: CPU only)."),
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


def _commands() -> JobCommands:
    from shardtrain.kubeflow.jobs import trainjob

    # A TrainJob is a dict: its manifest, loaded from the file as it is.
    return JobCommands(trainjob, trainjob.TrainJobConfig, trainjob.build_trainjob)


@click.group("trainjob")
def trainjob_group() -> None:
    """Kubeflow Trainer v2 TrainJobs: render the training job, or submit it and wait for it."""


_TRAINJOB_RENDER_HELP = """\
Print the TrainJob manifest (YAML) that trains on --data into --model-dir.

TRAIN_ARGS (after `--`) go to `shardtrain train` on every node. Apply the output with
`kubectl apply -f` once the runtime is installed (`kubectl apply --server-side -k
k8s/trainer-v2`).

Example: shardtrain trainjob render --data s3://b/q --model-dir s3://b/m -- --train-steps 5000
"""

_TRAINJOB_SUBMIT_HELP = """\
Create the TrainJob (kubeconfig or in-cluster credentials), stream the chief's log and
wait until it ends; exit non-zero when it Failed or did not end within --wait-timeout.

First (unless --no-preflight) the cluster is checked for what the job needs: Trainer v2
and the runtime, the namespace, the service account, the storage Secret's keys, RBAC and
URIs pods can read; every problem is listed with the command that fixes it, and nothing
is created.

Re-entrant: when the same TrainJob exists already (a repeated submit), it is attached to
and waited for. A job in a Kueue queue (--queue) is reported as queued until admitted.

Example: shardtrain trainjob submit --nodes 3 --data s3://b/quest --model-dir s3://b/m
"""


trainjob_render_cmd, trainjob_submit_cmd = add_job_commands(
    trainjob_group,
    _trainjob_options,
    _commands,
    "TrainJob",
    render_help=_TRAINJOB_RENDER_HELP,
    submit_help=_TRAINJOB_SUBMIT_HELP,
)
