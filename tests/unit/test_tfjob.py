"""The TFJob generator, its webhook checks, local runs of a manifest, and submit/wait/fail."""

from __future__ import annotations

import io
import json
import logging
import os
import sys
from unittest import mock

import pytest
import yaml
from kubeflow.training import TrainingClient, models
from kubernetes import client as k8s_client

from helpers import run_cli
from shardtrain import __version__, cli
from shardtrain.errors import ConfigError, ShardtrainError
from shardtrain.kubeflow import launcher, tfjob

DATA, MODEL_DIR = "s3://shardtrain/quest", "s3://shardtrain/models/quest"


def _config(**overrides) -> tfjob.JobConfig:
    return tfjob.JobConfig(data=DATA, model_dir=MODEL_DIR, **overrides)


def _manifest(**overrides) -> dict:
    return tfjob.to_manifest(tfjob.build_tfjob(_config(**overrides)))


def _container(manifest: dict, rtype: str) -> dict:
    (container,) = manifest["spec"]["tfReplicaSpecs"][rtype]["template"]["spec"]["containers"]
    return container


# --------------------------------------------------------------------------------------------
# The generator
# --------------------------------------------------------------------------------------------


def test_default_job_has_chief_two_workers_and_an_evaluator():
    m = _manifest()
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
    m = _manifest(train_args=("--train-steps", "500", "--model", "tabular"))
    for rtype in ("Chief", "Worker", "Evaluator"):
        c = _container(m, rtype)
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
    assert _container(_manifest(image="registry.local/st:dev"), "Chief")["image"] == (
        "registry.local/st:dev"
    )


def test_gpus_go_to_chief_and_workers_only():
    m = _manifest(gpus_per_worker=2)
    assert _container(m, "Chief")["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert _container(m, "Worker")["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert "nvidia.com/gpu" not in _container(m, "Evaluator")["resources"]["limits"]
    cpu_only = _manifest(gpus_per_worker=0, cpu="1", memory="2Gi")
    for rtype in ("Chief", "Worker", "Evaluator"):
        assert _container(cpu_only, rtype)["resources"] == {
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
    specs = _manifest(workers=workers, evaluator=evaluator)["spec"]["tfReplicaSpecs"]
    assert list(specs) == types
    if workers:
        assert specs["Worker"]["replicas"] == workers


def test_pods_are_locked_down_and_have_no_istio_sidecar():
    for rspec in _manifest()["spec"]["tfReplicaSpecs"].values():
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
    env = _container(_manifest(secret="my-store"), "Worker")["env"]
    by_name = {e["name"]: e for e in env}
    assert by_name["PYTHONUNBUFFERED"] == {"name": "PYTHONUNBUFFERED", "value": "1"}
    for key, optional in tfjob.STORAGE_ENV:
        ref = by_name[key]["valueFrom"]["secretKeyRef"]
        assert "value" not in by_name[key]
        assert ref["name"] == "my-store" and ref["key"] == key
        assert ref.get("optional", False) is optional
    no_secret = _container(_manifest(secret=None), "Chief")["env"]
    assert [e["name"] for e in no_secret] == ["PYTHONUNBUFFERED"]


def test_yaml_output_is_the_manifest_and_round_trips_through_the_sdk_models():
    job = tfjob.build_tfjob(_config(workers=1, active_deadline_seconds=7200))
    manifest = tfjob.to_manifest(job)
    assert yaml.safe_load(tfjob.to_yaml(job)) == manifest
    again = tfjob.from_manifest(manifest)
    assert isinstance(again, models.KubeflowOrgV1TFJob)
    assert tfjob.to_manifest(again) == manifest
    assert manifest["spec"]["runPolicy"]["activeDeadlineSeconds"] == 7200


def test_from_manifest_rejects_fields_the_sdk_would_silently_drop():
    manifest = _manifest()
    manifest["spec"]["tfReplicaSpecs"]["Worker"]["restartPolcy"] = "Never"
    with pytest.raises(ConfigError, match=r"unknown field\(s\) spec\.tfReplicaSpecs\.Worker\."):
        tfjob.from_manifest(manifest)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"name": "Quest_Train"}, "DNS-1035"),
        ({"name": "1quest"}, "DNS-1035"),
        ({"workers": -1}, "workers must be an integer >= 0"),
        ({"gpus_per_worker": -2}, "gpus_per_worker"),
        ({"clean_pod_policy": "Sometimes"}, "clean_pod_policy"),
        ({"env": {"AWS_SECRET_ACCESS_KEY": "x"}}, "Secret"),
        ({"env": {"TF_CONFIG": "{}"}}, "TF_CONFIG"),
        ({"train_args": ("--data=s3://other",)}, "--data"),
        (
            {"train_args": ("--batch-size", "256")},
            r"--batch-size 256 is not divisible by the 3 replicas in sync "
            r"\(3 training pods x 1 device\(s\)\); use --batch-size 255 or 258",
        ),
        (
            {"train_args": ("--batch-size=100",), "workers": 3, "gpus_per_worker": 2},
            "not divisible by the 8 replicas",
        ),
        ({"train_args": ("--batch-size", "many")}, "--batch-size must be an integer"),
        ({"image": ""}, "image"),
        ({"secret": "Not A Name"}, "secret"),
        ({"name": "q" * 60}, "longer than 63 characters"),
    ],
)
def test_bad_settings_fail_with_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        tfjob.build_tfjob(_config(**overrides))
    assert "\n" not in str(err.value)


