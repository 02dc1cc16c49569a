"""Serving a published model with KServe: the ``InferenceService`` and its service account.

The pipeline's export step publishes each model under the serving base (see
:func:`shardtrain.kubeflow.publish.publish_export`)::

    <serving_uri>/<integer version>/saved_model.pb, variables/, _MANIFEST.json, ...
    <serving_uri>/latest.json        {"version": "<integer version>", ...}   (written last)

That is the layout TensorFlow Serving loads from ``--model_base_path``: it lists the base,
takes every entry whose name is an integer as a version, ignores the rest (``latest.json``)
and serves the highest. KServe's ``tensorflow`` model format runs TensorFlow Serving with
``--model_base_path=/mnt/models``, where its storage initializer copies ``storageUri``; so
the ``InferenceService`` points ``storageUri`` at the base, not at one version. The storage
initializer copies every version under the base: prune old versions to keep pod start-up
short.

* :class:`ServingConfig`: everything that differs between shardtrain's InferenceServices.
* :func:`render`: the ServiceAccount and the InferenceService (``shardtrain serve render``,
  the pipeline's deploy step, ``k8s/serving/``).
* :func:`check_published`: the base holds what TensorFlow Serving will load, and it is the
  version ``latest.json`` names.
* :func:`apply`: server-side apply of rendered documents to the cluster.

Credentials: for ``s3://`` the storage initializer reads the same Secret the training pods
use (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``: KServe's default key names) because
the predictor's ServiceAccount lists it under ``secrets``, KServe's way of handing a
Secret to the storage initializer; nothing secret is rendered. KServe takes a non-AWS
endpoint from the Secret's annotations (``serving.kserve.io/s3-endpoint``,
``serving.kserve.io/s3-usehttps``, ``serving.kserve.io/s3-region``), not from its
``AWS_ENDPOINT_URL`` key. For ``gs://`` the ServiceAccount's own identity reads the bucket
(GKE Workload Identity); no Secret.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import yaml

from shardtrain import storage
from shardtrain.errors import ConfigError, DataError, NotCommittedError, one_line
from shardtrain.kubeflow.jobs import settings
from shardtrain.kubeflow.jobs.settings import JobSettings

log = logging.getLogger(__name__)

API_VERSION = "serving.kserve.io/v1beta1"
KIND = "InferenceService"
#: The pointer the export step writes last at the serving base.
SERVING_POINTER = "latest.json"
#: The Secret the training pods read storage credentials from (``k8s/README.md``).
DEFAULT_SECRET = "shardtrain-storage"
GPU_RESOURCE = "nvidia.com/gpu"
#: The ``tensorflow/serving`` tag of KServe v0.15's ``kserve-tensorflow-serving`` runtime;
#: its GPU build is this tag with ``-gpu`` (KServe picks the image by ``runtimeVersion``).
TF_SERVING_VERSION = "2.6.2"
LABELS = {"app.kubernetes.io/name": "shardtrain", "app.kubernetes.io/component": "serving"}
#: Workload Identity's annotation: the Google service account a Kubernetes one acts as.
GCP_SERVICE_ACCOUNT_ANNOTATION = "iam.gke.io/gcp-service-account"
_GCP_ACCOUNT = re.compile(r"[a-z][-a-z0-9]{4,28}[a-z0-9]@[-A-Za-z0-9_.]+\.gserviceaccount\.com")
#: A container image tag, as the OCI distribution spec defines it (``runtimeVersion`` is the
#: tag of the runtime's ``tensorflow/serving`` image).
_IMAGE_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
#: The schemes KServe's storage initializer reads (it knows no s3a:// or gcs://).
_SCHEMES = {"s3": "s3", "gs": "gs"}


def _store(uri: str) -> str | None:
    """``"s3"``, ``"gs"`` or None (a scheme KServe cannot read for us)."""
    return _SCHEMES.get(storage.scheme(uri))


@dataclass(frozen=True)
class ServingConfig(JobSettings):
    """Everything that differs between shardtrain's InferenceServices.

    Attributes:
        serving_uri: the serving base the export step publishes to (``s3://`` or ``gs://``):
            the predictor's ``storageUri``.
        name: InferenceService name (a DNS-1035 label; also TensorFlow Serving's model
            name, so the REST path is ``/v1/models/<name>:predict``).
        namespace: namespace of the InferenceService, its ServiceAccount and the Secret.
        secret: for ``s3://``, the Secret with ``AWS_ACCESS_KEY_ID`` and
            ``AWS_SECRET_ACCESS_KEY`` the ServiceAccount lists for the storage initializer
            (None: the ServiceAccount's own identity, e.g. IRSA). ``gs://`` takes none.
        service_account: the predictor's ServiceAccount (rendered too).
        gcp_service_account: for ``gs://`` on GKE, the Google service account the
            ServiceAccount acts as (Workload Identity's ``iam.gke.io/gcp-service-account``
            annotation); None: none rendered (the cluster grants access otherwise).
        cpu: CPU request and limit of the model server.
        memory: memory request and limit of the model server.
        gpus: ``nvidia.com/gpu`` limit (0: CPU only); with GPUs the runtime's GPU image.
        runtime_version: the ``tensorflow/serving`` tag (``runtimeVersion``); None: the
            runtime's own (:data:`TF_SERVING_VERSION`), with ``-gpu`` when ``gpus`` > 0.
        min_replicas: the fewest predictor pods (0 lets an idle service scale to zero in
            KServe's serverless mode).
        max_replicas: the most predictor pods the autoscaler may run.
    """

    serving_uri: str
    name: str = "shardtrain"
    namespace: str = "shardtrain"
    secret: str | None = DEFAULT_SECRET
    service_account: str = "shardtrain-serving"
    gcp_service_account: str | None = None
    cpu: str = "1"
    memory: str = "2Gi"
    gpus: int = 0
    runtime_version: str | None = None
    min_replicas: int = 1
    max_replicas: int = 1

    KIND: ClassVar[str] = KIND
    OPTIONAL: ClassVar[tuple[str, ...]] = ("secret", "gcp_service_account", "runtime_version")
    REQUIRED: ClassVar[tuple[str, ...]] = ("serving_uri",)

    @classmethod
    def from_overrides(cls, **overrides: Any) -> Self:
        """As :meth:`JobSettings.from_overrides`; a ``gs://`` base takes no Secret unless
        one is given (which is then an error)."""
        if overrides.get("secret") is None and _store(overrides.get("serving_uri") or "") == "gs":
            overrides["secret"] = ""
        return super().from_overrides(**overrides)

    def __post_init__(self) -> None:
        uri = str(self.serving_uri or "").strip()
        store = _store(uri)
        if store is None or not uri.split("://", 1)[1].strip("/"):
            where = "a local path" if storage.is_local(uri) else "not an s3:// or gs:// URI"
            raise ConfigError(
                f"{uri or repr(uri)}: {where}; KServe's storage initializer reads the serving "
                "base from s3:// or gs:// (the pipeline's serving_uri)"
            )
        if store == "gs" and self.secret is not None:
            raise ConfigError(
                f"{uri}: gs:// is read with the service account's own identity (Workload "
                f"Identity); --secret ({self.secret}) applies to s3:// only"
            )
        account = self.gcp_service_account
        if account is not None and (store != "gs" or not _GCP_ACCOUNT.fullmatch(account)):
            raise ConfigError(
                f"gcp_service_account '{account}': "
                + ("applies to gs:// only" if store != "gs" else "not a Google service account "
                   "e-mail (NAME@PROJECT.iam.gserviceaccount.com)")
            )  # fmt: skip
        settings.check_job_name(KIND, self.name)
        settings.check_namespace(self.namespace)
        settings.check_object_names(secret=self.secret, service_account=self.service_account)
        settings.check_counts(
            (
                ("gpus", self.gpus, 0),
                ("min_replicas", self.min_replicas, 0),
                ("max_replicas", self.max_replicas, 1),
            )
        )
        if self.max_replicas < self.min_replicas:
            raise ConfigError(
                f"max_replicas {self.max_replicas} is below min_replicas {self.min_replicas}"
            )
        settings.check_quantities(cpu=self.cpu, memory=self.memory)
        version = self.runtime_version
        if version is not None and not _IMAGE_TAG.fullmatch(version):
            raise ConfigError(
                f"runtime_version '{version}' is not an image tag (letters, digits, '_', '.' "
                "and '-', at most 128 characters, not starting with '.' or '-')"
            )
        if version is not None and (self.gpus > 0) != version.endswith("-gpu"):
            raise ConfigError(
                f"runtime_version '{version}' does not match gpus {self.gpus}: KServe refuses "
                "a GPU image without GPUs and the reverse (the GPU tags end in -gpu)"
            )

    @property
    def store(self) -> str:
        """``"s3"`` or ``"gs"``."""
        return _store(self.serving_uri) or ""


def build_service_account(config: ServingConfig) -> dict[str, Any]:
    """The predictor's ServiceAccount: for ``s3://`` it lists the storage Secret; for
    ``gs://`` it may name the Google service account it acts as."""
    account: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": config.service_account,
            "namespace": config.namespace,
            "labels": dict(LABELS),
        },
    }
    if config.gcp_service_account is not None:
        account["metadata"]["annotations"] = {
            GCP_SERVICE_ACCOUNT_ANNOTATION: config.gcp_service_account
        }
    if config.secret is not None:
        account["secrets"] = [{"name": config.secret}]
    return account


def build_inference_service(config: ServingConfig) -> dict[str, Any]:
    """The InferenceService: TensorFlow Serving (``modelFormat: tensorflow``, KServe's v1
    protocol) on the published base."""
    limits: dict[str, str] = {"cpu": config.cpu, "memory": config.memory}
    version = config.runtime_version
    if config.gpus > 0:
        limits[GPU_RESOURCE] = str(config.gpus)
        version = version or f"{TF_SERVING_VERSION}-gpu"
    model: dict[str, Any] = {
        "modelFormat": {"name": "tensorflow"},
        "protocolVersion": "v1",
        "storageUri": config.serving_uri.rstrip("/"),
        "resources": {
            "requests": {"cpu": config.cpu, "memory": config.memory},
            "limits": limits,
        },
    }
    if version is not None:
        model["runtimeVersion"] = version
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": config.name, "namespace": config.namespace, "labels": dict(LABELS)},
        "spec": {
            "predictor": {
                "minReplicas": config.min_replicas,
                "maxReplicas": config.max_replicas,
                "serviceAccountName": config.service_account,
                "model": model,
            }
        },
    }


