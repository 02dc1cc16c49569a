"""shardtrain's Kubeflow Pipelines components: one module per component.

Each module holds one lightweight Python component (``@dsl.component``): its KFP signature,
its documentation and a body that makes one call into :mod:`shardtrain.kubeflow.steps`, where
the logic lives and is tested. KFP embeds each body's source in the compiled pipeline and runs
it in :data:`IMAGE` (the project image, which has ``shardtrain`` and ``kfp`` installed, so
``install_kfp_package=False``: no ``pip install`` when a pod starts). The body therefore
imports everything it needs itself.

:data:`IMAGE` is pinned to this version's image (the TFJob's default image too); the
pipeline's ``image`` parameter overrides it for every step at run time.
"""

from shardtrain.kubeflow.jobs import tfjob

#: The image of every step pod and of the TFJob (one constant with the TFJob's default).
#: The pipeline's ``image`` parameter overrides it at run time.
IMAGE = tfjob.DEFAULT_IMAGE
#: Storage Secret keys → environment variables of the same name: (key, optional). The same
#: table the TFJob's ``secretKeyRef`` entries come from; the pipeline gives them to every step.
STORAGE_SECRET_KEYS: tuple[tuple[str, bool], ...] = tfjob.STORAGE_ENV

__all__ = ["IMAGE", "STORAGE_SECRET_KEYS"]
