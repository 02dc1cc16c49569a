"""The preflight's logic: what a job or a run needs, and the one-line problems (with their
fixes) a cluster stand-in without it yields. The live checks against a real API server with
RBAC are in tests/integration/kubeflow/test_preflight.py."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest

from helpers import cli_exit_code
from shardtrain.errors import ConfigError
from shardtrain.kubeflow import preflight
from shardtrain.kubeflow.jobs import tfjob, trainjob
from shardtrain.kubeflow.jobs.submit import ClusterError
from shardtrain.kubeflow.preflight import Access, Identity

DATA, MODEL = "s3://b/quest", "s3://b/models/quest"
STORAGE_KEYS = frozenset(
    {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION"}
)


@dataclass
class FakeCluster:
    """A cluster that has everything unless told otherwise; None answers mean "may not ask"."""

    served: set[str] = field(default_factory=lambda: {"TrainJob", "TFJob", "InferenceService"})
    runtimes: set[str] | None = field(default_factory=lambda: {"shardtrain-tensorflow"})
    namespaces: set[str] | None = None  # None: every namespace exists
    accounts: set[tuple[str, str]] | None = None  # None: every service account exists
    secrets: dict[tuple[str, str], frozenset[str]] | None = None  # None: all, every key
    denied: set[tuple[str | None, str, str, str]] = field(default_factory=set)
    reviews_allowed: bool = True
    me: str | None = "alice"
    asked: list[tuple[str | None, str, str]] = field(default_factory=list)

    def serves(self, api):
        return api.kind in self.served

    def runtime_exists(self, name):
        return None if self.runtimes is None else name in self.runtimes

    def namespace_exists(self, namespace):
        return True if self.namespaces is None else namespace in self.namespaces

    def service_account_exists(self, namespace, name):
        return True if self.accounts is None else (namespace, name) in self.accounts

    def secret_keys(self, namespace, name):
        if self.secrets is None:
            return STORAGE_KEYS
        if (namespace, name) not in self.secrets:
            raise LookupError(name)
        return self.secrets[(namespace, name)]

    def allowed(self, who, namespace, access):
        self.asked.append((who.user, namespace, access.what))
        if not self.reviews_allowed:
            return None
        return (who.user, namespace, access.verb, access.what) not in self.denied

    def whoami(self):
        return self.me


def _trainjob(**settings) -> dict:
    config = trainjob.TrainJobConfig(data=DATA, model_dir=MODEL, namespace="team", **settings)
    return trainjob.build_trainjob(config)


def _tfjob(**settings) -> dict:
    config = tfjob.JobConfig(data=DATA, model_dir=MODEL, namespace="team", **settings)
    return tfjob.to_manifest(tfjob.build_tfjob(config))


# ------------------------------------------------------------------------------------------
# What a job needs
# ------------------------------------------------------------------------------------------


def test_a_trainjob_needs_trainer_the_runtime_its_account_the_secret_keys_and_our_rbac():
    needs = preflight.job_needs(_trainjob(), logs=True, delete=False)
    assert needs.what == "TrainJob team/shardtrain"
    assert needs.apis == (preflight.TRAINJOB_API,)
    assert needs.runtime == "shardtrain-tensorflow"
    assert needs.namespaces == ("team",)
    # The runtime's own service account: the TrainJob patches none in.
    assert needs.service_accounts == (("team", "shardtrain-trainer"),)
    (secret,) = needs.secrets
    # Only the keys whose secretKeyRef is not optional keep pods from starting.
    assert (secret.name, secret.keys) == (
        "shardtrain-storage",
        ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
    )
    assert secret.optional_keys == ("AWS_ENDPOINT_URL", "AWS_REGION")
    assert needs.locations == {"--data": DATA, "--model-dir": MODEL}
    (grant,) = needs.grants
    assert grant.who == Identity() and grant.namespace == "team"
    assert {(a.verb, a.what) for a in grant.access} == {
        ("create", "trainjobs.trainer.kubeflow.org"),
        ("get", "trainjobs.trainer.kubeflow.org"),
        ("list", "pods"),
        ("get", "pods/log"),
    }
    deleting = preflight.job_needs(_trainjob(), logs=False, delete=True)
    assert {(a.verb, a.what) for a in deleting.grants[0].access} == {
        ("create", "trainjobs.trainer.kubeflow.org"),
        ("get", "trainjobs.trainer.kubeflow.org"),
        ("delete", "trainjobs.trainer.kubeflow.org"),
        ("list", "pods"),
    }


def test_a_patched_service_account_and_no_secret_change_what_a_trainjob_needs():
    needs = preflight.job_needs(_trainjob(service_account="team-trainer", secret=None))
    assert needs.service_accounts == (("team", "team-trainer"),)
    assert needs.secrets == ()  # GCS with Workload Identity: no Secret, no keys


def test_a_tfjob_needs_the_training_operator_and_its_pods_account():
    needs = preflight.job_needs(_tfjob(service_account="tf-trainer"))
    assert needs.apis == (preflight.TFJOB_API,) and needs.runtime is None
    assert needs.service_accounts == (("team", "tf-trainer"),)
    assert needs.secrets[0].keys == ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    assert {a.what for a in needs.grants[0].access} >= {"tfjobs.kubeflow.org", "pods/log"}


def test_a_manifest_of_another_kind_is_refused():
    with pytest.raises(ConfigError, match="cannot check a Deployment"):
        preflight.job_needs({"kind": "Deployment", "metadata": {"name": "x"}})


# ------------------------------------------------------------------------------------------
# The checks: every problem, one line each, with its fix
# ------------------------------------------------------------------------------------------


def test_a_cluster_with_everything_has_no_problems():
    cluster = FakeCluster()
    assert preflight.check(preflight.job_needs(_trainjob()), cluster) == []
    # Our own rights were asked with SelfSubjectAccessReviews (no user).
    assert {user for user, _, _ in cluster.asked} == {None}


def test_every_problem_is_listed_at_once_each_on_one_line_with_the_command_that_fixes_it():
    job = _trainjob()
    job["spec"]["trainer"]["args"][2] = "data/quest"  # --data, a local path
    cluster = FakeCluster(
        runtimes=set(),
        accounts=set(),
        secrets={("team", "shardtrain-storage"): frozenset({"AWS_ACCESS_KEY_ID"})},
        denied={
            (None, "team", "create", "trainjobs.trainer.kubeflow.org"),
            (None, "team", "get", "pods/log"),
        },
    )
    needs = preflight.job_needs(job)
    problems = preflight.check(needs, cluster)
    text = [str(p) for p in problems]
    assert len(problems) == 6, text
    assert all("\n" not in line for line in text)
    local, runtime, account, key, rbac, logs = text
    assert "--data 'data/quest' is a local path" in local
    assert "no ClusterTrainingRuntime shardtrain-tensorflow" in runtime
    assert runtime.endswith("fix: kubectl apply --server-side -k k8s/trainer-v2")
    assert account.startswith("service account team/shardtrain-trainer does not exist")
    assert account.endswith("fix: kubectl -n team create serviceaccount shardtrain-trainer")
    assert key.startswith("Secret team/shardtrain-storage has no key AWS_SECRET_ACCESS_KEY")
    assert "CreateContainerConfigError" in key
    assert key.endswith(
        "kubectl -n team patch secret shardtrain-storage "
        """-p '{"stringData":{"AWS_SECRET_ACCESS_KEY":"..."}}'"""
    )
    assert rbac.startswith(
        "your account (alice) may not create trainjobs.trainer.kubeflow.org in team"
    )
    assert "--verb=create --resource=trainjobs.trainer.kubeflow.org" in rbac
    assert "--user=alice" in rbac
    assert logs.startswith("your account (alice) may not get pods/log in team")

    with pytest.raises(preflight.PreflightError) as caught:
        preflight.raise_for(needs, cluster)
    assert caught.value.exit_code == ConfigError.exit_code == 1
    first, *lines = str(caught.value).splitlines()
    assert first.startswith("preflight: TrainJob team/shardtrain cannot start (6 problem(s);")
    assert "--no-preflight" in first
    assert [line.strip() for line in lines] == text


def test_a_missing_secret_is_created_with_the_keys_the_pods_need_and_no_values():
    cluster = FakeCluster(secrets={})
    (problem,) = preflight.check(preflight.job_needs(_trainjob()), cluster)
    assert problem.missing.startswith("Secret team/shardtrain-storage does not exist")
    assert problem.fix == (
        "kubectl -n team create secret generic shardtrain-storage "
        "--from-literal=AWS_ACCESS_KEY_ID=... --from-literal=AWS_SECRET_ACCESS_KEY=..."
    )


def test_a_missing_namespace_is_one_line_not_one_per_object_in_it():
    cluster = FakeCluster(namespaces=set(), accounts=set(), secrets={})
    problems = preflight.check(preflight.job_needs(_trainjob()), cluster)
    assert [str(p) for p in problems] == [
        "namespace team does not exist; fix: kubectl create ns team"
    ]


def test_trainer_not_served_names_how_to_install_it():
    cluster = FakeCluster(served={"TFJob"})
    (problem,) = preflight.check(preflight.job_needs(_trainjob()), cluster)
    assert "does not serve trainer.kubeflow.org/v1alpha1 TrainJobs" in problem.missing
    assert "kubeflow/trainer.git/manifests/overlays/manager?ref=v2.3.0" in problem.fix


def test_what_this_account_may_not_ask_is_not_a_failure_but_is_said(caplog):
    cluster = FakeCluster(runtimes=None, secrets=None, reviews_allowed=False)
    cluster.secret_keys = lambda namespace, name: None  # may not read Secrets
    cluster.service_account_exists = lambda namespace, name: None
    with caplog.at_level(logging.WARNING):
        assert preflight.check(preflight.job_needs(_trainjob()), cluster) == []
    said = caplog.text
    assert "not allowed to read Secret team/shardtrain-storage" in said
    assert "not allowed to read service account team/shardtrain-trainer" in said
    assert "cannot ask what your account (alice) may do in team" in said


def test_a_service_account_token_is_named_as_that_service_account():
    cluster = FakeCluster(
        me="system:serviceaccount:team:ci",
        denied={(None, "team", "create", "trainjobs.trainer.kubeflow.org")},
    )
    (problem,) = preflight.check(preflight.job_needs(_trainjob()), cluster)
    assert problem.missing.startswith(
        "your account, service account team/ci may not create trainjobs.trainer.kubeflow.org"
    )
    assert problem.fix.endswith("--serviceaccount=team:ci")


def test_without_a_cluster_the_one_line_is_the_missing_configuration():
    with pytest.raises(ClusterError, match=r"^no Kubernetes configuration .*--no-preflight"):
        preflight.raise_for(preflight.job_needs(_trainjob()), None)
    job = _trainjob()
    job["spec"]["trainer"]["args"][4] = "/tmp/model"  # --model-dir
    with pytest.raises(preflight.PreflightError) as caught:
        preflight.raise_for(preflight.job_needs(job), None)
    assert len(caught.value.problems) == 2
    assert "--model-dir '/tmp/model' is a local path" in str(caught.value)


# ------------------------------------------------------------------------------------------
# A pipeline run: the runner's identity, both namespaces, deploy
# ------------------------------------------------------------------------------------------

RUN = {
    "namespace": "",
    "secret_name": "shardtrain-storage",
    "service_account": "shardtrain-trainer",
    "dataset_uri": "s3://b/ds",
    "model_dir": "s3://b/m",
    "serving_uri": "s3://b/s",
    "deploy": False,
    "deploy_namespace": "",
    "gang_scheduler": "",
}


def test_the_runner_is_pipeline_runner_standalone_and_default_editor_in_a_profile():
    assert preflight.runner_of(None, None) == Identity("kubeflow", "pipeline-runner")
    assert preflight.runner_of("team-a", None) == Identity("team-a", "default-editor")
    assert preflight.runner_of("team-a", "ci") == Identity("team-a", "ci")
    assert Identity("kubeflow", "pipeline-runner").user == (
        "system:serviceaccount:kubeflow:pipeline-runner"
    )


def test_a_run_needs_the_secret_in_both_namespaces_and_the_runners_rbac_for_the_job():
    runner = Identity("kubeflow", "pipeline-runner")
    needs = preflight.pipeline_needs(
        RUN | {"namespace": "shardtrain"}, runner, preflight.TRAINJOB_API
    )
    assert needs.namespaces == ("kubeflow", "shardtrain")
    assert {(s.namespace, s.name) for s in needs.secrets} == {
        ("kubeflow", "shardtrain-storage"),
        ("shardtrain", "shardtrain-storage"),
    }
    assert needs.service_accounts == (
        ("kubeflow", "pipeline-runner"),
        ("shardtrain", "shardtrain-trainer"),
    )
    (grant,) = needs.grants
    assert grant.who == runner and grant.namespace == "shardtrain"
    assert {(a.verb, a.what) for a in grant.access} >= {
        ("create", "trainjobs.trainer.kubeflow.org"),
        ("get", "pods/log"),
        ("list", "events"),
    }
    cluster = FakeCluster(
        denied={
            (runner.user, "shardtrain", verb, "trainjobs.trainer.kubeflow.org")
            for verb in ("create", "get", "delete")
        }
    )
    (problem,) = preflight.check(needs, cluster)
    assert problem.missing == (
        "service account kubeflow/pipeline-runner may not create, get, delete "
        "trainjobs.trainer.kubeflow.org in shardtrain (for the train step to run the TrainJob)"
    )
    assert problem.fix == "kubectl apply -k k8s/rbac"  # its RoleBinding names pipeline-runner
    # The runner's rights were asked as the runner (SubjectAccessReview), not as ourselves.
    assert {user for user, _, _ in cluster.asked} == {runner.user}


def test_a_run_in_its_own_namespace_with_deploy_needs_kserve_and_its_rbac():
    runner = Identity("team-a", "default-editor")
    needs = preflight.pipeline_needs(RUN | {"deploy": True}, runner, preflight.TFJOB_API)
    assert needs.namespaces == ("team-a",)
    assert preflight.KSERVE_API in needs.apis and needs.runtime is None
    deploy = needs.grants[1]
    assert {a.what for a in deploy.access} == {
        "inferenceservices.serving.kserve.io",
        "serviceaccounts",
    }
    cluster = FakeCluster(
        served={"TFJob"},
        denied={(runner.user, "team-a", "patch", "inferenceservices.serving.kserve.io")},
    )
    kserve, isvc = (str(p) for p in preflight.check(needs, cluster))
    assert "does not serve serving.kserve.io/v1beta1 InferenceServices" in kserve
    assert isvc.startswith(
        "service account team-a/default-editor may not patch inferenceservices.serving.kserve.io"
    )
    assert "--serviceaccount=team-a:default-editor" in isvc


def test_auto_trains_on_what_the_cluster_serves_as_the_train_step_decides():
    runtime = "shardtrain-tensorflow"
    assert preflight.pipeline_job_api("auto", FakeCluster(), runtime) is preflight.TRAINJOB_API
    no_runtime = FakeCluster(runtimes=set())
    assert preflight.pipeline_job_api("auto", no_runtime, runtime) is preflight.TFJOB_API
    only_tf = FakeCluster(served={"TFJob"})
    assert preflight.pipeline_job_api("auto", only_tf, runtime) is preflight.TFJOB_API
    neither = FakeCluster(served=set())
    assert preflight.pipeline_job_api("auto", neither, runtime) is preflight.TRAINJOB_API
    assert preflight.pipeline_job_api("tfjob", FakeCluster(), runtime) is preflight.TFJOB_API


# ------------------------------------------------------------------------------------------
# The Kubeflow Pipelines backend's version
# ------------------------------------------------------------------------------------------


def test_the_backend_version_comes_from_the_ui_servers_healthz():
    ui = {"apiServerTagName": "2.5.0", "frontendTagName": "2.5.0", "apiServerReady": True}
    assert preflight.backend_version(ui) == "2.5.0"
    assert preflight.backend_version({"frontendTagName": "2.15.0"}) == "2.15.0"
    assert preflight.backend_version({"multi_user": False}) is None  # the API server's own


@pytest.mark.parametrize(
    ("version", "refused"),
    [("2.5.0", True), ("2.14.0", True), ("2.15.0", False), ("2.17.3", False), (None, False)],
)
def test_a_backend_older_than_2_15_is_a_problem(version, refused):
    problem = preflight.backend_problem(version, "http://kfp:8080")
    assert (problem is not None) is refused
    if problem is not None:
        assert problem.missing.startswith(f"Kubeflow Pipelines at http://kfp:8080 is {version}")
        assert "needs 2.15 or newer" in problem.missing


# ------------------------------------------------------------------------------------------
# The commands
# ------------------------------------------------------------------------------------------


def test_submit_lists_a_local_path_with_the_missing_cluster_and_no_preflight_skips(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    args = ("trainjob", "submit", "--data", str(tmp_path / "ds"), "--model-dir", MODEL)
    assert cli_exit_code(*args) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("error: preflight: TrainJob shardtrain/shardtrain cannot start")
    assert "--data" in lines[1] and "is a local path" in lines[1]
    assert lines[2].strip().startswith("no Kubernetes configuration")
    assert len(lines) == 3
    # Without the preflight, the local path is still refused (one line) before anything.
    assert cli_exit_code(*args, "--no-preflight") == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "is a local path, which no pod can read" in line


def test_the_preflight_never_sees_secret_values():
    fix = preflight.check(preflight.job_needs(_trainjob()), FakeCluster(secrets={}))[0].fix
    assert "=..." in fix and "AWS_SECRET_ACCESS_KEY=..." in fix
    assert Access("get", "pods", subresource="log").what == "pods/log"


def test_tfjob_submit_is_checked_too_after_the_jobs_own_rules(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    args = ("tfjob", "submit", "--data", DATA, "--model-dir", "models/quest")
    assert cli_exit_code(*args) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("error: preflight: TFJob shardtrain/shardtrain cannot start")
    assert "--model-dir 'models/quest' is a local path" in lines[1]


class _Healthz:
    """kfp.Client's healthz API: its api_client answers ``/apis/v1beta1/healthz``."""

    def __init__(self, answer):
        self.api_client = self
        self.answer = answer
        self.asked = []

    def call_api(self, path, method, **kwargs):
        self.asked.append((path, method))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    ("answer", "version"),
    [
        ({"apiServerTagName": "2.5.0", "frontendTagName": "2.5.0"}, "2.5.0"),
        ({"multi_user": True}, None),
        (RuntimeError("404 Not Found"), None),
    ],
)
def test_the_backend_is_asked_for_its_version_through_the_kfp_clients_credentials(answer, version):
    from shardtrain.kubeflow import client

    kfp_client = type("KfpClient", (), {})()
    kfp_client._healthz_api = _Healthz(answer)
    assert client._backend_version(kfp_client) == version
    assert kfp_client._healthz_api.asked == [("/apis/v1beta1/healthz", "GET")]
