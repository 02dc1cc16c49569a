"""The ``shard`` component: one shard worker's share of CSV → TFRecord shards."""

from kfp import dsl

from shardtrain.kubeflow.components import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def shard(
    sources: list[str],
    dataset_uri: str,
    label: str,
    key: str,
    splits: str,
    num_shards: int,
    task_mb: float,
    max_bad_fraction: float,
    worker_index: int,
    num_workers: int,
    cpu: str,
    images: bool = False,
    image_column: str = "",
) -> str:
    """Shards the tasks of worker worker_index of num_workers into TFRecords at dataset_uri,
    in as many processes as the cpu it requests; resumes after a crash. Returns a JSON report
    for finalize_shards. See shardtrain.kubeflow.steps.shard_step.
    """
    from shardtrain.kubeflow import steps

    return steps.shard_step(
        sources=sources,
        dataset_uri=dataset_uri,
        label=label,
        key=key,
        splits=splits,
        num_shards=num_shards,
        task_mb=task_mb,
        max_bad_fraction=max_bad_fraction,
        worker_index=worker_index,
        num_workers=num_workers,
        cpu=cpu,
        images=images,
        image_column=image_column,
    )
