"""The Kubeflow layer on top of the library: TFJobs and Kubeflow Pipelines.

* :mod:`.tfjob`: the one TFJob manifest generator (and submit/wait);
  :mod:`.launcher` runs a TFJob-shaped cluster as local processes.
* :mod:`.components` and :mod:`.pipelines`: the KFP definitions themselves (signatures and
  the graph), each component body one call into :mod:`.steps`.
* :mod:`.steps`: what each pipeline step does; the steps hand data to each other as
  :mod:`.pointers` and the evaluate step writes :mod:`.report`, the run's Markdown card.
* :mod:`.client`: the pipeline from the outside: its parameters, compile, submit to a
  Kubeflow Pipelines server, or run it here with ``kfp.local``.
"""
