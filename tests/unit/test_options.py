"""One definition of the options: ShardConfig and TrainConfig, and what is derived from them.

The ``shard`` and ``train`` flags are generated from the configuration dataclasses' fields
(:mod:`shardtrain.options`, :mod:`shardtrain.commands`), and so are the signatures of the
pipeline and its components (:mod:`shardtrain.kubeflow.parameters`). Checked here on what KFP
reads: every sharding option reaches the pipeline under the name, type and default its spec
gives, through ``plan_shards`` and every ``shard`` worker alike, and ``shard_config`` turns
each one into the field; the pipeline's training parameters are fields of TrainConfig whose
flags the TFJob's replicas receive. (Their descriptions: ``kubeflow/test_parameters.py``.)
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import subprocess
import sys
import types
from pathlib import Path
from unittest import mock

import pytest
import yaml
from click.testing import CliRunner

from shardtrain.cli.data import shard_cmd
from shardtrain.cli.train import train_cmd
from shardtrain.data import sharding
from shardtrain.data.sharding import MIB, ShardConfig
from shardtrain.errors import ConfigError
from shardtrain.kubeflow import client, parameters, steps
from shardtrain.kubeflow.jobs import tfjob
from shardtrain.options import METADATA_KEY, check, from_params, options, pipeline_help
from shardtrain.train.config import TrainConfig

#: The flags `shard` had before they were generated: none may disappear.
SHARD_FLAGS = {
    "--output", "-o", "--label", "--key", "--split", "--schema", "--compression",
    "--compression-level", "--num-shards", "--target-shard-mb", "--min-shards", "--task-mb",
    "--max-bad-fraction", "--top-k", "--worker-index", "--num-workers", "--processes",
    "--overwrite", "--images", "--image-column", "--resize",
}  # fmt: skip
#: The flags `train` had before they were generated.
TRAIN_FLAGS = {
    "--data", "--model-dir", "--config", "--model", "--backbone", "--image-size",
    "--mixed-precision", "--train-steps", "--batch-size", "--learning-rate", "--lr-schedule",
    "--eval-every", "--checkpoint-every", "--steps-per-loop", "--eval-steps", "--hidden-units",
    "--dropout", "--exclude", "--devices", "--seed", "--cache-dir", "--cache-mb",
}  # fmt: skip
#: ShardConfig fields the pipeline's graph sets instead of a parameter of their own: the
#: ParallelFor item, `shard_workers`, `shard_cpu`; and no pipeline deletes a dataset.
SET_BY_THE_GRAPH = {"worker_index", "num_workers", "processes", "overwrite", "overwrite_foreign"}
#: Pipeline defaults that differ from the configuration's on purpose: the quest logs' label
#: (the demo's data), and a production-sized training run.
PIPELINE_OWN_DEFAULTS = {
    "label": "cleared",
    "train_steps": 20000,
    "batch_size": 1024,
    "checkpoint_every": 1000,
}

SHARD_OPTIONS = options(ShardConfig)
#: The sharding parameters of the pipeline, in ShardConfig's order.
SHARDING_PARAMS = [o.spec.pipeline for o in SHARD_OPTIONS if o.spec.pipeline]


def _flags(command) -> dict[str, str]:
    """flag → click parameter name, of every option of ``command``."""
    ctx = command.make_context(command.name, ["--help"], resilient_parsing=True)
    return {
        flag: p.name
        for p in command.get_params(ctx)
        for flag in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))
    }


def _leaf_fields(cls: type, prefix: str = "") -> list[tuple[str, dataclasses.Field]]:
    out = []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(f.default_factory):  # a section: ModelConfig, InputConfig
            out += _leaf_fields(f.default_factory, f"{prefix}{f.name}.")
        else:
            out.append((prefix + f.name, f))
    return out


# --------------------------------------------------------------------------------------------
# The definition itself
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [ShardConfig, TrainConfig])
def test_every_field_is_an_option_with_help(cls):
    paths = {o.path for o in options(cls)}
    for path, f in _leaf_fields(cls):
        assert METADATA_KEY in f.metadata, f"{cls.__name__}.{path} has no option(help=...)"
        assert path in paths
    for opt in options(cls):
        assert opt.spec.help.strip().endswith((".", "]", ")")), opt.path
    flags = [flag for o in options(cls) for flag in o.flags]
    assert len(flags) == len(set(flags)), "two options share a flag"


@pytest.mark.parametrize("cls", [ShardConfig, TrainConfig])
def test_user_forms_of_every_default_convert_back(cls):
    """The default a flag shows and a pipeline parameter has are the field's default."""
    for opt in options(cls):
        if opt.required:
            continue
        shown = opt.value(opt.user_default())
        assert shown == opt.default or (shown is None and opt.default in (None, "")), opt.path
        assert opt.value(opt.pipeline_default()) == opt.default, opt.path