def test_from_overrides_keeps_defaults_for_none_and_empty_secret_means_none():
    cfg = tfjob.JobConfig.from_overrides(
        data=DATA, model_dir=MODEL_DIR, workers=None, secret="", train_args=("--seed", "1")
    )
    assert cfg.workers == 2 and cfg.secret is None and cfg.train_args == ("--seed", "1")
    with pytest.raises(ConfigError, match="needs model_dir"):
        tfjob.JobConfig.from_overrides(data=DATA)


# --------------------------------------------------------------------------------------------
# The operator's webhook rules
# --------------------------------------------------------------------------------------------


def _broken(edit) -> dict:
    manifest = _manifest()
    edit(manifest)
    return manifest


def _specs(m: dict) -> dict:
    return m["spec"]["tfReplicaSpecs"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m["metadata"].update(name="Quest"), "metadata.name must be a DNS-1035"),
        (lambda m: m["metadata"].update(name="q" * 64), "metadata.name must be a DNS-1035"),
        (lambda m: m["metadata"].update(name="q" * 55), "longer than 63 characters"),
        (
            lambda m: _container(m, "Worker").update(name="trainer"),
            "Worker: needs a container named 'tensorflow'",
        ),
        (lambda m: _container(m, "Chief").pop("image"), "Chief.template.spec.containers[0].image"),
        (
            lambda m: _specs(m)["Chief"]["template"]["spec"].update(containers=[]),
            "containers must be specified",
        ),
        (lambda m: _specs(m).update(Master=_specs(m)["Chief"]), "both Chief and Master"),
        (lambda m: _specs(m).update(worker=_specs(m).pop("Worker")), "unknown replica type"),
        (lambda m: _specs(m)["Chief"].update(replicas=2), "TensorFlow allows one chief"),
        (lambda m: _specs(m)["Evaluator"].update(replicas=2), "allows one evaluator"),
        (lambda m: _specs(m)["Worker"].update(restartPolicy="Sometimes"), "restartPolicy"),
        (lambda m: m["spec"]["runPolicy"].update(cleanPodPolicy="Some"), "cleanPodPolicy"),
        (lambda m: m["spec"]["runPolicy"].update(backoffLimit=-1), "backoffLimit"),
        (lambda m: m["spec"].update(tfReplicaSpecs={}), "tfReplicaSpecs is required"),
        (lambda m: m.update(kind="PyTorchJob"), "apiVersion/kind"),
    ],
)
def test_validate_enforces_the_webhook_rules(edit, message):
    manifest = _broken(edit)
    with pytest.raises(ConfigError) as err:
        tfjob.validate(manifest)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_validate_accepts_what_the_generator_writes():
    for overrides in ({}, {"workers": 0, "evaluator": False}, {"name": "q" * 50}):
        tfjob.validate(_manifest(**overrides))


# --------------------------------------------------------------------------------------------
# Manifests as local processes
# --------------------------------------------------------------------------------------------


