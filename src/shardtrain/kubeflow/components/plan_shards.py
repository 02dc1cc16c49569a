"""The ``plan_shards`` component: check the inputs once, choose the shard workers."""

from shardtrain.kubeflow.components import step_component
from shardtrain.kubeflow.parameters import PLAN_SHARDS, Param

plan_shards = step_component(
    "plan_shards",
    PLAN_SHARDS,
    step="plan_step",
    summary="""
    Lists the sources and settles the schema as every shard worker will, so a missing file
    or label fails once, here; returns the indices of the shard workers that have work (at
    most num_workers) for dsl.ParallelFor. See shardtrain.kubeflow.steps.plan_step.
    """,
    returns=Param(
        "Output", "list[int]", "The indices of the shard workers that have work: [0, 1, ...]."
    ),
)
