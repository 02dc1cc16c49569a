"""The ``finalize_shards`` component: commit the dataset once every shard worker is done."""

from kfp import dsl
from kfp.dsl import Dataset, Output

from shardtrain.kubeflow.components import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def finalize_shards(dataset_uri: str, worker_reports: list[str], dataset: Output[Dataset]):
    """Merges the shard workers' tasks into dataset_uri/metadata.json (statistics, rejects,
    splits) and outputs a Dataset pointing at it. See shardtrain.kubeflow.steps.finalize_step.
    """
    from shardtrain.kubeflow import steps

    steps.finalize_step(dataset_uri=dataset_uri, worker_reports=worker_reports, dataset=dataset)
