"""The ``evaluate`` component: the blessing decision, the evaluation and the data's statistics
in the UI, as tables (Markdown) and as pictures (HTML)."""

from dataclasses import replace

from shardtrain.kubeflow.components import step_component
from shardtrain.kubeflow.parameters import BLESSED, EVALUATE

evaluate = step_component(
    "evaluate",
    EVALUATE,
    step="evaluate_step",
    returns=replace(BLESSED, name="Output"),  # a component's return value is its Output
    summary="""
    Scores the trained model and the one served at serving_uri (its latest.json) on the
    same eval split and blesses the trained model only if every threshold holds (relative
    ones are skipped when nothing is served yet); writes MODEL_DIR/eval/blessing.json and,
    with slice_by, the metrics per slice into MODEL_DIR/eval/metrics.json. Logs Metrics
    scalars (a classifier's auc, accuracy, log_loss; a regression's rmse, mae, r2,
    mean_error, label_std; blessed; the served model's as baseline_<metric>), a classifier's
    ClassificationMetrics ROC curve and confusion matrix (and per slice), a Markdown
    report of the decision, the metrics and the data's statistics, and the same as
    pictures in an HTML report (also MODEL_DIR/eval/report.html; see shardtrain report).
    Returns blessed: the pipeline exports only then. See
    shardtrain.kubeflow.steps.evaluate_step.
    """,
)
