"""``shardtrain node run``: run the pods of a local control plane (``scripts/k8s-up``) on this
machine, as local processes (see :mod:`shardtrain.kubeflow.local.node_agent`)."""

from __future__ import annotations

import click


@click.group("node")
def node_group() -> None:
    """A node agent: run a TFJob on this machine against a local control plane."""


@node_group.command("run")
@click.option("--name", default="shardtrain-node", show_default=True, help="The Node's name.")
@click.option(
    "--kubeconfig",
    default=None,
    help="Kubeconfig of the control plane [default: $KUBECONFIG, then ~/.kube/config].",
)
@click.option(
    "--log-dir",
    default=None,
    help="Where container logs go [default: a temporary directory, deleted on exit].",
)
@click.option(
    "--port",
    type=click.IntRange(min=0, max=65535),
    default=0,
    show_default=True,
    help="Port of the log endpoint on 127.0.0.1 (0: a free one).",
)
@click.option(
    "--gpus",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="nvidia.com/gpu the Node offers (pods asking for more stay Pending).",
)
def node_run_cmd(
    name: str, kubeconfig: str | None, log_dir: str | None, port: int, gpus: int
) -> None:
    """Register a Node and run the pods the control plane gives it until Ctrl-C.

    Each pod's container command runs here as a local process in this Python environment (the
    image is ignored); service host names (e.g. in TF_CONFIG) map to ports on 127.0.0.1;
    Secrets referenced by the pod are read from the API server. Start the control plane with
    `eval "$(scripts/k8s-up)"`, then this, then `shardtrain tfjob submit` or `kubectl apply`.
    """
    from shardtrain.kubeflow.local import node_agent

    extended = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    node_agent.run(
        node_agent.NodeConfig(
            name=name,
            kubeconfig=kubeconfig,
            log_dir=log_dir,
            port=port,
            extended_resources=extended,
        )
    )