def test_compression_auto_is_gzip_for_per_row_examples_and_none_for_columnar_blocks():
    base = dict(sources=("a.csv",), output="out", label="y")
    assert ShardConfig(**base, record_format="example").compression == "gzip"
    assert ShardConfig(**base, record_format="columnar").compression == "none"
    assert ShardConfig(**base, record_format="columnar", compression="gzip").compression == "gzip"
    assert ShardConfig(**base, record_format="example", compression="none").compression == "none"


def test_record_format_auto_is_columnar_for_tabular_data_and_per_row_for_images():
    for source in ("a.csv", "a.parquet", "a.jsonl"):
        config = ShardConfig(sources=(source,), output="out", label="y")
        assert (config.record_format, config.compression) == ("columnar", "none"), source
        assert config.auto_resolved == ("record_format", "compression")
        assert config.plan_options()["record_format"] == "columnar"
    images = ShardConfig(sources=("root",), output="out", images=True)
    assert (images.record_format, images.compression) == ("example", "gzip")
    assert "record_format" not in images.plan_options()  # as before the option existed
    given = ShardConfig(sources=("a.csv",), output="out", label="y", compression="gzip")
    assert (given.record_format, given.compression) == ("columnar", "gzip")
    assert given.auto_resolved == ("record_format",)
    explicit = ShardConfig(sources=("a.csv",), output="out", label="y", record_format="example")
    assert explicit.auto_resolved == ("compression",)
    assert "record_format" not in explicit.plan_options()


