"""The components, each alone: pinned image, nothing installed at start, loadable from YAML,
and a body that passes every parameter to its step."""

from __future__ import annotations

import importlib
import inspect
from unittest import mock

import pytest

from helpers import REPO
from shardtrain.kubeflow import client, shard_steps, steps
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
        deploy,
        evaluate,
        export,
        finalize_shards,
        plan_shards,
        shard,
        train,
    )

    modules = (plan_shards, shard, finalize_shards, train, evaluate, export, deploy)
    for module in modules:
        name = module.__name__.rsplit(".", 1)[-1]
        component = getattr(module, name)
        container = component.component_spec.implementation.container
        assert container.image == IMAGE, name
        command = " ".join(container.command)
        assert "pip install" not in command, name  # kfp and shardtrain are in the image
        # The body is one call into shardtrain.kubeflow.steps (the sharding steps before
        # finalize: into shard_steps, whose import is light).
        step_module = "shard_steps" if name in SHARD_STEPS else "steps"
        assert f"from shardtrain.kubeflow import {step_module}\n" in command, name


COMPONENT_STEPS = [
    ("plan_shards", "plan_step"),
    ("shard", "shard_step"),
    ("settle_shards", "settle_step"),
    ("finalize_shards", "finalize_step"),
    ("train", "train_step"),
    ("evaluate", "evaluate_step"),
    ("export", "export_step"),
    ("deploy", "deploy_step"),
]
#: The components whose step is in shard_steps (light to import), not steps.
SHARD_STEPS = ("plan_shards", "shard", "settle_shards", "finalize_shards")


@pytest.mark.parametrize(("module", "step"), COMPONENT_STEPS)
def test_component_bodies_pass_every_parameter_to_their_step(module, step):
    component = getattr(importlib.import_module(f"shardtrain.kubeflow.components.{module}"), module)
    names = list(inspect.signature(component.python_func).parameters)
    values = {name: f"<{name}>" for name in names}
    with mock.patch.object(shard_steps if module in SHARD_STEPS else steps, step) as called:
        component.python_func(**values)
    called.assert_called_once_with(**values)


@pytest.mark.parametrize(("module", "step"), COMPONENT_STEPS)
def test_the_yaml_embeds_the_generated_function_as_its_source(module, step):
    """KFP runs the body from the YAML: the source it embeds is the generated function's,
    signature, docstring and call included."""
    component = getattr(importlib.import_module(f"shardtrain.kubeflow.components.{module}"), module)
    source = inspect.getsource(component.python_func)
    assert source.startswith(f"def {module}(\n")
    command = component.component_spec.implementation.container.command[-1]
    assert source in command
    step_module = "shard_steps" if module in SHARD_STEPS else "steps"
    assert f" {step_module}.{step}(\n" in source and "Args:\n" in source