def test_manifest_maps_to_launcher_replicas(monkeypatch, caplog):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local-key-id-value")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    manifest = _manifest(env={"SHARDTRAIN_MARK": "m1"}, train_args=("--train-steps", "3"))
    with caplog.at_level(logging.INFO, logger="shardtrain.kubeflow.tfjob"):
        replicas = tfjob.local_replicas(manifest)
    argv = (sys.executable, "-m", "shardtrain.cli", "train", "--data", DATA)
    argv += ("--model-dir", MODEL_DIR, "--train-steps", "3", "--batch-size", "255")
    assert replicas == [
        launcher.Replica("chief", 1, argv, {"PYTHONUNBUFFERED": "1", "SHARDTRAIN_MARK": "m1"}),
        launcher.Replica("worker", 2, argv, {"PYTHONUNBUFFERED": "1", "SHARDTRAIN_MARK": "m1"}),
        launcher.Replica("evaluator", 1, argv, {"PYTHONUNBUFFERED": "1", "SHARDTRAIN_MARK": "m1"}),
    ]
    # Secret-backed variables: named in the log (missing required ones warned), never valued.
    assert "AWS_ACCESS_KEY_ID" in caplog.text and "AWS_ENDPOINT_URL" in caplog.text
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning == ["not set in this environment: AWS_SECRET_ACCESS_KEY"]
    assert "local-key-id-value" not in caplog.text


def test_container_commands_map_to_this_interpreter():
    assert tfjob.local_argv(["shardtrain", "inspect", "x"]) == (
        sys.executable,
        "-m",
        "shardtrain.cli",
        "inspect",
        "x",
    )
    assert tfjob.local_argv(["/usr/local/bin/shardtrain"])[:3] == (
        sys.executable,
        "-m",
        "shardtrain.cli",
    )
    assert tfjob.local_argv(["python3", "-c", "pass"]) == (sys.executable, "-c", "pass")
    assert tfjob.local_argv(["/bin/echo", "hi"]) == ("/bin/echo", "hi")


def test_zero_count_replicas_are_skipped_and_a_missing_command_is_the_entrypoint():
    manifest = _manifest()
    _specs(manifest)["Worker"]["replicas"] = 0
    del _container(manifest, "Chief")["command"]
    replicas = tfjob.local_replicas(manifest)
    assert [r.type for r in replicas] == ["chief", "evaluator"]
    assert replicas[0].command[:4] == (sys.executable, "-m", "shardtrain.cli", "train")


def test_load_manifest_picks_the_tfjob_out_of_a_kustomize_rendering(tmp_path):
    path = tmp_path / "all.yaml"
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "x"}}
    path.write_text(yaml.safe_dump_all([sa, _manifest()]))
    assert tfjob.load_manifest(path) == _manifest()
    path.write_text(yaml.safe_dump(sa))
    with pytest.raises(ConfigError, match="expected one TFJob, found 0"):
        tfjob.load_manifest(path)
    with pytest.raises(ConfigError, match="cannot read"):
        tfjob.load_manifest(tmp_path / "missing.yaml")
    assert tfjob.is_manifest_path(["job.yaml"]) and tfjob.is_manifest_path(["j.JSON"])
    assert not tfjob.is_manifest_path(["train", "--data", "x.yaml"])
    assert not tfjob.is_manifest_path(["train"])


PRINT_ENV = (
    "import json, os; print('SEEN=' + json.dumps({'tf_config': json.loads(os.environ"
    "['TF_CONFIG']), 'mark': os.environ.get('SHARDTRAIN_MARK'), 'key_ok': os.environ.get("
    "'AWS_ACCESS_KEY_ID') == 'local-id'}))"
)


def _seen(text: str) -> dict[str, dict]:
    seen = {}
    for line in text.splitlines():
        prefix, _, rest = line.partition("] ")
        if rest.startswith("SEEN="):
            seen[prefix.lstrip("[")] = json.loads(rest.removeprefix("SEEN="))
    return seen


