"""The ``shard`` component: one shard worker's share of CSV → TFRecord shards."""

from shardtrain.kubeflow.components import step_component
from shardtrain.kubeflow.parameters import SHARD, Param

shard = step_component(
    "shard",
    SHARD,
    step="shard_step",
    module="shard_steps",
    summary="""
    Shards the tasks of worker worker_index of num_workers into TFRecords at dataset_uri, in
    as many processes as the cpu it requests; resumes after a crash. The sharding options
    are those of plan_shards. See shardtrain.kubeflow.shard_steps.shard_step.
    """,
    returns=Param("Output", "str", "A JSON report of what this worker did, for finalize_shards."),
)
