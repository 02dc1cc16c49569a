"""The ``evaluate`` component: the model's evaluation and the data's statistics in the UI."""

from shardtrain.kubeflow.components import step_component
from shardtrain.kubeflow.parameters import EVALUATE

evaluate = step_component(
    "evaluate",
    EVALUATE,
    step="evaluate_step",
    summary="""
    Logs the final evaluation (MODEL_DIR/eval/metrics.json) as Metrics scalars, a
    ClassificationMetrics ROC curve and confusion matrix, and a Markdown report of the data's
    statistics and the metrics; fails below min_auc (0: no gate). See
    shardtrain.kubeflow.steps.evaluate_step.
    """,
)
