"""Waiting for a TrainJob, through the Kubernetes client seam: what live controllers cannot
be made to do on cue (a runtime whose JobSet a webhook keeps denying). Jobs that run:
tests/integration/kubeflow/jobs/test_trainjob.py."""

from __future__ import annotations

import io
from unittest import mock

import pytest
from kubernetes import client as k8s_client

from shardtrain.kubeflow.jobs import trainjob
from shardtrain.kubeflow.jobs.logs import failed_pod_detail
from shardtrain.kubeflow.jobs.submit import JobFailedError
from shardtrain.kubeflow.jobs.trainjob import submit as trainjob_submit

DENIED = (
    'TrainJob resources reconciliation failed: admission webhook "vjobset.kb.io" denied the '
    'request: JobSet.jobset.x-k8s.io "q3" is invalid: invalid failure policy rule name'
)


def _job():
    return trainjob.build_trainjob(
        trainjob.TrainJobConfig(data="s3://b/q", model_dir="s3://b/m", namespace="ns", name="q3")
    )


def _clients(events):
    custom = mock.create_autospec(k8s_client.CustomObjectsApi, instance=True)
    custom.get_namespaced_custom_object.return_value = _job()  # no status: never ends
    core = mock.create_autospec(k8s_client.CoreV1Api, instance=True)
    core.list_namespaced_event.return_value = k8s_client.CoreV1EventList(items=events)
    core.list_namespaced_pod.return_value = k8s_client.V1PodList(items=[])
    return custom, core


def _event(reason, message):
    return k8s_client.CoreV1Event(
        metadata=k8s_client.V1ObjectMeta(name="e"),
        involved_object=k8s_client.V1ObjectReference(kind="TrainJob", name="q3"),
        reason=reason,
        message=message,
        type="Warning",
    )


def test_a_jobset_that_trainer_cannot_create_ends_the_wait_with_the_reason(monkeypatch):
    monkeypatch.setattr(trainjob_submit, "REFUSED_GRACE_SECONDS", 0.05)
    clients = _clients([_event("TrainJobResourcesCreationFailed", DENIED)])
    out = io.StringIO()
    with pytest.raises(JobFailedError) as info:
        trainjob.submit_and_wait(
            _job(), clients=clients, poll_interval=0.01, wait_timeout=60, stream_logs=False,
            out=out,
        )  # fmt: skip
    message = str(info.value)
    assert message.startswith("TrainJob ns/q3 cannot start: Trainer cannot create its JobSet:")
    assert "invalid failure policy rule name" in message and "\n" not in message


def test_other_warnings_do_not_end_the_wait():
    clients = _clients([_event("SomethingTransient", "the API server was busy")])
    with pytest.raises(Exception, match="did not end within"):
        trainjob.submit_and_wait(
            _job(), clients=clients, poll_interval=0.01, wait_timeout=0.2, stream_logs=False,
            out=io.StringIO(),
        )  # fmt: skip


def _failed_pod(name, code, finished, reason=None, message=None):
    import datetime

    return k8s_client.V1Pod(
        metadata=k8s_client.V1ObjectMeta(name=name, annotations={}),
        status=k8s_client.V1PodStatus(
            phase="Failed",
            container_statuses=[
                k8s_client.V1ContainerStatus(
                    name="node", image="i", image_id="", ready=False, restart_count=0,
                    state=k8s_client.V1ContainerState(
                        terminated=k8s_client.V1ContainerStateTerminated(
                            exit_code=code, reason=reason, message=message,
                            finished_at=datetime.datetime(2026, 1, 1, 0, 0, finished),
                        )
                    ),
                )
            ],
        ),
    )  # fmt: skip


def test_a_failed_job_says_which_pod_failed_first_and_its_last_log_line():
    custom, core = _clients([])
    failed = _job()
    failed["status"] = {"conditions": [
        {"type": "Failed", "status": "True", "reason": "FailJobSetFailurePolicyAction",
         "message": "applying FailJobSet failure policy action"},
    ]}  # fmt: skip
    custom.get_namespaced_custom_object.return_value = failed
    core.list_namespaced_pod.return_value = k8s_client.V1PodList(
        items=[_failed_pod("q3-node-0-0-b", 143, 9), _failed_pod("q3-node-0-1-a", 1, 3)]
    )
    core.read_namespaced_pod_log.return_value = "loading\nerror: s3://b/q: no dataset here\n"
    with pytest.raises(JobFailedError) as info:
        trainjob.submit_and_wait(
            _job(), clients=(custom, core), poll_interval=0.01, wait_timeout=60,
            stream_logs=False, out=io.StringIO(),
        )  # fmt: skip
    assert str(info.value) == (
        "TrainJob ns/q3 failed: FailJobSetFailurePolicyAction: applying FailJobSet failure "
        "policy action; pod q3-node-0-1-a exited 1: error: s3://b/q: no dataset here"
    )
    core.read_namespaced_pod_log.assert_called_once_with(
        "q3-node-0-1-a", "ns", container="node", tail_lines=5
    )


RUNC = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
    'runc create failed: unable to start container process: exec: "/no/such/train": stat '
    "/no/such/train: no such file or directory"
)