def render(config: ServingConfig) -> list[dict[str, Any]]:
    """``[ServiceAccount, InferenceService]``: apply them in this order."""
    return [build_service_account(config), build_inference_service(config)]


def to_yaml(documents: Iterable[Mapping[str, Any]]) -> str:
    """Documents as one YAML stream (``---`` between them), keys in the generator's order."""
    return yaml.safe_dump_all(
        [dict(d) for d in documents], sort_keys=False, default_flow_style=False
    )


# --------------------------------------------------------------------------------------------
# The published layout
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PublishedModel:
    """What TensorFlow Serving will load from a serving base.

    Attributes:
        base: the serving base.
        version: the version TensorFlow Serving serves (the highest integer directory), the
            one ``latest.json`` names.
        uri: the version's directory.
        versions: every version under the base, ascending.
        step: the training step of the version (``latest.json``), if recorded.
    """

    base: str
    version: int
    uri: str
    versions: tuple[int, ...]
    step: int | None = None


def version_number(name: str) -> int | None:
    """A directory name as TensorFlow Serving reads it: a non-negative int64, else None."""
    return int(name) if name.isascii() and name.isdigit() and int(name) < 2**63 else None


def check_published(base: str) -> PublishedModel:
    """Check that ``base`` holds a model TensorFlow Serving (KServe's ``tensorflow`` format)
    loads, and that it serves the version ``latest.json`` names.

    TensorFlow Serving serves the highest integer-named directory under the base and ignores
    other names; a version directory must hold ``saved_model.pb`` and ``variables/``.

    Raises:
        NotCommittedError: no ``latest.json`` (not a published base), or its version is not
            committed.
        DataError: the pointer names no integer version, the version lacks
            ``saved_model.pb`` or ``variables/``, or a higher version would be served instead.
    """
    base = base.rstrip("/")
    pointer_uri = storage.join(base, SERVING_POINTER)
    if not storage.exists(pointer_uri):
        raise NotCommittedError(
            f"{base}: not a published serving base (no {SERVING_POINTER}; the pipeline's export "
            "step publishes there)"
        )
    pointer = storage.read_json(pointer_uri)
    name = str(pointer.get("version", "")) if isinstance(pointer, dict) else ""
    version = version_number(name)
    if version is None:
        raise DataError(
            f"{pointer_uri}: version {name!r} is not an integer; TensorFlow Serving loads only "
            "integer-named version directories"
        )
    versions = sorted(
        v for v in (version_number(storage.basename(u)) for u in storage.ls(base)) if v is not None
    )
    uri = storage.join(base, name)
    if version not in versions or not storage.is_committed(uri):
        raise NotCommittedError(f"{uri}: named by {SERVING_POINTER} but not fully published")
    for needed in ("saved_model.pb", "variables/variables.index"):
        if not storage.exists(storage.join(uri, needed)):
            raise DataError(f"{uri}: not a SavedModel TensorFlow Serving loads (no {needed})")
    if versions[-1] != version:
        raise DataError(
            f"{base}: TensorFlow Serving would serve version {versions[-1]}, not {version} "
            f"({SERVING_POINTER}); remove {storage.join(base, str(versions[-1]))}/ or publish "
            "again"
        )
    step = pointer.get("step")
    return PublishedModel(
        base, version, uri, tuple(versions), step if isinstance(step, int) else None
    )