def test_ranges_and_choices_are_checked_for_library_callers_too():
    base = dict(sources=("a.csv",), output="out", label="y")
    for changes, message in (
        ({"compression": "zip"}, "--compression must be auto, gzip or none, not 'zip'"),
        ({"compression_level": 10}, "--compression-level must be between 1 and 9, not 10"),
        ({"task_bytes": 1000}, "--task-mb must be at least 0.01"),
        ({"block_bytes": 0}, "--block-mb must be at least 0.01, not 0"),
        ({"target_shard_bytes": MIB // 2}, "--target-shard-mb must be at least 1, not 0.5"),
        ({"min_shards": 0}, "--min-shards must be at least 1"),
        ({"top_k": 0}, "--top-k must be at least 1"),
        ({"max_bad_fraction": 1.5}, "--max-bad-fraction must be between 0 and 1"),
        ({"num_workers": 0}, "--num-workers must be at least 1"),
        ({"worker_index": 2, "num_workers": 2}, "--worker-index must be in [0, 2)"),
    ):
        with pytest.raises(ConfigError, match=re.escape(message)):
            ShardConfig(**base, **changes)
    # The minimum itself, given in its unit, is accepted: 0.01 MB is 10,485 bytes, which is
    # 0.0099993 MB (it was refused as below 0.01).
    assert ShardConfig(**base, **from_params(ShardConfig, {"task_mb": 0.01})).task_bytes == 10485
    assert ShardConfig(**base, **from_params(ShardConfig, {"block_mb": 0.01})).block_bytes == 10485
    with pytest.raises(ConfigError, match=re.escape("--task-mb must be at least 0.01, not 0.0098")):
        ShardConfig(**base, **from_params(ShardConfig, {"task_mb": 0.0099}))
    check(TrainConfig())  # the training defaults are in range
    bad = TrainConfig()
    bad.model.dropout = 1.0
    with pytest.raises(ConfigError, match=re.escape("--dropout must be in [0, 1), not 1")):
        check(bad)
    bad = TrainConfig(data="d", model_dir="m", evaluator_poll_secs=0.0)
    with pytest.raises(ConfigError, match="--evaluator-poll-secs must be greater than 0"):
        bad.validate()  # a value from a config file meets the flag's range too


# --------------------------------------------------------------------------------------------
# shard: flags generated from ShardConfig
# --------------------------------------------------------------------------------------------


def test_every_sharding_option_is_a_shard_flag_and_none_was_lost():
    flags = _flags(shard_cmd)
    assert set(flags) >= SHARD_FLAGS
    for opt in SHARD_OPTIONS:
        if not opt.spec.argument:
            assert set(opt.flags) <= set(flags), opt.path
    assert "--block-mb" in flags  # a field without a flag before: it got one


def _shard(*args: str, env: dict | None = None) -> tuple[object, ShardConfig | None]:
    """Run `shard ARGS` with the sharder replaced; returns the result and its config."""
    seen = []

    def fake_shard(config, progress=None):
        seen.append(config)
        return sharding.ShardOutcome("worker-done", config.output)

    with (
        mock.patch.object(sharding, "shard", fake_shard),
        mock.patch.object(sharding, "tune_process_memory"),
    ):
        result = CliRunner().invoke(shard_cmd, list(args), env=env)
    return result, seen[0] if seen else None


def test_shard_flags_become_the_config_fields():
    result, config = _shard("a.csv", "b.csv", "-o", "out", "--label", "y")
    assert result.exit_code == 0, result.output
    assert config == ShardConfig(sources=("a.csv", "b.csv"), output="out", label="y")

    result, config = _shard(
        "a.csv", "-o", "out", "--label", "y", "--key", "id", "--split", "a=0.5,b=0.5",
        "--schema", "s.yaml", "--compression", "none", "--compression-level", "6",
        "--record-format", "columnar", "--num-shards", "3", "--target-shard-mb", "64",
        "--min-shards", "2", "--task-mb", "0.5",
        "--block-mb", "2", "--max-bad-fraction", "0.5", "--top-k", "7", "--processes", "2",
        "--overwrite",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert config == ShardConfig(
        sources=("a.csv",),
        output="out",
        label="y",
        key="id",
        splits=(("a", 0.5), ("b", 0.5)),
        schema_file="s.yaml",
        compression="none",
        compression_level=6,
        record_format="columnar",
        num_shards=3,
        target_shard_bytes=64 * MIB,
        min_shards=2,
        task_bytes=MIB // 2,
        block_bytes=2 * MIB,
        max_bad_fraction=0.5,
        top_k=7,
        processes=2,
        overwrite=True,
    )

    env = {"SHARDTRAIN_WORKER_INDEX": "1", "SHARDTRAIN_NUM_WORKERS": "3"}
    result, config = _shard("root", "-o", "out", "--images", "--resize", "32x16", env=env)
    assert result.exit_code == 0, result.output
    assert (config.worker_index, config.num_workers) == (1, 3)
    assert (config.images, config.resize, config.label) == (True, (32, 16), "label")
    assert "worker 1/3: 0 task(s) committed" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--split", "train"], "--split: 'train' is not NAME=FRACTION"),
        (["--images", "--resize", "224"], "--resize: '224' is not WIDTHxHEIGHT"),
        (["--resize", "8x8"], "--resize applies to image datasets only"),
    ],
)
def test_shard_flags_that_do_not_parse_fail_with_one_line(args, message):
    result, config = _shard("a.csv", "-o", "out", "--label", "y", *args)
    assert config is None
    assert isinstance(result.exception, ConfigError)
    assert message in str(result.exception)


def test_pipeline_help_writes_flags_as_the_pipeline_parameters_that_carry_them():
    by_name = {o.name: o for o in SHARD_OPTIONS}
    no_header, overwrite = by_name["no_header"], by_name["overwrite"]
    assert pipeline_help(ShardConfig, no_header) == (
        "The CSV files have no header line; name the columns with columns."
    )
    # --output is the pipeline's dataset_uri; --overwrite-foreign has no parameter: it stays.
    text = pipeline_help(ShardConfig, overwrite)
    assert "dataset at dataset_uri, whatever" in text and "(see --overwrite-foreign)" in text
    assert "--output" not in text


def test_shard_flags_outside_their_range_are_usage_errors():
    result, _ = _shard("a.csv", "-o", "out", "--label", "y", "--compression-level", "0")
    assert result.exit_code == 2
    assert "--compression-level" in result.output


# --------------------------------------------------------------------------------------------
# The pipeline and its components, checked against ShardConfig
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pipeline():
    return client.load_pipeline()


def test_the_pipeline_has_every_sharding_option(pipeline):
    params = inspect.signature(pipeline.pipeline_func).parameters
    described = pipeline.component_spec.inputs
    for opt in SHARD_OPTIONS:
        if opt.spec.pipeline is None:
            continue
        p = params.get(opt.spec.pipeline)
        assert p is not None, f"the pipeline has no parameter {opt.spec.pipeline} ({opt.path})"
        assert p.annotation == opt.user_type, opt.path
        if opt.required:
            assert p.default is inspect.Parameter.empty, opt.path
        else:
            want = PIPELINE_OWN_DEFAULTS.get(opt.spec.pipeline, opt.pipeline_default())
            assert p.default == want, opt.path
            assert isinstance(p.default, p.annotation), opt.path
        assert described[opt.spec.pipeline].description, f"{opt.spec.pipeline}: no Args: entry"
    assert {o.name for o in SHARD_OPTIONS if o.spec.pipeline is None} == SET_BY_THE_GRAPH


def test_plan_and_every_shard_worker_get_every_sharding_option(pipeline, tmp_path):
    """The components take the sharding parameters with the pipeline's types, and the graph
    wires the same pipeline parameter into both."""
    from shardtrain.kubeflow.components.plan_shards import plan_shards
    from shardtrain.kubeflow.components.shard import shard

    pipeline_params = inspect.signature(pipeline.pipeline_func).parameters
    checked = [p.name for p in parameters.CHECKED]  # the plan step checks the whole run
    for component, own in (
        (plan_shards, ["num_workers", *checked]),
        (shard, ["worker_index", "num_workers", "cpu"]),
    ):
        params = inspect.signature(component.python_func).parameters
        assert list(params) == SHARDING_PARAMS + own, component.name
        for name in SHARDING_PARAMS:
            assert params[name].annotation == pipeline_params[name].annotation, name
            assert params[name].default is inspect.Parameter.empty, (component.name, name)

    path = tmp_path / "p.yaml"
    client.compile_pipeline(str(path))
    spec = next(yaml.safe_load_all(path.read_text()))
    root = spec["root"]["dag"]["tasks"]
    loop = spec["components"][root["for-loop-1"]["componentRef"]["name"]]["dag"]["tasks"]
    for name in SHARDING_PARAMS:
        planned = root["plan-shards"]["inputs"]["parameters"][name]
        assert planned == {"componentInputParameter": name}, name
        worker = loop["shard"]["inputs"]["parameters"][name]
        assert worker == {"componentInputParameter": f"pipelinechannel--{name}"}, name
    assert root["plan-shards"]["inputs"]["parameters"]["num_workers"] == {
        "componentInputParameter": "shard_workers"
    }


#: Pipeline arguments, none at its default: a CSV run and an image run (some options exclude
#: each other), between them every sharding parameter.
CSV_ARGS = dict(
    sources=["a.csv", "b.csv"],
    dataset_uri="s3://b/ds",
    label="y",
    key="id",
    splits="a=0.5,b=0.5",
    source_format="csv",
    schema_file="s3://b/schema.yaml",
    delimiter=";",
    quote_char="'",
    escape_char="\\",
    encoding="cp932",
    no_header=True,
    columns="id,x,y",
    null_values=",NA,-",
    skip_initial_space=True,
    decimal=",",
    infer_types="all",
    compression="none",
    compression_level=6,
    record_format="columnar",
    num_shards=3,
    target_shard_mb=64.0,
    min_shards=2,
    task_mb=0.5,
    block_mb=2.0,
    max_bad_fraction=0.5,
    top_k=7,
)
IMAGE_ARGS = dict(
    sources=["s3://b/m.csv"],
    dataset_uri="s3://b/img",
    label="label",
    image_column="image",
    resize="32x16",
)
TREE_ARGS = dict(sources=["s3://b/tree"], dataset_uri="s3://b/tree-ds", images=True)


def test_shard_config_maps_every_pipeline_parameter():
    assert set(CSV_ARGS) | set(IMAGE_ARGS) | set(TREE_ARGS) == set(SHARDING_PARAMS)
    assert steps.shard_config(CSV_ARGS) == ShardConfig(
        sources=("a.csv", "b.csv"),
        output="s3://b/ds",
        label="y",
        key="id",
        splits=(("a", 0.5), ("b", 0.5)),
        source_format="csv",
        schema_file="s3://b/schema.yaml",
        delimiter=";",
        quote_char="'",
        escape_char="\\",
        encoding="cp932",
        no_header=True,
        columns=("id", "x", "y"),
        null_values=("", "NA", "-"),
        skip_initial_space=True,
        decimal=",",
        infer_types="all",
        compression="none",
        compression_level=6,
        record_format="columnar",
        num_shards=3,
        target_shard_bytes=64 * MIB,
        min_shards=2,
        task_bytes=MIB // 2,
        block_bytes=2 * MIB,
        max_bad_fraction=0.5,
        top_k=7,
    )
    assert steps.shard_config(IMAGE_ARGS, worker_index=1, num_workers=2) == ShardConfig(
        sources=("s3://b/m.csv",),
        output="s3://b/img",
        label="label",
        image_column="image",
        resize=(32, 16),
        worker_index=1,
        num_workers=2,
    )
    tree = steps.shard_config(TREE_ARGS, processes=3)
    assert (tree.images, tree.label, tree.processes) == (True, "label", 3)
    with pytest.raises(ConfigError, match=r"no option for parameter\(s\) shard_workers"):
        steps.shard_config({**CSV_ARGS, "shard_workers": 2})


def test_the_pipelines_defaults_make_shard_configs_defaults(pipeline):
    params = inspect.signature(pipeline.pipeline_func).parameters
    defaults = {
        n: params[n].default for n in SHARDING_PARAMS if n not in ("sources", "dataset_uri")
    }
    config = steps.shard_config({**defaults, "sources": ["a.csv"], "dataset_uri": "ds"})
    assert config == ShardConfig(sources=("a.csv",), output="ds", label="cleared")


# --------------------------------------------------------------------------------------------
# train: flags generated from TrainConfig; the pipeline's training parameters
# --------------------------------------------------------------------------------------------


def test_every_training_option_is_a_train_flag_and_none_was_lost():
    flags = _flags(train_cmd)
    assert set(flags) >= TRAIN_FLAGS
    for opt in options(TrainConfig):
        assert set(opt.flags) <= set(flags), opt.path


def _train(*args: str) -> tuple[object, TrainConfig | None]:
    """Run `train ARGS` with the trainer replaced (no TensorFlow); returns its config."""
    seen = []

    def train_and_evaluate(config):
        seen.append(config)
        return types.SimpleNamespace(
            status="trained", role="chief", step=1, start_step=0, metrics=None, export_uri=None
        )

    fake = types.ModuleType("shardtrain.train.trainer")
    fake.train_and_evaluate = train_and_evaluate
    with mock.patch.dict(sys.modules, {"shardtrain.train.trainer": fake}):
        result = CliRunner().invoke(train_cmd, list(args))
    return result, seen[0] if seen else None


def test_train_flags_become_the_config_fields_over_the_config_file(tmp_path: Path):
    config_file = tmp_path / "train.yaml"
    config_file.write_text(
        "train_steps: 77\nbatch_size: 8\nmodel:\n  dropout: 0.3\n  extra: {a: 1}\n"
        "input:\n  cache_mb: 64\n"
    )
    result, config = _train(
        "--config", str(config_file), "--data", "d", "--model-dir", "m", "--batch-size", "16",
        "--model", "tabular", "--hidden-units", "32,16", "--exclude", "x", "--exclude", "z",
        "--extra", "b=[1, 2]", "--extra", "c=relu", "--eval-split", "ev",
        "--max-checkpoints", "5", "--final-eval-wait-secs", "9",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    # Flags left out keep the file's values: a flag's default never overrides the file.
    assert (config.train_steps, config.batch_size) == (77, 16)
    assert (config.model.name, config.model.dropout, config.model.hidden_units) == (
        "tabular",
        0.3,
        [32, 16],
    )
    assert config.model.extra == {"a": 1, "b": [1, 2], "c": "relu"}
    assert config.input.exclude_columns == ["x", "z"]
    assert (config.input.eval_split, config.input.cache_mb) == ("ev", 64)
    assert (config.max_checkpoints, config.final_eval_wait_secs) == (5, 9.0)

    result, config = _train("--data", "d", "--model-dir", "m")
    assert config == TrainConfig(data="d", model_dir="m")


def test_the_pipelines_training_parameters_reach_the_trainer_as_flags(pipeline):
    params = inspect.signature(pipeline.pipeline_func).parameters
    carried = {o.spec.pipeline: o for o in options(TrainConfig) if o.spec.pipeline}
    assert set(carried) == {"model_dir", "train_steps", "batch_size", "checkpoint_every", "task"}
    for name, opt in carried.items():
        assert params[name].annotation == opt.user_type, name
        if name in PIPELINE_OWN_DEFAULTS:
            assert params[name].default == PIPELINE_OWN_DEFAULTS[name]

    job = steps.job_config(
        data="s3://b/ds",
        model_dir="s3://b/m",
        run_id="run-1",
        image="reg/st:1",
        namespace="ns",
        workers=1,
        gpus_per_worker=0,
        evaluator=False,
        secret="",
        service_account="sa",
        cpu="1",
        memory="1Gi",
        train_steps=300,
        batch_size=128,
        checkpoint_every=100,
        train_flags="--dropout 0.25 --eval-batch-size 64",
        task="regression",
    )
    manifest = tfjob.to_manifest(tfjob.build_tfjob(job))
    chief = manifest["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]
    command, *args = chief["args"]
    assert command == "train"
    result, config = _train(*args)
    assert result.exit_code == 0, result.output
    assert (config.data, config.model_dir) == ("s3://b/ds", "s3://b/m")
    assert (config.train_steps, config.batch_size, config.checkpoint_every) == (300, 128, 100)
    assert (config.model.dropout, config.eval_batch_size) == (0.25, 64)
    assert config.task == "regression"


# --------------------------------------------------------------------------------------------
# Start-up
# --------------------------------------------------------------------------------------------


def test_the_cli_imports_no_configuration_and_help_loads_nothing_heavy():
    """Importing the CLI (every command's and every TFJob replica's start-up) makes no flags;
    `shard --help`, `train --help` and `evaluate --help` make them from configuration modules
    that load neither pyarrow, numpy nor PyYAML."""
    heavy = ("pyarrow", "numpy", "yaml", "shardtrain.data.sharding", "shardtrain.storage")
    code = f"""
import sys
import shardtrain.cli
print([m for m in ("shardtrain.options", *{heavy!r}) if m in sys.modules])
for command in ("shard", "train", "evaluate"):
    try:
        shardtrain.cli.cli.main([command, "--help"], standalone_mode=False)
    except SystemExit:
        pass
print([m for m in {heavy!r} if m in sys.modules])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "[]" and lines[-1] == "[]", out.stdout
    assert "--target-shard-mb" in out.stdout and "--hidden-units" in out.stdout
    assert "--thresholds" in out.stdout and "--slice-by" in out.stdout
