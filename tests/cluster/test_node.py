"""A real node (scripts/node-up) does what a cluster's node does: it becomes Ready, runs
containers of a local image, gives pods addresses and DNS names their peers resolve, lets them
reach this machine (Trainer's status server by its Service name, too), and stops them with
SIGTERM within the grace period."""

from __future__ import annotations

import base64
import ipaddress
import re
import socket
import threading
import time
import uuid

from cluster.nodes import Node


def _pod(name: str, image: str, script: str, **spec) -> dict:
    """A one-container pod of the busybox image running ``sh -c script``, never restarted."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **spec.pop("metadata", {})},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", script],
                    **spec.pop("container", {}),
                }
            ],
            **spec,
        },
    }


def _phase(*phases: str):
    return lambda pod: pod.get("status", {}).get("phase") in phases


def _terminated(pod: dict) -> dict:
    return pod["status"]["containerStatuses"][0]["state"].get("terminated") or {}


def test_node_is_ready_with_the_bridge_address_and_containerd(node: Node) -> None:
    info = node.get("node", node.name, "")
    ready = {c["type"]: c["status"] for c in info["status"]["conditions"]}
    addresses = {a["type"]: a["address"] for a in info["status"]["addresses"]}

    assert ready["Ready"] == "True"
    assert addresses["InternalIP"] == node.gateway
    assert info["status"]["nodeInfo"]["containerRuntimeVersion"] == "containerd://2.4.2"
    assert info["status"]["nodeInfo"]["kubeletVersion"] == "v1.36.3"
    assert not [t for t in info["spec"].get("taints", []) if t["effect"] == "NoSchedule"]


def test_pod_runs_to_success_and_its_logs_come_through_kubectl(node: Node) -> None:
    ns = node.namespace()
    node.apply(ns, _pod("hello", node.image, 'echo "hello from $(hostname) uid $(id -u)"'))

    pod = node.wait_pod("hello", ns, _phase("Succeeded", "Failed"))
    logs = node.kubectl("logs", "hello", "-n", ns).stdout

    assert pod["status"]["phase"] == "Succeeded"
    assert pod["spec"]["nodeName"] == node.name
    assert _terminated(pod)["exitCode"] == 0
    assert logs == "hello from hello uid 0\n"


# Each peer serves its hostname on port 7000 and reads the other peer's by two names: JobSet's
# `<hostname>.<subdomain>` and the training operator's `<per-pod service>.<ns>.svc` (both
# through the search path, as TF_CONFIG's names are); it exits once its peer has read it twice.
_PEER = r"""
(n=0; while :; do
  echo "hello from $(hostname)" | nc -l -p 7000 && n=$((n+1)) && touch /tmp/served$n
done) &
for name in "$PEER.peers" "peer-$PEER.$NS.svc"; do
  for i in $(seq 60); do
    ip=$(ping -c1 -W1 "$name" 2>/dev/null | sed -n 's/^PING [^ ]* (\([0-9.]*\)).*/\1/p')
    reply=$(nc -w 2 "$name" 7000 </dev/null 2>/dev/null) && [ -n "$reply" ] && break
    sleep 1
  done
  echo "$name $ip $reply"
