"""The Kubeflow layer on top of the library: training jobs and Kubeflow Pipelines.

* :mod:`.jobs`: the training job APIs, one module per API (:mod:`.jobs.tfjob`, the one TFJob
  manifest generator, its rules and submit/wait), and the submit/wait/logs machinery they
  share; :mod:`.pods`: what every pod has in common (image, storage Secret, local commands).
* :mod:`.local`: a job on one machine without a cluster: its replicas as local processes
  (``run-local``).
* :mod:`.components` and :mod:`.pipelines`: the KFP definitions themselves (signatures and
  the graph), each component body one call into :mod:`.steps`.
* :mod:`.steps`: what each pipeline step does (the sharding steps before finalize in
  :mod:`.shard_steps`, light to import); the steps hand data to each other as
  :mod:`.pointers` and the evaluate step writes :mod:`.report`, the run's Markdown card.
* :mod:`.client`: the pipeline from the outside: its parameters, compile, submit to a
  Kubeflow Pipelines server, or run it here with ``kfp.local``.
"""
