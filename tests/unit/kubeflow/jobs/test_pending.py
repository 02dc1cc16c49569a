"""A job's pods that cannot go on are named while the submit waits (shardtrain.kubeflow.jobs
.pending): the scheduler's reason, a container's waiting reason; once each."""

from __future__ import annotations

import io

from kubernetes import client as k8s

from shardtrain.kubeflow.jobs import pending


def _pod(name: str, *, unschedulable: str | None = None, waiting: tuple | None = None) -> k8s.V1Pod:
    conditions = (
        [k8s.V1PodCondition(type="PodScheduled", status="False", reason="Unschedulable",
                            message=unschedulable)]
        if unschedulable
        else []
    )  # fmt: skip
    statuses = (
        [k8s.V1ContainerStatus(
            name="node", image="i", image_id="", ready=False, restart_count=0,
            state=k8s.V1ContainerState(
                waiting=k8s.V1ContainerStateWaiting(reason=waiting[0], message=waiting[1])
            ),
        )]
        if waiting
        else []
    )  # fmt: skip
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name),
        status=k8s.V1PodStatus(phase="Pending", conditions=conditions, container_statuses=statuses),
    )


def test_what_keeps_a_pod_from_running_is_said_once_per_pod_and_reason(monkeypatch):
    monkeypatch.setattr(pending, "INTERVAL_SECONDS", 0.0)
    pods = [
        _pod("q-1", unschedulable="0/1 nodes are available: 1 Insufficient memory."),
        _pod("q-0", waiting=("CreateContainerConfigError",
                             'couldn\'t find key AWS_SECRET_ACCESS_KEY in Secret ns/s')),
        _pod("q-2", waiting=("ContainerCreating", None)),  # a normal start: nothing to say
    ]  # fmt: skip
    out = io.StringIO()
    watch = pending.PendingPods("TrainJob ns/q", lambda: pods, out)
    watch(None)
    watch(None)
    assert out.getvalue().splitlines() == [
        "TrainJob ns/q: pod q-1 not scheduled: 0/1 nodes are available: 1 Insufficient memory.",
        "TrainJob ns/q: pod q-0 CreateContainerConfigError: couldn't find key "
        "AWS_SECRET_ACCESS_KEY in Secret ns/s",
    ]


def test_a_listing_that_fails_is_no_reason_to_stop_waiting():
    def broken() -> list:
        raise RuntimeError("the API server went away")

    out = io.StringIO()
    pending.PendingPods("TFJob ns/q", broken, out)(None)
    assert out.getvalue() == ""


def test_pods_are_listed_at_most_once_an_interval():
    calls = []
    watch = pending.PendingPods("TFJob ns/q", lambda: calls.append(1) or [], io.StringIO())
    for _ in range(5):
        watch(None)
    assert len(calls) == 1