# --------------------------------------------------------------------------------------------
# Applying to a cluster
# --------------------------------------------------------------------------------------------

#: The field manager of shardtrain's server-side applies.
FIELD_MANAGER = "shardtrain"


def _dynamic_client() -> Any:
    """A dynamic client from the in-cluster service account, else kubeconfig."""
    from kubernetes import client, config, dynamic
    from kubernetes.config import ConfigException

    from shardtrain.kubeflow.jobs.submit import ClusterError

    try:
        try:
            config.load_incluster_config()
        except ConfigException:
            # KUBECONFIG as it is now: the client reads it only once, when first imported.
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
        return dynamic.DynamicClient(client.ApiClient())
    except (ConfigException, OSError) as exc:
        raise ClusterError(
            f"no Kubernetes configuration (kubeconfig or in-cluster): {exc}"
        ) from exc
    except Exception as exc:  # urllib3 errors while reading the API's discovery documents
        raise ClusterError(f"Kubernetes API unreachable: {one_line(exc)}") from exc


def apply(documents: Iterable[Mapping[str, Any]], *, client: Any = None) -> None:
    """Server-side apply each document, in order (``kubectl apply --server-side
    --force-conflicts``: shardtrain owns the fields it renders).

    Raises:
        ClusterError: no cluster configuration, the API unreachable, the kind unknown to the
            cluster (KServe not installed), or the API refused a document; one line.
    """
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic.exceptions import DynamicApiError, ResourceNotFoundError

    from shardtrain.kubeflow.jobs.submit import ClusterError

    dyn = client if client is not None else _dynamic_client()
    for doc in documents:
        meta = doc["metadata"]
        what = f"{doc['kind']} {meta.get('namespace', '')}/{meta['name']}"
        try:
            resource = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            dyn.server_side_apply(
                resource,
                body=dict(doc),
                namespace=meta.get("namespace"),
                field_manager=FIELD_MANAGER,
                force_conflicts=True,
            )
        except ResourceNotFoundError:
            raise ClusterError(
                f"{what}: the cluster does not serve {doc['apiVersion']} {doc['kind']} "
                "(is KServe installed?)"
            ) from None
        except (ApiException, DynamicApiError) as exc:
            raise ClusterError(f"{what}: refused ({one_line(exc)})") from exc
        except Exception as exc:  # urllib3: connection refused, TLS, timeouts
            raise ClusterError(f"{what}: Kubernetes API unreachable ({one_line(exc)})") from exc
        log.info("applied %s", what)
