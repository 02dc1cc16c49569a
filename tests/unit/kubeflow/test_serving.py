"""The KServe InferenceService generator, the published-layout check and the apply seam
(:mod:`shardtrain.kubeflow.serving`), and the ``serve render`` command and the deploy step
over them; no cluster, no TensorFlow."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
import yaml
from kfp import dsl
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from helpers import cli_exit_code
from shardtrain import storage
from shardtrain.errors import ConfigError, DataError, NotCommittedError
from shardtrain.kubeflow import pointers, serving, steps
from shardtrain.kubeflow.jobs.submit import ClusterError
from shardtrain.kubeflow.pods import STORAGE_ENV

S3 = "s3://shardtrain/serving/quest"
GS = "gs://shardtrain-data/serving/quest"


def _config(**kw) -> serving.ServingConfig:
    return serving.ServingConfig.from_overrides(**{"serving_uri": S3, **kw})


def _predictor(config: serving.ServingConfig) -> dict:
    return serving.build_inference_service(config)["spec"]["predictor"]


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


def test_s3_the_service_account_lists_the_training_pods_secret():
    account, isvc = serving.render(_config())
    assert account["kind"] == "ServiceAccount" and isvc["kind"] == "InferenceService"
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1"
    predictor = isvc["spec"]["predictor"]
    assert predictor["serviceAccountName"] == account["metadata"]["name"] == "shardtrain-serving"
    # The Secret the TFJob's pods read, with the key names KServe's default configuration reads.
    assert account["secrets"] == [{"name": "shardtrain-storage"}]
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= {k for k, _ in STORAGE_ENV}
    model = predictor["model"]
    assert model["modelFormat"] == {"name": "tensorflow"}
    assert model["protocolVersion"] == "v1"
    assert model["storageUri"] == S3
    assert model["resources"] == {
        "requests": {"cpu": "1", "memory": "2Gi"},
        "limits": {"cpu": "1", "memory": "2Gi"},
    }
    assert "runtimeVersion" not in model  # the runtime's own TensorFlow Serving
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (1, 1)
    assert {d["metadata"]["namespace"] for d in (account, isvc)} == {"shardtrain"}
    text = serving.to_yaml([account, isvc])
    assert "AWS_" not in text and "valueFrom" not in text  # names only, never values


def test_gs_reads_with_the_service_accounts_identity_and_takes_no_secret():
    account, isvc = serving.render(_config(serving_uri=GS + "/"))
    assert "secrets" not in account
    assert isvc["spec"]["predictor"]["model"]["storageUri"] == GS
    with pytest.raises(ConfigError, match=r"^gs://\S+: gs:// is read .* applies to s3:// only$"):
        _config(serving_uri=GS, secret="shardtrain-storage")


def test_gs_on_gke_acts_as_a_google_service_account():
    email = "shardtrain-serving@my-project.iam.gserviceaccount.com"
    account, _ = serving.render(_config(serving_uri=GS, gcp_service_account=email))
    assert account["metadata"]["annotations"] == {"iam.gke.io/gcp-service-account": email}
    with pytest.raises(ConfigError, match="applies to gs:// only"):
        _config(gcp_service_account=email)
    with pytest.raises(ConfigError, match="not a Google service account e-mail"):
        _config(serving_uri=GS, gcp_service_account="serving@example.com")


def test_s3_without_a_secret_for_an_identity_of_its_own():
    account, _ = serving.render(_config(secret=""))
    assert "secrets" not in account


def test_gpus_take_the_runtimes_gpu_image_and_a_gpu_limit():
    model = _predictor(_config(gpus=2, cpu="4", memory="8Gi"))["model"]
    assert model["resources"]["limits"] == {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "2"}
    assert model["runtimeVersion"] == f"{serving.TF_SERVING_VERSION}-gpu"
    assert (
        _predictor(_config(gpus=1, runtime_version="2.19.0-gpu"))["model"]["runtimeVersion"]
        == "2.19.0-gpu"
    )
    # KServe refuses a GPU image without GPUs and the reverse: caught before the cluster.
    for kw in ({"gpus": 1, "runtime_version": "2.19.0"}, {"runtime_version": "2.19.0-gpu"}):
        with pytest.raises(ConfigError, match="does not match gpus"):
            _config(**kw)


def test_name_namespace_and_replicas():
    config = _config(name="quest-model", namespace="team-a", min_replicas=0, max_replicas=4)
    account, isvc = serving.render(config)
    assert isvc["metadata"]["name"] == "quest-model"
    assert {d["metadata"]["namespace"] for d in (account, isvc)} == {"team-a"}
    assert (isvc["spec"]["predictor"]["minReplicas"], isvc["spec"]["predictor"]["maxReplicas"]) == (
        0,
        4,
    )


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"serving_uri": "/data/serving/quest"}, r"^/data/serving/quest: a local path; "),
        ({"serving_uri": "file:///srv/m"}, r"^file:///srv/m: a local path; "),
        ({"serving_uri": "http://h/m"}, r"^http://h/m: not an s3:// or gs:// URI; "),
        ({"serving_uri": "s3://"}, r"^s3://: not an s3:// or gs:// URI; "),
        ({"serving_uri": "s3a://b/m"}, r"^s3a://b/m: not an s3:// or gs:// URI; "),
        ({"name": "Quest_Model"}, "not a DNS-1035 label"),
        ({"namespace": "Team A"}, "not a DNS-1123 label"),
        ({"min_replicas": 3, "max_replicas": 2}, "max_replicas 2 is below min_replicas 3"),
        ({"gpus": -1}, "gpus must be an integer >= 0"),
        ({"memory": "lots"}, "not a Kubernetes quantity"),
        ({"cpu": "0"}, "cpu '0' must be a positive quantity"),
    ],
)
def test_bad_settings_fail_with_one_line(kw, message):
    with pytest.raises(ConfigError, match=message) as info:
        _config(**kw)
    assert "\n" not in str(info.value)


# --------------------------------------------------------------------------------------------
# The published layout TensorFlow Serving loads
# --------------------------------------------------------------------------------------------


def _publish(base: Path, version: str, *, pointer: bool = True, files=None) -> None:
    """A version as the export step lays it out (fake bytes), and latest.json naming it."""
    files = files or ("saved_model.pb", "variables/variables.index", "variables/variables.data-0")
    for rel in files:
        storage.write_bytes(str(base / version / rel), b"x")
    storage.publish(str(base / version), {"files": list(files)})
    if pointer:
        storage.write_json(
            str(base / "latest.json"), {"version": version, "path": version, "step": 7}
        )


def test_a_published_base_is_what_tensorflow_serving_loads(tmp_path):
    base = tmp_path / "serving"
    _publish(base, "1700000000")
    _publish(base, "1700000500")
    (base / "notes").mkdir()  # a non-integer directory: TensorFlow Serving ignores it
    published = serving.check_published(str(base) + "/")
    assert published == serving.PublishedModel(
        base=str(base),
        version=1700000500,
        uri=f"{base}/1700000500",
        versions=(1700000000, 1700000500),
        step=7,
    )


def test_not_a_published_base(tmp_path):
    with pytest.raises(NotCommittedError, match=r"serving: not a published serving base \(no "):
        serving.check_published(str(tmp_path / "serving"))


def test_a_pointer_to_a_non_integer_version(tmp_path):
    base = tmp_path / "serving"
    _publish(base, "v2")
    with pytest.raises(DataError, match="version 'v2' is not an integer"):
        serving.check_published(str(base))


def test_a_version_without_variables_or_graph(tmp_path):
    base = tmp_path / "serving"
    _publish(base, "1700000000", files=("saved_model.pb",))
    with pytest.raises(DataError, match=r"no variables/variables\.index"):
        serving.check_published(str(base))
    _publish(base, "1700000001", files=("variables/variables.index",))
    with pytest.raises(DataError, match=r"no saved_model\.pb"):
        serving.check_published(str(base))


def test_a_version_not_yet_committed(tmp_path):
    base = tmp_path / "serving"
    storage.write_bytes(str(base / "1700000000/saved_model.pb"), b"x")
    storage.write_json(str(base / "latest.json"), {"version": "1700000000"})
    with pytest.raises(NotCommittedError, match=r"named by latest\.json but not fully published"):
        serving.check_published(str(base))


def test_a_higher_version_would_be_served_instead(tmp_path):
    """TensorFlow Serving serves the highest version, whatever latest.json says (a rollback by
    re-pointing latest.json does not roll back a TensorFlow Serving)."""
    base = tmp_path / "serving"
    _publish(base, "1700000500", pointer=False)
    _publish(base, "1700000000")
    with pytest.raises(
        DataError, match="TensorFlow Serving would serve version 1700000500, not 1700000000"
    ):
        serving.check_published(str(base))


# --------------------------------------------------------------------------------------------
# Server-side apply
# --------------------------------------------------------------------------------------------


def test_apply_sends_each_document_server_side_in_order():
    client = mock.Mock()
    documents = serving.render(_config())
    serving.apply(documents, client=client)
    gets = [c.kwargs for c in client.resources.get.call_args_list]
    assert gets == [
        {"api_version": "v1", "kind": "ServiceAccount"},
        {"api_version": "serving.kserve.io/v1beta1", "kind": "InferenceService"},
    ]
    for call, doc in zip(client.server_side_apply.call_args_list, documents, strict=True):
        assert call.kwargs["body"] == doc
        assert call.kwargs["namespace"] == "shardtrain"
        assert call.kwargs["field_manager"] == "shardtrain"
        assert call.kwargs["force_conflicts"] is True


def test_apply_without_kserve_or_refused_says_so_in_one_line():
    client = mock.Mock()
    client.resources.get.side_effect = [mock.Mock(), ResourceNotFoundError("no kind")]
    with pytest.raises(ClusterError, match=r"InferenceService shardtrain/shardtrain: .*KServe"):
        serving.apply(serving.render(_config()), client=client)
    client = mock.Mock()
    refused = ApiException(status=422, reason="Unprocessable Entity")
    refused.body = '{"kind": "Status", "message": "spec.predictor: Invalid value:\\n bad"}'
    client.server_side_apply.side_effect = refused
    with pytest.raises(ClusterError) as info:
        serving.apply(serving.render(_config()), client=client)
    assert str(info.value) == (
        "ServiceAccount shardtrain/shardtrain-serving: refused (HTTP 422: spec.predictor: "
        "Invalid value: bad)"
    )


# --------------------------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------------------------


def test_serve_render_prints_the_documents(capsys):
    code = cli_exit_code(
        "serve", "render", "--serving-uri", S3, "--no-check", "--name", "quest",
        "--namespace", "team-a", "--secret", "store", "--service-account", "quest-serving",
        "--cpu", "2", "--memory", "4Gi", "--gpus", "1", "--min-replicas", "0",
        "--max-replicas", "3",
    )  # fmt: skip
    assert code == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert docs == serving.render(
        serving.ServingConfig(
            serving_uri=S3,
            name="quest",
            namespace="team-a",
            secret="store",
            service_account="quest-serving",
            cpu="2",
            memory="4Gi",
            gpus=1,
            min_replicas=0,
            max_replicas=3,
        )
    )


def test_serve_render_checks_the_base_first(capsys):
    published = serving.PublishedModel(S3, 1700000000, f"{S3}/1700000000", (1700000000,), 9)
    with mock.patch.object(serving, "check_published", autospec=True, return_value=published) as c:
        assert cli_exit_code("serve", "render", "--serving-uri", S3) == 0
    c.assert_called_once_with(S3)
    out = capsys.readouterr()
    assert "serves version 1700000000 (step 9)" in out.err
    assert len(list(yaml.safe_load_all(out.out))) == 2  # the note is not in the YAML


@pytest.mark.parametrize("uri", ["/srv/models/quest", "s3://shardtrain/not-published"])
def test_serve_render_a_bad_base_is_one_line_and_exit_1(uri, capsys):
    missing = NotCommittedError(f"{uri}: not a published serving base (no latest.json)")
    with mock.patch.object(serving, "check_published", autospec=True, side_effect=missing):
        assert cli_exit_code("serve", "render", "--serving-uri", uri) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert len(out.err.strip().splitlines()) == 1 and out.err.startswith(f"error: {uri}: ")


# --------------------------------------------------------------------------------------------
# The pipeline's deploy step
# --------------------------------------------------------------------------------------------


def _deploy(tmp_path: Path, *, local: bool, uri: str = S3, namespace: str = "team-a"):
    served = dsl.Model(name="served", uri=str(tmp_path / "served"), metadata={})
    pointers.write_pointer(served, f"{uri}/1700000000")
    out = dsl.Artifact(name="isvc", uri=str(tmp_path / "isvc.yaml"), metadata={})
    published = serving.PublishedModel(uri, 1700000000, f"{uri}/1700000000", (1700000000,), 9)
    with (
        mock.patch.object(serving, "check_published", autospec=True, return_value=published),
        mock.patch.object(serving, "apply", autospec=True) as apply,
    ):
        steps.deploy_step(
            served_model=served,
            serving_uri=uri,
            name="quest",
            namespace=namespace,
            secret="shardtrain-storage",
            local=local,
            inference_service=out,
        )
    return apply, list(yaml.safe_load_all(Path(out.path).read_text())), out.metadata


def test_deploy_step_applies_what_it_records(tmp_path):
    apply, docs, metadata = _deploy(tmp_path, local=False)
    expected = serving.render(
        serving.ServingConfig(serving_uri=S3, name="quest", namespace="team-a")
    )
    assert docs == expected
    apply.assert_called_once_with(expected)
    assert metadata["version"] == 1700000000 and metadata["storageUri"] == S3


def test_deploy_step_in_a_local_run_records_and_applies_nothing(tmp_path):
    apply, docs, _ = _deploy(tmp_path, local=True)
    apply.assert_not_called()
    assert [d["kind"] for d in docs] == ["ServiceAccount", "InferenceService"]


def test_deploy_step_gs_needs_no_secret_and_defaults_to_the_pods_namespace(tmp_path):
    with mock.patch.object(steps, "current_namespace", autospec=True, return_value="kubeflow-u"):
        _, docs, _ = _deploy(tmp_path, local=True, uri=GS, namespace="")
    account, isvc = docs
    assert "secrets" not in account
    assert isvc["metadata"]["namespace"] == "kubeflow-u"


def test_deploy_step_refuses_a_local_serving_uri(tmp_path):
    with pytest.raises(ConfigError, match="a local path"):
        _deploy(tmp_path, local=True, uri=str(tmp_path / "serving"))
