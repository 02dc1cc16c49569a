"""The TFJob generator: what every replica runs, with what, and how it is queued; manifests
and SDK models."""

from __future__ import annotations

import pytest
import yaml
from kubeflow.training import models

from shardtrain import __version__
from shardtrain.errors import ConfigError
from shardtrain.kubeflow.jobs import tfjob
from tfjob_examples import DATA, MODEL_DIR, container_of, make_config, make_manifest


def test_default_job_has_chief_two_workers_and_an_evaluator():
    m = make_manifest()
    assert (m["apiVersion"], m["kind"]) == ("kubeflow.org/v1", "TFJob")
    assert m["metadata"]["name"] == "shardtrain" and m["metadata"]["namespace"] == "shardtrain"
    specs = m["spec"]["tfReplicaSpecs"]
    assert list(specs) == ["Chief", "Worker", "Evaluator"]
    assert [specs[t]["replicas"] for t in specs] == [1, 2, 1]
    assert {s["restartPolicy"] for s in specs.values()} == {"ExitCode"}
    assert m["spec"]["runPolicy"] == {
        "backoffLimit": 3,
        "cleanPodPolicy": "Running",
        "ttlSecondsAfterFinished": 86400,
    }


def test_every_replica_runs_the_trainer_in_the_tensorflow_container():
    m = make_manifest(train_args=("--train-steps", "500", "--model", "tabular"))
    for rtype in ("Chief", "Worker", "Evaluator"):
        c = container_of(m, rtype)
        assert c["name"] == "tensorflow"
        assert c["image"] == tfjob.DEFAULT_IMAGE
        assert c["command"] == ["shardtrain"]
        assert c["args"] == [
            "train",
            "--data",
            DATA,
            "--model-dir",
            MODEL_DIR,
            "--train-steps",
            "500",
            "--model",
            "tabular",
            "--batch-size",  # the default 256 rounded for the 3 replicas in sync
            "255",
        ]
        assert c["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]


def test_default_image_is_this_versions_project_image():
    assert f"ghcr.io/shardtrain/shardtrain:{__version__}" == tfjob.DEFAULT_IMAGE
    assert container_of(make_manifest(image="registry.local/st:dev"), "Chief")["image"] == (
        "registry.local/st:dev"
    )


def test_gpus_go_to_chief_and_workers_only():
    m = make_manifest(gpus_per_worker=2)
    assert container_of(m, "Chief")["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert container_of(m, "Worker")["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert "nvidia.com/gpu" not in container_of(m, "Evaluator")["resources"]["limits"]
    cpu_only = make_manifest(gpus_per_worker=0, cpu="1", memory="2Gi")
    for rtype in ("Chief", "Worker", "Evaluator"):
        assert container_of(cpu_only, rtype)["resources"] == {
            "requests": {"cpu": "1", "memory": "2Gi"},
            "limits": {"memory": "2Gi"},
        }


@pytest.mark.parametrize(
    ("workers", "evaluator", "types"),
    [
        (0, False, ["Chief"]),
        (0, True, ["Chief", "Evaluator"]),
        (3, False, ["Chief", "Worker"]),
    ],
)
def test_workers_and_evaluator_are_omitted_when_not_wanted(workers, evaluator, types):
    specs = make_manifest(workers=workers, evaluator=evaluator)["spec"]["tfReplicaSpecs"]
    assert list(specs) == types
    if workers:
        assert specs["Worker"]["replicas"] == workers


def test_pods_are_locked_down_and_have_no_istio_sidecar():
    for rspec in make_manifest()["spec"]["tfReplicaSpecs"].values():
        template = rspec["template"]
        assert template["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
        pod = template["spec"]
        assert pod["serviceAccountName"] == "shardtrain-trainer"
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"] == {
            "runAsNonRoot": True,
            "runAsUser": 10001,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        assert pod["containers"][0]["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        }


def test_storage_credentials_are_secret_references_never_values():
    env = container_of(make_manifest(secret="my-store"), "Worker")["env"]
    by_name = {e["name"]: e for e in env}
    assert by_name["PYTHONUNBUFFERED"] == {"name": "PYTHONUNBUFFERED", "value": "1"}
    for key, optional in tfjob.STORAGE_ENV:
        ref = by_name[key]["valueFrom"]["secretKeyRef"]
        assert "value" not in by_name[key]
        assert ref["name"] == "my-store" and ref["key"] == key
        assert ref.get("optional", False) is optional
    no_secret = container_of(make_manifest(secret=None), "Chief")["env"]
    assert [e["name"] for e in no_secret] == ["PYTHONUNBUFFERED"]


def test_yaml_output_is_the_manifest_and_round_trips_through_the_sdk_models():
    job = tfjob.build_tfjob(make_config(workers=1, active_deadline_seconds=7200))
    manifest = tfjob.to_manifest(job)
    assert yaml.safe_load(tfjob.to_yaml(job)) == manifest
    again = tfjob.from_manifest(manifest)
    assert isinstance(again, models.KubeflowOrgV1TFJob)
    assert tfjob.to_manifest(again) == manifest
    assert manifest["spec"]["runPolicy"]["activeDeadlineSeconds"] == 7200


def test_from_manifest_rejects_fields_the_sdk_would_silently_drop():
    manifest = make_manifest()
    manifest["spec"]["tfReplicaSpecs"]["Worker"]["restartPolcy"] = "Never"
    with pytest.raises(ConfigError, match=r"unknown field\(s\) spec\.tfReplicaSpecs\.Worker\."):
        tfjob.from_manifest(manifest)


@pytest.mark.parametrize(
    ("overrides", "batch"),
    [
        ({}, "255"),  # README's example: 256 by default, 3 replicas
        ({"workers": 3}, None),  # 4 replicas: the default 256 already splits
        ({"workers": 2, "gpus_per_worker": 0}, "255"),  # one CPU device per pod
        ({"workers": 1, "gpus_per_worker": 4, "train_args": ("--devices", "3")}, "258"),
        ({"train_args": ("--batch-size", "192")}, "192"),  # explicit and divisible: kept
        ({"train_args": ("--config", "train.yaml")}, None),  # the file decides: left alone
    ],
)
def test_the_global_batch_splits_evenly_over_the_replicas_in_sync(overrides, batch):
    """The trainer refuses a batch that does not split; render must not write such a job."""
    args = container_of(make_manifest(**overrides), "Chief")["args"]
    got = args[args.index("--batch-size") + 1] if "--batch-size" in args else None
    assert got == batch


def test_no_queue_settings_by_default():
    m = make_manifest()
    assert tfjob.KUEUE_QUEUE_LABEL not in m["metadata"]["labels"]
    assert "suspend" not in m["spec"]["runPolicy"]
    assert "schedulingPolicy" not in m["spec"]["runPolicy"]
    for rspec in m["spec"]["tfReplicaSpecs"].values():
        pod = rspec["template"]["spec"]
        assert "schedulerName" not in pod and "priorityClassName" not in pod


def test_a_kueue_queue_labels_the_job_and_creates_it_suspended():
    m = make_manifest(queue="gpu-team", priority_class="high")
    assert m["metadata"]["labels"][tfjob.KUEUE_QUEUE_LABEL] == "gpu-team"
    assert m["spec"]["runPolicy"]["suspend"] is True
    assert "schedulingPolicy" not in m["spec"]["runPolicy"]
    for rspec in m["spec"]["tfReplicaSpecs"].values():
        pod = rspec["template"]["spec"]
        assert pod["priorityClassName"] == "high"  # Kueue's workload priority
        assert "schedulerName" not in pod
        # The label is the job's (Kueue reads it there), not the pods'.
        assert tfjob.KUEUE_QUEUE_LABEL not in rspec["template"]["metadata"]["labels"]
    assert tfjob.is_queued(tfjob.build_tfjob(make_config(queue="gpu-team")))
    assert not tfjob.is_queued(tfjob.build_tfjob(make_config()))


@pytest.mark.parametrize(
    ("overrides", "replicas"),
    [({}, 4), ({"workers": 0, "evaluator": False}, 1), ({"workers": 5}, 7)],
)
def test_volcano_gangs_every_replica(overrides, replicas):
    m = make_manifest(
        gang_scheduler="volcano", queue="research", priority_class="high", **overrides
    )
    assert m["spec"]["runPolicy"]["schedulingPolicy"] == {
        "minAvailable": replicas,
        "queue": "research",
        "priorityClass": "high",
    }
    total = sum(r["replicas"] for r in m["spec"]["tfReplicaSpecs"].values())
    assert total == replicas
    # A Volcano queue is not a Kueue queue: no label, not suspended.
    assert tfjob.KUEUE_QUEUE_LABEL not in m["metadata"]["labels"]
    assert "suspend" not in m["spec"]["runPolicy"]
    for rspec in m["spec"]["tfReplicaSpecs"].values():
        assert rspec["template"]["spec"]["schedulerName"] == "volcano"
        assert rspec["template"]["spec"]["priorityClassName"] == "high"


def test_volcano_without_a_queue_leaves_it_to_the_operator():
    policy = make_manifest(gang_scheduler="volcano")["spec"]["runPolicy"]["schedulingPolicy"]
    assert policy == {"minAvailable": 4}  # the operator's default queue is "default"


def test_queue_manifests_round_trip_through_the_sdk_models():
    for overrides in ({"queue": "q"}, {"gang_scheduler": "volcano", "queue": "q"}):
        m = make_manifest(priority_class="p", **overrides)
        assert tfjob.to_manifest(tfjob.from_manifest(m)) == m
