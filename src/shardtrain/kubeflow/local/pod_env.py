"""A pod's container as a local command: its environment and command line on this machine.

What the node agent does where a kubelet would build a container's environment:

* plain ``env`` values with Kubernetes' ``$(VAR)`` expansion; ``secretKeyRef`` and
  ``configMapKeyRef`` read from the API server; ``fieldRef`` (name, namespace, labels …);
  ``envFrom`` Secrets and ConfigMaps;
* the agent's own environment minus storage credentials and cluster settings
  (:data:`WITHHELD_ENV`): a pod gets those only from its spec, as on a cluster;
* one network: service host names (``<service>.<namespace>.svc[.cluster.local]:<port>``, e.g.
  in the operator's TF_CONFIG) become ``127.0.0.1:<port of its own>``, and a JobSet's pods get
  an address table for their peers' host names (:mod:`.pod_dns`, the stand-in for cluster DNS);
* ``HOSTNAME`` is the pod's ``spec.hostname`` if set (JobSet's pods), else its name;
* the image's entrypoint and ``python`` map to this interpreter
  (:func:`shardtrain.kubeflow.pods.local_argv`).
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from shardtrain.errors import one_line
from shardtrain.kubeflow.local.pod_dns import (
    ADDRESSES_ENV,
    JOBSET_NAME_LABEL,
    ServicePorts,
    address_table,
)
from shardtrain.kubeflow.pods import ENTRYPOINT, local_argv

#: Reads a JobSet object: ``(namespace, name) -> dict`` (raises ``ApiException``).
JobSetReader = Callable[[str, str], Mapping[str, Any]]

#: Variables of the agent's environment a pod never inherits (it gets them from its spec).
WITHHELD_ENV = re.compile(
    r"^(AWS_.*|GOOGLE_APPLICATION_CREDENTIALS|CLOUDSDK_.*|TF_CONFIG|KUBECONFIG|KUBERNETES_.*)$"
)
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class PodConfigError(Exception):
    """A container's environment cannot be built (a missing Secret or key)."""


