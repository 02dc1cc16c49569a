"""Every parameter of the pipeline and its components documented once, from its option's help.

KFP shows each input's and output's description in its UI; it reads them from the docstrings
:mod:`shardtrain.kubeflow.parameters` generates. Checked on the YAML users upload or load (the
checked-in ``pipelines/`` and ``components/``, which ``test_client.py`` keeps equal to the
package): every input and output of the pipeline and of each component has a description; a
parameter carrying an option is described by the option's help; a component's parameter that
receives a pipeline parameter is described as that parameter.
"""

from __future__ import annotations

import inspect

import pytest
import yaml

from helpers import REPO
from shardtrain.data.shard_config import ShardConfig
from shardtrain.kubeflow import client, parameters
from shardtrain.options import options, pipeline_help
from shardtrain.train.config import TrainConfig

YAML_FILES = [REPO / "pipelines" / "csv_to_model.yaml"] + [
    REPO / "components" / f"{name}.yaml" for name in client.COMPONENTS
]


def _spec(path) -> dict:
    return next(yaml.safe_load_all(path.read_text()))


PIPELINE = _spec(YAML_FILES[0])
ROOT_PARAMS = PIPELINE["root"]["inputDefinitions"]["parameters"]


def _ours(spec: dict):
    """(name, definition) of the root and of every component that runs a step (KFP's own
    ``for-loop`` components pass channels through and carry no descriptions)."""
    yield "root", spec["root"]
    for name, component in spec.get("components", {}).items():
        if "executorLabel" in component:
            yield name, component


def _descriptions(component: dict) -> dict[tuple[str, str], str | None]:
    """(section, name) → description of every input and output."""
    return {
        (section, name): entry.get("description")
        for section in ("inputDefinitions", "outputDefinitions")
        for kind in ("parameters", "artifacts")
        for name, entry in component.get(section, {}).get(kind, {}).items()
    }


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: p.name)
def test_every_input_and_output_has_a_description(path):
    spec = _spec(path)
    seen = {
        (where, *key): text for where, c in _ours(spec) for key, text in _descriptions(c).items()
    }
    assert len(seen) >= 3
    missing = [key for key, text in seen.items() if not (text and text.strip())]
    assert not missing, f"{path.name}: no description for {missing}"


@pytest.mark.parametrize("cls", [ShardConfig, TrainConfig])
def test_a_parameter_carrying_an_option_is_described_by_its_help(cls):
    carried = [opt for opt in options(cls) if opt.spec.pipeline]
    assert carried
    for opt in carried:
        description = ROOT_PARAMS[opt.spec.pipeline].get("description")
        assert description == pipeline_help(cls, opt), opt.spec.pipeline


def test_a_components_parameter_is_described_as_the_pipeline_parameter_it_receives():
    """By the compiled graph: whatever a task's input is wired from, in the pipeline and in the
    component files alike."""
    files = {path.stem: _spec(path) for path in YAML_FILES[1:]}
    root_tasks = PIPELINE["root"]["dag"]["tasks"]
    loop = PIPELINE["components"][root_tasks["for-loop-1"]["componentRef"]["name"]]
    checked = 0
    for task in [*root_tasks.values(), *loop["dag"]["tasks"].values()]:
        component = PIPELINE["components"][task["componentRef"]["name"]]
        if "executorLabel" not in component:
            continue
        alone = files[task["componentRef"]["name"].removeprefix("comp-").replace("-", "_")]
        inputs = component["inputDefinitions"]["parameters"]
        for name, argument in task["inputs"].get("parameters", {}).items():
            source = argument.get("componentInputParameter", "").removeprefix("pipelinechannel--")
            # (pipelinechannel--image: the image parameter KFP hands a task for its container)
            if source in ROOT_PARAMS and not name.startswith("pipelinechannel--"):
                want = ROOT_PARAMS[source]["description"]
                assert inputs[name]["description"] == want, (task["taskInfo"]["name"], name)
                got = alone["root"]["inputDefinitions"]["parameters"][name]["description"]
                assert got == want, (task["taskInfo"]["name"], name)
                checked += 1
    assert checked >= 2 * len(parameters.SHARDING) + 20


def test_the_pipelines_signature_is_its_parameter_list():
    """Required parameters first, each once; the signature KFP reads is the list's."""
    names = [p.name for p in parameters.PIPELINE]
    assert len(names) == len(set(names))
    assert names[:4] == ["sources", "dataset_uri", "model_dir", "serving_uri"]
    assert all(not p.required for p in parameters.PIPELINE[4:])
    signature = inspect.signature(client.load_pipeline().pipeline_func)
    assert list(signature.parameters) == names
    for p in parameters.PIPELINE:
        default = signature.parameters[p.name].default
        assert default == (inspect.Parameter.empty if p.required else p.default), p.name


def test_arguments_pass_pipeline_parameters_by_the_components_names():
    values = {p.name: f"<{p.name}>" for p in parameters.PIPELINE}
    train = parameters.arguments(parameters.TRAIN, values)
    assert train["workers"] == "<tfjob_workers>" and train["timeout"] == "<train_timeout>"
    assert train["secret"] == "<secret_name>" and train["model_dir"] == "<model_dir>"
    # Values the graph sets are not pipeline parameters.
    assert not {"dataset", "model", "run_id"} & set(train)
    shard = parameters.arguments(parameters.SHARD, values)
    assert (shard["num_workers"], shard["cpu"]) == ("<shard_workers>", "<shard_cpu>")
    assert "worker_index" not in shard


def test_generated_docstrings_put_inputs_under_args_and_outputs_under_returns():
    params = (
        parameters.Param("data", "Input[Dataset]", "What is read."),
        parameters.Param("written", "Output[Model]", "What is written."),
        parameters.Param("size", "int", "How much: 1 or more.", 1),
    )
    returned = parameters.Param("Output", "str", "A report.")
    doc = parameters.docstring("  Does it.\n", params, [returned])
    assert doc == (
        "Does it.\n\nArgs:\n    data: What is read.\n    size: How much: 1 or more.\n"
        "\nReturns:\n    written: What is written.\n    Output: A report.\n"
    )
    function = parameters.define(
        "example", params, module=__name__, doc=doc, body="return str(size)", returns="str"
    )
    assert inspect.getdoc(function) == doc.strip()
    assert inspect.getsource(function).startswith(
        "def example(\n    data: Input[Dataset],\n    written: Output[Model],\n    size: int = 1,\n"
    )
    assert function(data=None, written=None) == "1"
    with pytest.raises(ValueError, match="triple quote"):
        parameters.function_source("f", (), returns=None, doc='say """', body="pass")
