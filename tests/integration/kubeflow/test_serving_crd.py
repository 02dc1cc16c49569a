"""The InferenceServices shardtrain renders pass a server dry-run against KServe's own CRD.

``scripts/k8s-up`` installs KServe's CRDs (from the ``github.com/kserve/kserve`` Go module)
beside the others; the ``k8s`` fixture (tests/conftest.py) starts that control plane. Each
rendering (``shardtrain serve render`` for s3:// and gs://, with and without GPUs, and every
``k8s/serving`` kustomization) goes through ``kubectl apply --dry-run=server
--validate=strict``: the CRD's schema and its structural pruning (an unknown field is an
error here, not silently dropped). Then :func:`shardtrain.kubeflow.serving.apply` (the
pipeline's deploy step) applies one for real, server-side, twice. No KServe controller runs:
these are checks of the objects, not of serving.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from helpers import REPO
from shardtrain.kubeflow import serving

pytestmark = pytest.mark.k8s

CRD = "inferenceservices.serving.kserve.io"
KUSTOMIZATIONS = ("base", "overlays/gcp", "overlays/gpu")
WI = "shardtrain-serving@my-project.iam.gserviceaccount.com"
RENDERS = {
    "s3-cpu": {"serving_uri": "s3://shardtrain/serving/quest"},
    "s3-gpu": {"serving_uri": "s3://shardtrain/serving/quest", "gpus": 2, "max_replicas": 3},
    "gs-cpu": {"serving_uri": "gs://shardtrain-data/serving/quest", "gcp_service_account": WI},
    "gs-gpu": {
        "serving_uri": "gs://shardtrain-data/serving/quest",
        "gpus": 1,
        "runtime_version": "2.19.0-gpu",
        "min_replicas": 0,
    },
}


@pytest.fixture(scope="module")
def kserve(k8s):
    """The control plane, once KServe's InferenceService CRD is there (k8s-up installs it)."""
    found = k8s.kubectl("get", "crd", CRD, "-o", "name", check=False)
    if found.returncode != 0:
        pytest.fail(
            f"the control plane has no CRD {CRD}: scripts/k8s-up must install KServe's CRDs "
            f"(github.com/kserve/kserve config/crd/full/) ({found.stderr.strip()})"
        )
    return k8s


def _dry_run(k8s, docs: list[dict]) -> subprocess.CompletedProcess[str]:
    return k8s.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "--server-side", "-f", "-",
        input=serving.to_yaml(docs), check=False,
    )  # fmt: skip


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_serve_render_passes_a_server_dry_run(kserve, name):
    namespace = kserve.namespace("serve")
    docs = serving.render(
        serving.ServingConfig.from_overrides(namespace=namespace, **RENDERS[name])
    )
    out = _dry_run(kserve, docs)
    assert out.returncode == 0, out.stderr
    assert "inferenceservice.serving.kserve.io/shardtrain serverside-applied (server dry run)" in (
        out.stdout
    )


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_serving_kustomization_passes_a_server_dry_run(kserve, kustomization):
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(REPO / "k8s" / "serving" / kustomization)],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    namespace = kserve.namespace("serve")
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
    out = _dry_run(kserve, docs)
    assert out.returncode == 0, out.stderr


def test_the_dry_run_catches_a_misplaced_field(kserve):
    """So that a pass means something: a field the CRD does not know is refused, and so is a
    value of the wrong type."""
    namespace = kserve.namespace("serve")
    docs = serving.render(
        serving.ServingConfig.from_overrides(namespace=namespace, **RENDERS["s3-cpu"])
    )
    docs[1]["spec"]["predictor"]["model"]["storageUrl"] = docs[1]["spec"]["predictor"]["model"][
        "storageUri"
    ]
    out = _dry_run(kserve, docs)
    assert out.returncode != 0 and "storageUrl" in out.stderr
    docs = serving.render(
        serving.ServingConfig.from_overrides(namespace=namespace, **RENDERS["s3-cpu"])
    )
    docs[1]["spec"]["predictor"]["minReplicas"] = "one"
    out = _dry_run(kserve, docs)
    assert out.returncode != 0 and "minReplicas" in out.stderr


def test_the_deploy_steps_apply_creates_and_updates_in_place(kserve):
    namespace = kserve.namespace("serve")
    config = serving.ServingConfig.from_overrides(namespace=namespace, **RENDERS["s3-cpu"])
    serving.apply(serving.render(config))
    bigger = serving.ServingConfig.from_overrides(
        namespace=namespace, **RENDERS["s3-cpu"], max_replicas=4
    )
    serving.apply(serving.render(bigger))  # again: an update, not a conflict
    got = yaml.safe_load(kserve.kubectl("get", "inferenceservice", "shardtrain", "-n", namespace,
                                        "-o", "yaml", "--show-managed-fields").stdout)  # fmt: skip
    assert got["spec"]["predictor"]["maxReplicas"] == 4
    assert got["spec"]["predictor"]["model"]["storageUri"] == config.serving_uri
    managers = {m["manager"] for m in got["metadata"]["managedFields"]}
    assert managers == {serving.FIELD_MANAGER}
    account = yaml.safe_load(kserve.kubectl("get", "serviceaccount", "shardtrain-serving", "-n",
                                            namespace, "-o", "yaml").stdout)  # fmt: skip
    assert account["secrets"] == [{"name": "shardtrain-storage"}]