class PodEnvironment:
    """Builds containers' command lines and environments, reading Secrets and ConfigMaps
    through ``core`` (a ``CoreV1Api``), JobSets through ``jobsets``, and mapping service and
    pod addresses through ``ports``."""

    def __init__(self, core: Any, ports: ServicePorts, jobsets: JobSetReader | None = None) -> None:
        self.core = core
        self.ports = ports
        self.jobsets = jobsets

    def argv(self, spec: Any, env: Mapping[str, str]) -> list[str]:
        """The container's command and args (``$(VAR)`` expanded) as a local command line."""
        command = [expand(a, env) for a in (spec.command or [ENTRYPOINT])]
        args = [expand(a, env) for a in (spec.args or [])]
        return [self.ports.localise(a) for a in (*local_argv(command), *args)]

    def environment(self, pod: Any, spec: Any) -> dict[str, str]:
        """The container's environment.

        Raises:
            PodConfigError: a Secret, ConfigMap or key it needs is missing (a kubelet keeps
                such a pod Pending with ``CreateContainerConfigError``).
        """
        env = {k: v for k, v in os.environ.items() if not WITHHELD_ENV.match(k)}
        env["HOSTNAME"] = pod.spec.hostname or pod.metadata.name
        ns = pod.metadata.namespace
        for source in spec.env_from or ():
            prefix = source.prefix or ""
            if source.secret_ref is not None:
                data = self._secret(ns, source.secret_ref.name, source.secret_ref.optional)
            elif source.config_map_ref is not None:
                data = self._config_map(
                    ns, source.config_map_ref.name, source.config_map_ref.optional
                )
            else:
                continue
            env.update({prefix + k: v for k, v in data.items()})
        for var in spec.env or ():
            if var.value_from is None:
                env[var.name] = expand(var.value or "", env)
                continue
            value = self._value_from(pod, var.name, var.value_from)
            if value is not None:
                env[var.name] = value
        env = {k: self.ports.localise(v) for k, v in env.items()}
        jobset = (pod.metadata.labels or {}).get(JOBSET_NAME_LABEL)
        if jobset:
            env[ADDRESSES_ENV] = json.dumps(self._addresses(pod, spec, jobset), sort_keys=True)
        return env

    def _addresses(self, pod: Any, spec: Any, jobset: str) -> dict[str, str]:
        """The address table of a JobSet's pod (:mod:`.pod_dns`)."""
        from kubernetes.client.rest import ApiException

        ns = pod.metadata.namespace
        if self.jobsets is None:
            raise PodConfigError(f"JobSet {ns}/{jobset}: this agent cannot read JobSets")
        try:
            obj = self.jobsets(ns, jobset)
        except ApiException as exc:
            raise PodConfigError(f"JobSet {ns}/{jobset}: {one_line(exc)}") from exc
        ports = [p.container_port for p in spec.ports or ()]
        return address_table(obj, ports, self.ports, subdomain=pod.spec.subdomain)

    def _value_from(self, pod: Any, name: str, source: Any) -> str | None:
        ns = pod.metadata.namespace
        if source.secret_key_ref is not None:
            ref = source.secret_key_ref
            return _key(name, ref, self._secret(ns, ref.name, ref.optional), f"Secret {ns}")
        if source.config_map_key_ref is not None:
            ref = source.config_map_key_ref
            data = self._config_map(ns, ref.name, ref.optional)
            return _key(name, ref, data, f"ConfigMap {ns}")
        if source.field_ref is not None:
            return field_value(pod, source.field_ref.field_path)
        raise PodConfigError(
            f"{name}: only secretKeyRef, configMapKeyRef and fieldRef are supported"
        )

    def _secret(self, ns: str, name: str, optional: bool | None) -> dict[str, str]:
        secret = read_object("secret", self.core.read_namespaced_secret, ns, name, optional)
        return {
            k: base64.b64decode(v).decode("utf-8", "replace")
            for k, v in ((secret.data if secret else None) or {}).items()
        }

    def _config_map(self, ns: str, name: str, optional: bool | None) -> dict[str, str]:
        cm = read_object("configmap", self.core.read_namespaced_config_map, ns, name, optional)
        return dict((cm.data if cm else None) or {})


def read_object(what: str, read: Any, ns: str, name: str, optional: bool | None) -> Any:
    """The object ``read(name, ns)`` returns (a Secret, a ConfigMap); None for a missing
    optional one.

    Raises:
        PodConfigError: any other failure, naming ``what`` and the object.
    """
    from kubernetes.client.rest import ApiException

    try:
        return read(name, ns)
    except ApiException as exc:
        if exc.status == 404 and optional:
            return None
        raise PodConfigError(f"{what} {ns}/{name}: {one_line(exc)}") from exc


def _key(name: str, ref: Any, data: Mapping[str, str], where: str) -> str | None:
    """Key ``ref.key`` of ``data`` (a Secret's or ConfigMap's), None if optional and absent."""
    if ref.key not in data:
        if ref.optional:
            return None
        raise PodConfigError(f"{name}: key {ref.key!r} not in {where}/{ref.name}")
    return data[ref.key]


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: known variables are replaced, ``$$`` is ``$``, unknown
    references stay as written."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR_REF.sub(sub, text)


def field_value(pod: Any, path: str) -> str:
    """The value of a ``fieldRef`` (``metadata.name``, ``metadata.labels['x']`` …) of ``pod``."""
    meta = pod.metadata
    simple = {
        "metadata.name": meta.name,
        "metadata.namespace": meta.namespace,
        "metadata.uid": meta.uid,
        "spec.nodeName": pod.spec.node_name,
        "spec.serviceAccountName": pod.spec.service_account_name,
        "status.podIP": "127.0.0.1",
        "status.hostIP": "127.0.0.1",
    }
    if path in simple:
        return simple[path] or ""
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        return ((meta.labels if m.group(1) == "labels" else meta.annotations) or {}).get(
            m.group(2), ""
        )
    raise PodConfigError(f"unsupported fieldRef {path!r}")
