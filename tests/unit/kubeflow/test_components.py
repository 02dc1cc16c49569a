"""The components, each alone: pinned image, nothing installed at start, loadable from YAML."""

from __future__ import annotations

from helpers import REPO
from shardtrain.kubeflow import client
from shardtrain.kubeflow.components import IMAGE


def test_a_checked_in_component_loads_into_a_pipeline_of_ones_own():
    from kfp import components

    shard = components.load_component_from_file(str(REPO / "components" / "shard.yaml"))
    assert {"sources", "dataset_uri", "worker_index", "num_workers"} <= set(
        shard.component_spec.inputs
    )
    spec = shard.pipeline_spec.deployment_spec["executors"]
    (executor,) = spec.values()
    assert executor["container"]["image"] == IMAGE


def test_components_alone_pin_the_image_and_install_nothing_at_start():
    client.load_pipeline()
    from shardtrain.kubeflow.components import (
        evaluate,
        export,
        finalize_shards,
        plan_shards,
        shard,
        train,
    )

    modules = (plan_shards, shard, finalize_shards, train, evaluate, export)
    for module in modules:
        name = module.__name__.rsplit(".", 1)[-1]
        component = getattr(module, name)
        container = component.component_spec.implementation.container
        assert container.image == IMAGE, name
        command = " ".join(container.command)
        assert "pip install" not in command, name  # kfp and shardtrain are in the image
        # The body is one call into shardtrain.kubeflow.steps.
        assert "from shardtrain.kubeflow import steps" in command, name
