"""A node agent for tests and local runs: runs the pods of a Kubernetes control plane as local
processes (a stand-in for the scheduler and the kubelet, not for production clusters).

With ``scripts/k8s-up`` (etcd, kube-apiserver, kube-controller-manager, the Kubeflow training
operator, JobSet and Kubeflow Trainer on 127.0.0.1) and this agent, a TFJob or a TrainJob runs
on one machine exactly as the controllers drive it on a cluster: the training operator creates
a TFJob's pods and services and writes TF_CONFIG; Trainer makes a TrainJob's JobSet, JobSet its
Indexed Jobs, the Job controller their pods; the controllers decide restarts, success and
failure; the agent plays the part of the scheduler and the kubelet::

    eval "$(scripts/k8s-up)"            # export KUBECONFIG=...
    shardtrain node run &               # this agent
    shardtrain tfjob submit --namespace default --data ... --model-dir ...

What :class:`NodeAgent` does, as a kubelet (and the scheduler) would:

* registers a Node (``Ready``, address 127.0.0.1, its log endpoint as the kubelet port);
* binds every pending pod that asks for no resource the node lacks (a GPU) and whose node
  selector matches;
* starts the pod's container command and args (``$(VAR)`` expanded) as a local process in a
  new session, with the container's environment: plain values, ``secretKeyRef`` and
  ``configMapKeyRef`` read from the API server, ``fieldRef`` (name, namespace, labels …) and
  ``envFrom``;
* writes the ``projected``, ``configMap`` and ``secret`` volumes the container mounts
  (service-account tokens from the TokenRequest API, e.g. the one Trainer's status server
  wants) into the pod's directory (:mod:`.volumes`);
* reports the pod's status through the status subresource: phase, conditions, ``podIP``,
  ``containerStatuses`` with the running state or the exit code (128 + signal for a process
  killed by a signal; a Job's ``podFailurePolicy`` and JobSet's failure policy go by it);
  restarts the process in place under ``restartPolicy`` ``Always``/``OnFailure``, never under
  ``Never`` (Jobs' pods: the Job controller makes a new pod instead);
* serves ``/containerLogs/<namespace>/<pod>/<container>`` (``follow``, ``tailLines``,
  ``limitBytes``) over TLS to the API server, which authenticates with its kubelet client
  certificate (signed by the cluster CA), so ``kubectl logs`` and the kubeflow-training SDK's
  ``get_job_logs`` work;
* stops the process of a pod being deleted (by a controller, the garbage collector, a user:
  SIGTERM to its process group, SIGKILL after the grace period), reports its exit code and
  finalises the deletion (grace period 0); a pod then held by a finalizer (the Job
  controller's ``batch.kubernetes.io/job-tracking``) is left to its controller;
* fails a pod whose command cannot be started (not found, not executable, working directory
  unusable) as containerd does: exit code 128, reason ``StartError``; one pod's trouble (a
  failed binding or start) never holds up the others, and pods with scheduling gates wait;
* keeps pod logs and working directories under ``log_dir`` (mode 0700, logs 0600); stops
  all containers at once (SIGTERM, one grace period, SIGKILL) when it exits, on a signal or
  after the API server has not answered for ``give_up_seconds``.

What differs from a kubelet:

* The image is ignored: the command runs in this machine's environment (this Python
  environment's ``shardtrain``: the image's entrypoint ``shardtrain`` and ``python`` map to
  this interpreter, see :func:`shardtrain.kubeflow.pods.local_argv`). Nothing is mounted:
  environment values and arguments that start with a mount path are rewritten to the
  volume's directory (:mod:`.volumes`); other volume types, resources and security settings
  are not applied. A pod must have exactly one container and no init containers (TFJob pods
  have one, ``tensorflow``).
* There is one network: every pod's IP is 127.0.0.1. Service host names in the environment and
  arguments (``<service>.<namespace>.svc[.cluster.local]:<port>``, e.g. in the operator's
  TF_CONFIG) are rewritten to ``127.0.0.1:<port of its own>``; each service name and port
  keeps its local port for the agent's lifetime, so a recreated pod finds its peers again.
  A JobSet's pods get an address table (``SHARDTRAIN_LOCAL_ADDRESSES``) mapping every pod
  host name of their JobSet to a local port instead of cluster DNS (:mod:`.pod_dns`).
  Services of k8s-up's controllers (Trainer's status server) map to their real ports, read
  from k8s-up's ``env`` file next to the kubeconfig.
* The process inherits this agent's environment except storage credentials and cluster
  settings (``AWS_*``, ``GOOGLE_APPLICATION_CREDENTIALS``, ``TF_CONFIG``, ``KUBECONFIG``
  …): a pod gets those only from its spec, as on a cluster.

Its parts: this module (the Node, binding, the pods' life cycle and status);
:mod:`.pod_env` (a container's environment and command line here); :mod:`.pod_dns` (local
addresses for host names); :mod:`.containers` (the processes, and stopping them);
:mod:`.pod_logs` (the log endpoint); :mod:`.volumes` (the volumes it writes).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import tempfile
import threading
import time
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardtrain.errors import ShardtrainError, one_line
from shardtrain.kubeflow.local.containers import Container, now, pod_status, stop_all
from shardtrain.kubeflow.local.pod_dns import ServicePorts, control_plane_services
from shardtrain.kubeflow.local.pod_env import JobSetReader, PodConfigError, PodEnvironment
from shardtrain.kubeflow.local.pod_logs import LogEndpoint
from shardtrain.kubeflow.local.volumes import PodVolumes
from shardtrain.kubeflow.pods import quantity

log = logging.getLogger(__name__)

_NODE_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage")


class NodeError(ShardtrainError):
    """The node agent cannot reach or register with the API server."""


@dataclass(frozen=True)
class NodeConfig:
    """How the node agent runs.

    Attributes:
        name: the Node's name.
        kubeconfig: kubeconfig file (default: ``$KUBECONFIG``, then ``~/.kube/config``).
        log_dir: where container logs and pods' working directories go (default: a new
            temporary directory, deleted on exit).
        port: the log endpoint's port on 127.0.0.1 (0: a free one).
        poll_seconds: how often pods are listed and processes checked.
        cpu: the Node's CPU capacity (default: this machine's cores).
        memory: the Node's memory capacity, e.g. ``16Gi`` (default: this machine's).
        extended_resources: extra capacity, e.g. ``{"nvidia.com/gpu": "1"}`` (pods asking
            for a resource the node lacks stay Pending, as with a scheduler).
        give_up_seconds: the agent stops its containers and exits (:class:`NodeError`) after
            this long with every sync failing (the API server is gone).
        stop_grace_seconds: on exit, how long the containers get between SIGTERM and SIGKILL
            (all of them at once).
    """

    name: str = "shardtrain-node"
    kubeconfig: str | None = None
    log_dir: str | None = None
    port: int = 0
    poll_seconds: float = 0.3
    cpu: str | None = None
    memory: str | None = None
    extended_resources: Mapping[str, str] = field(default_factory=dict)
    give_up_seconds: float = 60.0
    stop_grace_seconds: float = 10.0


class NodeAgent:
    """Registers a Node and runs the pods bound to it; see the module documentation."""

    def __init__(
        self, cfg: NodeConfig, *, core: Any = None, jobsets: JobSetReader | None = None
    ) -> None:
        """``core``: a ``CoreV1Api`` to use instead of one from the kubeconfig (tests drive
        :meth:`_sync` with one; the log endpoint then cannot be served), ``jobsets`` a reader
        of JobSet objects to go with it."""
        from kubernetes import client, config

        self.cfg = cfg
        if core is not None:
            self._ca_pem = ""
            self.core = core
        else:
            try:
                api_client = config.new_client_from_config(config_file=cfg.kubeconfig)
            except Exception as exc:  # ConfigException, OSError, yaml errors
                raise NodeError(f"no usable kubeconfig ({exc})") from exc
            self._ca_pem = _cluster_ca(api_client)
            self.core = client.CoreV1Api(api_client)
            custom = client.CustomObjectsApi(api_client)

            def read_jobset(namespace: str, name: str) -> Any:
                return custom.get_namespaced_custom_object(
                    "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", name, _request_timeout=30
                )

            jobsets = jobsets or read_jobset
        self._own_log_dir = cfg.log_dir is None
        self.log_dir = Path(cfg.log_dir or tempfile.mkdtemp(prefix="shardtrain-node-"))
        # Logs and working directories of pods (their output may hold secrets): owner only.
        self.log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._containers: dict[str, Container] = {}
        self._pods: dict[tuple[str, str], Any] = {}  # (uid, resourceVersion) -> V1Pod
        # With a kubeconfig of scripts/k8s-up: its controllers' Services map to their ports.
        services = control_plane_services(cfg.kubeconfig) if core is None else {}
        for (ns, svc, port), local in services.items():
            log.info("node %s: %s.%s.svc:%d is 127.0.0.1:%d", cfg.name, svc, ns, port, local)
        self._pod_env = PodEnvironment(self.core, ServicePorts(services), jobsets)
        self._volumes = PodVolumes(self.core)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._logs = LogEndpoint(cfg.name, self.log_dir, self._ca_pem, self._runs)
        self.port = cfg.port

    # ---- life cycle -------------------------------------------------------------------------

    def run(self) -> None:
        """Serve logs, register the Node and run pods until :meth:`stop` (or SIGTERM/SIGINT)."""
        self._serve_logs()
        self._register()
        log.info("node %s: ready, log endpoint https://127.0.0.1:%d", self.cfg.name, self.port)
        failing_since: float | None = None
        try:
            while not self._stop.is_set():
                try:
                    self._sync()
                    failing_since = None
                except Exception as exc:  # the API server restarting must not end the agent
                    log.warning("node %s: sync failed: %s", self.cfg.name, one_line(exc))
                    now = time.monotonic()
                    failing_since = now if failing_since is None else failing_since
                    if (
                        now - failing_since >= self.cfg.give_up_seconds
                    ):  # but its going for good does
                        raise NodeError(
                            f"node {self.cfg.name}: the API server has not answered for "
                            f"{now - failing_since:.0f} s ({one_line(exc)}); stopping"
                        ) from exc
                self._stop.wait(self.cfg.poll_seconds)
        finally:
            self._shutdown()

    def stop(self) -> None:
        self._stop.set()

    def _shutdown(self) -> None:
        with self._lock:
            running = [c for c in self._containers.values() if c.poll() is None and c.proc]
        stop_all(running, self.cfg.stop_grace_seconds)
        self._logs.stop()
        with contextlib.suppress(Exception):
            self.core.delete_node(self.cfg.name, _request_timeout=5)
        if self._own_log_dir:
            import shutil

            shutil.rmtree(self.log_dir, ignore_errors=True)
        log.info("node %s: stopped", self.cfg.name)

    # ---- the Node -----------------------------------------------------------------------------

    def _capacity(self) -> dict[str, str]:
        cpu = self.cfg.cpu or str(os.cpu_count() or 1)
        if self.cfg.memory:
            memory = self.cfg.memory
        else:
            pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            memory = f"{pages // 1024}Ki"
        return {"cpu": cpu, "memory": memory, "pods": "110", **dict(self.cfg.extended_resources)}

    def _register(self) -> None:
        from kubernetes.client.rest import ApiException

        name = self.cfg.name
        labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "shardtrain.io/node-agent": "true",
        }
        try:
            with contextlib.suppress(ApiException):
                self.core.delete_node(name)  # a stale registration of an earlier run
            self.core.create_node({"metadata": {"name": name, "labels": labels}})
        except ApiException as exc:
            raise NodeError(f"cannot register node {name}: {one_line(exc)}") from exc
        except Exception as exc:  # urllib3 connection errors
            raise NodeError(f"cannot reach the API server: {one_line(exc)}") from exc
        capacity = self._capacity()
        stamp = now()
        status = {
            "capacity": capacity,
            "allocatable": capacity,
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "shardtrain node agent is running pods as local processes",
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": stamp,
                }
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "shardtrain-node",
                "kubeProxyVersion": "",
                "containerRuntimeVersion": "local-process://",
                "osImage": "",
                "kernelVersion": os.uname().release,
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        }
        self.core.patch_node_status(name, {"status": status})

    # ---- the loop ------------------------------------------------------------------------------

    def _list_pods(self) -> list[Any]:
        """Every pod of the cluster, as client objects; only those changed since the last
        list (by uid and resourceVersion) are deserialised. The client's deserialisation of
        every pod, three times a second, was the agent's CPU: 220 CPU-s in one run of the
        suite, whose finished pods stay listed."""
        raw = self.core.list_pod_for_all_namespaces(_request_timeout=30, _preload_content=False)
        pods: dict[tuple[str, str], Any] = {}
        for item in json.loads(raw.data)["items"]:
            key = (item["metadata"]["uid"], item["metadata"].get("resourceVersion", ""))
            pod = self._pods.get(key)
            if pod is None:
                reply = types.SimpleNamespace(data=json.dumps(item))
                pod = self.core.api_client.deserialize(reply, "V1Pod")
            pods[key] = pod
        self._pods = pods
        return list(pods.values())

    def _sync(self) -> None:
        pods = self._list_pods()
        seen = set()
        for pod in pods:
            seen.add(pod.metadata.uid)
            try:  # one pod's trouble must not keep the others waiting
                self._sync_pod(pod)
            except Exception as exc:
                log.warning(
                    "pod %s/%s: %s", pod.metadata.namespace, pod.metadata.name, one_line(exc)
                )
        with self._lock:  # pods deleted by someone else with grace period 0
            gone = [c for uid, c in self._containers.items() if uid not in seen]
        for c in gone:
            if c.poll() is None and c.proc is not None and not c.stopping:
                c.stopping = True
                threading.Thread(target=self._kill, args=(c, 0), daemon=True).start()
            if c.poll() is not None or c.proc is None:
                with self._lock:
                    self._containers.pop(c.uid, None)

    def _sync_pod(self, pod: Any) -> None:
        if not pod.spec.node_name:
            if pod.metadata.deletion_timestamp is None:
                self._maybe_bind(pod)
            return
        if pod.spec.node_name != self.cfg.name:
            return
        if pod.metadata.deletion_timestamp is not None:
            self._delete(pod)
            return
        self._step(pod)

    def _maybe_bind(self, pod: Any) -> None:
        """Bind a pending pod to this node, as the scheduler would (or say why not)."""
        if getattr(pod.spec, "scheduling_gates", None):
            return  # the scheduler leaves a gated pod alone until its gates are removed
        reason = self._unschedulable(pod)
        ns, name = pod.metadata.namespace, pod.metadata.name
        if reason:
            cond = {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": reason,
            }
            current = [c for c in (pod.status.conditions or []) if c.type == "PodScheduled"]
            if not current or current[0].message != reason:
                log.warning("pod %s/%s: not scheduled: %s", ns, name, reason)
                self._patch_status(pod, {"conditions": [cond]}, merge=True)
            return
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "uid": pod.metadata.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.cfg.name},
        }
        from kubernetes.client.rest import ApiException

        try:  # the client cannot deserialise the (empty) reply: keep it raw
            self.core.create_namespaced_pod_binding(name, ns, body, _preload_content=False)
            log.info("pod %s/%s: bound to %s", ns, name, self.cfg.name)
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise

    def _unschedulable(self, pod: Any) -> str:
        capacity = self._capacity()
        labels = {
            "kubernetes.io/hostname": self.cfg.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }
        for key, value in (pod.spec.node_selector or {}).items():
            if labels.get(key) != value:
                return f"node {self.cfg.name} does not match the node selector {key}={value}"
        for c in pod.spec.containers:
            res = c.resources
            wanted = {**((res and res.requests) or {}), **((res and res.limits) or {})}
            for resource, amount in wanted.items():
                if resource in _NODE_RESOURCES or resource.startswith("hugepages-"):
                    continue
                if resource not in capacity or quantity(amount) > quantity(capacity[resource]):
                    return f"node {self.cfg.name} has no {amount} {resource}"
        return ""

    def _step(self, pod: Any) -> None:
        """Start, watch, restart and report the container of a pod bound here."""
        uid = pod.metadata.uid
        phase = pod.status.phase if pod.status else None
        with self._lock:
            c = self._containers.get(uid)
        if c is None:
            if phase in ("Succeeded", "Failed"):
                return  # finished before this agent started (or by an earlier run of it)
            c = self._start(pod)
            if c is None:
                return
        if c.start_error and c.reported != "terminated:128":
            self._report(pod, c)  # its failure to start was not reported yet
        if c.proc is None or c.stopping:
            return
        code = c.poll()
        if code is None:
            if c.reported != "running":
                self._report(pod, c)
            return
        if c.exit_code is None:
            c.exit_code, c.finished_at = code, now()
            log.info("pod %s/%s: exited with code %d", c.namespace, c.pod, code)
        policy = pod.spec.restart_policy or "Always"
        if policy == "Always" or (policy == "OnFailure" and code != 0):
            self._restart(pod, c)
            return
        if c.reported != f"terminated:{code}":
            self._report(pod, c)
            c.done.set()

    # ---- processes ----------------------------------------------------------------------------

    def _start(self, pod: Any) -> Container | None:
        ns, name, uid = pod.metadata.namespace, pod.metadata.name, pod.metadata.uid
        if len(pod.spec.containers) != 1 or pod.spec.init_containers:
            self._fail(pod, "Unsupported", "the node agent runs pods with exactly one container")
            return None
        spec = pod.spec.containers[0]
        pod_dir = self.log_dir / ns / name / uid
        pod_dir.mkdir(parents=True, exist_ok=True)
        c = Container(uid, ns, name, spec.name, pod_dir / f"{spec.name}-0.log")
        try:
            mounts = self._volumes.mount(pod, spec, pod_dir)
            env = self._pod_env.environment(pod, spec)
        except PodConfigError as exc:
            # As a kubelet: the pod stays Pending with the reason; retried on the next sync.
            waiting = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
            if pod.status.container_statuses is None or "ConfigError" not in str(
                pod.status.container_statuses
            ):
                log.warning("pod %s/%s: %s", ns, name, exc)
                self._patch_status(pod, pod_status(pod, c, state=waiting, phase="Pending"))
            return None
        env = {k: mounts.localise(v) for k, v in env.items()}  # the imitation of mounts
        argv = [mounts.localise(a) for a in self._pod_env.argv(spec, env)]
        c.argv, c.env, c.cwd = argv, env, pod_dir
        with self._lock:
            self._containers[uid] = c
        self._spawn(c)
        self._report(pod, c)
        return c

    def _spawn(self, c: Container) -> None:
        """Start the container's process; if it cannot start (no such command, working
        directory unusable), the container ends with code 128 and reason ``StartError``, as
        with containerd, and the pod fails (it is not restarted)."""
        c.log_path = c.log_path.with_name(f"{c.name}-{c.restarts}.log")
        c.started_at, c.exit_code, c.reported, c.start_error = now(), None, "", ""
        try:
            fd = os.open(c.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "ab") as out:
                c.proc = subprocess.Popen(
                    c.argv,
                    env=c.env,
                    cwd=c.cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: stopped as a whole
                )
        except (OSError, subprocess.SubprocessError) as exc:
            c.proc, c.exit_code, c.finished_at = None, 128, now()
            c.start_error = f"cannot start {c.argv[0] if c.argv else '(no command)'}: {exc}"
            log.warning("pod %s/%s: %s", c.namespace, c.pod, c.start_error)
            return
        log.info("pod %s/%s: started pid %d: %s", c.namespace, c.pod, c.proc.pid, c.log_path)

    def _restart(self, pod: Any, c: Container) -> None:
        c.last_terminated = {
            "terminated": {
                "exitCode": c.exit_code,
                "reason": "Completed" if c.exit_code == 0 else "Error",
                "startedAt": c.started_at,
                "finishedAt": c.finished_at,
            }
        }
        c.restarts += 1
        self._spawn(c)
        self._report(pod, c)

    def _kill(self, c: Container, grace: float) -> None:
        """SIGTERM the container's process group; SIGKILL it after ``grace`` seconds."""
        stop_all([c], grace)

    def _delete(self, pod: Any) -> None:
        """A pod being deleted: stop its process, then finalise the deletion."""
        uid = pod.metadata.uid
        with self._lock:
            c = self._containers.get(uid)
        if c is not None and c.proc is not None and c.poll() is None:
            if not c.stopping:
                c.stopping = True
                grace = pod.metadata.deletion_grace_period_seconds
                if grace is None:
                    grace = pod.spec.termination_grace_period_seconds or 30
                log.info("pod %s/%s: deleting; stopping pid %d", c.namespace, c.pod, c.proc.pid)
                threading.Thread(
                    target=self._stop_and_finalise, args=(pod, c, grace), daemon=True
                ).start()
            return
        if c is not None and c.stopping:
            return  # its stopping thread finalises
        meta = pod.metadata
        if c is None and meta.deletion_grace_period_seconds == 0 and meta.finalizers:
            return  # finalised; a finalizer (the Job controller's) holds it until its owner is done
        self._finalise(pod)

    def _stop_and_finalise(self, pod: Any, c: Container, grace: float) -> None:
        try:
            self._kill(c, grace)
            code = c.poll()
            if code is not None:
                c.exit_code, c.finished_at = code, now()
                with contextlib.suppress(Exception):
                    self._report(pod, c)
            self._finalise(pod)
        except Exception as exc:
            log.warning("pod %s/%s: deletion: %s", c.namespace, c.pod, one_line(exc))
        finally:
            c.stopping = False
            c.done.set()

    def _finalise(self, pod: Any) -> None:
        from kubernetes.client.rest import ApiException

        ns, name, uid = pod.metadata.namespace, pod.metadata.name, pod.metadata.uid
        try:
            self.core.delete_namespaced_pod(
                name,
                ns,
                grace_period_seconds=0,
                body={"preconditions": {"uid": uid}, "gracePeriodSeconds": 0},
            )
            log.info("pod %s/%s: deleted", ns, name)
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
        with self._lock:
            c = self._containers.get(uid)
            if c is None or c.poll() is not None or c.proc is None:
                self._containers.pop(uid, None)

    # ---- logs --------------------------------------------------------------------------------

    def _serve_logs(self) -> None:
        self.port = self._logs.start(self.cfg.port)

    def _runs(self, namespace: str, pod: str, container: str) -> list[Container]:
        """The runs of a pod's container this agent knows (for the log endpoint)."""
        with self._lock:
            return [
                c
                for c in self._containers.values()
                if c.namespace == namespace and c.pod == pod and c.name == container
            ]

    # ---- status ------------------------------------------------------------------------------

    def _report(self, pod: Any, c: Container) -> None:
        state, phase, tag = c.state()
        self._patch_status(pod, pod_status(pod, c, state=state, phase=phase))
        c.reported = tag

    def _fail(self, pod: Any, reason: str, message: str) -> None:
        log.warning("pod %s/%s: %s", pod.metadata.namespace, pod.metadata.name, message)
        status = {"phase": "Failed", "reason": reason, "message": message}
        if pod.status is not None and pod.status.qos_class:
            status["qosClass"] = pod.status.qos_class
        self._patch_status(pod, status)

    def _patch_status(self, pod: Any, status: dict[str, Any], *, merge: bool = False) -> None:
        from kubernetes.client.rest import ApiException

        # A JSON patch replaces the status as a whole (a strategic merge would keep the
        # container's old "running" next to its new "terminated").
        body: Any = (
            {"status": status} if merge else [{"op": "add", "path": "/status", "value": status}]
        )
        try:
            self.core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, body)
        except ApiException as exc:
            if exc.status not in (404, 409, 422):
                raise
            log.info("pod %s: status not updated: %s", pod.metadata.name, one_line(exc))


def _cluster_ca(api_client: Any) -> str:
    """The cluster CA (PEM) the API server's client certificates are signed by."""
    path = api_client.configuration.ssl_ca_cert
    if not path:
        raise NodeError("the kubeconfig names no certificate authority for the cluster")
    return Path(path).read_text()


def run(cfg: NodeConfig) -> None:
    """Run the node agent in the foreground until SIGTERM or SIGINT (``shardtrain node run``)."""
    agent = NodeAgent(cfg)

    def stop(signum: int, frame: Any) -> None:
        agent.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    agent.run()
