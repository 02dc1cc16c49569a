"""Submitting a TrainJob and waiting for it: the TrainJob's side of the shared machinery
(:mod:`shardtrain.kubeflow.jobs.submit`), through the Kubernetes client's custom-objects API
(the job is a plain manifest, see :mod:`.render`)."""

from __future__ import annotations

import datetime
import os
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

from shardtrain.errors import one_line
from shardtrain.kubeflow.jobs import manifests, submit
from shardtrain.kubeflow.jobs.logs import failed_pod_detail
from shardtrain.kubeflow.jobs.status import conditions_of
from shardtrain.kubeflow.jobs.submit import (
    ClusterError,
    JobExistsError,
    JobFailedError,
    SubmitResult,
)
from shardtrain.kubeflow.jobs.trainjob import spec as api


def is_queued(job: Any) -> bool:
    """True while a TrainJob waits in a queue: ``spec.suspend`` (Kueue has not admitted it,
    or preempted it) or the ``Suspended`` condition. A queued job has no pods."""
    if (job.get("spec") or {}).get("suspend"):
        return True
    return any(c.type == api.SUSPENDED and c.true for c in conditions_of(job))


#: How long Trainer may keep failing to create a TrainJob's JobSet with an admission error
#: (a webhook denied it: a broken runtime, not a passing hiccup) before the wait gives up.
REFUSED_GRACE_SECONDS = 30.0


#: Events older than the wait's start by more than this are another attempt's (and leave
#: room for a clock skew between this machine and the API server).
EVENT_SKEW_SECONDS = 60.0


def _event_time(event: Any) -> datetime.datetime | None:
    """When an event was last seen (core/v1 events carry it in one of three places)."""
    series = getattr(event, "series", None)
    for when in (
        getattr(series, "last_observed_time", None),
        getattr(event, "last_timestamp", None),
        getattr(event, "event_time", None),
    ):
        if when is not None:
            return when if when.tzinfo else when.replace(tzinfo=datetime.UTC)
    return None


