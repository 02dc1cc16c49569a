"""The node agent's own logic (no API server): service addresses, ``$(VAR)`` expansion,
quantities, withheld variables and log reading. The agent against a live control plane is
tested in tests/integration/test_k8s_operator.py."""

from __future__ import annotations

import json

from shardtrain.kubeflow import node


def test_service_addresses_map_to_one_loopback_port_each_and_keep_it():
    ports = node.ServicePorts()
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
    assert node._expand("$(A)-$(B)", env) == "1-x y"
    assert node._expand("$(MISSING) $$(A) $$", env) == "$(MISSING) $(A) $"


def test_quantities():
    assert node._quantity("500m") == 0.5
    assert node._quantity("2") == 2
    assert node._quantity("16Gi") == 16 * 2**30
    assert node._quantity("1k") == 1000


def test_credentials_and_cluster_settings_are_withheld_from_pods():
    for name in (
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ENDPOINT_URL",
        "TF_CONFIG",
        "KUBECONFIG",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "KUBERNETES_SERVICE_HOST",
    ):
        assert node.WITHHELD_ENV.match(name), name
    for name in ("PATH", "PYTHONPATH", "HOME", "TF_DETERMINISTIC_OPS"):
        assert not node.WITHHELD_ENV.match(name), name


def test_log_reading_tails_and_follows_until_the_process_ended(tmp_path):
    path = tmp_path / "c.log"
    path.write_bytes(b"one\ntwo\nthree\n")
    assert b"".join(node._read_log(path, tail=2, follow=False, ended=lambda: True)) == (
        b"two\nthree\n"
    )
    assert b"".join(node._read_log(path, tail=0, follow=False, ended=lambda: True)) == b""
    calls = []

    def ended() -> bool:  # the process writes one more line, then ends
        calls.append(1)
        if len(calls) == 1:
            with open(path, "ab") as f:
                f.write(b"four\n")
        return len(calls) > 2

    out = b"".join(node._read_log(path, tail=None, follow=True, ended=ended))
    assert out == b"one\ntwo\nthree\nfour\n"
