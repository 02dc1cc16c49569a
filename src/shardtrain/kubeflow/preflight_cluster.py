"""The live cluster a preflight asks (:mod:`shardtrain.kubeflow.preflight`): its
:class:`~shardtrain.kubeflow.preflight.Cluster`, answered through the Kubernetes client with
discovery, reads and access reviews. An answer this account may not see (401/403) is None,
"not checked", never a failure; a cluster that does not answer is one line
(:class:`~shardtrain.kubeflow.jobs.submit.ClusterError`, exit 1).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from shardtrain.errors import ShardtrainError, one_line
from shardtrain.kubeflow.jobs.submit import ClusterError
from shardtrain.kubeflow.jobs.trainjob import spec as trainjob_spec
from shardtrain.kubeflow.preflight import Access, Api, Identity

log = logging.getLogger(__name__)


class KubernetesCluster:
    """:class:`~shardtrain.kubeflow.preflight.Cluster` through the Kubernetes client
    (kubeconfig or in-cluster account)."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.authz = client.AuthorizationV1Api(api_client)
        self._served: dict[Api, bool] = {}

    def _read(self, what: str, call: Any, *args: Any) -> bool | None:
        from kubernetes.client.rest import ApiException

        try:
            call(*args)
        except ApiException as exc:
            if exc.status == 404:
                return False
            if exc.status in (401, 403):
                return None
            raise _unreachable(what, exc) from exc
        except OSError as exc:
            raise _unreachable(what, exc) from exc
        return True

    def serves(self, api: Api) -> bool:
        from kubernetes.client.rest import ApiException

        if api not in self._served:
            try:
                resources = self.custom.get_api_resources(api.group, api.version)
                names = {r.name for r in (resources.resources or ())}
                self._served[api] = api.plural in names
            except ApiException as exc:
                if exc.status != 404:
                    raise _unreachable(f"{api.group}/{api.version}", exc) from exc
                self._served[api] = False
            except OSError as exc:
                raise _unreachable(f"{api.group}/{api.version}", exc) from exc
        return self._served[api]

    def runtime_exists(self, name: str) -> bool | None:
        return self._read(
            f"ClusterTrainingRuntime {name}",
            self.custom.get_cluster_custom_object,
            trainjob_spec.GROUP,
            trainjob_spec.VERSION,
            "clustertrainingruntimes",
            name,
        )

    def namespace_exists(self, namespace: str) -> bool | None:
        return self._read(f"namespace {namespace}", self.core.read_namespace, namespace)

    def service_account_exists(self, namespace: str, name: str) -> bool | None:
        return self._read(
            f"service account {namespace}/{name}",
            self.core.read_namespaced_service_account,
            name,
            namespace,
        )

    def secret_keys(self, namespace: str, name: str) -> frozenset[str] | None:
        from kubernetes.client.rest import ApiException

        try:
            secret = self.core.read_namespaced_secret(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                raise LookupError(name) from exc
            if exc.status in (401, 403):
                return None
            raise _unreachable(f"Secret {namespace}/{name}", exc) from exc
        except OSError as exc:
            raise _unreachable(f"Secret {namespace}/{name}", exc) from exc
        return frozenset((secret.data or {}).keys()) | frozenset((secret.string_data or {}).keys())

    def allowed(self, who: Identity, namespace: str, access: Access) -> bool | None:
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        attributes = client.V1ResourceAttributes(
            namespace=namespace,
            verb=access.verb,
            group=access.group,
            resource=access.resource,
            subresource=access.subresource or None,
        )
        try:
            if who.user is None:
                review = self.authz.create_self_subject_access_review(
                    client.V1SelfSubjectAccessReview(
                        spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes)
                    )
                )
            else:
                review = self.authz.create_subject_access_review(
                    client.V1SubjectAccessReview(
                        spec=client.V1SubjectAccessReviewSpec(
                            user=who.user, groups=who.groups, resource_attributes=attributes
                        )
                    )
                )
        except ApiException as exc:
            if exc.status in (401, 403):
                return None
            raise _unreachable("an access review", exc) from exc
        except OSError as exc:
            raise _unreachable("an access review", exc) from exc
        return bool(review.status and review.status.allowed)

    def whoami(self) -> str | None:
        from kubernetes import client

        try:
            review = client.AuthenticationV1Api(self.api_client).create_self_subject_review(
                client.V1SelfSubjectReview()
            )
            return str(review.status.user_info.username)
        except Exception as exc:  # older API servers (before 1.28): the name only explains
            log.debug("preflight: SelfSubjectReview: %s", one_line(exc))
            return None


def _unreachable(what: str, exc: BaseException) -> ShardtrainError:
    return ClusterError(f"preflight: cannot ask the cluster about {what}: {one_line(exc)}")


def kubernetes_cluster() -> KubernetesCluster | None:
    """The cluster of kubeconfig (``$KUBECONFIG``) or of the in-cluster account; None when
    there is neither."""
    from kubernetes import client, config
    from kubernetes.config import ConfigException

    configuration = client.Configuration()
    try:
        try:
            config.load_kube_config(
                config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration
            )
        except ConfigException:
            config.load_incluster_config(client_configuration=configuration)
    except (ConfigException, OSError):
        return None
    return KubernetesCluster(client.ApiClient(configuration))
