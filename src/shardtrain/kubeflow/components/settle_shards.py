"""The ``settle_shards`` component: decide what the shard workers checked, name who runs again."""

from shardtrain.kubeflow.components import step_component
from shardtrain.kubeflow.parameters import SETTLE_SHARDS, Param

settle_shards = step_component(
    "settle_shards",
    SETTLE_SHARDS,
    step="settle_step",
    module="shard_steps",
    summary="""
    Once every shard worker is done, decides what planning guessed from a sample and the
    workers checked as they read (CSV column types by all rows); returns the shard workers
    that must run again for dsl.ParallelFor: none when every guess held, all of them when a
    column's type changed. When none runs again, also commits the dataset and checks it
    against the served model's training data (as finalize_shards would), handing both to
    finalize_shards through settled. See shardtrain.kubeflow.shard_steps.settle_step.
    """,
    returns=Param(
        "Output", "list[int]", "The indices of the shard workers to run again ([] when none)."
    ),
)
