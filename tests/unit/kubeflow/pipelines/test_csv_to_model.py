"""The compiled ``csv_to_model`` pipeline, checked the way a reviewer would.

The compiled YAML is what users upload in the UI: every step runs the pinned project image (or
the ``image`` parameter whose default it is), every step pod gets the storage Secret by *name*
through kfp-kubernetes, no credential value of this environment appears anywhere, no step pod
asks for a GPU (the GPUs are on the TFJob's replicas, see ``test_steps.py``), and the graph
fans the shard workers out and collects them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kfp import dsl

from shardtrain.kubeflow import client
from shardtrain.kubeflow.components import IMAGE
from shardtrain.kubeflow.jobs import tfjob

#: Credentials and endpoints present in the compiling process: none may reach the YAML.
FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "fake-key-id-for-the-leak-check",
    "AWS_SECRET_ACCESS_KEY": "fake/Secret+Key/shardtrain-unit-test-0123",
    "AWS_ENDPOINT_URL": "http://fake-minio.shardtrain.invalid:9000",
    "AWS_REGION": "xx-fake-1",
    "AWS_SESSION_TOKEN": "FakeSessionToken0shardtrain0unit0test",
}
STEP_EXECUTORS = {
    "exec-plan-shards",
    "exec-shard",
    "exec-settle-shards",
    "exec-shard-2",  # the shard workers that run again after settling
    "exec-finalize-shards",
    "exec-train",
    "exec-evaluate",
    "exec-export",
    "exec-deploy",
}
IMAGE_PARAM = "{{$.inputs.parameters['pipelinechannel--image']}}"


# --------------------------------------------------------------------------------------------
# The compiled YAML
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[str, dict, dict]:
    """The pipeline compiled in a process whose environment holds (fake) credentials."""
    path = str(tmp_path_factory.mktemp("compiled") / "csv_to_model.yaml")
    with pytest.MonkeyPatch.context() as mp:
        for name, value in FAKE_ENV.items():
            mp.setenv(name, value)
        client.compile_pipeline(path)
    text = Path(path).read_text()
    spec, platform = list(yaml.safe_load_all(text))
    return text, spec, platform


def test_every_step_runs_the_pinned_project_image(compiled):
    _, spec, _ = compiled
    executors = spec["deploymentSpec"]["executors"]
    assert set(executors) == STEP_EXECUTORS
    # One knob: the `image` parameter (default: the pinned image, the TFJob's default too).
    default = spec["root"]["inputDefinitions"]["parameters"]["image"]["defaultValue"]
    assert default == IMAGE == tfjob.DEFAULT_IMAGE
    assert ":" in default.rsplit("/", 1)[-1] and not default.endswith(":latest")
    for name, executor in executors.items():
        assert executor["container"]["image"] == IMAGE_PARAM, name


def test_step_pods_get_the_storage_secret_by_name_only(compiled):
    _, spec, platform = compiled
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert set(executors) == STEP_EXECUTORS
    wanted = {key: optional for key, optional in tfjob.STORAGE_ENV}
    for name, config in executors.items():
        seen = {}
        for entry in config["secretAsEnv"]:
            # The Secret's name comes from the `secret_name` pipeline parameter.
            source = entry["secretNameParameter"]["componentInputParameter"]
            assert source.removeprefix("pipelinechannel--") == "secret_name", name
            assert "secretName" not in entry or entry["secretName"] == ""
            for pair in entry["keyToEnv"]:
                assert pair["secretKey"] == pair["envVar"]
                seen[pair["envVar"]] = entry.get("optional", False)
        assert seen == wanted, name
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["secret_name"]["defaultValue"] == tfjob.JobConfig.default("secret")


def test_no_credential_value_anywhere_in_the_yaml(compiled):
    text, spec, _ = compiled
    for name, value in FAKE_ENV.items():
        assert value not in text, name
    # Nor are storage variables set as plain values on any container.
    for executor in spec["deploymentSpec"]["executors"].values():
        env = {e["name"] for e in executor["container"].get("env", [])}
        assert not env & set(FAKE_ENV)
    # No parameter is meant to carry one either: the Secret is given by name.
    names = set(spec["root"]["inputDefinitions"]["parameters"])
    suspicious = ("password", "token", "access", "credential", "secret")
    assert {n for n in names if any(w in n for w in suspicious)} == {"secret_name"}


def test_no_gpu_on_step_pods_and_resources_set(compiled):
    _, spec, _ = compiled
    for name, executor in spec["deploymentSpec"]["executors"].items():
        resources = executor["container"].get("resources", {})
        assert "accelerator" not in resources, name
        assert not any("gpu" in str(k).lower() for k in resources), name
        assert resources.get("resourceCpuRequest"), name
        assert resources.get("resourceMemoryRequest"), name
    for name in ("exec-shard", "exec-shard-2"):  # the shard workers, and those that run again
        shard = spec["deploymentSpec"]["executors"][name]["container"]["resources"]
        cpu = "{{$.inputs.parameters['pipelinechannel--shard_cpu']}}"
        assert shard["resourceCpuRequest"] == cpu, name
    plan = spec["deploymentSpec"]["executors"]["exec-plan-shards"]["container"]["resources"]
    assert plan["resourceCpuRequest"] == "500m"  # it reads the listing and a sample only


def test_graph_fans_out_shard_workers_and_collects_them(compiled):
    _, spec, _ = compiled
    root = spec["root"]["dag"]["tasks"]
    assert set(root) == {
        "plan-shards",
        "for-loop-1",
        "settle-shards",
        "for-loop-2",  # the workers settling names to run again (usually none)
        "finalize-shards",
        "train",
        "evaluate",
        "condition-3",  # the export, if blessed
    }
    loop = root["for-loop-1"]
    assert loop["parameterIterator"]["items"]["inputParameter"].endswith("plan-shards-Output")
    assert "plan-shards" in loop["dependentTasks"]
    inner = spec["components"][loop["componentRef"]["name"]]["dag"]["tasks"]
    assert set(inner) == {"shard"}
    settle = root["settle-shards"]
    assert settle["dependentTasks"] == ["for-loop-1"]
    reports = settle["inputs"]["parameters"]["worker_reports"]["taskOutputParameter"]
    assert reports["producerTask"] == "for-loop-1"
    again = root["for-loop-2"]
    assert again["parameterIterator"]["items"]["inputParameter"].endswith("settle-shards-Output")
    inner = spec["components"][again["componentRef"]["name"]]["dag"]["tasks"]
    assert set(inner) == {"shard-2"}
    finalize = root["finalize-shards"]
    assert set(finalize["dependentTasks"]) == {"for-loop-1", "for-loop-2", "settle-shards"}
    finalize_inputs = finalize["inputs"]["parameters"]["worker_reports"]
    assert finalize_inputs["taskOutputParameter"]["producerTask"] == "for-loop-1"
    # What settle committed and checked when no worker runs again: finalize only points at it.
    handed = finalize["inputs"]["parameters"]["settled"]["taskOutputParameter"]
    assert handed == {"producerTask": "settle-shards", "outputParameterKey": "settled"}
    settle_outputs = spec["components"][settle["componentRef"]["name"]]["outputDefinitions"]
    assert set(settle_outputs["parameters"]) == {"Output", "settled"}
    # The export runs only when evaluate returns blessed = true.
    blessed = root["condition-3"]
    assert set(blessed["dependentTasks"]) == {"train", "evaluate"}
    assert blessed["taskInfo"]["name"] == "blessed"
    condition = blessed["triggerPolicy"]["condition"]
    assert condition == "inputs.parameter_values['pipelinechannel--evaluate-Output'] == true"
    # Inside it: the export, and the deploy step's own condition (test below).
    inner = spec["components"][blessed["componentRef"]["name"]]["dag"]["tasks"]
    assert set(inner) == {"export", "condition-4"}
    # The steps resume by themselves; KFP's cache must not skip one whose outputs are gone.
    for name, task in root.items():
        if name not in ("for-loop-1", "for-loop-2", "condition-3"):
            assert not task.get("cachingOptions", {}).get("enableCache"), name
    # Every run gets its own TFJob name from the run id.
    run_id = root["train"]["inputs"]["parameters"]["run_id"]["runtimeValue"]["constant"]
    assert run_id == dsl.PIPELINE_JOB_ID_PLACEHOLDER
    outputs = spec["root"]["outputDefinitions"]
    assert set(outputs["artifacts"]) == {
        "model",
        "metrics",
        "classification",
        "sliced",
        "report",
        "html_report",
    }
    assert outputs["parameters"]["blessed"]["parameterType"] == "BOOLEAN"


def test_the_pipeline_passes_its_queue_parameters_to_the_train_step(compiled):
    # The pipeline passes its parameters of the same names to the train step, '' by default.
    _, spec, _ = compiled
    params = spec["root"]["inputDefinitions"]["parameters"]
    train = spec["root"]["dag"]["tasks"]["train"]["inputs"]["parameters"]
    for name in ("queue", "gang_scheduler", "priority_class"):
        assert params[name]["defaultValue"] == "", name
        assert train[name]["componentInputParameter"] == name, name


def test_the_deploy_step_runs_after_the_export_only_when_asked(compiled):
    _, spec, _ = compiled
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["deploy"]["defaultValue"] is False
    assert params["deploy_namespace"]["defaultValue"] == ""
    blessed = spec["root"]["dag"]["tasks"]["condition-3"]  # deploy only what was exported
    condition = spec["components"][blessed["componentRef"]["name"]]["dag"]["tasks"]["condition-4"]
    assert condition["triggerPolicy"]["condition"] == (
        "inputs.parameter_values['pipelinechannel--deploy'] == true"
    )
    assert condition["dependentTasks"] == ["export"]
    inner = spec["components"][condition["componentRef"]["name"]]["dag"]["tasks"]
    (task,) = inner.values()
    assert task["componentRef"]["name"] == "comp-deploy"
    assert not task.get("cachingOptions", {}).get("enableCache")
    inputs = task["inputs"]
    served = inputs["artifacts"]["served_model"]["componentInputArtifact"]
    assert served == "pipelinechannel--export-served_model"
    assert inputs["parameters"]["name"]["componentInputParameter"] == (
        "pipelinechannel--deploy_name"
    )
