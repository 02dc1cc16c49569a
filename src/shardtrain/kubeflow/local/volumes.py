"""The node agent's volumes: a pod's ``projected``, ``configMap`` and ``secret`` volumes written
into a directory of the pod, as a kubelet writes them before it starts the container.

What is written, per volume the container mounts (``volumeMounts``, ``subPath`` honoured):

* a ``serviceAccountToken`` source: a token from the TokenRequest API for the pod's
  ServiceAccount (``spec.serviceAccountName``, default ``default``) with the source's audience
  and ``expirationSeconds`` (default 3600), bound to the pod, as the kubelet asks for it
  (Trainer's status server authenticates a TrainJob's pods with one, audience
  ``trainer.kubeflow.org/v1alpha1/namespaces/<ns>/trainjobs/<name>/status``);
* ``configMap`` and ``secret`` sources and volumes: their ``items`` (all keys when none are
  listed; ``binaryData`` too), a missing one skipped when ``optional``;
* ``downwardAPI`` items with a ``fieldRef``.

Files are 0600 (the pod's process runs as this agent's user), under the pod's directory
(the agent's ``log_dir``, 0700). A source that cannot be read (a missing ConfigMap, a refused
token) raises :class:`~shardtrain.kubeflow.local.pod_env.PodConfigError`: the pod waits with
the reason and the agent tries again on its next sync, as a kubelet retries a failed mount.

The limit of this imitation: a pod here is a host process with this machine's file system, so
nothing is mounted at the mount path. Instead the container's environment values (and
arguments) that **start with** a mount path are rewritten to the volume's local directory
(:meth:`Mounts.localise`): ``KUBEFLOW_TRAINER_SERVER_TOKEN=/var/run/secrets/kubeflow/trainer/
token`` becomes ``<pod dir>/volumes/kubeflow-trainer-token/token``. A path the process builds
itself, or finds in a file, is not rewritten. Tokens are not refreshed (the kubelet renews one
at 80% of its lifetime): a pod sees its token expire after ``expirationSeconds``. Other volume
types (``emptyDir``, ``hostPath``, claims) are not applied, nor is the API-access volume the
ServiceAccount admission adds to every pod (mounted at :data:`API_ACCESS_MOUNT`): pods here do
not reach the API server in-cluster (``KUBERNETES_*`` is withheld) and k8s-up runs no
root-CA publisher to make its ``kube-root-ca.crt``.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardtrain.errors import one_line
from shardtrain.kubeflow.local.pod_env import PodConfigError, field_value, read_object

#: Where the ServiceAccount admission mounts a pod's API access volume (not materialised).
API_ACCESS_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
_DEFAULT_TOKEN_SECONDS = 3600


@dataclass(frozen=True)
class Mounts:
    """A container's mount paths → the local directories (or files) standing for them."""

    paths: Mapping[str, Path]

    def localise(self, value: str) -> str:
        """``value`` with a leading mount path replaced by its local directory (the longest
        mount path that is ``value`` itself or a parent directory of it)."""
        for mount in sorted(self.paths, key=len, reverse=True):
            if value == mount or value.startswith(mount.rstrip("/") + "/"):
                return str(self.paths[mount]) + value[len(mount.rstrip("/")) :]
        return value


