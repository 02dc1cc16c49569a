"""The ``evaluate`` component: the model's evaluation and the data's statistics in the UI."""

from kfp import dsl
from kfp.dsl import ClassificationMetrics, Dataset, Input, Markdown, Metrics, Model, Output

from shardtrain.kubeflow.components import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def evaluate(
    dataset: Input[Dataset],
    model: Input[Model],
    metrics: Output[Metrics],
    classification: Output[ClassificationMetrics],
    report: Output[Markdown],
    min_auc: float,
):
    """Logs the final evaluation (MODEL_DIR/eval/metrics.json) as Metrics scalars (auc,
    accuracy, log_loss, num_examples, step), a ClassificationMetrics ROC curve and confusion
    matrix, and a Markdown report of the data's statistics and the metrics; fails below
    min_auc (0: no gate). See shardtrain.kubeflow.steps.evaluate_step.
    """
    from shardtrain.kubeflow import steps

    steps.evaluate_step(
        dataset=dataset,
        model=model,
        metrics=metrics,
        classification=classification,
        report=report,
        min_auc=min_auc,
    )
