"""TFJob settings and manifests for tests: the small builders the TFJob tests share
(:func:`make_config`, :func:`make_manifest`, :func:`container_of`), and manifests of every kind
the generator writes, for tests that check them against the real training operator: its CRD's
openAPI schema (``tests/integration/kubeflow/jobs/test_tfjob_crd.py``) and, on a real control
plane, ``kubectl apply`` / the operator's webhook.

Add a case to :data:`EXAMPLES` when the generator learns a new shape; every checker picks it up.
"""

from __future__ import annotations

from typing import Any

from shardtrain.kubeflow.jobs import tfjob

DATA, MODEL_DIR = "s3://shardtrain/quest", "s3://shardtrain/models/quest"


def make_config(**overrides) -> tfjob.JobConfig:
    """The job's settings for :data:`DATA` and :data:`MODEL_DIR`, with ``overrides``."""
    return tfjob.JobConfig(data=DATA, model_dir=MODEL_DIR, **overrides)


def make_manifest(**overrides) -> dict:
    """The manifest the generator writes for :func:`make_config` ``(**overrides)``."""
    return tfjob.to_manifest(tfjob.build_tfjob(make_config(**overrides)))


def replica_specs(m: dict) -> dict:
    return m["spec"]["tfReplicaSpecs"]


def container_of(m: dict, rtype: str) -> dict:
    """The one container of replica type ``rtype`` (``Chief``, ``Worker`` …) of manifest ``m``."""
    (only,) = replica_specs(m)[rtype]["template"]["spec"]["containers"]
    return only


#: name → the JobConfig overrides of one rendering (``shardtrain tfjob render`` flags).
EXAMPLES: dict[str, dict[str, Any]] = {
    "default": {},
    "chief-only-cpu": {"workers": 0, "gpus_per_worker": 0, "evaluator": False},
    "gcs-no-secret": {
        "data": "gs://shardtrain-data/quest",
        "model_dir": "gs://shardtrain-data/models/quest",
        "secret": None,
    },
    "deadline-and-env": {"active_deadline_seconds": 3600, "env": {"TF_CPP_MIN_LOG_LEVEL": "1"}},
    "kueue": {"queue": "gpu-team"},
    "kueue-priority": {"queue": "gpu-team", "priority_class": "high-priority"},
    "volcano": {"gang_scheduler": "volcano"},
    "volcano-queue-priority": {
        "gang_scheduler": "volcano",
        "queue": "research",
        "priority_class": "high-priority",
        "workers": 3,
    },
}


def example_manifests(namespace: str = "shardtrain") -> dict[str, dict[str, Any]]:
    """name → the TFJob manifest the generator writes for that example (job name = name)."""
    out = {}
    for name, overrides in EXAMPLES.items():
        settings = {"data": DATA, "model_dir": MODEL_DIR, **overrides}
        config = tfjob.JobConfig(name=name, namespace=namespace, **settings)
        out[name] = tfjob.to_manifest(tfjob.build_tfjob(config))
    return out
