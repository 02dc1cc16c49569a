"""Submitting a TFJob and waiting for it: the TFJob's side of the shared machinery
(:mod:`shardtrain.kubeflow.jobs.submit`), through the kubeflow-training SDK's
``TrainingClient``."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, TextIO

from shardtrain.kubeflow.jobs import manifests, submit
from shardtrain.kubeflow.jobs.logs import failed_pod_detail
from shardtrain.kubeflow.jobs.manifests import pod_containers
from shardtrain.kubeflow.jobs.status import conditions_of
from shardtrain.kubeflow.jobs.submit import (
    ClusterError,
    JobExistsError,
    SubmitResult,
    check_submission,
)
from shardtrain.kubeflow.jobs.tfjob.render import to_manifest
from shardtrain.kubeflow.jobs.tfjob.spec import (
    CONTAINER_NAME,
    KIND,
    KUEUE_QUEUE_LABEL,
    SUSPENDED,
    validate,
)

if TYPE_CHECKING:  # the SDK pulls in the whole Kubernetes client: imported where it is used
    from kubeflow.training import KubeflowOrgV1TFJob, TrainingClient


def is_queued(job: Any) -> bool:
    """True while a TFJob waits in a queue: ``runPolicy.suspend`` is true (Kueue has not
    admitted it yet, or preempted it) or the operator reports the ``Suspended`` condition.

    A queued job has no pods and is neither running nor failed.
    """
    spec = getattr(job, "spec", None)
    run_policy = getattr(spec, "run_policy", None)
    if getattr(run_policy, "suspend", None):
        return True
    return any(c.type == SUSPENDED and c.true for c in conditions_of(job))


class TFJobApi:
    """The TFJob API for :func:`shardtrain.kubeflow.jobs.submit.submit_and_wait`, through a
    ``TrainingClient(job_kind="TFJob")``. The chief's pods are those the operator labels
    ``training.kubeflow.org/job-role=master`` (the Chief, or worker 0 without one)."""

    kind = KIND
    succeeded = "Succeeded"
    failed = "Failed"

    def __init__(self, client: TrainingClient) -> None:
        self.client = client

    def create(self, job: Any, namespace: str) -> None:
        from kubernetes.client.rest import ApiException

        try:
            # With a job object the SDK takes the kind from the client (job_kind must be None).
            self.client.create_job(job=job, namespace=namespace)
        except RuntimeError as exc:
            cause = exc.__cause__
            if isinstance(cause, ApiException) and cause.status == 409:
                raise JobExistsError(str(exc)) from exc
            raise

    def same_job(self, existing: Any, job: Any) -> bool:
        """Same replicas (types, counts, containers' image, command and args)."""

        def shape(tfjob: Any) -> dict[str, Any]:
            manifest = to_manifest(tfjob)
            specs = manifest["spec"]["tfReplicaSpecs"]
            queue = (manifest["metadata"].get("labels") or {}).get(KUEUE_QUEUE_LABEL)
            return {"queue": queue} | {
                rtype: (
                    rspec.get("replicas"),
                    [
                        (c.get("image"), c.get("command"), c.get("args"))
                        for c in pod_containers(rspec)
                    ],
                )
                for rtype, rspec in specs.items()
            }

        return shape(existing) == shape(job)

    def wait(
        self, name: str, namespace: str, *, timeout: float, poll: float, callback: Any,
        request_timeout: int,
    ) -> Any:  # fmt: skip
        return self.client.wait_for_job_conditions(
            name=name,
            namespace=namespace,
            job_kind=KIND,
            expected_conditions={self.succeeded, self.failed},
            wait_timeout=timeout,
            # The SDK polls round(wait_timeout / polling_interval) times: at least once.
            polling_interval=min(poll, timeout),
            callback=callback,
            timeout=request_timeout,
        )

    def get(self, name: str, namespace: str) -> Any:
        return self.client.get_job(name=name, namespace=namespace, job_kind=KIND)

    def delete(self, name: str, namespace: str) -> None:
        self.client.delete_job(name=name, namespace=namespace, job_kind=KIND)

    def is_queued(self, job: Any) -> bool:
        return is_queued(job)

    def pods(self, name: str, namespace: str) -> list[Any]:
        return self.client.get_job_pods(name=name, namespace=namespace)

    def chief_pods(self, name: str, namespace: str) -> list[Any]:
        return self.client.get_job_pods(name=name, namespace=namespace, is_master=True)

    def follow_chief_log(self, name: str, namespace: str) -> None:
        # The SDK prints every line as "[Pod name]: line" while following.
        self.client.get_job_logs(
            name=name, namespace=namespace, job_kind=KIND, is_master=True, follow=True
        )

    def failure_detail(self, name: str, namespace: str) -> str | None:
        pods = self.client.get_job_pods(name=name, namespace=namespace)
        return failed_pod_detail(self.client.core_api, pods, namespace, CONTAINER_NAME)

    def chief_logs(self, name: str, namespace: str) -> dict[str, str]:
        logs, _ = self.client.get_job_logs(
            name=name, namespace=namespace, job_kind=KIND, is_master=True
        )
        return logs


def _training_client(namespace: str) -> TrainingClient:
    """The SDK client for TFJobs, configured from kubeconfig or the in-cluster service account."""
    from kubeflow.training import TrainingClient
    from kubernetes.config import ConfigException

    try:
        # KUBECONFIG as it is now: the client reads it only once, when first imported.
        return TrainingClient(
            config_file=os.environ.get("KUBECONFIG"), namespace=namespace, job_kind=KIND
        )
    except (ConfigException, OSError) as exc:
        raise ClusterError(
            f"no Kubernetes configuration (kubeconfig or in-cluster): {exc}"
        ) from exc


def submit_and_wait(
    job: KubeflowOrgV1TFJob,
    *,
    wait_timeout: float = 86400,
    poll_interval: float = 15,
    stream_logs: bool = True,
    delete_after: bool = False,
    client: TrainingClient | None = None,
    request_timeout: int = 120,
    out: TextIO | None = None,
) -> SubmitResult:
    """Create a TFJob, wait until it Succeeded or Failed, and report how it ended.

    ``wait_timeout`` is the overall bound: it goes to the SDK's
    ``wait_for_job_conditions(wait_timeout=...)``, while ``request_timeout`` bounds each API
    request (the SDK's ``timeout``). "Failed" is among the awaited conditions, so a failed
    job ends the wait at once and is reported as a failure, never as success.

    A job created in a queue (Kueue: ``runPolicy.suspend``) is reported as queued, and as
    admitted when its queue lets it start; being queued is neither running nor failing. The
    timeout counts from creation, **queue time included**: it bounds how long the caller (a
    pipeline step) waits, whatever the job waits for. A job still queued at the timeout is a
    :class:`JobTimeoutError` saying so, and stays on the cluster (in its queue) unless
    ``delete_after``.

    Args:
        job: the TFJob (e.g. from :func:`build_tfjob` or :func:`from_manifest`).
        wait_timeout: seconds to wait for the job to finish, in total.
        poll_interval: seconds between status polls.
        stream_logs: print the chief's log while the job runs.
        delete_after: delete the job once it has ended, failed or timed out.
        client: a ``TrainingClient(job_kind="TFJob")`` (the kind matters: ``create_job`` takes
            it from the client); by default one from kubeconfig or the in-cluster account.
        request_timeout: seconds per Kubernetes API request.
        out: where status and final conditions are written (default: stdout).

    Returns:
        The job's name, namespace and final conditions, when it Succeeded.

    Raises:
        ConfigError: the job breaks a rule of :func:`validate` or has no namespace.
        ClusterError: the API could not be reached or refused the job (e.g. another job of
            that name exists; the same job is attached to).
        JobFailedError: the job ended Failed (the message carries the operator's reason).
        JobTimeoutError: the job had not finished after ``wait_timeout`` seconds.
    """
    out = out or sys.stdout
    manifest = to_manifest(job)
    validate(manifest)
    name, namespace = job.metadata.name, job.metadata.namespace
    check_submission(KIND, name, namespace, wait_timeout, poll_interval)
    manifests.warn_about_local_paths(
        c for rspec in manifest["spec"]["tfReplicaSpecs"].values() for c in pod_containers(rspec)
    )
    api = TFJobApi(client or _training_client(namespace))
    return submit.submit_and_wait(
        api, job, name, namespace,
        wait_timeout=wait_timeout, poll_interval=poll_interval, stream_logs=stream_logs,
        delete_after=delete_after, request_timeout=request_timeout, out=out,
    )  # fmt: skip
