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
    max_rmse: float = 0.0,
):
    """Logs the final evaluation (MODEL_DIR/eval/metrics.json) as Metrics scalars (auc,
    accuracy, log_loss; a regression's rmse, mae, r2, mean_error, label_std; num_examples,
    step), a classifier's ClassificationMetrics ROC curve and confusion matrix, and a
    Markdown report of the data's statistics and the metrics; fails a classifier below
    min_auc, a regression above max_rmse (0: no gate). See
    shardtrain.kubeflow.steps.evaluate_step.
    """
    from shardtrain.kubeflow import steps

    steps.evaluate_step(
        dataset=dataset,
        model=model,
        metrics=metrics,
        classification=classification,
        report=report,
        min_auc=min_auc,
        max_rmse=max_rmse,
    )
