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
    source_format: str,
    schema_file: str,
    delimiter: str,
    quote_char: str,
    escape_char: str,
    encoding: str,
    no_header: bool,
    columns: str,
    null_values: str,
    skip_initial_space: bool,
    decimal: str,
    infer_types: str,
    compression: str,
    compression_level: int,
    record_format: str,
    num_shards: int,
    target_shard_mb: float,
    min_shards: int,
    task_mb: float,
    block_mb: float,
    max_bad_fraction: float,
    top_k: int,
    images: bool,
    image_column: str,
    resize: str,
    num_workers: int,
) -> list[int]:
    """Lists the sources and settles the schema as every shard worker will, so a missing
    file or label fails once, here; returns the indices of the shard workers that have work
    (at most num_workers) for dsl.ParallelFor. The sharding options are the pipeline's
    parameters of the same names (ShardConfig's fields). See
    shardtrain.kubeflow.steps.plan_step.
    """
    from shardtrain.kubeflow import steps

    return steps.plan_step(
        sources=sources,
        dataset_uri=dataset_uri,
        label=label,
        key=key,
        splits=splits,
        source_format=source_format,
        schema_file=schema_file,
        delimiter=delimiter,
        quote_char=quote_char,
        escape_char=escape_char,
        encoding=encoding,
        no_header=no_header,
        columns=columns,
        null_values=null_values,
        skip_initial_space=skip_initial_space,
        decimal=decimal,
        infer_types=infer_types,
        compression=compression,
        compression_level=compression_level,
        record_format=record_format,
        num_shards=num_shards,
        target_shard_mb=target_shard_mb,
        min_shards=min_shards,
        task_mb=task_mb,
        block_mb=block_mb,
        max_bad_fraction=max_bad_fraction,
        top_k=top_k,
        images=images,
        image_column=image_column,
        resize=resize,
        num_workers=num_workers,
    )
