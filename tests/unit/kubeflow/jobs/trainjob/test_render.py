"""The TrainJob generator, its settings and rules: what `shardtrain trainjob render` writes.
The API server's own checks (the CRDs' schemas, Trainer's and JobSet's webhooks) run in
tests/integration/kubeflow/jobs/test_trainjob.py."""

from __future__ import annotations

import json

import pytest

from shardtrain.errors import ConfigError
from shardtrain.kubeflow.jobs import trainjob
from shardtrain.train import cluster


def _config(**kw):
    return trainjob.TrainJobConfig(data="s3://b/quest", model_dir="s3://b/m", **kw)


def _env(job):
    return {e["name"]: e for e in job["spec"]["trainer"]["env"]}


def test_the_default_job_has_three_nodes_on_our_runtime_with_the_secret_by_reference():
    job = trainjob.build_trainjob(_config())
    spec = job["spec"]
    assert spec["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
        "name": "shardtrain-tensorflow",
    }
    trainer = spec["trainer"]
    assert trainer["numNodes"] == 3
    assert trainer["command"] == ["shardtrain"]
    assert trainer["args"][:5] == ["train", "--data", "s3://b/quest", "--model-dir", "s3://b/m"]
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "1"
    env = _env(job)
    assert env["SHARDTRAIN_NUM_NODES"] == {"name": "SHARDTRAIN_NUM_NODES", "value": "3"}
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]["name"] == "shardtrain-storage"
    assert all("value" not in e for k, e in env.items() if k.startswith("AWS_"))
    assert "suspend" not in spec and "runtimePatches" not in spec  # the runtime's defaults


def test_the_default_batch_is_rounded_to_split_over_nodes_and_an_explicit_one_is_checked():
    args = trainjob.build_trainjob(_config(nodes=3, gpus_per_node=0))["spec"]["trainer"]["args"]
    batch = int(args[args.index("--batch-size") + 1])
    assert batch % 3 == 0
    with pytest.raises(ConfigError, match="not divisible by the 4 replicas"):
        _config(nodes=2, gpus_per_node=2, train_args=("--batch-size", "30"))


def test_a_cpu_only_job_has_a_cpu_limit_the_kubeflow_sdk_reads_as_its_device():
    """The Kubeflow SDK names a node's device from its limits (GPU, TPU, …, else ``cpu``) and
    raises "Unknown device type" on a job whose limits hold none of them, in every job call
    (get_job, wait_for_job_status, get_job_logs)."""
    from kubeflow.trainer.backends.kubernetes import utils as sdk
    from kubeflow_trainer_api import models

    def device(cfg):
        resources = trainjob.build_trainjob(cfg)["spec"]["trainer"]["resourcesPerNode"]
        return sdk.get_container_devices(
            models.IoK8sApiCoreV1ResourceRequirements.from_dict(resources)
        )

    cpu_only = _config(gpus_per_node=0, cpu="500m", memory="1Gi")
    assert trainjob.build_trainjob(cpu_only)["spec"]["trainer"]["resourcesPerNode"] == {
        "requests": {"cpu": "500m", "memory": "1Gi"},
        "limits": {"cpu": "500m", "memory": "1Gi"},
    }
    assert device(cpu_only) == ("cpu", "500m")
    # With GPUs the device is the GPU, and the CPU stays unlimited (no throttled input pipeline).
    gpu = _config(gpus_per_node=2)
    assert device(gpu) == ("gpu", "2")
    assert (
        "cpu" not in trainjob.build_trainjob(gpu)["spec"]["trainer"]["resourcesPerNode"]["limits"]
    )


def test_service_account_and_grace_period_go_through_one_runtime_patch():
    job = trainjob.build_trainjob(_config(service_account="team-sa", termination_grace_seconds=60))
    (patch,) = job["spec"]["runtimePatches"]
    assert patch["manager"] == "shardtrain.dev/trainjob"
    (rjob,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert rjob["name"] == "node"
    assert rjob["template"]["spec"]["template"]["spec"] == {
        "serviceAccountName": "team-sa",
        "terminationGracePeriodSeconds": 60,
    }


def test_queues_kueue_suspends_with_label_and_priority_volcano_uses_its_runtime():
    job = trainjob.build_trainjob(_config(queue="team", priority_class="high"))
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"
    assert trainjob.is_queued(job)
    gang = trainjob.build_trainjob(_config(queue="vq", gang_scheduler="volcano"))
    assert gang["spec"]["runtimeRef"]["name"] == "shardtrain-tensorflow-volcano"
    assert gang["metadata"]["annotations"] == {"scheduling.volcano.sh/queue-name": "vq"}
    assert "suspend" not in gang["spec"]
    with pytest.raises(ConfigError, match="WorkloadPriorityClass"):
        _config(priority_class="high")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"nodes": 0}, "nodes must be an integer >= 1"),
        ({"name": "Quest"}, "not a DNS-1035 label"),
        ({"name": "q" * 55, "nodes": 12}, "too long"),
        ({"env": {"SHARDTRAIN_NUM_NODES": "9"}}, "set by shardtrain"),
        ({"runtime": "Bad_Name"}, "not a valid Kubernetes name"),
        ({"train_args": ("--data", "x")}, "give --data as the job's own field"),
    ],
)
def test_bad_settings_fail_with_one_line(settings, message):
    with pytest.raises(ConfigError, match=message):
        _config(**settings)


