"""The kustomize tree in k8s/: it renders, validates offline, matches the generator, holds no
credentials, and grants a launcher nothing beyond what it needs."""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import ValidationError as SchemaError
from yamllint import linter
from yamllint.config import YamlLintConfig

from shardtrain.kubeflow import serving
from shardtrain.kubeflow.jobs import tfjob, trainjob

K8S = Path(__file__).resolve().parents[2] / "k8s"
KUSTOMIZATIONS = (
    "base",
    "overlays/local",
    "overlays/local/minio",
    "overlays/gcp",
    "overlays/kueue",
    "overlays/volcano",
    "rbac",
    "rbac/deploy",
    "serving/base",
    "serving/overlays/gcp",
    "serving/overlays/gpu",
)
SECRET_TEMPLATE = K8S / "overlays/local/storage-secret.template.yaml"
NAMESPACE = "shardtrain"
#: The oldest Kubernetes the training operator v1.9 supports here, and the newest schemas.
K8S_VERSIONS = ("1.31.0", kubernetes_validate.utils.latest_version())

#: The generator's settings for the TFJob of each kustomization (the tests compare them).
BASE = tfjob.JobConfig(data="s3://shardtrain/quest", model_dir="s3://shardtrain/models/quest")
EXPECTED_JOBS = {
    "base": BASE,
    "overlays/local": tfjob.JobConfig(
        data=BASE.data, model_dir=BASE.model_dir, gpus_per_worker=0, cpu="1", memory="2Gi"
    ),
    "overlays/gcp": tfjob.JobConfig(
        data="gs://shardtrain-data/quest",
        model_dir="gs://shardtrain-data/models/quest",
        secret=None,
    ),
    "overlays/kueue": tfjob.JobConfig(data=BASE.data, model_dir=BASE.model_dir, queue="shardtrain"),
    "overlays/volcano": tfjob.JobConfig(
        data=BASE.data, model_dir=BASE.model_dir, gang_scheduler="volcano"
    ),
}

#: The generator's settings for the documents of each serving kustomization.
SERVING = serving.ServingConfig(serving_uri="s3://shardtrain/serving/quest")
EXPECTED_SERVING = {
    "serving/base": SERVING,
    "serving/overlays/gcp": serving.ServingConfig(
        serving_uri="gs://shardtrain-data/serving/quest",
        secret=None,
        gcp_service_account="shardtrain-serving@PROJECT_ID.iam.gserviceaccount.com",
    ),
    "serving/overlays/gpu": serving.ServingConfig(
        serving_uri=SERVING.serving_uri, gpus=1, cpu="4", memory="8Gi"
    ),
}


