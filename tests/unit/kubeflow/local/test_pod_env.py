"""A pod's container as a local command: service addresses, ``$(VAR)`` expansion and the
variables pods never inherit."""

from __future__ import annotations

import json

from shardtrain.kubeflow.local import pod_env


def test_service_addresses_map_to_one_loopback_port_each_and_keep_it():
    ports = pod_env.ServicePorts()
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