def test_run_local_runs_a_rendered_manifest_with_operator_shaped_tf_config(tmp_path):
    manifest = _manifest(env={"SHARDTRAIN_MARK": "from-manifest"})
    for rspec in _specs(manifest).values():
        container = rspec["template"]["spec"]["containers"][0]
        container["command"], container["args"] = ["python", "-c", PRINT_ENV], []
    path = tmp_path / "job.yaml"
    path.write_text(tfjob.to_yaml(manifest))

    proc = run_cli("run-local", "--grace", "5", str(path), env={"AWS_ACCESS_KEY_ID": "local-id"})
    assert proc.returncode == 0, proc.stderr
    assert "local job succeeded" in proc.stdout
    seen = _seen(proc.stdout)
    assert sorted(seen) == ["chief-0", "evaluator-0", "worker-0", "worker-1"]
    cluster = seen["chief-0"]["tf_config"]["cluster"]
    assert list(cluster) == ["chief", "evaluator", "worker"]  # the operator's order
    assert [len(cluster[t]) for t in cluster] == [1, 1, 2]
    for name, got in seen.items():
        kind, index = name.rsplit("-", 1)
        assert got["tf_config"] == {
            "cluster": cluster,
            "task": {"type": kind, "index": int(index)},
            "environment": "cloud",
        }
        assert got["mark"] == "from-manifest" and got["key_ok"] is True


def test_the_shardtrain_entrypoint_runs_this_installation():
    manifest = _manifest(workers=1)
    for rspec in _specs(manifest).values():
        rspec["template"]["spec"]["containers"][0]["args"] = ["--version"]
    out = io.StringIO()
    result = launcher.run_local(tfjob.local_replicas(manifest), out=out, grace=5, timeout=120)
    assert result.succeeded, result.reason
    lines = [line for line in out.getvalue().splitlines() if "version" in line]
    assert sorted(line.split("]")[0] for line in lines) == ["[chief-0", "[evaluator-0", "[worker-0"]
    assert all(line.endswith(f"shardtrain, version {__version__}") for line in lines)


def test_run_local_refuses_replica_options_with_a_manifest(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(tfjob.to_yaml(_manifest()))
    proc = run_cli("run-local", "--workers", "3", str(path))
    assert proc.returncode == 2
    assert "drop --workers/--evaluator" in proc.stderr


def test_run_local_reports_a_bad_manifest_in_one_line(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(tfjob.to_yaml(_broken(lambda m: _container(m, "Worker").update(name="tf"))))
    proc = run_cli("run-local", str(path))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "error: TFJob shardtrain: tfReplicaSpecs.Worker: needs a container named 'tensorflow'"
    ]


# --------------------------------------------------------------------------------------------
# Submit and wait, through the TrainingClient seam: what a live operator cannot be made to do
# on cue. Submitting, success, failure, timeouts, log streaming and manifest files run
# against the real control plane in tests/integration/test_k8s_operator.py.
# --------------------------------------------------------------------------------------------


def _job_with(*conditions: tuple[str, str, str]) -> models.KubeflowOrgV1TFJob:
    job = tfjob.build_tfjob(_config())
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
        result = tfjob.submit_and_wait(tfjob.build_tfjob(_config()), client=sdk, out=out, **kwargs)
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


# --------------------------------------------------------------------------------------------
# The CLI
# --------------------------------------------------------------------------------------------


def _rendered(capsys) -> dict:
    """The YAML `tfjob render` printed; a parse error shows the first lines of stdout (a
    render that printed anything besides the manifest would break `render > job.yaml`)."""
    out = capsys.readouterr().out
    try:
        return yaml.safe_load(out)
    except yaml.YAMLError as exc:
        head = "\n".join(out.splitlines()[:3])
        raise AssertionError(
            f"stdout is not one YAML manifest: {exc}\nfirst lines:\n{head}"
        ) from exc


def _main(*args: str) -> int:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(list(args))
    return exit_info.value.code or 0


def test_render_prints_the_generators_yaml(capsys):
    code = _main(
        "tfjob", "render", "--data", DATA, "--model-dir", MODEL_DIR, "--workers", "1",
        "--gpus-per-worker", "0", "--no-evaluator", "--secret", "", "--", "--train-steps", "9",
    )  # fmt: skip
    assert code == 0
    expected = _manifest(
        workers=1,
        gpus_per_worker=0,
        evaluator=False,
        secret=None,
        train_args=("--train-steps", "9"),
    )
    assert _rendered(capsys) == expected


def test_render_warns_when_the_grace_period_is_shorter_than_a_stop_needs(caplog):
    """After SIGTERM a replica needs one step plus a checkpoint write: warn below 30 s.

    Run as a user runs it (``render > job.yaml``), in a process of its own: stdout is
    exactly the manifest, the warning goes to stderr. (In-process, this test twice read a
    first stdout line of ~180 spaces before the YAML, written by something an earlier test
    left running; `render` itself writes nothing else, as this shows.)"""
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable, "-m", "shardtrain.cli", "tfjob", "render", "--data", DATA,
            "--model-dir", MODEL_DIR, "--termination-grace-seconds", "10",
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    pods = [
        spec["template"]["spec"]
        for spec in yaml.safe_load(done.stdout)["spec"]["tfReplicaSpecs"].values()
    ]
    assert {pod["terminationGracePeriodSeconds"] for pod in pods} == {10}
    assert "termination_grace_seconds 10" in done.stderr and "SIGKILL" in done.stderr
    with caplog.at_level(logging.WARNING, logger="shardtrain.kubeflow.tfjob"):
        tfjob.build_tfjob(_config())  # the default, 120 s
    assert "termination_grace_seconds" not in caplog.text


def test_render_needs_data_and_model_dir(capsys):
    assert _main("tfjob", "render", "--data", DATA) == 2
    assert "--model-dir" in capsys.readouterr().err


def test_submit_refuses_job_options_with_a_manifest_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(tfjob.to_yaml(_manifest(name="from-file")))
    assert _main("tfjob", "submit", "-f", str(path), "--workers", "4") == 2


def test_submit_without_a_cluster_is_one_clear_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert _main("tfjob", "submit", "--data", DATA, "--model-dir", MODEL_DIR) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: no Kubernetes configuration")


def test_nothing_here_prints_secret_values(monkeypatch, capsys, caplog, tmp_path):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "super-secret-value-123")
    with caplog.at_level(logging.DEBUG):
        _main("tfjob", "render", "--data", DATA, "--model-dir", MODEL_DIR)
        tfjob.local_replicas(_manifest())
    assert "super-secret-value-123" not in capsys.readouterr().out + caplog.text
    assert os.environ["AWS_SECRET_ACCESS_KEY"] == "super-secret-value-123"


