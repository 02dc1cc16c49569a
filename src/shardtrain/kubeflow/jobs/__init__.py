"""Kubeflow training jobs: one module per job API, and what they share.

* :mod:`.trainjob`: the TrainJob (``trainer.kubeflow.org/v1alpha1``, Kubeflow Trainer v2)
  and our TensorFlow runtime for it: settings, generators, rules and submission.
* :mod:`.tfjob`: the TFJob (``kubeflow.org/v1``, the training operator v1): its settings,
  generator, rules, local runs and submission.
* :mod:`.settings`: the checks every job's settings share (names, env, train arguments, the
  global batch) and how the CLI builds settings from its options.
* :mod:`.manifests`: manifests as files, dicts and SDK models.
* :mod:`.submit`: create a job and wait for its end, whatever its API (:class:`.api.JobApi`),
  with the chief's log streamed in a thread (:mod:`.logs`), its queue watched
  (:mod:`.queue`) and its conditions reported (:mod:`.status`).

What every pod has in common, whoever runs it, is in :mod:`shardtrain.kubeflow.pods`.
"""