done
for i in $(seq 60); do [ -e /tmp/served2 ] && exit 0; sleep 1; done
exit 1
"""


def test_peers_behind_a_headless_service_resolve_and_reach_each_other(node: Node) -> None:
    ns = node.namespace()
    # As the controllers make them: JobSet's one service for all (publishNotReadyAddresses on
    # by default), the training operator's one per pod (without it).
    headless = {"clusterIP": "None", "ports": [{"name": "p", "port": 7000}]}
    objects = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "peers"},
            "spec": {**headless, "publishNotReadyAddresses": True, "selector": {"app": "peers"}},
        },
    ]
    for me, peer in (("a", "b"), ("b", "a")):
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": f"peer-{me}"},
                "spec": {**headless, "selector": {"peer": me}},
            }
        )
        objects.append(
            _pod(
                me,
                node.image,
                _PEER,
                hostname=me,
                subdomain="peers",
                metadata={"labels": {"app": "peers", "peer": me}},
                container={"env": [{"name": "PEER", "value": peer}, {"name": "NS", "value": ns}]},
            )
        )
    node.apply(ns, *objects)

    pods = {me: node.wait_pod(me, ns, _phase("Succeeded", "Failed")) for me in ("a", "b")}
    ips = {me: pod["status"]["podIP"] for me, pod in pods.items()}
    logs = {me: node.kubectl("logs", me, "-n", ns).stdout for me in ("a", "b")}

    subnet = ipaddress.ip_network(node.subnet)
    assert ips["a"] != ips["b"] and all(ipaddress.ip_address(ip) in subnet for ip in ips.values())
    for me, peer in (("a", "b"), ("b", "a")):
        assert pods[me]["status"]["phase"] == "Succeeded", logs[me]
        assert logs[me].splitlines() == [
            f"{peer}.peers {ips[peer]} hello from {peer}",
            f"peer-{peer}.{ns}.svc {ips[peer]} hello from {peer}",
        ]


def test_pod_reaches_a_server_on_the_node_address(node: Node) -> None:
    token = uuid.uuid4().hex
    seen: list[tuple[str, bytes]] = []
    server = socket.create_server((node.gateway, 0))
    server.settimeout(120)
    port = server.getsockname()[1]

    def serve() -> None:
        with server:
            conn, (peer, _) = server.accept()
            with conn:
                seen.append((peer, conn.recv(100)))
                conn.sendall(f"{token}\n".encode())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    ns = node.namespace()
    host_ip = {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}
    node.apply(
        ns,
        _pod(
            "client",
            node.image,
            f'echo ping | nc -w 10 "$HOST_IP" {port}',
            container={"env": [host_ip]},
        ),
    )

    pod = node.wait_pod("client", ns, _phase("Succeeded", "Failed"))
    thread.join(timeout=10)

    assert pod["status"]["hostIP"] == node.gateway
    assert seen == [(pod["status"]["podIP"], b"ping\n")]
    assert node.kubectl("logs", "client", "-n", ns).stdout == f"{token}\n"


def test_delete_with_grace_period_delivers_sigterm_and_exit_143(node: Node) -> None:
    ns = node.namespace()
    # A finalizer keeps the pod object (and the status the kubelet wrote last) after the
    # kubelet has stopped it and deleted it.
    script = (
        "trap 'echo got SIGTERM >/dev/termination-log; exit 143' TERM; echo started; "
        "while :; do sleep 1 & wait $!; done"
    )
    node.apply(
        ns,
        _pod(
            "victim",
            node.image,
            script,
            terminationGracePeriodSeconds=60,
            metadata={"finalizers": ["shardtrain.test/keep"]},
        ),
    )
    node.wait_pod(
        "victim",
        ns,
        lambda p: node.kubectl("logs", "victim", "-n", ns, check=False).stdout == "started\n",
    )

    node.kubectl("delete", "pod", "victim", "-n", ns, "--grace-period=30", "--wait=false")
    pod = node.wait_pod("victim", ns, lambda p: bool(_terminated(p)), timeout=60)
    node.kubectl(
        "patch",
        "pod",
        "victim",
        "-n",
        ns,
        "--type=json",
        "-p",
        '[{"op": "remove", "path": "/metadata/finalizers"}]',
    )

    terminated = _terminated(pod)
    assert terminated["exitCode"] == 143  # its own exit, not the kubelet's SIGKILL (137)
    assert terminated["message"] == "got SIGTERM\n"
    assert pod["status"]["phase"] == "Failed"


# Pings each name in $NAMES until it answers (at most 60 s each) and prints `<name> <address>`;
# then stays up a while, so a peer that started later still finds it (a finished pod is not
# Ready, and the operator's per-pod services publish Ready pods only).
_PING_PEERS = r"""
for name in $NAMES; do
  for i in $(seq 60); do
    ip=$(ping -c1 -W1 "$name" 2>/dev/null | sed -n 's/^PING [^ ]* (\([0-9.]*\)).*/\1/p')
    [ -n "$ip" ] && ping -c1 -W1 "$ip" >/dev/null 2>&1 && break
    sleep 1
  done
  echo "$name $ip"
