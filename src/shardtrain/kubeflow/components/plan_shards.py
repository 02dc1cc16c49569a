"""The ``plan_shards`` component: choose the shard workers from the listing of the sources."""

from shardtrain.kubeflow.components import step_component
from shardtrain.kubeflow.parameters import PLAN_SHARDS, Param

plan_shards = step_component(
    "plan_shards",
    PLAN_SHARDS,
    step="plan_step",
    module="shard_steps",
    summary="""
    Lists the sources (reads no data) and returns the indices of the shard workers that have
    work, one per task the file sizes promise and at most num_workers, for dsl.ParallelFor;
    each worker plans the run itself. See shardtrain.kubeflow.shard_steps.plan_step.
    """,
    returns=Param(
        "Output", "list[int]", "The indices of the shard workers that have work: [0, 1, ...]."
    ),
)
