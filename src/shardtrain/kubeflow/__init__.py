"""The Kubeflow layer on top of the library: TFJobs and Kubeflow Pipelines.

:mod:`.tfjob` is the one TFJob manifest generator (and submit/wait), :mod:`.launcher` runs a
TFJob-shaped cluster as local processes, :mod:`.pipeline` holds what each pipeline step does and
compiles/submits/runs the pipeline; :mod:`.components` and :mod:`.pipelines` are the KFP
definitions themselves.
"""
