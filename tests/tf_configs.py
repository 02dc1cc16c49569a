"""TF_CONFIG values as the Kubeflow training operator writes them, shared by the cluster tests."""

from __future__ import annotations

import json

CHIEF = ["job-chief-0.ns.svc:2222"]
WORKERS = ["job-worker-0.ns.svc:2222", "job-worker-1.ns.svc:2222"]
EVALUATOR = ["job-evaluator-0.ns.svc:2222"]


def env_for(cluster: dict, task_type: str, index: int = 0) -> dict[str, str]:
    """The environment the training operator gives one replica."""
    config = {
        "cluster": cluster,
        "task": {"type": task_type, "index": index},
        "environment": "cloud",
    }
    return {"TF_CONFIG": json.dumps(config)}


FULL = {"chief": CHIEF, "worker": WORKERS, "evaluator": EVALUATOR}
TRAINING = {"chief": CHIEF, "worker": WORKERS}