done
sleep 10
"""


def _container(name: str, image: str, names: str) -> dict:
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", _PING_PEERS],
        "env": [{"name": "NAMES", "value": names}],
    }


_INDEX = "batch.kubernetes.io/job-completion-index"  # the Job controller's pod label


def _pod_name(node: Node, ns: str, selector: str, timeout: float = 60) -> str:
    """The name of the first pod the selector matches, once there is one."""
    deadline = time.monotonic() + timeout
    while True:
        out = node.kubectl("get", "pods", "-n", ns, "-l", selector, "-o", "name").stdout.split()
        if out:
            return out[0].removeprefix("pod/")
        assert time.monotonic() < deadline, f"no pod matches {selector} in {ns} after {timeout} s"
        time.sleep(0.5)


def test_tfjob_and_jobset_pods_reach_each_other_by_the_names_their_controllers_give(
    node: Node,
) -> None:
    ns = node.namespace()
    # The names TF_CONFIG lists (training operator) and JobSet's pod DNS names.
    tf_names = f"tj-chief-0.{ns}.svc tj-worker-0.{ns}.svc"
    js_names = "js-node-0-0.js js-node-0-1.js"
    replica = {
        "replicas": 1,
        "restartPolicy": "Never",
        "template": {"spec": {"containers": [_container("tensorflow", node.image, tf_names)]}},
    }
    tfjob = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "tj"},
        "spec": {"tfReplicaSpecs": {"Chief": replica, "Worker": replica}},
    }
    job = {
        "parallelism": 2,
        "completions": 2,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [_container("node", node.image, js_names)],
            }
        },
    }
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": job}}]},
    }
    node.apply(ns, tfjob, jobset)

    done = _phase("Succeeded", "Failed")
    tf_pods = {n: node.wait_pod(n, ns, done) for n in ("tj-chief-0", "tj-worker-0")}
    js_pods = {}
    for index in (0, 1):
        selector = f"jobset.sigs.k8s.io/jobset-name=js,{_INDEX}={index}"
        js_pods[f"js-node-0-{index}"] = node.wait_pod(_pod_name(node, ns, selector), ns, done)

    for pods, names in ((tf_pods, tf_names), (js_pods, js_names)):
        ips = [pods[name.split(".")[0]]["status"]["podIP"] for name in names.split()]
        expected = [f"{name} {ip}" for name, ip in zip(names.split(), ips, strict=True)]
        for pod in pods.values():
            assert pod["status"]["phase"] == "Succeeded"
            logs = node.kubectl("logs", pod["metadata"]["name"], "-n", ns).stdout
            assert logs.splitlines() == expected


# Trainer's status server by the name in KUBEFLOW_TRAINER_SERVER_URL: resolved, verified with
# the CA Trainer hands to trainer pods, answered (403: a POST without a token); the same server
# by the gateway's address is refused by the hostname check (verification is on).
_TRAINER_STATUS = r"""
import json, os, socket, ssl, urllib.error, urllib.request
name, port, gateway = os.environ["NAME"], os.environ["PORT"], os.environ["GATEWAY"]
print(socket.gethostbyname(name))
context = ssl.create_default_context(cafile="/trainer-ca/ca.crt")
path = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/x/trainjobs/x/status"
for host in (name, gateway):
    request = urllib.request.Request(f"https://{host}:{port}{path}", data=b"{}", method="POST")
    try:
        urllib.request.urlopen(request, context=context, timeout=10)
        print(host, 200)
    except urllib.error.HTTPError as exc:
        print(host, exc.code, json.load(exc).get("reason"))
    except urllib.error.URLError as exc:
        print(host, type(exc.reason).__name__)
"""


def test_pod_reaches_trainers_status_server_by_its_service_name_over_verified_tls(
    node: Node, image: str
) -> None:
    """scripts/node-up's headless Service: the name Trainer gives trainer pods resolves to the
    node's gateway, where k8s-up's status server listens, and its certificate verifies with
    Trainer's CA for that name (what a chief's progress reports need)."""
    ca = node.kubectl(
        "get", "secret", "kubeflow-trainer-webhook-cert", "-n", "kubeflow-system",
        "-o", r"jsonpath={.data.ca\.crt}",
    ).stdout  # fmt: skip
    port = re.search(r"^TRAINER_STATUS_PORT=(\d+)$", (node.state_dir / "env").read_text(), re.M)
    name = "kubeflow-trainer-controller-manager.kubeflow-system.svc"
    ns = node.namespace()
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "trainer-ca"},
        "data": {"ca.crt": base64.b64decode(ca).decode()},
    }
    env = {"NAME": name, "PORT": port.group(1), "GATEWAY": node.gateway}
    pod = _pod(
        "status-client",
        image,
        "",
        volumes=[{"name": "ca", "configMap": {"name": "trainer-ca"}}],
        container={
            "command": ["python3", "-c", _TRAINER_STATUS],
            "env": [{"name": k, "value": v} for k, v in env.items()],
            "volumeMounts": [{"name": "ca", "mountPath": "/trainer-ca"}],
        },
    )
    node.apply(ns, configmap, pod)

    pod = node.wait_pod("status-client", ns, _phase("Succeeded", "Failed"), timeout=180)
    logs = node.kubectl("logs", "status-client", "-n", ns).stdout

    assert pod["status"]["phase"] == "Succeeded", logs
    assert logs.splitlines() == [
        node.gateway,
        f"{name} 403 Forbidden",
        f"{node.gateway} SSLCertVerificationError",
    ]