@functools.cache
def _kustomize(kustomization: str) -> str:
    proc = subprocess.run(
        ["kubectl", "kustomize", str(K8S / kustomization)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"kubectl kustomize {kustomization}:\n{proc.stderr}"
    return proc.stdout


def render(kustomization: str) -> list[dict]:
    """The documents `kubectl kustomize` renders (fresh copies: tests may edit them)."""
    return [d for d in yaml.safe_load_all(_kustomize(kustomization)) if d]


def _of_kind(docs, kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def _all_rendered() -> list[tuple[str, dict]]:
    return [(k, d) for k in KUSTOMIZATIONS for d in render(k)]


def _pod_templates(doc: dict) -> list[tuple[str, dict]]:
    if doc["kind"] == "ClusterTrainingRuntime":
        return [
            (f"runtime {r['name']}", r["template"]["spec"]["template"])
            for r in doc["spec"]["template"]["spec"]["replicatedJobs"]
        ]
    if doc["kind"] == "TFJob":
        return [(t, s["template"]) for t, s in doc["spec"]["tfReplicaSpecs"].items()]
    if doc["kind"] in ("Deployment", "StatefulSet", "Job", "DaemonSet"):
        return [(doc["kind"], doc["spec"]["template"])]
    return []


# --------------------------------------------------------------------------------------------
# Rendering and schemas
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_kustomization_renders_into_one_namespace(kustomization):
    docs = render(kustomization)
    assert docs
    assert {d["metadata"].get("namespace") for d in docs} == {NAMESPACE}


def test_overlays_hold_the_resources_they_promise():
    kinds = {k: sorted(d["kind"] for d in render(k)) for k in KUSTOMIZATIONS}
    assert kinds["base"] == ["ServiceAccount", "TFJob"]
    assert kinds["overlays/local"] == [
        "Deployment",
        "PersistentVolumeClaim",
        "Service",
        "ServiceAccount",
        "TFJob",
    ]
    assert kinds["overlays/gcp"] == ["ServiceAccount", "TFJob"]
    assert kinds["overlays/kueue"] == kinds["overlays/volcano"] == ["ServiceAccount", "TFJob"]
    assert kinds["rbac"] == ["Role", "RoleBinding", "ServiceAccount"]
    assert kinds["rbac/deploy"] == ["Role", "RoleBinding"]
    for kustomization in EXPECTED_SERVING:
        assert kinds[kustomization] == ["InferenceService", "ServiceAccount"], kustomization


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_core_resources_validate_strictly_against_the_kubernetes_schemas(version):
    # The TFJob and InferenceService CRDs have no schema here (the server dry-runs check them).
    docs = [d for _, d in _all_rendered() if d["kind"] not in ("TFJob", "InferenceService")]
    docs.append(yaml.safe_load(SECRET_TEMPLATE.read_text()))
    # A TFJob's pod templates are checked as core PodTemplates.
    for _, doc in _all_rendered():
        for rtype, template in _pod_templates(doc) if doc["kind"] == "TFJob" else []:
            docs.append(
                {
                    "apiVersion": "v1",
                    "kind": "PodTemplate",
                    "metadata": {"name": f"{doc['metadata']['name']}-{rtype.lower()}"},
                    "template": template,
                }
            )
    assert len(docs) > 10
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_schema_check_catches_a_misspelt_field():
    (deployment,) = _of_kind(render("overlays/local/minio"), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    with pytest.raises(SchemaError):
        kubernetes_validate.validate(deployment, K8S_VERSIONS[-1], strict=True)


# --------------------------------------------------------------------------------------------
# TFJobs: the operator's rules, the SDK models, the generator
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kustomization", ["base", "overlays/local", "overlays/gcp"])
def test_every_tfjob_passes_the_webhook_rules_and_round_trips(kustomization):
    (job,) = _of_kind(render(kustomization), "TFJob")
    tfjob.validate(job)
    assert tfjob.to_manifest(tfjob.from_manifest(job)) == job


def test_the_base_tfjob_file_is_the_generators_output():
    (job,) = [d for d in yaml.safe_load_all((K8S / "base/tfjob.yaml").read_text()) if d]
    assert job == tfjob.to_manifest(tfjob.build_tfjob(BASE))


@pytest.mark.parametrize("kustomization", sorted(EXPECTED_JOBS))
def test_each_rendered_tfjob_is_the_generators_output_for_its_settings(kustomization):
    (job,) = _of_kind(render(kustomization), "TFJob")
    assert job == tfjob.to_manifest(tfjob.build_tfjob(EXPECTED_JOBS[kustomization]))


def test_tfjobs_run_as_the_dedicated_service_account_of_the_base():
    for kustomization in EXPECTED_JOBS:
        docs = render(kustomization)
        (account,) = _of_kind(docs, "ServiceAccount")
        (job,) = _of_kind(docs, "TFJob")
        for _, template in _pod_templates(job):
            assert template["spec"]["serviceAccountName"] == account["metadata"]["name"]


@pytest.mark.parametrize("kustomization", sorted(EXPECTED_SERVING))
def test_each_rendered_inference_service_is_the_generators_output(kustomization):
    docs = sorted(render(kustomization), key=lambda d: d["kind"])
    expected = sorted(serving.render(EXPECTED_SERVING[kustomization]), key=lambda d: d["kind"])
    assert docs == expected


def test_the_base_serving_files_are_the_generators_output():
    files = [K8S / "serving/base/serviceaccount.yaml", K8S / "serving/base/inferenceservice.yaml"]
    assert [yaml.safe_load(f.read_text()) for f in files] == serving.render(SERVING)


def test_serving_reads_the_training_pods_secret_and_minios_endpoint():
    (account,) = _of_kind(render("serving/base"), "ServiceAccount")
    assert account["secrets"] == [{"name": BASE.secret}]
    # KServe's storage initializer takes the endpoint from the Secret's annotations: the
    # template's say what its AWS_ENDPOINT_URL says.
    template = yaml.safe_load(SECRET_TEMPLATE.read_text())
    url = template["stringData"]["AWS_ENDPOINT_URL"]
    notes = template["metadata"]["annotations"]
    assert notes["serving.kserve.io/s3-endpoint"] == url.removeprefix("http://")
    assert notes["serving.kserve.io/s3-usehttps"] == ("0" if url.startswith("http://") else "1")
    assert notes["serving.kserve.io/s3-region"] == template["stringData"]["AWS_REGION"]
    (gcp,) = _of_kind(render("serving/overlays/gcp"), "ServiceAccount")
    assert "secrets" not in gcp


# --------------------------------------------------------------------------------------------
# Kubeflow Trainer v2: the TensorFlow runtime and the example TrainJob
# --------------------------------------------------------------------------------------------

#: Trainer v2's kustomizations: the runtime (cluster-scoped), its Volcano variant, a TrainJob.
TRAINER_V2 = ("trainer-v2", "trainer-v2/volcano", "trainer-v2/coscheduling", "trainer-v2/job")


def test_the_trainer_v2_files_are_the_generators_output():
    (runtime,) = render("trainer-v2")
    assert runtime == trainjob.build_runtime()
    assert runtime["metadata"]["labels"]["trainer.kubeflow.org/framework"] == "tensorflow"
    assert "namespace" not in runtime["metadata"]  # cluster-scoped
    (volcano,) = render("trainer-v2/volcano")
    assert volcano == trainjob.build_runtime("volcano")
    assert volcano["metadata"]["name"] == "shardtrain-tensorflow-volcano"
    assert volcano["spec"]["podGroupPolicy"] == {"volcano": {}}
    (cosched,) = render("trainer-v2/coscheduling")
    assert cosched == trainjob.build_runtime("coscheduling")
    assert cosched["metadata"]["name"] == "shardtrain-tensorflow-coscheduling"
    assert "coscheduling" in cosched["spec"]["podGroupPolicy"]
    docs = render("trainer-v2/job")
    (job,) = _of_kind(docs, "TrainJob")
    assert job == trainjob.build_trainjob(trainjob.TrainJobConfig(BASE.data, BASE.model_dir))
    assert {d["metadata"]["namespace"] for d in docs} == {NAMESPACE}
    # The job's ServiceAccount is the base's (kustomize cannot load files above its folder).
    assert (K8S / "trainer-v2/job/serviceaccount.yaml").read_bytes() == (
        K8S / "base/serviceaccount.yaml"
    ).read_bytes()


def test_the_runtime_fails_at_once_on_the_trainers_fatal_codes_and_restarts_otherwise():
    (runtime,) = render("trainer-v2")
    jobset = runtime["spec"]["template"]["spec"]
    assert jobset["failurePolicy"]["maxRestarts"] >= 1
    (rule,) = jobset["failurePolicy"]["rules"]
    assert rule["action"] == "FailJobSet" and rule["onJobFailureReasons"] == ["PodFailurePolicy"]
    (node,) = jobset["replicatedJobs"]
    job = node["template"]["spec"]
    assert node["name"] == "node"
    assert node["template"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"]
    assert job["backoffLimit"] == 0 and job["template"]["spec"]["restartPolicy"] == "Never"
    (fatal,) = job["podFailurePolicy"]["rules"]
    assert fatal["action"] == "FailJob"
    assert fatal["onExitCodes"] == {"containerName": "node", "operator": "In", "values": [1, 2, 3]}
    (container,) = job["template"]["spec"]["containers"]
    assert container["ports"] == [{"name": "tf", "containerPort": 2222}]


def test_gcp_uses_workload_identity_and_no_keys():
    docs = render("overlays/gcp")
    (account,) = _of_kind(docs, "ServiceAccount")
    annotation = account["metadata"]["annotations"]["iam.gke.io/gcp-service-account"]
    assert re.fullmatch(r"[a-z][-a-z0-9]*@[A-Z_a-z0-9-]+\.iam\.gserviceaccount\.com", annotation)
    text = yaml.safe_dump_all(docs)
    assert "AWS_" not in text and "secretKeyRef" not in text and "s3://" not in text
    (job,) = _of_kind(docs, "TFJob")
    for rtype, template in _pod_templates(job):
        args = template["spec"]["containers"][0]["args"]
        assert args[2].startswith("gs://") and args[4].startswith("gs://"), rtype


def test_local_minio_and_the_trainer_share_the_secret_and_the_endpoint():
    docs = render("overlays/local")
    (service,) = _of_kind(docs, "Service")
    (deployment,) = _of_kind(docs, "Deployment")
    (claim,) = _of_kind(docs, "PersistentVolumeClaim")
    (job,) = _of_kind(docs, "TFJob")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    minio_env = {e["name"]: e for e in pod["containers"][0]["env"]}
    for name, key in (
        ("MINIO_ROOT_USER", "AWS_ACCESS_KEY_ID"),
        ("MINIO_ROOT_PASSWORD", "AWS_SECRET_ACCESS_KEY"),
    ):
        assert minio_env[name]["valueFrom"]["secretKeyRef"] == {
            "name": BASE.secret,
            "key": key,
        }
    trainer_refs = {
        e["valueFrom"]["secretKeyRef"]["name"]
        for _, t in _pod_templates(job)
        for e in t["spec"]["containers"][0]["env"]
        if "valueFrom" in e
    }
    assert trainer_refs == {BASE.secret}
    # The template's endpoint is the in-cluster address of that very Service.
    template = yaml.safe_load(SECRET_TEMPLATE.read_text())
    assert template["metadata"]["name"] == BASE.secret
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "s3")
    assert template["stringData"]["AWS_ENDPOINT_URL"] == (
        f"http://{service['metadata']['name']}.{NAMESPACE}.svc:{port}"
    )
    assert {d["kind"] for d in docs}.isdisjoint({"Secret"}), "placeholders must not be applied"


# --------------------------------------------------------------------------------------------
# Security
# --------------------------------------------------------------------------------------------

CREDENTIAL_NAME = re.compile(r"(KEY|SECRET|PASSWORD|TOKEN|CREDENTIAL|ROOT_USER)", re.I)
PLACEHOLDER = "REPLACE_ME"
LEAKED = [
    re.compile(r"AKIA[0-9A-Z]{16}"),  # AWS access key ids
    re.compile(r"minioadmin", re.I),  # MinIO's default credentials
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"\"type\":\s*\"service_account\""),  # a GCP key file
]


def _all_yaml_files() -> list[Path]:
    files = sorted(K8S.rglob("*.yaml")) + sorted(K8S.rglob("*.yml"))
    assert len(files) >= 15
    return files


def test_no_credential_values_anywhere_in_k8s():
    for path in _all_yaml_files():
        text = path.read_text()
        for pattern in LEAKED:
            assert not pattern.search(text), f"{path}: matches {pattern.pattern}"
        for doc in (d for d in yaml.safe_load_all(text) if isinstance(d, dict)):
            if doc.get("kind") == "Secret":
                assert path == SECRET_TEMPLATE, f"{path}: Secrets belong in the template only"
                values = {**doc.get("data", {}), **doc.get("stringData", {})}
                secret_values = {k: v for k, v in values.items() if CREDENTIAL_NAME.search(k)}
                assert secret_values == {
                    "AWS_ACCESS_KEY_ID": PLACEHOLDER,
                    "AWS_SECRET_ACCESS_KEY": PLACEHOLDER,
                }
    for kustomization, doc in _all_rendered():
        for _, template in _pod_templates(doc):
            for container in template["spec"]["containers"]:
                for var in container.get("env", []):
                    if CREDENTIAL_NAME.search(var["name"]):
                        assert "value" not in var, f"{kustomization}: {var['name']} has a value"
                        assert "secretKeyRef" in var["valueFrom"]


def test_the_secret_template_is_not_part_of_any_kustomization():
    for kustomization in KUSTOMIZATIONS:
        assert not _of_kind(render(kustomization), "Secret"), kustomization
    assert "kubectl -n shardtrain create secret generic shardtrain-storage" in (
        SECRET_TEMPLATE.read_text()
    )


def test_every_pod_meets_the_restricted_pod_security_level():
    rendered = _all_rendered() + [(k, d) for k in TRAINER_V2 for d in render(k)]
    templates = [(k, t) for k, d in rendered for t in _pod_templates(d)]
    assert len(templates) >= 9
    for kustomization, (kind, template) in templates:
        where = f"{kustomization} {kind}"
        pod = template["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert pod["automountServiceAccountToken"] is False, where
        assert template["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false", where
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["capabilities"]["drop"] == ["ALL"], where
            assert "privileged" not in context and "hostPath" not in str(pod), where
            assert ":latest" not in container["image"] and ":" in container["image"], where


def test_the_launcher_role_is_minimal():
    docs = render("rbac")
    assert not _of_kind(docs, "ClusterRole") and not _of_kind(docs, "ClusterRoleBinding")
    (role,) = _of_kind(docs, "Role")
    (binding,) = _of_kind(docs, "RoleBinding")
    (account,) = _of_kind(docs, "ServiceAccount")
    rules = {
        (tuple(r["apiGroups"]), tuple(r["resources"])): sorted(r["verbs"]) for r in role["rules"]
    }
    assert rules == {
        (("kubeflow.org",), ("tfjobs",)): ["create", "delete", "get", "list", "watch"],
        (("trainer.kubeflow.org",), ("trainjobs",)): ["create", "delete", "get", "list", "watch"],
        (("",), ("pods", "pods/log")): ["get", "list", "watch"],
        (("",), ("events",)): ["list"],
    }
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE},
        # Kubeflow Pipelines' runner (standalone installs), whose own role lacks TrainJobs.
        {"kind": "ServiceAccount", "name": "pipeline-runner", "namespace": "kubeflow"},
    ]


def _granted(kustomizations: tuple[str, ...], subject: tuple[str, str]) -> set[tuple[str, ...]]:
    """(group, resource, verb) that ``subject`` (namespace, name) gets in the namespace from
    the Roles the kustomizations bind it to."""
    docs = [d for k in kustomizations for d in render(k)]
    roles = {r["metadata"]["name"]: r for r in _of_kind(docs, "Role")}
    granted = set()
    for binding in _of_kind(docs, "RoleBinding"):
        names = {(s.get("namespace"), s["name"]) for s in binding["subjects"]}
        if subject not in names:
            continue
        for rule in roles[binding["roleRef"]["name"]]["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    granted |= {(group, resource, verb) for verb in rule["verbs"]}
    return granted


@pytest.mark.parametrize("deploy", [False, True])
@pytest.mark.parametrize("job_api", ["TrainJob", "TFJob"])
def test_rbac_grants_pipeline_runner_everything_the_preflight_checks_for_a_run(job_api, deploy):
    """What the preflight asks of the runner (:func:`shardtrain.kubeflow.preflight.
    pipeline_needs`: the train step's job, pods, logs and events; with deploy the
    InferenceService) is what `kubectl apply -k k8s/rbac` (and `k8s/rbac/deploy`) grants
    ``kubeflow/pipeline-runner`` in the job's namespace: the two cannot drift apart."""
    from shardtrain.kubeflow import preflight

    runner = preflight.runner_of(None, None)
    assert (runner.namespace, runner.service_account) == ("kubeflow", "pipeline-runner")
    api = preflight.TRAINJOB_API if job_api == "TrainJob" else preflight.TFJOB_API
    arguments = {"namespace": NAMESPACE, "deploy": deploy, "deploy_namespace": NAMESPACE}
    needs = preflight.pipeline_needs(arguments, runner, api)
    wanted = {
        (a.group, f"{a.resource}/{a.subresource}" if a.subresource else a.resource, a.verb)
        for grant in needs.grants
        for a in grant.access
    }
    assert {g.namespace for g in needs.grants} == {NAMESPACE}
    kustomizations = ("rbac", "rbac/deploy") if deploy else ("rbac",)
    missing = wanted - _granted(kustomizations, ("kubeflow", "pipeline-runner"))
    assert not missing
    if not deploy:  # deploying is a grant of its own
        assert not {w for w in wanted if w[0] == "serving.kserve.io"}
        assert not {
            g
            for g in _granted(("rbac",), ("kubeflow", "pipeline-runner"))
            if g[0] == "serving.kserve.io"
        }


YAMLLINT = YamlLintConfig(
    "extends: default\n"
    "rules:\n"
    "  line-length: {max: 100}\n"
    "  document-start: disable\n"
    "  comments: {min-spaces-from-content: 2}\n"
    "  indentation: {indent-sequences: consistent}\n"
    "  truthy: {check-keys: false}\n"
)


def test_yaml_files_are_lint_clean():
    problems = [
        f"{path.relative_to(K8S)}:{p.line}: {p.message}"
        for path in _all_yaml_files()
        for p in linter.run(path.read_text(), YAMLLINT)
    ]
    assert problems == []
