"""A TFJob run on this machine: its manifest as local replicas (``shardtrain run-local
job.yaml``, the pipeline's ``local=true`` train step), so a local run starts the very manifest
a cluster would."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shardtrain.kubeflow.jobs import manifests
from shardtrain.kubeflow.jobs.manifests import pod_containers
from shardtrain.kubeflow.jobs.tfjob.spec import CONTAINER_NAME, KIND, REPLICA_TYPES, validate
from shardtrain.kubeflow.local.processes import Replica
from shardtrain.kubeflow.pods import ENTRYPOINT, local_argv

log = logging.getLogger(__name__)


def load_manifest(path: str | Path) -> dict[str, Any]:
    """The one TFJob in a YAML/JSON file (other documents, e.g. a ServiceAccount, are skipped).

    Raises:
        ConfigError: the file is missing or unreadable, or holds no TFJob or several.
    """
    return manifests.load_manifest(path, KIND)


def local_replicas(manifest: Mapping[str, Any]) -> list[Replica]:
    """The replicas of a TFJob manifest for :func:`shardtrain.kubeflow.local.processes.run_local`.

    Each replica runs its ``tensorflow`` container's command and args (the image entrypoint
    ``shardtrain`` when there is no command; see :func:`shardtrain.kubeflow.pods.local_argv`)
    with the container's plain ``env`` values. Variables the cluster would fill from Secrets
    or field references (``valueFrom``) cannot be resolved here: they come from this
    process's environment, and their names (never their values) are logged. ``run_local``
    adds TF_CONFIG of the operator's shape, with localhost ports in place of the
    ``<job>-<type>-<i>.<ns>.svc:2222`` hosts.

    Raises:
        ConfigError: the manifest breaks a rule of :func:`validate`.
    """
    validate(manifest)
    run_policy = manifest["spec"].get("runPolicy") or {}
    if run_policy.get("suspend") or run_policy.get("schedulingPolicy"):
        log.info("queue and gang-scheduling settings apply on a cluster; here all replicas start")
    specs = manifest["spec"]["tfReplicaSpecs"]
    replicas = []
    from_here: dict[str, bool] = {}  # name -> required (a Secret key without optional: true)
    for rtype in REPLICA_TYPES:
        if rtype not in specs:
            continue
        rspec = specs[rtype]
        count = rspec.get("replicas", 1)
        if count == 0:
            continue
        container = next(c for c in pod_containers(rspec) if c.get("name") == CONTAINER_NAME)
        argv = local_argv(container.get("command") or [ENTRYPOINT])
        argv += tuple(str(a) for a in container.get("args") or ())
        env = {}
        for var in container.get("env") or ():
            if "valueFrom" in var:
                ref = var["valueFrom"].get("secretKeyRef") or {}
                required = bool(ref) and not ref.get("optional", False)
                from_here[var["name"]] = from_here.get(var["name"], False) or required
            else:
                env[var["name"]] = str(var.get("value", ""))
        if container.get("envFrom"):
            log.warning("%s: envFrom is not resolved locally; set those variables here", rtype)
        replicas.append(Replica(rtype.lower(), count, argv, env))
    if from_here:
        names = list(from_here)
        missing = [n for n, required in from_here.items() if required and n not in os.environ]
        log.info(
            "from this environment (Secrets and field references are not resolved locally): %s",
            ", ".join(names),
        )
        if missing:
            log.warning("not set in this environment: %s", ", ".join(missing))
    return replicas
