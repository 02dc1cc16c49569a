"""The ``plan_shards`` component: check the inputs once, choose the shard workers."""

from kfp import dsl

from shardtrain.kubeflow.components import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def plan_shards(
    sources: list[str],
    dataset_uri: str,
    label: str,
    key: str,
    splits: str,
    num_shards: int,
    task_mb: float,
    num_workers: int,
    images: bool = False,
    image_column: str = "",
) -> list[int]:
    """Lists the CSV sources and settles the schema as every shard worker will, so a missing
    file or label fails once, here; returns the indices of the shard workers that have work
    (at most num_workers) for dsl.ParallelFor. See shardtrain.kubeflow.steps.plan_step.
    """
    from shardtrain.kubeflow import steps

    return steps.plan_step(
        sources=sources,
        dataset_uri=dataset_uri,
        label=label,
        key=key,
        splits=splits,
        num_shards=num_shards,
        task_mb=task_mb,
        num_workers=num_workers,
        images=images,
        image_column=image_column,
    )
