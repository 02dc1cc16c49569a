"""shardtrain's Kubeflow pipelines (``csv_to_model``), loaded by
:func:`shardtrain.kubeflow.pipeline.load_pipeline`."""
