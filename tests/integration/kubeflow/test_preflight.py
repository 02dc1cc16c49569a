"""The preflight against a real API server with RBAC on (the ``k8s`` fixture's control plane,
with Trainer v2 and our runtime installed): each fault ends the submit in one line naming it,
before any job exists, and a namespace that has everything passes.

Restricted identities are real service accounts with tokens from the TokenRequest API
(``kubectl create token``): the API server authenticates them and RBAC authorises them as it
would in a cluster. What another identity may do (the pipeline's runner) is asked with
SubjectAccessReviews by the admin.

None of these needs a pod (this tier's control plane has no node): what a TrainJob does when
the preflight is skipped, its pods stuck on a missing Secret key, is tests/cluster/
test_preflight.py on a real kubelet.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cluster_jobs import REPO, launcher_kubeconfig
from helpers import run_cli
from shardtrain.kubeflow import client, preflight, preflight_cluster

pytestmark = pytest.mark.k8s

DATA, MODEL = "s3://shardtrain-data/quest", "s3://shardtrain-data/models/quest"
KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION")


@pytest.fixture(scope="module")
def trainer_runtime(k8s) -> str:
    """Our ClusterTrainingRuntime, installed as the README says."""
    k8s.kubectl("apply", "--server-side", "-k", str(REPO / "k8s" / "trainer-v2"))
    return "shardtrain-tensorflow"


def _namespace(k8s, keys: tuple[str, ...] = KEYS) -> str:
    """A namespace with the trainer's service account and a storage Secret holding ``keys``
    (placeholder values: nothing here reads storage)."""
    ns = k8s.namespace("pf", service_accounts=("shardtrain-trainer",))
    literals = [f"--from-literal={k}=placeholder" for k in keys]
    k8s.kubectl("create", "secret", "generic", "shardtrain-storage", "-n", ns, *literals)
    return ns


def _kubeconfig_of(k8s, ns: str, account: str, rules: list[dict], path: Path) -> Path:
    """A service account of ``ns`` allowed ``rules`` there (a Role and RoleBinding), and a
    kubeconfig holding only its token."""
    k8s.kubectl("create", "serviceaccount", account, "-n", ns)
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": account, "namespace": ns},
        "rules": rules,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": account, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
    }
    k8s.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([role, binding]))
    token = k8s.kubectl("create", "token", account, "-n", ns, "--duration", "1h").stdout.strip()
    config = yaml.safe_load(Path(k8s.kubeconfig).read_text())
    config["users"] = [{"name": account, "user": {"token": token}}]
    config["contexts"][0]["context"] = {"cluster": "shardtrain", "user": account, "namespace": ns}
    path.write_text(yaml.safe_dump(config))
    return path


def _submit(ns: str, *more: str, env: dict | None = None):
    return run_cli(
        "trainjob", "submit", "--namespace", ns, "--name", "pf", "--nodes", "2",
        "--gpus-per-node", "0", "--cpu", "500m", "--memory", "1Gi", "--no-logs",
        "--wait-timeout", "30", *more, env=env,
    )  # fmt: skip


def _trainjobs(k8s, ns: str) -> list[str]:
    return k8s.kubectl("get", "trainjobs", "-n", ns, "-o", "name").stdout.split()


def _problems(stderr: str) -> list[str]:
    """The problem lines of a preflight's error (after its first line; what was not checked
    is logged before it)."""
    lines = stderr.strip().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("error: preflight: ")]
    assert starts, stderr
    return [line.strip() for line in lines[starts[0] + 1 :]]


def test_a_service_account_without_trainer_rbac_is_named_and_no_trainjob_is_created(
    k8s, trainer_runtime, tmp_path
):
    ns = _namespace(k8s)
    # What Kubeflow's own pipeline-runner role has: TFJobs, pods and logs, no TrainJobs.
    rules = [
        {"apiGroups": ["kubeflow.org"], "resources": ["tfjobs"], "verbs": ["create", "get"]},
        {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
    ]
    config = _kubeconfig_of(k8s, ns, "no-trainer", rules, tmp_path / "kubeconfig")
    out = _submit(ns, "--data", DATA, "--model-dir", MODEL, env={"KUBECONFIG": str(config)})
    assert out.returncode == 1, out.stderr
    (line,) = _problems(out.stderr)
    assert line.startswith(
        f"your account, service account {ns}/no-trainer may not create, get "
        f"trainjobs.trainer.kubeflow.org in {ns}"
    ), line
    assert f"--serviceaccount={ns}:no-trainer" in line
    assert _trainjobs(k8s, ns) == []


def test_a_missing_secret_key_a_missing_account_and_a_local_path_are_all_named_first(
    k8s, trainer_runtime, tmp_path
):
    ns = _namespace(k8s, keys=("AWS_ACCESS_KEY_ID", "AWS_ENDPOINT_URL"))
    out = _submit(
        ns, "--data", str(tmp_path / "quest"), "--model-dir", MODEL,
        "--service-account", "team-trainer",
    )  # fmt: skip
    assert out.returncode == 1, out.stderr
    local, account, key = _problems(out.stderr)
    assert local.startswith(f"--data '{tmp_path / 'quest'}' is a local path"), local
    assert account.startswith(f"service account {ns}/team-trainer does not exist"), account
    assert account.endswith(f"fix: kubectl -n {ns} create serviceaccount team-trainer")
    assert key.startswith(f"Secret {ns}/shardtrain-storage has no key AWS_SECRET_ACCESS_KEY"), key
    assert "kubectl -n" in key and "placeholder" not in out.stderr  # names keys, never values
    assert _trainjobs(k8s, ns) == []

    # The one the CLI builds is the one it checks: fixed, the same submit gets past the
    # preflight (and creates the job, which the short wait then gives up on).
    k8s.kubectl("create", "serviceaccount", "team-trainer", "-n", ns)
    k8s.kubectl(
        "patch", "secret", "shardtrain-storage", "-n", ns,
        "-p", '{"stringData": {"AWS_SECRET_ACCESS_KEY": "placeholder"}}',
    )  # fmt: skip
    needs = preflight.job_needs(
        yaml.safe_load(
            run_cli(
                "trainjob", "render", "--namespace", ns, "--name", "pf", "--data", DATA,
                "--model-dir", MODEL, "--service-account", "team-trainer", check=True,
            ).stdout
        )
    )  # fmt: skip
    assert preflight.check(needs, preflight_cluster.kubernetes_cluster()) == []


def test_a_missing_runtime_and_namespace_are_named(k8s, trainer_runtime):
    out = _submit("no-such-namespace", "--data", DATA, "--model-dir", MODEL)
    assert out.returncode == 1, out.stderr
    assert _problems(out.stderr) == [
        "namespace no-such-namespace does not exist; fix: kubectl create ns no-such-namespace"
    ]
    ns = _namespace(k8s)
    out = _submit(ns, "--data", DATA, "--model-dir", MODEL, "--runtime", "no-such-runtime")
    assert out.returncode == 1, out.stderr
    (line,) = _problems(out.stderr)
    assert line.startswith("the cluster has no ClusterTrainingRuntime no-such-runtime")
    assert _trainjobs(k8s, ns) == []


def test_the_launcher_of_k8s_rbac_passes_and_cannot_read_secrets_is_not_a_failure(
    k8s, trainer_runtime, tmp_path
):
    ns = _namespace(k8s)
    config = launcher_kubeconfig(k8s, ns, tmp_path / "launcher.kubeconfig")
    job = yaml.safe_load(
        run_cli(
            "trainjob", "render", "--namespace", ns, "--data", DATA, "--model-dir", MODEL,
            check=True,
        ).stdout
    )  # fmt: skip
    from kubernetes import config as k8s_config

    launcher = preflight_cluster.KubernetesCluster(k8s_config.new_client_from_config(str(config)))
    assert launcher.whoami() == f"system:serviceaccount:{ns}:shardtrain-launcher"
    # The launcher may not read Secrets or service accounts: not checked, not failed.
    assert launcher.secret_keys(ns, "shardtrain-storage") is None
    assert preflight.check(preflight.job_needs(job, delete=True), launcher) == []


def test_the_pipeline_runner_is_asked_as_itself_and_k8s_rbac_grants_it(k8s, trainer_runtime):
    run_ns = _namespace(k8s)  # the run's namespace: its steps read the Secret here too
    k8s.kubectl("create", "serviceaccount", "runner", "-n", run_ns)
    job_ns = _namespace(k8s)
    values = {p.name: p.default for p in client.parameters() if not p.required}
    values |= {"namespace": job_ns, "dataset_uri": DATA, "model_dir": MODEL}
    admin = preflight_cluster.kubernetes_cluster()
    with pytest.raises(preflight.PreflightError) as caught:
        client.preflight_run("http://kfp:8080", values, run_ns, "runner", "2.5.0", admin)
    old, *rbac = (str(p) for p in caught.value.problems)
    assert old.startswith("Kubeflow Pipelines at http://kfp:8080 is 2.5.0; csv_to_model needs 2.15")
    assert rbac[0].startswith(
        f"service account {run_ns}/runner may not create, get, delete "
        f"trainjobs.trainer.kubeflow.org in {job_ns} (for the train step to run the TrainJob)"
    ), rbac
    assert {line.split(" may not ")[1].split(" in ")[0] for line in rbac} == {
        "create, get, delete trainjobs.trainer.kubeflow.org",
        "list pods",
        "get pods/log",
        "list events",
    }
    # k8s/rbac's Role, bound to the runner in the job's namespace, is all it needs.
    docs = [
        d for d in yaml.safe_load_all(k8s.kubectl("kustomize", str(REPO / "k8s/rbac")).stdout) if d
    ]
    for doc in docs:
        doc["metadata"]["namespace"] = job_ns
        if doc["kind"] == "RoleBinding":
            doc["subjects"] = [{"kind": "ServiceAccount", "name": "runner", "namespace": run_ns}]
    k8s.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    client.preflight_run("http://kfp:8080", values, run_ns, "runner", "2.15.0", admin)
