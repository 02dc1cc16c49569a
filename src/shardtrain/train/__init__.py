"""Training: the Estimator contract (``train_and_evaluate`` from ``TF_CONFIG``) on
``tf.distribute`` with Keras 3 layers and a custom loop.

:mod:`.config` (typed configuration), :mod:`.cluster` (the one reader of ``TF_CONFIG``),
:mod:`.features` and :mod:`.dataset` (model inputs from ``metadata.json`` and the shards),
:mod:`.models`, :mod:`.trainer` (``train_and_evaluate``: wires the parts for each role),
:mod:`.controller` (checkpoint, evaluation and summary intervals, the stop vote, around a step
function), :mod:`.loop` (the distributed step function), :mod:`.evaluator` (the sidecar
evaluator and checkpoint evaluation), :mod:`.summaries` (TensorBoard), :mod:`.checkpoints`,
:mod:`.evaluation` (streaming metrics) and :mod:`.export` (SavedModel).
"""
