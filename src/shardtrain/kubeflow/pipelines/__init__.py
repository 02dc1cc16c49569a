"""shardtrain's Kubeflow pipelines: one module per pipeline, defining a pipeline function of
the module's name (``csv_to_model``), loaded by :func:`shardtrain.kubeflow.client.load_pipeline`.

Importing this package imports nothing else (kfp comes with a pipeline module), so
:data:`PIPELINE_NAME` costs nothing to those that only need the name.
"""

#: The pipeline the ``shardtrain pipeline`` commands compile, submit and run, and the title
#: of its report.
PIPELINE_NAME = "csv_to_model"
