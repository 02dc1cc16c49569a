"""The ``evaluate`` component: the model's evaluation and the data's statistics in the UI."""

from shardtrain.kubeflow.components import step_component
from shardtrain.kubeflow.parameters import EVALUATE

evaluate = step_component(
    "evaluate",
    EVALUATE,
    step="evaluate_step",
    summary="""
    Logs the final evaluation (MODEL_DIR/eval/metrics.json) as Metrics scalars (a
    classifier's auc, accuracy, log_loss; a regression's rmse, mae, r2, mean_error,
    label_std), a classifier's ClassificationMetrics ROC curve and confusion matrix, and a
    Markdown report of the data's statistics and the metrics; fails a classifier below
    min_auc, a regression above max_rmse (0: no gate). See
    shardtrain.kubeflow.steps.evaluate_step.
    """,
)