@pytest.mark.parametrize(
    ("pod", "log", "said"),
    [
        # A container that never ran (runc could not start it): no log, the kubelet's message.
        (
            _failed_pod("p", 128, 1, "StartError", RUNC),
            "",
            "pod p exited 128 (StartError): " + RUNC[-300:],
        ),
        # The kernel's OOM killer: the reason, then what the trainer last said.
        (
            _failed_pod("p", 137, 1, "OOMKilled"),
            "step 40\n",
            "pod p exited 137 (OOMKilled): step 40",
        ),
        # Our trainer's own error: its last line, no reason (the kubelet's plain "Error").
        (_failed_pod("p", 1, 1, "Error"), "error: x\n", "pod p exited 1: error: x"),
    ],
)
def test_a_failed_pod_is_described_by_the_kubelets_reason_and_message_when_it_logged_nothing(
    pod, log, said
):
    """A pod whose command is not in the image exits 128 with an empty log: the one line
    said only "exited 128"; the kubelet's reason and runc's message say why."""
    core = mock.Mock()
    core.read_namespaced_pod_log.return_value = log
    assert failed_pod_detail(core, [pod], "ns", "node") == said


def test_an_old_refusal_or_one_since_overcome_does_not_end_the_wait(monkeypatch):
    """A denial from before this wait (a policy webhook fixed since), or while the JobSet
    exists (Trainer got past it), is not this job's fate."""
    import datetime

    monkeypatch.setattr(trainjob_submit, "REFUSED_GRACE_SECONDS", 0.0)
    old = _event("TrainJobResourcesCreationFailed", DENIED)
    old.last_timestamp = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    clients = _clients([old])
    with pytest.raises(Exception, match="did not end within"):
        trainjob.submit_and_wait(
            _job(), clients=clients, poll_interval=0.01, wait_timeout=0.2, stream_logs=False,
            out=io.StringIO(),
        )  # fmt: skip
    running = _job() | {"status": {"jobsStatus": [{"name": "node", "active": 2}]}}
    custom, core = _clients([_event("TrainJobResourcesCreationFailed", DENIED)])
    custom.get_namespaced_custom_object.return_value = running
    with pytest.raises(Exception, match="did not end within"):
        trainjob.submit_and_wait(
            _job(), clients=(custom, core), poll_interval=0.01, wait_timeout=0.2,
            stream_logs=False, out=io.StringIO(),
        )  # fmt: skip


def _conflict():
    from kubernetes.client.rest import ApiException

    return ApiException(status=409, reason="AlreadyExists")


def test_a_repeated_submit_of_a_failed_job_deletes_it_and_runs_it_again(monkeypatch):
    from kubernetes.client.rest import ApiException

    failed = _job() | {"status": {"conditions": [
        {"type": "Failed", "status": "True", "reason": "FailJobSetFailurePolicyAction"},
    ]}}  # fmt: skip
    done = _job() | {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    custom, core = _clients([])
    custom.create_namespaced_custom_object.side_effect = [_conflict(), None]
    # read: the failed job; after the delete: gone; then the new job, which completes.
    custom.get_namespaced_custom_object.side_effect = [failed, ApiException(status=404), done]
    out = io.StringIO()
    result = trainjob.submit_and_wait(
        _job(), clients=(custom, core), poll_interval=0.01, wait_timeout=60, stream_logs=False,
        out=out,
    )  # fmt: skip
    assert result.name == "q3"
    text = out.getvalue()
    assert "failed in an earlier attempt (FailJobSetFailurePolicyAction): deleting it" in text
    assert "created TrainJob ns/q3" in text
    custom.delete_namespaced_custom_object.assert_called_once()
    assert custom.create_namespaced_custom_object.call_count == 2


def test_a_repeated_submit_attaches_only_to_the_same_job(monkeypatch):
    running = _job() | {"status": {"conditions": [{"type": "Created", "status": "True"}]}}
    custom, core = _clients([])
    custom.create_namespaced_custom_object.side_effect = _conflict()
    # The same job, still running: attached.
    custom.get_namespaced_custom_object.return_value = running
    with pytest.raises(Exception, match="did not end within"):
        trainjob.submit_and_wait(
            _job(), clients=(custom, core), poll_interval=0.01, wait_timeout=0.1,
            stream_logs=False, out=io.StringIO(),
        )  # fmt: skip
    # Another queue: refused.
    other = trainjob.build_trainjob(
        trainjob.TrainJobConfig(
            data="s3://b/q", model_dir="s3://b/m", namespace="ns", name="q3", queue="gpu"
        )
    )
    custom.get_namespaced_custom_object.return_value = other
    with pytest.raises(Exception, match="already exists and runs something else"):
        trainjob.submit_and_wait(
            _job(), clients=(custom, core), poll_interval=0.01, wait_timeout=0.1,
            stream_logs=False, out=io.StringIO(),
        )  # fmt: skip


def test_the_kubeconfig_is_the_one_the_environment_names_now(tmp_path, monkeypatch):
    """The Kubernetes client reads KUBECONFIG once, when first imported; a process whose
    environment changed since (a test session, a notebook) must still use the current one."""
    import kubernetes.config  # noqa: F401  (imported before KUBECONFIG changes)
    import yaml

    from shardtrain.kubeflow import serving

    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    custom, _ = trainjob_submit._clients()
    assert custom.api_client.configuration.host == "https://127.0.0.1:9"
    with pytest.raises(Exception, match="Kubernetes API unreachable"):
        serving._dynamic_client()  # reads discovery from that server: refused, one line
