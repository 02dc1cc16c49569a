"""The ``export`` component: publish the trained SavedModel at a serving location."""

from kfp import dsl
from kfp.dsl import Input, Model, Output

from shardtrain.kubeflow.components import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def export(model: Input[Model], serving_uri: str, served_model: Output[Model]):
    """Copies the model's newest SavedModel export to serving_uri/<version>/ (saved_model.pb
    after the variables, then a manifest, then serving_uri/latest.json: publish-last) and
    outputs a Model pointing at it. See shardtrain.kubeflow.steps.export_step.
    """
    from shardtrain.kubeflow import steps

    steps.export_step(model=model, serving_uri=serving_uri, served_model=served_model)