class _Refusals:
    """Watches a TrainJob's Warning events for Trainer's ``TrainJobResourcesCreationFailed``
    with a denied admission, while the job has no JobSet: such a job never starts, so after
    :data:`REFUSED_GRACE_SECONDS` of it the wait ends with the reason instead of running into
    its timeout. Events from before this wait (an earlier, since fixed refusal) do not count."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.first: float | None = None
        self.since = datetime.datetime.now(datetime.UTC) - datetime.timedelta(
            seconds=EVENT_SKEW_SECONDS
        )

    def check(self, job: Any, events: list[Any]) -> None:
        if ((job.get("status") or {}).get("jobsStatus")) if isinstance(job, Mapping) else None:
            self.first = None  # Trainer has made the JobSet: whatever it was, it passed
            return
        denied = [
            e
            for e in events
            if e.reason == "TrainJobResourcesCreationFailed"
            and "denied" in (e.message or "")
            and (_event_time(e) or self.since) >= self.since
        ]
        if not denied:
            self.first = None
            return
        now = time.monotonic()
        self.first = self.first if self.first is not None else now
        if now - self.first >= REFUSED_GRACE_SECONDS:
            raise JobFailedError(
                f"{self.what} cannot start: Trainer cannot create its JobSet: "
                f"{' '.join(str(denied[-1].message).split())}"
            )


class TrainJobApi:
    """The TrainJob API for :func:`shardtrain.kubeflow.jobs.submit.submit_and_wait`. The
    chief is node 0: the pod of the ``node`` replicated job with completion index 0."""

    kind = api.KIND
    succeeded = api.COMPLETE
    failed = api.FAILED

    def __init__(self, custom: Any, core: Any) -> None:
        self.custom = custom
        self.core = core

    def _call(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.rest import ApiException

        try:
            return call(*args, **kwargs)
        except ApiException as exc:
            if exc.status == 409 and what == "create":
                raise JobExistsError(one_line(exc)) from exc
            raise RuntimeError(f"{what}: {one_line(exc)}") from exc
        except OSError as exc:  # urllib3's connection errors derive from it
            raise RuntimeError(f"{what}: {exc}") from exc

    def create(self, job: Any, namespace: str) -> None:
        self._call(
            "create", self.custom.create_namespaced_custom_object,
            api.GROUP, api.VERSION, namespace, api.PLURAL, job,
        )  # fmt: skip

    def get(self, name: str, namespace: str) -> Any:
        return self._call(
            "get", self.custom.get_namespaced_custom_object,
            api.GROUP, api.VERSION, namespace, api.PLURAL, name,
        )  # fmt: skip

    def wait(
        self, name: str, namespace: str, *, timeout: float, poll: float, callback: Any,
        request_timeout: int,
    ) -> Any:  # fmt: skip
        deadline = time.monotonic() + timeout
        refused = _Refusals(f"{api.KIND} {namespace}/{name}")
        while True:
            job = self.get(name, namespace)
            callback(job)
            conditions = conditions_of(job)
            if any(c.true and c.type in (self.succeeded, self.failed) for c in conditions):
                return job
            refused.check(job, self._warnings(name, namespace))
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"timeout after {timeout:g}s")
            time.sleep(min(poll, left))

    def _warnings(self, name: str, namespace: str) -> list[Any]:
        """The TrainJob's Warning events (Trainer records why it cannot create the JobSet)."""
        try:
            return self.core.list_namespaced_event(
                namespace,
                field_selector=(
                    f"involvedObject.kind={api.KIND},involvedObject.name={name},type=Warning"
                ),
            ).items
        except Exception:  # events only explain; never fail a wait for want of them
            return []

    def delete(self, name: str, namespace: str) -> None:
        self._call(
            "delete", self.custom.delete_namespaced_custom_object,
            api.GROUP, api.VERSION, namespace, api.PLURAL, name,
            propagation_policy="Foreground",
        )  # fmt: skip

    def is_queued(self, job: Any) -> bool:
        return is_queued(job)

    def same_job(self, existing: Any, job: Any) -> bool:
        """True when ``existing`` runs what ``job`` asks for: runtime, trainer settings, our
        pods' patches (without the time Trainer's webhook stamps on them; other managers'
        patches, such as the one Kueue's webhook adds to every TrainJob and fills on
        admission, are not ours to compare) and the queue."""

        def shape(obj: Mapping[str, Any]) -> tuple[Any, ...]:
            spec, meta = obj.get("spec") or {}, obj.get("metadata") or {}
            patches = [
                {k: v for k, v in p.items() if k != "time"}
                for p in spec.get("runtimePatches") or ()
                if p.get("manager") == api.PATCH_MANAGER
            ]
            return (
                spec.get("runtimeRef"),
                spec.get("trainer"),
                patches,
                (meta.get("labels") or {}).get(api.KUEUE_QUEUE_LABEL),
                (meta.get("annotations") or {}).get(api.VOLCANO_QUEUE_ANNOTATION),
            )

        return shape(existing) == shape(job)

    def _pods(self, name: str, namespace: str) -> list[Any]:
        return self._call(
            "list pods", self.core.list_namespaced_pod, namespace,
            label_selector=(
                f"{api.JOBSET_NAME_LABEL}={name},{api.REPLICATED_JOB_LABEL}={api.REPLICATED_JOB}"
            ),
        ).items  # fmt: skip

    def pods(self, name: str, namespace: str) -> list[Any]:
        return self._pods(name, namespace)

    def chief_pods(self, name: str, namespace: str) -> list[Any]:
        return [
            p
            for p in self._pods(name, namespace)
            if (p.metadata.annotations or {}).get(api.COMPLETION_INDEX_ANNOTATION) == "0"
        ]

    def failure_detail(self, name: str, namespace: str) -> str | None:
        pods = self._pods(name, namespace)
        return failed_pod_detail(self.core, pods, namespace, api.CONTAINER_NAME)

    def follow_chief_log(self, name: str, namespace: str) -> None:
        for pod in self.chief_pods(name, namespace):
            if pod.status is None or pod.status.phase != "Running":
                continue
            stream = self._call(
                "log", self.core.read_namespaced_pod_log, pod.metadata.name, namespace,
                container=api.CONTAINER_NAME, follow=True, _preload_content=False,
            )  # fmt: skip
            try:
                for raw in stream.stream():
                    for line in raw.decode("utf-8", "replace").splitlines():
                        print(f"[{pod.metadata.name}]: {line}", flush=True)
            finally:
                stream.release_conn()

    def chief_logs(self, name: str, namespace: str) -> dict[str, str]:
        return {
            p.metadata.name: self._call(
                "log",
                self.core.read_namespaced_pod_log,
                p.metadata.name,
                namespace,
                container=api.CONTAINER_NAME,
            )
            for p in self.chief_pods(name, namespace)
        }


