"""shardtrain's Kubeflow Pipelines components: one module per component.

Each module makes one lightweight Python component with :func:`step_component`: a function
generated from the component's parameter list in :mod:`shardtrain.kubeflow.parameters` (its
signature, and a docstring that describes every input and output, which KFP shows in its UI)
whose body is one call into :mod:`shardtrain.kubeflow.steps` (the sharding steps before
finalize: :mod:`shardtrain.kubeflow.shard_steps`, lighter to import), where the logic lives and is
tested; the call runs under ``user_errors``, so that a user error ends the step in one line,
not a traceback. KFP embeds each body's source in the compiled pipeline and runs it in :data:`IMAGE`
(the project image, which has ``shardtrain`` and ``kfp`` installed, so
``install_kfp_package=False``: no ``pip install`` when a pod starts). The body therefore
imports everything it needs itself.

:data:`IMAGE` is pinned to this version's image (the TFJob's default image too); the
pipeline's ``image`` parameter overrides it for every step at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardtrain.kubeflow.jobs import tfjob
from shardtrain.kubeflow.parameters import Param, define, docstring

if TYPE_CHECKING:
    from kfp.dsl.python_component import PythonComponent

#: The image of every step pod and of the TFJob (one constant with the TFJob's default).
#: The pipeline's ``image`` parameter overrides it at run time.
IMAGE = tfjob.DEFAULT_IMAGE
#: Storage Secret keys → environment variables of the same name: (key, optional). The same
#: table the TFJob's ``secretKeyRef`` entries come from; the pipeline gives them to every step.
STORAGE_SECRET_KEYS: tuple[tuple[str, bool], ...] = tfjob.STORAGE_ENV


def step_component(
    name: str,
    params: tuple[Param, ...],
    *,
    step: str,
    summary: str,
    returns: Param | None = None,
    module: str = "steps",
) -> PythonComponent:
    """The component ``name`` (defined in module ``shardtrain.kubeflow.components.<name>``):
    ``def name(<params>) -> <returns>`` whose body calls ``<module>.<step>`` with every parameter
    by name, documented by ``summary`` and each parameter's description.

    Args:
        name: the component's function name.
        params: its parameters, in signature order.
        step: the function of ``module`` the body calls.
        summary: what the component does.
        returns: the value it returns (KFP's output ``Output``), if any.
        module: the module of :mod:`shardtrain.kubeflow` that defines ``step`` (the sharding
            steps' own module is lighter to import: :mod:`~shardtrain.kubeflow.shard_steps`).
    """
    from kfp import dsl

    call = "".join(f"        {p.name}={p.name},\n" for p in params)
    # A user error ends the step in one line, not a traceback (shard_steps.user_errors).
    body = (
        f"from shardtrain.kubeflow import {module}\n\nwith {module}.user_errors():\n"
        f"    {'return ' if returns else ''}"
    )
    function = define(
        name,
        params,
        module=f"{__name__}.{name}",
        doc=docstring(summary, params, [returns] if returns else []),
        body=f"{body}{module}.{step}(\n{call}    )",
        returns=returns.annotation if returns else None,
    )
    return dsl.component(function, base_image=IMAGE, install_kfp_package=False)


__all__ = ["IMAGE", "STORAGE_SECRET_KEYS", "step_component"]