class PodVolumes:
    """Writes pods' volumes through ``core`` (a ``CoreV1Api``: Secrets, ConfigMaps and
    TokenRequests); see the module documentation."""

    def __init__(self, core: Any) -> None:
        self.core = core

    def mount(self, pod: Any, spec: Any, pod_dir: Path) -> Mounts:
        """Write the volumes container ``spec`` of ``pod`` mounts under ``pod_dir/volumes``.

        Raises:
            PodConfigError: a source cannot be read (the pod should wait and retry).
        """
        volumes = {v.name: v for v in pod.spec.volumes or ()}
        paths: dict[str, Path] = {}
        written: dict[str, Path] = {}
        for vm in spec.volume_mounts or ():
            volume = volumes.get(vm.name)
            if volume is None or vm.mount_path.rstrip("/") == API_ACCESS_MOUNT:
                continue
            if volume.name not in written:
                files = self._files(pod, volume)
                if files is None:
                    continue  # a volume type this agent does not apply
                target = pod_dir / "volumes" / volume.name
                _write(target, files)
                written[volume.name] = target
            local = written[volume.name]
            paths[vm.mount_path] = local / vm.sub_path if vm.sub_path else local
        return Mounts(paths)

    def _files(self, pod: Any, volume: Any) -> dict[str, tuple[bytes, int | None]] | None:
        """The files of a volume (relative path → content, mode), None for an unsupported
        type."""
        if volume.projected is not None:
            files: dict[str, tuple[bytes, int | None]] = {}
            for source in volume.projected.sources or ():
                files.update(self._projection(pod, source))
            return files
        if volume.config_map is not None:
            return self._config_map_files(pod, volume.config_map)
        if volume.secret is not None:
            return self._secret_files(pod, volume.secret, volume.secret.secret_name)
        return None

    def _config_map_files(self, pod: Any, ref: Any) -> dict[str, tuple[bytes, int | None]]:
        """The files of a ConfigMap a volume or a projection names (``ref``)."""
        return _items(self._config_map(pod, ref.name, ref.optional), ref.items, ref.name)

    def _secret_files(self, pod: Any, ref: Any, name: str) -> dict[str, tuple[bytes, int | None]]:
        """The files of Secret ``name`` a volume or a projection names (``ref``: its items)."""
        return _items(self._secret(pod, name, ref.optional), ref.items, name)

    def _projection(self, pod: Any, source: Any) -> dict[str, tuple[bytes, int | None]]:
        if source.service_account_token is not None:
            sat = source.service_account_token
            return {sat.path: (self._token(pod, sat.audience, sat.expiration_seconds), None)}
        if source.config_map is not None:
            return self._config_map_files(pod, source.config_map)
        if source.secret is not None:
            return self._secret_files(pod, source.secret, source.secret.name)
        if source.downward_api is not None:
            return {
                item.path: (field_value(pod, item.field_ref.field_path).encode(), item.mode)
                for item in source.downward_api.items or ()
                if item.field_ref is not None
            }
        return {}

    def _token(self, pod: Any, audience: str | None, seconds: int | None) -> bytes:
        """A token of the pod's ServiceAccount from the TokenRequest API, bound to the pod."""
        from kubernetes.client.rest import ApiException

        ns, account = pod.metadata.namespace, pod.spec.service_account_name or "default"
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [audience] if audience else [],
                "expirationSeconds": seconds or _DEFAULT_TOKEN_SECONDS,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod.metadata.name,
                    "uid": pod.metadata.uid,
                },
            },
        }
        try:
            reply = self.core.create_namespaced_service_account_token(account, ns, body)
        except ApiException as exc:
            raise PodConfigError(
                f"token of serviceaccount {ns}/{account} (audience {audience or '(default)'}): "
                f"{one_line(exc)}"
            ) from exc
        return str(reply.status.token).encode()

    def _config_map(self, pod: Any, name: str, optional: bool | None) -> dict[str, bytes] | None:
        ns = pod.metadata.namespace
        cm = read_object(
            "volume configmap", self.core.read_namespaced_config_map, ns, name, optional
        )
        if cm is None:
            return None
        data = {k: v.encode() for k, v in (cm.data or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (cm.binary_data or {}).items()})
        return data

    def _secret(self, pod: Any, name: str, optional: bool | None) -> dict[str, bytes] | None:
        ns = pod.metadata.namespace
        secret = read_object("volume secret", self.core.read_namespaced_secret, ns, name, optional)
        if secret is None:
            return None
        return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}


def _items(
    data: Mapping[str, bytes] | None, items: Iterable[Any] | None, name: str
) -> dict[str, tuple[bytes, int | None]]:
    """The files of a ConfigMap's or Secret's keys: ``items`` (key → path) or every key."""
    if data is None:
        return {}  # an optional object that does not exist
    if not items:
        return {key: (value, None) for key, value in data.items()}
    files = {}
    for item in items:
        if item.key not in data:
            raise PodConfigError(f"volume item {item.key!r}: no such key in {name}")
        files[item.path] = (data[item.key], item.mode)
    return files


def _write(target: Path, files: Mapping[str, tuple[bytes, int | None]]) -> None:
    """Write ``files`` under ``target`` (each atomically, owner-only unless a mode says)."""
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    for rel, (content, mode) in files.items():
        path = target / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            raise PodConfigError(f"volume file {rel!r}: not a relative path inside the volume")
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, (mode or 0o600) & 0o777)
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        os.replace(tmp, path)
