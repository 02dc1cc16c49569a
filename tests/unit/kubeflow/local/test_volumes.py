"""The node agent's volumes (no API server): a pod's projected volume (a service-account token
from the TokenRequest API and ConfigMap items, as Trainer's TrainJobStatus plugin mounts them),
plain ConfigMap/Secret volumes, and the container seeing them through its environment."""

from __future__ import annotations

import base64
import json
import types

import pytest

from shardtrain.kubeflow.local import node_agent, volumes
from shardtrain.kubeflow.local.pod_env import PodConfigError

AUDIENCE = "trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/quest/status"
MOUNT = "/var/run/secrets/kubeflow/trainer"


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


class _Core:
    """ConfigMaps, Secrets and TokenRequests of namespace ``ns``, recorded."""

    def __init__(self, config_maps=None, secrets=None):
        default = {"quest-tls-config": {"ca.crt": "CA PEM"}}
        self.config_maps = default if config_maps is None else config_maps
        self.secrets = secrets or {}
        self.token_requests: list[tuple[str, str, dict]] = []

    def read_namespaced_config_map(self, name, namespace):
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        if name not in self.config_maps:
            raise ApiException(status=404, reason="Not Found")
        return client.V1ConfigMap(data=self.config_maps[name])

    def read_namespaced_secret(self, name, namespace):
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        if name not in self.secrets:
            raise ApiException(status=404, reason="Not Found")
        data = {k: base64.b64encode(v.encode()).decode() for k, v in self.secrets[name].items()}
        return client.V1Secret(data=data)

    def create_namespaced_service_account_token(self, name, namespace, body):
        from kubernetes import client

        self.token_requests.append((namespace, name, body))
        return client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=body["spec"]["audiences"]),
            status=client.V1TokenRequestStatus(
                token=f"jwt-for-{name}", expiration_timestamp="2030-01-01T00:00:00Z"
            ),
        )

    # What the agent's loop calls besides (see test_node_agent.py).
    def patch_namespaced_pod_status(self, name, namespace, body):
        pass


def _pod(command=None, *, extra_volumes=(), extra_mounts=(), env=()):
    """A TrainJob node pod as Trainer's TrainJobStatus plugin shapes it (volume, mount, env)."""
    from kubernetes import client

    token_volume = client.V1Volume(
        name="kubeflow-trainer-token",
        projected=client.V1ProjectedVolumeSource(
            sources=[
                client.V1VolumeProjection(
                    service_account_token=client.V1ServiceAccountTokenProjection(
                        audience=AUDIENCE, expiration_seconds=3600, path="token"
                    )
                ),
                client.V1VolumeProjection(
                    config_map=client.V1ConfigMapProjection(
                        name="quest-tls-config",
                        items=[client.V1KeyToPath(key="ca.crt", path="ca.crt")],
                    )
                ),
            ]
        ),
    )
    # What the ServiceAccount admission adds to every pod (its ConfigMap does not exist here).
    api_access = client.V1Volume(
        name="kube-api-access-x",
        projected=client.V1ProjectedVolumeSource(
            sources=[
                client.V1VolumeProjection(
                    config_map=client.V1ConfigMapProjection(name="kube-root-ca.crt")
                )
            ]
        ),
    )
    mounts = [
        client.V1VolumeMount(name="kubeflow-trainer-token", mount_path=MOUNT, read_only=True),
        client.V1VolumeMount(name="kube-api-access-x", mount_path=volumes.API_ACCESS_MOUNT),
        *extra_mounts,
    ]
    container = client.V1Container(
        name="node",
        image="i",
        command=command,
        volume_mounts=mounts,
        env=[
            client.V1EnvVar(name="KUBEFLOW_TRAINER_SERVER_TOKEN", value=f"{MOUNT}/token"),
            client.V1EnvVar(name="KUBEFLOW_TRAINER_SERVER_CA_CERT", value=f"{MOUNT}/ca.crt"),
            *env,
        ],
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name="quest-node-0-0", namespace="ns", uid="uid-1"),
        spec=client.V1PodSpec(
            containers=[container],
            node_name="n",
            restart_policy="Never",
            service_account_name="trainer-sa",
            volumes=[token_volume, api_access, *extra_volumes],
        ),
        status=client.V1PodStatus(phase="Pending"),
    )


