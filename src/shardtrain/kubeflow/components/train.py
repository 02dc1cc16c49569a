"""The ``train`` component: train on a Kubeflow TFJob (or the same job run locally)."""

from shardtrain.kubeflow.components import step_component
from shardtrain.kubeflow.parameters import TRAIN

train = step_component(
    "train",
    TRAIN,
    step="train_step",
    summary="""
    Renders the TFJob (chief, workers with gpus_per_worker GPUs, optional evaluator) that
    trains on the dataset into model_dir, submits it and waits for it, failing when the job
    fails or outlasts timeout seconds; with local=True runs the same manifest as local
    processes. task (auto, binary, multiclass, regression) is `shardtrain train --task`.
    queue/gang_scheduler/priority_class put the job in a Kueue or Volcano queue.
    Outputs a Model pointing at model_dir. See shardtrain.kubeflow.steps.train_step.
    """,
)
