"""shardtrain's Kubeflow pipelines (``csv_to_model``), loaded by
:func:`shardtrain.pipeline.load_pipeline`."""