def test_cli_help_shows_the_manifest_defaults_which_start_up_does_not_read():
    """`tfjob render --help` ends each setting's help with the base manifest's value; just
    importing the CLI reads no manifest (PyYAML, ~30 ms of every command's start-up)."""
    import subprocess

    from click.testing import CliRunner

    text = CliRunner().invoke(cli.cli, ["tfjob", "render", "--help"], terminal_width=200).output
    assert (
        f"Worker replicas besides the chief. [default: {tfjob.JobConfig.default('workers')}]"
        in text
    )
    assert "[default: none]" in text or "[default: no]" in text or "[default: yes]" in text
    code = (
        "import sys, shardtrain.cli; "
        "print(sorted(m for m in ('yaml', 'shardtrain.kubeflow.tfjob') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


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
    args = _container(_manifest(**overrides), "Chief")["args"]
    got = args[args.index("--batch-size") + 1] if "--batch-size" in args else None
    assert got == batch


# --------------------------------------------------------------------------------------------
# Queues: Kueue and Volcano
# --------------------------------------------------------------------------------------------


def test_no_queue_settings_by_default():
    m = _manifest()
    assert tfjob.KUEUE_QUEUE_LABEL not in m["metadata"]["labels"]
    assert "suspend" not in m["spec"]["runPolicy"]
    assert "schedulingPolicy" not in m["spec"]["runPolicy"]
    for rspec in m["spec"]["tfReplicaSpecs"].values():
        pod = rspec["template"]["spec"]
        assert "schedulerName" not in pod and "priorityClassName" not in pod


def test_a_kueue_queue_labels_the_job_and_creates_it_suspended():
    m = _manifest(queue="gpu-team", priority_class="high")
    assert m["metadata"]["labels"][tfjob.KUEUE_QUEUE_LABEL] == "gpu-team"
    assert m["spec"]["runPolicy"]["suspend"] is True
    assert "schedulingPolicy" not in m["spec"]["runPolicy"]
    for rspec in m["spec"]["tfReplicaSpecs"].values():
        pod = rspec["template"]["spec"]
        assert pod["priorityClassName"] == "high"  # Kueue's workload priority
        assert "schedulerName" not in pod
        # The label is the job's (Kueue reads it there), not the pods'.
        assert tfjob.KUEUE_QUEUE_LABEL not in rspec["template"]["metadata"]["labels"]
    assert tfjob.is_queued(tfjob.build_tfjob(_config(queue="gpu-team")))
    assert not tfjob.is_queued(tfjob.build_tfjob(_config()))


@pytest.mark.parametrize(
    ("overrides", "replicas"),
    [({}, 4), ({"workers": 0, "evaluator": False}, 1), ({"workers": 5}, 7)],
)
def test_volcano_gangs_every_replica(overrides, replicas):
    m = _manifest(gang_scheduler="volcano", queue="research", priority_class="high", **overrides)
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
    policy = _manifest(gang_scheduler="volcano")["spec"]["runPolicy"]["schedulingPolicy"]
    assert policy == {"minAvailable": 4}  # the operator's default queue is "default"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"queue": "Team_A"}, "queue 'Team_A' is not a valid queue name"),
        ({"queue": "q" * 64}, "is not a valid queue name"),
        ({"gang_scheduler": "yunikorn"}, "gang_scheduler 'yunikorn' is not supported"),
        ({"priority_class": "High!"}, "priority_class 'High!' is not a valid name"),
    ],
)
def test_bad_queue_settings_fail_with_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message):
        _config(**overrides)