def test_validate_refuses_a_node_count_the_nodes_would_not_agree_on():
    job = trainjob.build_trainjob(_config(nodes=2))
    job["spec"]["trainer"]["numNodes"] = 4
    with pytest.raises(ConfigError, match=r"SHARDTRAIN_NUM_NODES=2 but trainer\.numNodes=4"):
        trainjob.validate(job)
    job["kind"] = "TFJob"
    with pytest.raises(ConfigError, match="not a TrainJob"):
        trainjob.validate(job)
    # Without the variable (a job the Kubeflow SDK wrote) the runtime gives the count.
    job = trainjob.build_trainjob(_config(nodes=2))
    job["spec"]["trainer"]["env"] = [
        e for e in job["spec"]["trainer"]["env"] if e["name"] != "SHARDTRAIN_NUM_NODES"
    ]
    trainjob.validate(job)


def test_each_node_derives_the_cluster_the_runtime_promises():
    """The variables the runtime gives node i (JobSet's labels by the downward API, the Job
    controller's completion index, trainer.env) become one TF_CONFIG naming JobSet's host
    names; node 0 is the chief."""
    job = trainjob.build_trainjob(_config(name="quest", nodes=3))
    runtime = trainjob.build_runtime()
    container = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"
    ]["spec"]["containers"][0]
    labels = {  # what JobSet v0.12 puts on the pods of TrainJob "quest"
        "jobset.sigs.k8s.io/jobset-name": "quest",
        "jobset.sigs.k8s.io/replicatedjob-name": "node",
        "jobset.sigs.k8s.io/job-index": "0",
    }
    base = {
        e["name"]: labels[e["valueFrom"]["fieldRef"]["fieldPath"][len("metadata.labels['") : -2]]
        for e in container["env"]
        if "fieldRef" in e.get("valueFrom", {})
    }
    base["SHARDTRAIN_NUM_NODES"] = _env(job)["SHARDTRAIN_NUM_NODES"]["value"]
    hosts = [f"quest-node-0-{i}.quest:2222" for i in range(3)]
    roles = []
    for i in range(3):
        config = json.loads(
            cluster.tf_config_from_trainjob({**base, "JOB_COMPLETION_INDEX": str(i)})
        )
        assert config["cluster"] == {"chief": hosts[:1], "worker": hosts[1:]}
        roles.append(cluster.resolve_role({**base, "JOB_COMPLETION_INDEX": str(i)}))
    assert [(r.task_type, r.task_index, r.is_chief) for r in roles] == [
        ("chief", 0, True),
        ("worker", 0, False),
        ("worker", 1, False),
    ]
    assert all(r.num_workers == 3 and not r.has_evaluator for r in roles)


def test_a_job_without_our_node_count_variable_gets_its_count_from_trainer():
    """What the Kubeflow SDK submits (``num_nodes`` only): the runtime asks for Trainer's JAX
    policy, which writes ``JAX_NUM_PROCESSES`` = ``trainer.numNodes`` into every node (Trainer
    v2.3 ``plugins/jax``; plainML writes nothing), and each node builds its cluster from it."""
    runtime = trainjob.build_runtime()
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 1, "jax": {}}
    labels = {
        "SHARDTRAIN_TRAINJOB": "sdk",
        "SHARDTRAIN_REPLICATED_JOB": "node",
        "SHARDTRAIN_JOB_INDEX": "0",
    }
    trainer_env = {"JAX_NUM_PROCESSES": "2"}  # Trainer, for numNodes: 2
    roles = [
        cluster.resolve_role({**labels, **trainer_env, "JOB_COMPLETION_INDEX": str(i)})
        for i in range(2)
    ]
    assert [(r.task_type, r.num_workers) for r in roles] == [("chief", 2), ("worker", 2)]
    assert roles[0].cluster == {
        "chief": ["sdk-node-0-0.sdk:2222"],
        "worker": ["sdk-node-0-1.sdk:2222"],
    }


def test_the_runtime_reads_the_storage_secret_a_job_of_the_sdk_cannot_name():
    """Trainer's webhook refuses env for container node in runtime patches and the Kubeflow
    SDK's env is plain values: the runtime itself references every storage key of the
    namespace's shardtrain-storage Secret, optionally (GCS with Workload Identity has none);
    our job's own Secret, in trainer.env, replaces them by name."""
    runtime = trainjob.build_runtime()
    (container,) = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"
    ]["spec"]["containers"]
    refs = {
        e["name"]: e["valueFrom"]["secretKeyRef"]
        for e in container["env"]
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    assert refs == {
        key: {"name": "shardtrain-storage", "key": key, "optional": True}
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION")
    }
    own = _env(trainjob.build_trainjob(_config(secret="team-storage")))
    assert own["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]["name"] == "team-storage"


def test_failure_policy_rule_names_are_what_jobsets_webhook_accepts():
    """JobSet v0.12's webhook (pkg/webhooks/jobset_webhook.go, ruleNameFmt) denies other
    names, and Trainer then never creates the job's JobSet."""
    import re

    rule_name = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    for gang in (None, "volcano", "coscheduling"):
        runtime = trainjob.build_runtime(gang)
        for rule in runtime["spec"]["template"]["spec"]["failurePolicy"]["rules"]:
            assert rule_name.match(rule["name"]) and len(rule["name"]) <= 128, rule["name"]
