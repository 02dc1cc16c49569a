"""The ``export`` component: publish the trained SavedModel at a serving location."""

from shardtrain.kubeflow.components import step_component
from shardtrain.kubeflow.parameters import EXPORT

export = step_component(
    "export",
    EXPORT,
    step="export_step",
    summary="""
    Copies the model's newest SavedModel export to serving_uri/<version>/ (saved_model.pb
    after the variables, then a manifest, then serving_uri/latest.json: publish-last) and
    outputs a Model pointing at it. See shardtrain.kubeflow.steps.export_step.
    """,
)