def test_empty_queue_settings_mean_none():
    cfg = tfjob.JobConfig.from_overrides(
        data=DATA, model_dir=MODEL_DIR, queue="", gang_scheduler="", priority_class=""
    )
    assert cfg.queue is cfg.gang_scheduler is cfg.priority_class is None


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m["spec"]["runPolicy"].update(suspend="yes"), "suspend must be true or false"),
        (
            lambda m: m["spec"]["runPolicy"].update(schedulingPolicy={"minAvailable": 5}),
            r"minAvailable must be between 1 and the job's 4 replicas",
        ),
        (
            lambda m: m["spec"]["runPolicy"].update(schedulingPolicy={"minAvailable": 0}),
            "minAvailable must be between 1",
        ),
    ],
)
def test_validate_checks_suspend_and_the_gang_size(edit, message):
    m = _manifest()
    edit(m)
    with pytest.raises(ConfigError, match=message):
        tfjob.validate(m)


def test_queue_manifests_round_trip_through_the_sdk_models():
    for overrides in ({"queue": "q"}, {"gang_scheduler": "volcano", "queue": "q"}):
        m = _manifest(priority_class="p", **overrides)
        assert tfjob.to_manifest(tfjob.from_manifest(m)) == m


def test_render_writes_the_queue_options(capsys):
    code = _main(
        "tfjob", "render", "--data", DATA, "--model-dir", MODEL_DIR,
        "--queue", "gpu-team", "--priority-class", "high",
    )  # fmt: skip
    assert code == 0
    m = _rendered(capsys)
    assert m == _manifest(queue="gpu-team", priority_class="high")
    code = _main(
        "tfjob", "render", "--data", DATA, "--model-dir", MODEL_DIR,
        "--gang-scheduler", "volcano", "--queue", "research",
    )  # fmt: skip
    assert code == 0
    m = _rendered(capsys)
    assert m == _manifest(gang_scheduler="volcano", queue="research")


def test_the_clis_gang_schedulers_are_the_generators():
    from shardtrain.cli.jobs import tfjob_render_cmd

    (option,) = [p for p in tfjob_render_cmd.params if p.name == "gang_scheduler"]
    assert tuple(option.type.choices) == tfjob.GANG_SCHEDULERS


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
    job = tfjob.build_tfjob(_config(queue="gpu-team"))
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
    job = tfjob.build_tfjob(_config(queue="gpu-team"))
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
            tfjob.build_tfjob(_config(queue="q")), client=client, out=out, wait_timeout=30,
            poll_interval=0.01, stream_logs=False,
        )  # fmt: skip
    text = out.getvalue()
    assert text.count("is queued") == 2 and text.count("was admitted") == 2


def test_a_queued_manifest_runs_locally_at_once(caplog):
    caplog.set_level(logging.INFO, logger="shardtrain.kubeflow.tfjob")
    replicas = tfjob.local_replicas(_manifest(queue="q", workers=1, evaluator=False))
    assert [r.type for r in replicas] == ["chief", "worker"]
    assert "queue and gang-scheduling settings apply on a cluster" in caplog.text
