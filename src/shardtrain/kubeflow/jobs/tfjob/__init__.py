"""Kubeflow TFJobs (``kubeflow.org/v1``, the training operator v1): the job API module.

Every TFJob shardtrain trains with comes from :func:`build_tfjob`: ``shardtrain tfjob render``
prints it, ``shardtrain tfjob submit`` creates it, the pipeline's train step submits it, and
``k8s/base/tfjob.yaml`` is its output for the default :class:`JobConfig`.

* :mod:`.config`: :class:`JobConfig`, the settings that differ between jobs.
* :mod:`.render`: :func:`build_tfjob` (what it writes, and why), manifests and models.
* :mod:`.spec`: the API's names and :func:`validate`, the operator's and TensorFlow's rules.
* :mod:`.local`: a TFJob manifest as local replicas (``shardtrain run-local job.yaml``).
* :mod:`.submit`: :func:`submit_and_wait` through the kubeflow-training SDK.

Import this package (``from shardtrain.kubeflow.jobs import tfjob``): it offers all of them,
and the TFJob's default image and Secret keys (:mod:`shardtrain.kubeflow.pods`).
"""

from shardtrain.kubeflow.jobs.manifests import is_manifest_path, to_yaml
from shardtrain.kubeflow.jobs.settings import round_batch
from shardtrain.kubeflow.jobs.submit import (
    ClusterError,
    JobFailedError,
    JobTimeoutError,
    SubmitResult,
)
from shardtrain.kubeflow.jobs.tfjob.config import JobConfig, replicas_in_sync
from shardtrain.kubeflow.jobs.tfjob.local import load_manifest, local_replicas
from shardtrain.kubeflow.jobs.tfjob.render import build_tfjob, from_manifest, to_manifest
from shardtrain.kubeflow.jobs.tfjob.spec import (
    API_VERSION,
    CLEAN_POD_POLICIES,
    CONTAINER_NAME,
    GANG_SCHEDULERS,
    KIND,
    KUEUE_QUEUE_LABEL,
    PORT,
    PORT_NAME,
    REPLICA_TYPES,
    RESTART_POLICIES,
    validate,
)
from shardtrain.kubeflow.jobs.tfjob.submit import is_queued, submit_and_wait
from shardtrain.kubeflow.pods import DEFAULT_IMAGE, STORAGE_ENV

__all__ = [
    "API_VERSION",
    "CLEAN_POD_POLICIES",
    "CONTAINER_NAME",
    "DEFAULT_IMAGE",
    "GANG_SCHEDULERS",
    "KIND",
    "KUEUE_QUEUE_LABEL",
    "PORT",
    "PORT_NAME",
    "REPLICA_TYPES",
    "RESTART_POLICIES",
    "STORAGE_ENV",
    "ClusterError",
    "JobConfig",
    "JobFailedError",
    "JobTimeoutError",
    "SubmitResult",
    "build_tfjob",
    "from_manifest",
    "is_manifest_path",
    "is_queued",
    "load_manifest",
    "local_replicas",
    "replicas_in_sync",
    "round_batch",
    "submit_and_wait",
    "to_manifest",
    "to_yaml",
    "validate",
]
