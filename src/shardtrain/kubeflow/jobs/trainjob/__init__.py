"""Kubeflow Trainer v2 TrainJobs (``trainer.kubeflow.org/v1alpha1``): the job API module, and
the TensorFlow runtime Trainer does not ship (``k8s/trainer-v2``).

* :mod:`.config`: :class:`TrainJobConfig`, the settings that differ between jobs.
* :mod:`.render`: :func:`build_runtime` (the ClusterTrainingRuntime: roles, restarts, pods)
  and :func:`build_trainjob`.
* :mod:`.spec`: the API's and JobSet's names, and :func:`validate`.
* :mod:`.submit`: :func:`submit_and_wait` through the Kubernetes client, and
  :func:`serves_trainjobs` (does the cluster have Trainer v2?).
"""

from shardtrain.kubeflow.jobs.manifests import to_yaml
from shardtrain.kubeflow.jobs.trainjob.config import TrainJobConfig, replicas_in_sync
from shardtrain.kubeflow.jobs.trainjob.render import build_runtime, build_trainjob
from shardtrain.kubeflow.jobs.trainjob.spec import (
    API_VERSION,
    KIND,
    RUNTIME_NAME,
    VOLCANO_RUNTIME_NAME,
    runtime_name,
    validate,
)
from shardtrain.kubeflow.jobs.trainjob.submit import (
    is_queued,
    runtime_installed,
    serves,
    serves_trainjobs,
    submit_and_wait,
)

__all__ = [
    "API_VERSION",
    "KIND",
    "RUNTIME_NAME",
    "VOLCANO_RUNTIME_NAME",
    "TrainJobConfig",
    "build_runtime",
    "build_trainjob",
    "is_queued",
    "replicas_in_sync",
    "runtime_installed",
    "runtime_name",
    "serves",
    "serves_trainjobs",
    "submit_and_wait",
    "to_yaml",
    "validate",
]
