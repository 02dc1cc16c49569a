"""The ``deploy`` component: serve the published model with a KServe InferenceService."""

from shardtrain.kubeflow.components import step_component
from shardtrain.kubeflow.parameters import DEPLOY

deploy = step_component(
    "deploy",
    DEPLOY,
    step="deploy_step",
    summary="""
    Renders the ServiceAccount and the KServe InferenceService serving serving_uri (after
    checking that TensorFlow Serving will serve the version latest.json names), writes them
    as the inference_service artifact and, on a cluster, applies them (server-side apply).
    See shardtrain.kubeflow.steps.deploy_step.
    """,
)
