"""What every pod shardtrain runs has in common, whichever job API or stand-in runs it.

* The project image (:data:`DEFAULT_IMAGE`, pinned to this version), its entrypoint and user.
* The storage variables a pod reads from the storage Secret (:data:`STORAGE_ENV`), and the
  labels and annotations of every training pod.
* :func:`local_argv`: a container command as a command line of this machine, for
  ``shardtrain run-local``, which runs a job's replicas without the image.
* :func:`quantity`: Kubernetes resource quantities (``500m``, ``16Gi``) as numbers.

Used by the job generators (:mod:`shardtrain.kubeflow.jobs`), the pipeline components, and
``run-local`` (:mod:`shardtrain.kubeflow.local`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from shardtrain import __version__
from shardtrain.errors import ConfigError

IMAGE_REPOSITORY = "ghcr.io/shardtrain/shardtrain"
#: The project image of this version ('+' is not allowed in image tags).
DEFAULT_IMAGE = f"{IMAGE_REPOSITORY}:{__version__.replace('+', '-')}"
#: The image's entrypoint, i.e. the command of every replica.
ENTRYPOINT = "shardtrain"
#: The image's user (``useradd --uid 10001`` in the Dockerfile).
RUN_AS_USER = 10001
#: Below this grace period (Kubernetes' default) the generators warn: after SIGTERM a replica
#: needs one training step plus a checkpoint write (plus TensorFlow's exit) before SIGKILL.
MIN_TERMINATION_GRACE_SECONDS = 30
#: Storage variables read from the Secret: (key, optional).
STORAGE_ENV = (
    ("AWS_ACCESS_KEY_ID", False),
    ("AWS_SECRET_ACCESS_KEY", False),
    ("AWS_ENDPOINT_URL", True),
    ("AWS_REGION", True),
)
LABELS = {"app.kubernetes.io/name": "shardtrain", "app.kubernetes.io/component": "trainer"}
#: An Istio sidecar never exits (the pod would never complete) and intercepts workers' gRPC.
POD_ANNOTATIONS = {"sidecar.istio.io/inject": "false"}


def local_argv(command: Iterable[str]) -> tuple[str, ...]:
    """A container command as a local command line.

    The image's ``shardtrain`` entrypoint becomes ``python -m shardtrain.cli`` of this
    interpreter, and ``python``/``python3`` become this interpreter (the one shardtrain is
    installed in); anything else runs as written.
    """
    argv = list(command)
    if not argv:
        return ()
    head = Path(argv[0]).name
    if head == ENTRYPOINT:
        return (sys.executable, "-m", "shardtrain.cli", *argv[1:])
    if head in ("python", "python3"):
        return (sys.executable, *argv[1:])
    return tuple(argv)


_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9}


def quantity(text: Any) -> float:
    """A Kubernetes quantity (``2``, ``500m``, ``0.5``, ``16Gi``, ``1k``) as a number.

    Raises:
        ConfigError: ``text`` is not a quantity.
    """
    s = str(text).strip()
    try:
        if s.endswith("m"):
            return float(s[:-1]) / 1000
        for suffix, factor in _SUFFIXES.items():
            if s.endswith(suffix):
                return float(s[: -len(suffix)]) * factor
        return float(s)
    except ValueError:
        raise ConfigError(f"'{text}' is not a Kubernetes quantity (e.g. 4, 500m, 16Gi)") from None


def resources(cpu: str, memory: str, gpus: int = 0) -> dict[str, dict[str, str]]:
    """A training pod's requests and limits: ``cpu`` and ``memory`` requested, memory limited
    to its request; with ``gpus`` the ``nvidia.com/gpu`` limit, else the CPU limited to its
    request. A CPU-only pod needs that limit: the Kubeflow SDK names a node's device from its
    limits (GPU, TPU, …, else ``cpu``) and fails every job call ("Unknown device type in the
    container resources") on a job whose limits name none. A GPU pod's CPU stays unlimited,
    so its input pipeline is never throttled."""
    limits = {"memory": memory}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    else:
        limits = {"cpu": cpu, **limits}
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": limits}
