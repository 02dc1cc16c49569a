"""Submit and wait, through the TrainingClient seam: what a live operator cannot be made to do
on cue. Submitting, success, failure, timeouts, log streaming and manifest files run against
the real control plane in tests/integration/kubeflow/jobs/test_tfjob.py."""

from __future__ import annotations

import io
from unittest import mock

import pytest
from kubeflow.training import TrainingClient, models
from kubernetes import client as k8s_client

from shardtrain.errors import ShardtrainError
from shardtrain.kubeflow.jobs import tfjob
from tfjob_examples import make_config


def _job_with(*conditions: tuple[str, str, str]) -> models.KubeflowOrgV1TFJob:
    job = tfjob.build_tfjob(make_config())
    job.status = models.KubeflowOrgV1JobStatus(
        conditions=[
            models.KubeflowOrgV1JobCondition(type=t, status="True", reason=r, message=msg)
            for t, r, msg in conditions
        ]
    )
    return job


CREATED = ("Created", "TFJobCreated", "TFJob shardtrain is created.")


SUCCEEDED = ("Succeeded", "TFJobSucceeded", "TFJob shardtrain successfully completed.")


FAILED = ("Failed", "TFJobFailed", "TFJob shardtrain has failed because 1 Chief replica(s) failed.")


def _pod(phase: str, uid: str = "uid-1") -> k8s_client.V1Pod:
    return k8s_client.V1Pod(
        metadata=k8s_client.V1ObjectMeta(name="shardtrain-chief-0", uid=uid),
        status=k8s_client.V1PodStatus(phase=phase),
    )


@pytest.fixture
def sdk():
    """A TrainingClient double with the real method signatures (autospec)."""
    fake = mock.create_autospec(TrainingClient, instance=True)
    fake.get_job_pods.return_value = []
    fake.get_job_logs.return_value = ({}, {})
    return fake


@pytest.fixture
def real_client():
    """The SDK's own TrainingClient (its real create_job checks and wait loop) with only the
    HTTP calls patched out: creating posts nothing, get_job is the test's. For what a live
    operator cannot be made to do on cue: Kueue admitting, preempting, re-admitting a job."""
    client = TrainingClient(
        client_configuration=k8s_client.Configuration(host="http://127.0.0.1:9"),
        namespace="shardtrain",
        job_kind="TFJob",
    )
    with mock.patch.object(client.custom_api, "create_namespaced_custom_object", autospec=True):
        yield client


def _submit(sdk, **kwargs):
    out = io.StringIO()
    kwargs = {"wait_timeout": 3600, "poll_interval": 0.01, **kwargs}
    try:
        result = tfjob.submit_and_wait(
            tfjob.build_tfjob(make_config()), client=sdk, out=out, **kwargs
        )
    except ShardtrainError as exc:
        return exc, out.getvalue()
    return result, out.getvalue()


def test_logs_of_a_chief_that_ended_between_polls_are_printed_at_the_end(sdk):
    sdk.get_job_pods.return_value = [_pod("Failed")]
    sdk.get_job_logs.return_value = ({"shardtrain-chief-0": "step 1\nerror: bad data\n"}, {})
    sdk.wait_for_job_conditions.return_value = _job_with(CREATED, FAILED)
    error, out = _submit(sdk)
    assert isinstance(error, tfjob.JobFailedError)
    assert "[shardtrain-chief-0] step 1\n[shardtrain-chief-0] error: bad data\n" in out
    assert sdk.get_job_logs.call_args.kwargs.get("follow", False) is False


def test_no_logs_when_not_wanted(sdk):
    sdk.wait_for_job_conditions.return_value = _job_with(CREATED, SUCCEEDED)
    _submit(sdk, stream_logs=False)
    sdk.get_job_logs.assert_not_called()
    sdk.get_job_pods.assert_not_called()


def _queued_job(*conditions, suspend: bool) -> models.KubeflowOrgV1TFJob:
    job = _job_with(*conditions)
    job.spec.run_policy.suspend = suspend
    return job


SUSPENDED = ("Suspended", "TFJobSuspended", "TFJob shardtrain is suspended.")


RESUMED = ("Running", "TFJobRunning", "TFJob shardtrain is running.")


def test_a_queued_job_is_reported_as_queued_then_admitted_and_succeeds(real_client):
    """The SDK's own wait loop, with the job as the operator reports it under Kueue: created
    suspended (condition Suspended), admitted (suspend false, Running), then Succeeded."""
    client = real_client
    states = [
        _queued_job(CREATED, SUSPENDED, suspend=True),
        _queued_job(CREATED, SUSPENDED, suspend=True),
        _queued_job(CREATED, RESUMED, suspend=False),
        _queued_job(CREATED, SUCCEEDED, suspend=False),
    ]
    out = io.StringIO()
    job = tfjob.build_tfjob(make_config(queue="gpu-team"))
    with mock.patch.object(client, "get_job", autospec=True) as get_job:
        get_job.side_effect = states
        result = tfjob.submit_and_wait(
            job, client=client, out=out, wait_timeout=30, poll_interval=0.01, stream_logs=False
        )
    text = out.getvalue()
    assert isinstance(result, tfjob.SubmitResult)
    assert "waiting up to 30s for it to end (queue time included)" in text
    assert text.count("is queued: suspended until its queue admits it") == 1
    assert text.count("was admitted") == 1
    assert text.index("is queued") < text.index("was admitted") < text.index("succeeded")
    posted = client.custom_api.create_namespaced_custom_object.call_args.args[4]
    assert tfjob.to_manifest(posted)["spec"]["runPolicy"]["suspend"] is True


def test_a_job_still_queued_at_the_timeout_is_a_timeout_not_a_failure(real_client):
    client = real_client
    out = io.StringIO()
    job = tfjob.build_tfjob(make_config(queue="gpu-team"))
    with mock.patch.object(client, "get_job", autospec=True) as get_job:
        get_job.return_value = _queued_job(CREATED, SUSPENDED, suspend=True)
        with pytest.raises(tfjob.JobTimeoutError) as info:
            tfjob.submit_and_wait(
                job, client=client, out=out, wait_timeout=0.3, poll_interval=0.05,
                stream_logs=False,
            )  # fmt: skip
    assert "did not end within 0.3s; it is still queued (suspended" in str(info.value)
    assert not isinstance(info.value, tfjob.JobFailedError)
    assert "Suspended   True" in out.getvalue()


def test_a_preempted_job_is_reported_queued_again(real_client):
    client = real_client
    out = io.StringIO()
    with mock.patch.object(client, "get_job", autospec=True) as get_job:
        get_job.side_effect = [
            _queued_job(CREATED, SUSPENDED, suspend=True),
            _queued_job(CREATED, RESUMED, suspend=False),
            _queued_job(CREATED, SUSPENDED, suspend=True),  # Kueue preempted it
            _queued_job(CREATED, RESUMED, suspend=False),
            _queued_job(CREATED, SUCCEEDED, suspend=False),
        ]
        tfjob.submit_and_wait(
            tfjob.build_tfjob(make_config(queue="q")), client=client, out=out, wait_timeout=30,
            poll_interval=0.01, stream_logs=False,
        )  # fmt: skip
    text = out.getvalue()
    assert text.count("is queued") == 2 and text.count("was admitted") == 2
