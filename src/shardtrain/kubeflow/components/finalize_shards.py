"""The ``finalize_shards`` component: commit the dataset once every shard worker is done."""

from shardtrain.kubeflow.components import step_component
from shardtrain.kubeflow.parameters import FINALIZE_SHARDS

finalize_shards = step_component(
    "finalize_shards",
    FINALIZE_SHARDS,
    step="finalize_step",
    module="shard_steps",
    summary="""
    Merges the shard workers' tasks into dataset_uri/metadata.json (statistics, rejects,
    splits) and outputs a Dataset pointing at it; then checks the dataset against the
    training data of the model served at serving_uri (data_checks: fail, warn or off) and
    writes the outcome to data_checks_report and dataset_uri/data_checks.json. When
    settle_shards did both (no worker ran again), only writes what it handed over. See
    shardtrain.kubeflow.shard_steps.finalize_step.
    """,
)
