"""The ``train`` component: train on a Kubeflow TFJob (or the same job run locally)."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Model, Output

from shardtrain.kubeflow.components import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def train(
    dataset: Input[Dataset],
    model: Output[Model],
    model_dir: str,
    local: bool,
    run_id: str,
    timeout: float,
    image: str,
    namespace: str,
    workers: int,
    gpus_per_worker: int,
    evaluator: bool,
    secret: str,
    service_account: str,
    cpu: str,
    memory: str,
    train_steps: int,
    batch_size: int,
    checkpoint_every: int,
    train_flags: str,
    task: str = "auto",
    queue: str = "",
    gang_scheduler: str = "",
    priority_class: str = "",
):
    """Renders the TFJob (chief, workers with gpus_per_worker GPUs, optional evaluator) that
    trains on the dataset into model_dir, submits it and waits for it, failing when the job
    fails or outlasts timeout seconds; with local=True runs the same manifest as local
    processes. task (auto, binary, multiclass, regression) is `shardtrain train --task`.
    queue/gang_scheduler/priority_class put the job in a Kueue or Volcano queue.
    Outputs a Model pointing at model_dir. See shardtrain.kubeflow.steps.train_step.
    """
    from shardtrain.kubeflow import steps

    steps.train_step(
        dataset=dataset,
        model=model,
        model_dir=model_dir,
        local=local,
        run_id=run_id,
        timeout=timeout,
        image=image,
        namespace=namespace,
        workers=workers,
        gpus_per_worker=gpus_per_worker,
        evaluator=evaluator,
        secret=secret,
        service_account=service_account,
        cpu=cpu,
        memory=memory,
        train_steps=train_steps,
        batch_size=batch_size,
        checkpoint_every=checkpoint_every,
        train_flags=train_flags,
        task=task,
        queue=queue,
        gang_scheduler=gang_scheduler,
        priority_class=priority_class,
    )
