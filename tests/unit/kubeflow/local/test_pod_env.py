"""A pod's container as a local command: ``$(VAR)`` expansion, the variables pods never
inherit, and the environment of a JobSet's pod (its host name, completion index and address
table)."""

from __future__ import annotations

import json

import pytest

from shardtrain.kubeflow.local import pod_env


def test_variable_references_expand_like_kubernetes():
    env = {"A": "1", "B": "x y"}
    assert pod_env.expand("$(A)-$(B)", env) == "1-x y"
    assert pod_env.expand("$(MISSING) $$(A) $$", env) == "$(MISSING) $(A) $"


def test_credentials_and_cluster_settings_are_withheld_from_pods():
    for name in (
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ENDPOINT_URL",
        "TF_CONFIG",
        "KUBECONFIG",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "KUBERNETES_SERVICE_HOST",
    ):
        assert pod_env.WITHHELD_ENV.match(name), name
    for name in ("PATH", "PYTHONPATH", "HOME", "TF_DETERMINISTIC_OPS"):
        assert not pod_env.WITHHELD_ENV.match(name), name


class _Core:
    """No Secrets or ConfigMaps: a pod of these tests reads none."""


def _jobset_pod(ports=(2222,)):
    """Pod 1 of Job ``train-node-0`` of JobSet ``train`` as the Job controller makes it."""
    from kubernetes import client

    index = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    container = client.V1Container(
        name="node",
        image="i",
        env=[
            client.V1EnvVar(
                name="JOB_COMPLETION_INDEX",
                value_from=client.V1EnvVarSource(
                    field_ref=client.V1ObjectFieldSelector(field_path=index)
                ),
            ),
            client.V1EnvVar(name="PEER", value="train-node-0-0.train.team.svc:2222"),
        ],
        ports=[client.V1ContainerPort(container_port=p) for p in ports],
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name="train-node-0-1-x7k2p",
            namespace="team",
            uid="u1",
            labels={"jobset.sigs.k8s.io/jobset-name": "train"},
            annotations={"batch.kubernetes.io/job-completion-index": "1"},
            finalizers=["batch.kubernetes.io/job-tracking"],
        ),
        spec=client.V1PodSpec(
            containers=[container],
            hostname="train-node-0-1",
            subdomain="train",
            restart_policy="Never",
        ),
    )


_JOBSET = {
    "metadata": {"name": "train", "namespace": "team"},
    "spec": {
        "replicatedJobs": [
            {
                "name": "node",
                "replicas": 1,
                "template": {"spec": {"parallelism": 2, "completions": 2}},
            }
        ]
    },
}


def test_a_jobset_pod_gets_its_host_name_completion_index_and_address_table():
    ports = pod_env.ServicePorts()
    reads = []

    def jobsets(namespace, name):
        reads.append((namespace, name))
        return _JOBSET

    env_of = pod_env.PodEnvironment(_Core(), ports, jobsets)
    pod = _jobset_pod()
    env = env_of.environment(pod, pod.spec.containers[0])
    assert reads == [("team", "train")]
    assert env["HOSTNAME"] == "train-node-0-1"  # spec.hostname, not the pod's name
    assert env["JOB_COMPLETION_INDEX"] == "1"
    table = json.loads(env["SHARDTRAIN_LOCAL_ADDRESSES"])
    assert sorted(table) == ["train-node-0-0.train:2222", "train-node-0-1.train:2222"]
    # A peer's full name in the environment goes to the same local port as its table entry.
    assert env["PEER"] == table["train-node-0-0.train:2222"]
    # The pod recreated (a new uid, the same host name) gets the same table.
    again = env_of.environment(_jobset_pod(), pod.spec.containers[0])
    assert json.loads(again["SHARDTRAIN_LOCAL_ADDRESSES"]) == table


def test_a_jobset_pod_whose_jobset_cannot_be_read_waits_with_the_reason():
    from kubernetes.client.rest import ApiException

    def jobsets(namespace, name):
        raise ApiException(status=404, reason="Not Found")

    env_of = pod_env.PodEnvironment(_Core(), pod_env.ServicePorts(), jobsets)
    pod = _jobset_pod()
    with pytest.raises(pod_env.PodConfigError, match="JobSet team/train"):
        env_of.environment(pod, pod.spec.containers[0])
    # A pod of no JobSet needs no reader.
    pod.metadata.labels = {}
    env = pod_env.PodEnvironment(_Core(), pod_env.ServicePorts()).environment(
        pod, pod.spec.containers[0]
    )
    assert "SHARDTRAIN_LOCAL_ADDRESSES" not in env