def _clients() -> tuple[Any, Any]:
    """Custom-objects and core clients from kubeconfig or the in-cluster service account."""
    from kubernetes import client, config
    from kubernetes.config import ConfigException

    try:
        try:
            # KUBECONFIG as it is now: the client reads it only once, when first imported.
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
        except ConfigException:
            config.load_incluster_config()
    except (ConfigException, OSError) as exc:
        raise ClusterError(
            f"no Kubernetes configuration (kubeconfig or in-cluster): {exc}"
        ) from exc
    return client.CustomObjectsApi(), client.CoreV1Api()


def serves(group: str, version: str, plural: str, custom: Any | None = None) -> bool:
    """True when the cluster serves ``plural`` of ``group/version`` (API discovery, which
    every authenticated account may read)."""
    from kubernetes.client.rest import ApiException

    if custom is None:
        custom, _ = _clients()
    try:
        resources = custom.get_api_resources(group, version)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise ClusterError(
            f"cannot ask the cluster for {group}/{version}: {one_line(exc)}"
        ) from exc
    except OSError as exc:
        raise ClusterError(f"cannot reach the cluster: {exc}") from exc
    return any(r.name == plural for r in (resources.resources or ()))


def serves_trainjobs(custom: Any | None = None) -> bool:
    """True when the cluster serves ``trainer.kubeflow.org/v1alpha1`` TrainJobs."""
    return serves(api.GROUP, api.VERSION, api.PLURAL, custom)


def runtime_installed(name: str, custom: Any | None = None) -> bool | None:
    """Whether the ClusterTrainingRuntime ``name`` exists; None when this account may not
    read cluster-scoped runtimes (a namespaced launcher Role): Trainer's webhook then refuses
    a TrainJob naming a missing one, in one line, at creation."""
    from kubernetes.client.rest import ApiException

    if custom is None:
        custom, _ = _clients()
    try:
        custom.get_cluster_custom_object(api.GROUP, api.VERSION, "clustertrainingruntimes", name)
    except ApiException as exc:
        if exc.status == 404:
            return False
        if exc.status == 403:
            return None
        raise ClusterError(f"cannot read ClusterTrainingRuntime {name}: {one_line(exc)}") from exc
    except OSError as exc:
        raise ClusterError(f"cannot reach the cluster: {exc}") from exc
    return True


def submit_and_wait(
    job: Mapping[str, Any],
    *,
    wait_timeout: float = 86400,
    poll_interval: float = 15,
    stream_logs: bool = True,
    delete_after: bool = False,
    clients: tuple[Any, Any] | None = None,
    request_timeout: int = 120,
    out: TextIO | None = None,
) -> SubmitResult:
    """Create a TrainJob (or attach to the same one, already there), wait until it is
    Complete or Failed, and report how it ended; see
    :func:`shardtrain.kubeflow.jobs.submit.submit_and_wait`.

    Raises:
        ConfigError: the job breaks a rule of :func:`~.spec.validate` or has no namespace.
        ClusterError: the API could not be reached or refused the job (e.g. another job of
            that name exists).
        JobFailedError: the job ended Failed (the message carries the reason).
        JobTimeoutError: the job had not finished after ``wait_timeout`` seconds.
    """
    out = out or sys.stdout
    job = dict(job)
    api.validate(job)
    name, namespace = job["metadata"]["name"], job["metadata"].get("namespace")
    submit.check_submission(api.KIND, name, namespace, wait_timeout, poll_interval)
    manifests.warn_about_local_paths([job["spec"].get("trainer") or {}])
    custom, core = clients or _clients()
    return submit.submit_and_wait(
        TrainJobApi(custom, core), job, name, namespace,
        wait_timeout=wait_timeout, poll_interval=poll_interval, stream_logs=stream_logs,
        delete_after=delete_after, request_timeout=request_timeout, out=out,
    )  # fmt: skip
