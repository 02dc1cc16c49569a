"""The node agent's stand-in for cluster DNS: pod host names → local addresses.

On a cluster, the pods of a JobSet reach each other by the host names JobSet gives them: an
Indexed Job ``<jobset>-<replicatedJob>-<jobIndex>`` names its pods' hosts
``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>`` (the completion index) and puts them in the
subdomain of the JobSet's headless Service (``spec.network.subdomain``, default the JobSet's
name), so ``<hostname>.<subdomain>:<port>`` reaches that pod's container port. Here every pod
runs on 127.0.0.1 and there is no DNS; and the names are built inside the pod's process (from
the completion index, the node count ...), not written into its environment where the agent
could rewrite them. So the agent gives each JobSet pod an **address table** instead:

* the environment variable :data:`ADDRESSES_ENV` holds a JSON object mapping
  ``"<hostname>.<subdomain>:<port>"`` → ``"127.0.0.1:<local port>"`` for every pod host name
  of the pod's JobSet (read from the JobSet object: each replicated job's ``replicas`` Jobs ×
  its Job template's completions / parallelism pods) and every ``containerPort`` of the pod's
  container;
* each name keeps its local port for the agent's lifetime (:class:`ServicePorts`), so a pod
  recreated by a restart finds its peers where they were, and its peers find it;
* a process resolves a peer's address through the table
  (:func:`shardtrain.train.cluster` does, when the variable is set) and listens on its own
  entry's local port.

Addresses the agent can see (in the environment and arguments) are rewritten directly:
``<service>.<namespace>.svc[.cluster.local]:<port>`` (a Service, e.g. in the training
operator's TF_CONFIG) and ``<hostname>.<subdomain>.<namespace>.svc[...]:<port>`` (a JobSet
pod, the same local port as its table entry).

Services of the control plane's controllers are not pods of this node: they run on this
machine as processes of ``scripts/k8s-up`` on ports of their own, and their names map to those
ports (``host_services`` of :class:`ServicePorts`, as kube-proxy maps a Service to its
endpoints). Trainer's status server (``TrainJobStatus``: its pods POST to
``https://kubeflow-trainer-controller-manager.kubeflow-system.svc:<port>/...``) is one: k8s-up
writes its port into the state directory's ``env`` file, next to the kubeconfig it writes
(:func:`control_plane_services`); its certificate is valid for 127.0.0.1.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from shardtrain.kubeflow.local.processes import free_port

#: The environment variable holding a JobSet pod's address table (JSON).
ADDRESSES_ENV = "SHARDTRAIN_LOCAL_ADDRESSES"
#: The label JobSet puts on its Jobs' pods: the JobSet's name.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"

_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
#: A Service's (or a pod's, with its subdomain) address as pods use it.
_SERVICE_ADDRESS = re.compile(
    rf"(?<![-.a-z0-9])((?:{_LABEL}\.)?{_LABEL})\.({_LABEL})\.svc(?:\.cluster\.local)?:(\d+)\b"
)


class ServicePorts:
    """Host names (a Service's, a pod's) → ``127.0.0.1:<port>``: one local port per name and
    port, kept for the agent's lifetime.

    ``quest-worker-1.team.svc:2222`` (or ``...svc.cluster.local:2222``) always maps to the same
    local port, so a recreated pod and its peers find each other again; likewise a JobSet pod's
    ``<hostname>.<subdomain>`` in its namespace.

    ``host_services`` maps ``(namespace, service, port)`` of Services served by processes on
    this machine (the control plane's, see :func:`control_plane_services`) to their real local
    ports.
    """

    def __init__(self, host_services: Mapping[tuple[str, str, int], int] | None = None) -> None:
        self._ports: dict[tuple[str, str, int], int] = dict(host_services or {})
        self._lock = threading.Lock()

    def local_port(self, namespace: str, host: str, port: int) -> int:
        """The local port standing for ``host:port`` in ``namespace`` (chosen on first use)."""
        key = (namespace, host, int(port))
        with self._lock:
            if key not in self._ports:
                self._ports[key] = free_port()
            return self._ports[key]

    def localise(self, text: str) -> str:
        """``text`` with every Service or pod address in it replaced by its local address."""

        def local(m: re.Match[str]) -> str:
            return f"127.0.0.1:{self.local_port(m.group(2), m.group(1), int(m.group(3)))}"

        return _SERVICE_ADDRESS.sub(local, text)


#: Trainer's status server: its Service (the webhook's, ``certManagement.webhookServiceName``)
#: in the operator's namespace.
TRAINER_SERVICE = ("kubeflow-system", "kubeflow-trainer-controller-manager")


def control_plane_services(kubeconfig: str | None) -> dict[tuple[str, str, int], int]:
    """The Services of ``scripts/k8s-up``'s controllers that pods reach, ``(namespace, service,
    port) -> local port``, read from the ``env`` file k8s-up writes next to its kubeconfig
    (``TRAINER_STATUS_PORT``: Trainer names its status server by the Service and that port).
    Empty for a kubeconfig of another cluster (no such file)."""
    path = kubeconfig or (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
    if not path:
        return {}
    try:
        text = (Path(path).expanduser().resolve().parent / "env").read_text()
    except OSError:
        return {}
    values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    services = {}
    status_port = values.get("TRAINER_STATUS_PORT", "").strip()
    if status_port.isdigit():
        services[(*TRAINER_SERVICE, int(status_port))] = int(status_port)
    return services


def jobset_hostnames(jobset: Mapping[str, Any]) -> Iterator[str]:
    """The host names of all pods of a JobSet (a JobSet object as the API returns it).

    Replicated job ``r`` with ``replicas`` N makes Jobs ``<jobset>-<r>-0 .. N-1``; each Job's
    pods are ``<job>-0 ..`` up to its completions (the completion index; its parallelism when
    completions is unset, one pod when both are).
    """
    name = jobset["metadata"]["name"]
    for rj in (jobset.get("spec") or {}).get("replicatedJobs") or ():
        spec = (rj.get("template") or {}).get("spec") or {}
        sizes = [n for n in (spec.get("completions"), spec.get("parallelism")) if n is not None]
        pods = max(sizes) if sizes else 1
        for job_index in range(int(rj.get("replicas", 1))):
            for pod_index in range(int(pods)):
                yield f"{name}-{rj['name']}-{job_index}-{pod_index}"


def jobset_subdomain(jobset: Mapping[str, Any]) -> str:
    """The subdomain of a JobSet's pods: its network's, else the JobSet's name."""
    network = (jobset.get("spec") or {}).get("network") or {}
    return network.get("subdomain") or jobset["metadata"]["name"]


def address_table(
    jobset: Mapping[str, Any],
    ports: Iterable[int],
    service_ports: ServicePorts,
    *,
    subdomain: str | None = None,
) -> dict[str, str]:
    """``{"<hostname>.<subdomain>:<port>": "127.0.0.1:<local port>"}`` for every pod of
    ``jobset`` and every port in ``ports`` (see the module documentation)."""
    namespace = jobset["metadata"].get("namespace") or "default"
    sub = subdomain or jobset_subdomain(jobset)
    wanted = sorted({int(p) for p in ports})
    table = {}
    for host in jobset_hostnames(jobset):
        for port in wanted:
            local = service_ports.local_port(namespace, f"{host}.{sub}", port)
            table[f"{host}.{sub}:{port}"] = f"127.0.0.1:{local}"
    return table
