"""Training: the Estimator contract (``train_and_evaluate`` from ``TF_CONFIG``) on
``tf.distribute`` with Keras 3 layers and a custom loop.

:mod:`.config` (typed configuration), :mod:`.cluster` (the one reader of ``TF_CONFIG``),
:mod:`.features` and :mod:`.dataset` (model inputs from ``metadata.json`` and the shards),
:mod:`.models`, :mod:`.trainer` (the distributed loop, checkpoints, the sidecar evaluator),
:mod:`.checkpoints`, :mod:`.evaluation` (streaming metrics) and :mod:`.export` (SavedModel).
"""
