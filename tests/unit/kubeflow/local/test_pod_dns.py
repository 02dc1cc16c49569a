"""The node agent's stand-in for cluster DNS: service and pod addresses → local ports, and the
address table of a JobSet's pods."""

from __future__ import annotations

import json

from shardtrain.kubeflow.local import pod_dns


def test_service_addresses_map_to_one_loopback_port_each_and_keep_it():
    ports = pod_dns.ServicePorts()
    tf_config = json.dumps(
        {
            "cluster": {
                "chief": ["j-chief-0.team.svc:2222"],
                "worker": ["j-worker-0.team.svc:2222", "j-worker-1.team.svc.cluster.local:2222"],
            },
            "task": {"type": "worker", "index": 1},
        }
    )
    first = json.loads(ports.localise(tf_config))
    again = json.loads(ports.localise(tf_config))
    assert first == again  # a recreated pod gets the same ports
    addresses = first["cluster"]["chief"] + first["cluster"]["worker"]
    assert all(a.startswith("127.0.0.1:") for a in addresses)
    assert len(set(addresses)) == 3
    # Another namespace or port is another service.
    other = ports.localise("j-chief-0.other.svc:2222 j-chief-0.team.svc:2223")
    assert first["cluster"]["chief"][0] not in other
    assert ports.localise("no address here: example.com:80") == "no address here: example.com:80"


def _jobset(**network):
    """A JobSet of a 2-pod Indexed replicated job ``node`` and 2 one-pod Jobs ``ps``."""
    return {
        "metadata": {"name": "train", "namespace": "team"},
        "spec": {
            "network": network,
            "replicatedJobs": [
                {
                    "name": "node",
                    "replicas": 1,
                    "template": {"spec": {"parallelism": 2, "completions": 2}},
                },
                {"name": "ps", "replicas": 2, "template": {"spec": {}}},
            ],
        },
    }


def test_a_jobset_names_a_host_per_job_and_completion_index():
    assert list(pod_dns.jobset_hostnames(_jobset())) == [
        "train-node-0-0",
        "train-node-0-1",
        "train-ps-0-0",
        "train-ps-1-0",
    ]
    only_parallelism = {
        "metadata": {"name": "j"},
        "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"parallelism": 3}}}]},
    }
    assert list(pod_dns.jobset_hostnames(only_parallelism)) == ["j-w-0-0", "j-w-0-1", "j-w-0-2"]


def test_the_address_table_maps_every_host_and_port_to_a_local_port_of_its_own():
    ports = pod_dns.ServicePorts()
    table = pod_dns.address_table(_jobset(), [2222, 8470], ports)
    hosts = ["train-node-0-0", "train-node-0-1", "train-ps-0-0", "train-ps-1-0"]
    assert sorted(table) == sorted(f"{h}.train:{p}" for h in hosts for p in (2222, 8470))
    assert all(a.startswith("127.0.0.1:") for a in table.values())
    assert len(set(table.values())) == len(table)  # one local port per name and port
    # Every pod of the JobSet (and a recreated one) gets the same table for the agent's life.
    assert pod_dns.address_table(_jobset(), [8470, 2222], ports) == table
    json.dumps(table)  # it travels as JSON in SHARDTRAIN_LOCAL_ADDRESSES
    # The JobSet's own subdomain, or the pod's, names the hosts.
    custom = pod_dns.address_table(_jobset(subdomain="net"), [2222], ports)
    assert "train-node-0-1.net:2222" in custom
    assert pod_dns.address_table(_jobset(), [2222], ports, subdomain="x").keys() == {
        f"{h}.x:2222" for h in hosts
    }
    # A pod's full DNS name written in its environment maps to its table entry's local port.
    local = ports.localise("train-node-0-1.train.team.svc.cluster.local:2222")
    assert local == table["train-node-0-1.train:2222"]
    # Another namespace is another pod.
    other = {**_jobset(), "metadata": {"name": "train", "namespace": "other"}}
    assert (
        pod_dns.address_table(other, [2222], ports)["train-node-0-0.train:2222"]
        != (table["train-node-0-0.train:2222"])
    )


def test_trainers_status_server_maps_to_the_port_k8s_up_gave_it(tmp_path, monkeypatch):
    """Trainer names its status server by its Service and port; the agent routes that name to
    the port k8s-up wrote into its state ``env`` file, next to the kubeconfig."""
    (tmp_path / "kubeconfig").write_text("apiVersion: v1\n")
    (tmp_path / "env").write_text("API_PORT=6443\nTRAINER_STATUS_PORT=41234\nKUEUE=true\n")
    services = pod_dns.control_plane_services(str(tmp_path / "kubeconfig"))
    assert services == {("kubeflow-system", "kubeflow-trainer-controller-manager", 41234): 41234}
    ports = pod_dns.ServicePorts(services)
    url = (
        "https://kubeflow-trainer-controller-manager.kubeflow-system.svc:41234"
        "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/quest/status"
    )
    assert ports.localise(url) == url.replace(
        "kubeflow-trainer-controller-manager.kubeflow-system.svc", "127.0.0.1"
    )
    # Other services still get ports of their own; $KUBECONFIG is the default kubeconfig.
    assert ports.localise("j-chief-0.team.svc:41234") != "127.0.0.1:41234"
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    assert pod_dns.control_plane_services(None) == services
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "elsewhere" / "config"))
    assert pod_dns.control_plane_services(None) == {}