def test_a_projected_volume_gets_a_bound_token_and_configmap_items(tmp_path):
    from kubernetes import client

    core = _Core(secrets={"creds": {"key": "s3cret", "other": "x"}})
    settings = client.V1Volume(
        name="settings", config_map=client.V1ConfigMapVolumeSource(name="quest-tls-config")
    )
    creds = client.V1Volume(
        name="creds",
        secret=client.V1SecretVolumeSource(
            secret_name="creds", items=[client.V1KeyToPath(key="key", path="dir/k")]
        ),
    )
    extra_mounts = [
        client.V1VolumeMount(name="settings", mount_path="/etc/settings/ca", sub_path="ca.crt"),
        client.V1VolumeMount(name="creds", mount_path="/etc/creds"),
    ]
    pod = _pod(extra_volumes=[settings, creds], extra_mounts=extra_mounts)
    mounts = volumes.PodVolumes(core).mount(pod, pod.spec.containers[0], tmp_path)
    # The token: the pod's ServiceAccount, Trainer's audience and lifetime, bound to the pod.
    [(ns, account, body)] = core.token_requests
    assert (ns, account) == ("ns", "trainer-sa")
    spec = body["spec"]
    assert spec["audiences"] == [AUDIENCE] and spec["expirationSeconds"] == 3600
    assert spec["boundObjectRef"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "quest-node-0-0",
        "uid": "uid-1",
    }
    token = mounts.localise(f"{MOUNT}/token")
    assert token.startswith(str(tmp_path)) and _read(token) == "jwt-for-trainer-sa"
    assert _read(mounts.localise(f"{MOUNT}/ca.crt")) == "CA PEM"
    # Plain ConfigMap (subPath) and Secret (items) volumes.
    assert _read(mounts.localise("/etc/settings/ca")) == "CA PEM"
    assert _read(mounts.localise("/etc/creds/dir/k")) == "s3cret"
    assert not (tmp_path / "volumes" / "creds" / "other").exists()
    # Owner-only files; paths outside mounts (or merely sharing a prefix) are left alone.
    assert (tmp_path / "volumes" / "kubeflow-trainer-token" / "token").stat().st_mode & 0o777 == (
        0o600
    )
    assert mounts.localise(f"{MOUNT}-other/token") == f"{MOUNT}-other/token"
    assert mounts.localise("/etc/passwd") == "/etc/passwd"
    # The API access volume is not written (its kube-root-ca.crt does not exist here).
    assert volumes.API_ACCESS_MOUNT not in mounts.paths


def test_a_missing_configmap_keeps_the_pod_waiting_unless_optional(tmp_path):
    from kubernetes import client

    core = _Core(config_maps={})
    pod = _pod()
    with pytest.raises(PodConfigError, match="configmap ns/quest-tls-config"):
        volumes.PodVolumes(core).mount(pod, pod.spec.containers[0], tmp_path)
    pod.spec.volumes[0].projected.sources[1].config_map.optional = True
    mounts = volumes.PodVolumes(core).mount(pod, pod.spec.containers[0], tmp_path)
    assert _read(mounts.localise(f"{MOUNT}/token")) == "jwt-for-trainer-sa"
    assert not (tmp_path / "volumes" / "kubeflow-trainer-token" / "ca.crt").exists()
    # A listed key the ConfigMap lacks is an error, as with a kubelet.
    core.config_maps["quest-tls-config"] = {"other": "x"}
    pod.spec.volumes[0].projected.sources[1].config_map.items = [
        client.V1KeyToPath(key="ca.crt", path="ca.crt")
    ]
    pod.spec.volumes[0].projected.sources[1].config_map.optional = False
    with pytest.raises(PodConfigError, match=r"'ca\.crt'"):
        volumes.PodVolumes(core).mount(pod, pod.spec.containers[0], tmp_path)


def test_the_agent_starts_the_container_with_its_volumes_in_the_environment(tmp_path):
    """The pod's process reads the files its environment names (the mount paths rewritten)."""
    from kubernetes import client

    script = 'cat "$KUBEFLOW_TRAINER_SERVER_TOKEN"; echo; cat "$KUBEFLOW_TRAINER_SERVER_CA_CERT"'
    pod = _pod(
        ["sh", "-c", script],
        env=[client.V1EnvVar(name="UNRELATED", value="/var/run/secrets/other")],
    )
    core = _Core()
    core.api_client = client.ApiClient()
    body = core.api_client.sanitize_for_serialization(client.V1PodList(items=[pod]))
    core.list_pod_for_all_namespaces = lambda **kw: types.SimpleNamespace(data=json.dumps(body))
    agent = node_agent.NodeAgent(
        node_agent.NodeConfig(name="n", log_dir=str(tmp_path / "logs")), core=core
    )
    agent._sync()
    c = agent._containers["uid-1"]
    assert c.proc is not None and c.proc.wait(timeout=30) == 0
    assert c.log_path.read_text() == "jwt-for-trainer-sa\nCA PEM"
    assert c.env["UNRELATED"] == "/var/run/secrets/other"
    assert c.env["KUBEFLOW_TRAINER_SERVER_TOKEN"].startswith(str(tmp_path / "logs"))
