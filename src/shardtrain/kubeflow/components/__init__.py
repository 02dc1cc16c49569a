"""shardtrain's Kubeflow Pipelines components: one module per component.

Each module holds one lightweight Python component (``@dsl.component``): its KFP signature,
its documentation and a body that makes one call into :mod:`shardtrain.kubeflow.pipeline`, where the
logic lives and is tested. KFP embeds each body's source in the compiled pipeline and runs it
in :data:`IMAGE` (the project image, which has ``shardtrain`` and ``kfp`` installed, so
``install_kfp_package=False``: no ``pip install`` when a pod starts). The body therefore
imports everything it needs itself.

:data:`IMAGE` is pinned to this version's image (the TFJob's default image too); the
pipeline's ``image`` parameter overrides it for every step at run time.
"""

from shardtrain.kubeflow.pipeline import IMAGE

__all__ = ["IMAGE"]
