"""The parameters of the pipeline ``csv_to_model`` and of its components, each defined once.

A pipeline parameter is either an option or one of the pipeline's own settings:

* the sharding options (:data:`SHARDING`), the training options the pipeline has
  parameters for (:data:`TRAINING`) and the evaluation's (:data:`EVALUATION`) are fields of
  :class:`~shardtrain.data.shard_config.ShardConfig`,
  :class:`~shardtrain.train.config.TrainConfig` and
  :class:`~shardtrain.train.blessing.EvaluateConfig` declared with ``pipeline=``: their name, type,
  default and description come from the field's option (the description is the option's help,
  :func:`shardtrain.options.pipeline_help`);
* the pipeline's own settings (:data:`RUN`: where the model is published, how the run is
  spread over pods, the training job and the cluster) are declared here.

A component's parameter is a pipeline parameter it receives, under the component's own name
(:func:`passed`: the ``train`` component's ``workers`` is the pipeline's ``tfjob_workers``),
or a value the graph sets (a loop item, the run id, an artifact), declared here with its
description. From these lists :func:`define` generates the functions KFP reads: the
components' and the pipeline's signatures, and docstrings whose ``Args:`` and ``Returns:``
KFP turns into the description of every input and output (the UI shows them); the graph
hands each component its pipeline parameters by the same lists (:func:`arguments`).

:func:`check_arguments` reads a run's arguments with the parsers of the steps that use them,
so that ``pipeline compile -p``/``submit``/``run-local`` and the first step (``plan_shards``,
which receives every parameter for it: :data:`CHECKED`) refuse a bad run before it costs.

KFP needs real Python functions: it reads their signatures and docstrings, and it embeds a
component's *source* in the compiled YAML, where the step's pod runs it. So the functions are
generated as source text (kept in :mod:`linecache`, where :func:`inspect.getsource` finds it)
and executed in the namespace that pod code has (``from kfp.dsl import *``).
"""

from __future__ import annotations

import linecache
import textwrap
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shardtrain.data.shard_config import ShardConfig
from shardtrain.errors import ShardtrainError
from shardtrain.kubeflow.jobs.tfjob import DEFAULT_IMAGE, JobConfig
from shardtrain.kubeflow.serving import ServingConfig
from shardtrain.options import Option, from_params, options, pipeline_help
from shardtrain.train.blessing import EvaluateConfig
from shardtrain.train.config import TrainConfig


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: The default of a required parameter.
REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Param:
    """One parameter of the pipeline or of a component."""

    name: str
    #: The annotation as the signature writes it, in kfp.dsl's names: ``int``, ``list[str]``,
    #: ``Input[Dataset]``, ``Output[Model]``.
    annotation: str
    #: The description: the docstring's entry, which KFP puts into the compiled YAML.
    help: str
    #: The default; :data:`REQUIRED` for none.
    default: Any = REQUIRED
    #: The pipeline parameter a component's parameter receives; None for a pipeline
    #: parameter, or a value the graph sets.
    source: str | None = None

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def output(self) -> bool:
        """An output (an ``Output[...]`` artifact or an ``OutputPath(...)`` parameter): KFP
        reads its description from ``Returns:``."""
        return self.annotation.startswith(("Output[", "OutputPath("))


def _annotation(hint: Any) -> str:
    """``str``, ``list[str]``...: a type as a signature writes it."""
    return repr(hint) if typing.get_origin(hint) else hint.__name__


#: Pipeline defaults that differ from the options' on purpose: the demo data's label, a
#: production-sized training run, and a model directory the pipeline cannot do without.
PIPELINE_DEFAULTS: dict[str, Any] = {
    "label": "cleared",
    "model_dir": REQUIRED,
    "train_steps": 20000,
    "batch_size": 1024,
    "checkpoint_every": 1000,
}


def _default(opt: Option) -> Any:
    """An option's default as a pipeline parameter's: its user form, of the parameter's type
    (``128.0`` MB, not ``128``)."""
    if opt.required:
        return REQUIRED
    value = opt.pipeline_default()
    return float(value) if opt.user_type is float else value


def _from_options(cls: type) -> tuple[Param, ...]:
    """The pipeline parameters of ``cls``'s options (those with ``pipeline=``), in field order,
    each in its user form (``task_mb``, ``''`` or ``0`` for not set)."""
    return tuple(
        Param(
            name=opt.spec.pipeline,
            annotation=_annotation(opt.user_type),
            help=pipeline_help(cls, opt),
            default=PIPELINE_DEFAULTS.get(opt.spec.pipeline, _default(opt)),
        )
        for opt in options(cls)
        if opt.spec.pipeline
    )


#: The sharding options: every ShardConfig field with a pipeline parameter, in field order.
SHARDING = _from_options(ShardConfig)
#: The training options the pipeline has parameters of its own for; any other ``shardtrain
#: train`` flag goes into ``train_flags``.
TRAINING = _from_options(TrainConfig)
#: The evaluation options: the blessing thresholds and the slicing columns.
EVALUATION = _from_options(EvaluateConfig)
#: The pipeline's own settings.
RUN = (
    Param("serving_uri", "str", "Where the exported SavedModel is published (<uri>/<version>/)."),
    Param("shard_workers", "int", "Shard worker pods (at most one per task).", 4),
    Param("shard_cpu", "str", "CPU request of each shard worker, also its process count.", "4"),
    Param(
        "job_api",
        "str",
        "The training job's API: 'trainjob' (Kubeflow Trainer v2, runtime shardtrain-tensorflow),"
        " 'tfjob' (training operator v1), or 'auto': the TrainJob where the cluster serves it.",
        "auto",
    ),
    Param(
        "tfjob_workers",
        "int",
        "Training replicas besides the chief (TFJob Workers; a TrainJob gets this + 1 nodes).",
        JobConfig.default("workers"),
    ),
    Param(
        "gpus_per_worker",
        "int",
        "nvidia.com/gpu of the chief and each worker (0 for CPU only).",
        JobConfig.default("gpus_per_worker"),
    ),
    Param(
        "evaluator",
        "bool",
        "Add a sidecar Evaluator replica to the TFJob (in a TrainJob the chief evaluates).",
        JobConfig.default("evaluator"),
    ),
    Param(
        "worker_cpu",
        "str",
        "CPU request of each training replica (TFJob replica, TrainJob node).",
        JobConfig.default("cpu"),
    ),
    Param("worker_memory", "str", "Memory of each training replica.", JobConfig.default("memory")),
    Param(
        "train_flags",
        "str",
        "More `shardtrain train` flags, e.g. --learning-rate 0.003 --dropout 0.1.",
        "",
    ),
    Param(
        "train_timeout",
        "float",
        "Seconds the training job may take before the train step fails (time queued included).",
        86400.0,
    ),
    Param(
        "image", "str", "The project image of every step and of the training job.", DEFAULT_IMAGE
    ),
    Param(
        "data_checks",
        "str",
        "Compare the new dataset with the served model's training data (new, missing or "
        "retyped columns, label classes, missing rates, drift): 'fail' stops the run before "
        "training when a check fails, 'warn' reports it and goes on, 'off' checks nothing.",
        "fail",
    ),
    Param(
        "data_check_limits",
        "str",
        "Limits of the data checks, e.g. 'numeric_drift=0.05,new_columns=off,"
        "missing_rate.gold=0.2' ('' keeps the defaults; see `shardtrain validate --help`).",
        "",
    ),
    Param(
        "secret_name",
        "str",
        "Kubernetes Secret holding AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and optionally "
        "AWS_ENDPOINT_URL, AWS_REGION (mounted as environment variables).",
        JobConfig.default("secret"),
    ),
    Param(
        "namespace", "str", "The training job's namespace ('' is the namespace the run is in).", ""
    ),
    Param(
        "service_account",
        "str",
        "Service account of the training job's pods.",
        JobConfig.default("service_account"),
    ),
    Param(
        "queue",
        "str",
        "Queue the training job waits in: a Kueue LocalQueue (the job is created suspended until "
        "admitted), or with gang_scheduler 'volcano' a Volcano queue ('' for none).",
        "",
    ),
    Param(
        "gang_scheduler",
        "str",
        "'volcano' starts all training replicas together or none ('' for the default scheduler).",
        "",
    ),
    Param(
        "priority_class",
        "str",
        "PriorityClass of the TFJob's pods; of a TrainJob in a Kueue queue, its Kueue priority.",
        "",
    ),
    Param(
        "local",
        "bool",
        "Run the training job as local processes (kfp.local runs; never on a cluster).",
        False,
    ),
    Param(
        "deploy",
        "bool",
        "After the export, render a KServe InferenceService serving serving_uri (an s3:// or "
        "gs:// base) and apply it to the cluster (not in a local run).",
        False,
    ),
    Param(
        "deploy_name",
        "str",
        "The InferenceService's name, also the model's in /v1/models/<name>:predict.",
        ServingConfig.default("name"),
    ),
    Param(
        "deploy_namespace",
        "str",
        "The InferenceService's namespace ('' is the namespace the run is in).",
        "",
    ),
)
#: Every parameter of the pipeline, the required ones first.
PIPELINE = tuple(sorted((*SHARDING, *TRAINING, *EVALUATION, *RUN), key=lambda p: not p.required))
_BY_NAME = {p.name: p for p in PIPELINE}


def passed(source: str, name: str | None = None, default: Any = REQUIRED) -> Param:
    """A component's parameter that receives pipeline parameter ``source`` (as ``name``),
    described as it."""
    param = _BY_NAME[source]
    return Param(name or source, param.annotation, param.help, default, source=source)


# --------------------------------------------------------------------------------------------
# The components' parameters, in signature order
# --------------------------------------------------------------------------------------------

_SHARDING_INPUTS = tuple(passed(p.name) for p in SHARDING)
#: The pipeline parameters the first step checks besides the sharding options
#: (:func:`check_arguments`), each under its own name, defaulting to the pipeline's default
#: ('' for a required one: not checked when left out).
CHECKED = tuple(
    passed(p.name, default="" if p.required else p.default)
    for p in PIPELINE
    if p.name not in {s.name for s in SHARDING} | {"shard_workers"}
)
PLAN_SHARDS = (*_SHARDING_INPUTS, passed("shard_workers", "num_workers"), *CHECKED)
SHARD = (
    *_SHARDING_INPUTS,
    Param(
        "worker_index",
        "int",
        "This shard worker's index in [0, num_workers): it runs the tasks t with "
        "t % num_workers == worker_index.",
    ),
    passed("shard_workers", "num_workers"),
    passed("shard_cpu", "cpu"),
)
SETTLE_SHARDS = (
    *_SHARDING_INPUTS,
    passed("shard_workers", "num_workers"),
    Param(
        "worker_reports",
        "list[str]",
        "The shard workers' JSON reports (the shard step's outputs, collected).",
    ),
    passed("serving_uri"),
    passed("data_checks"),
    passed("data_check_limits"),
    Param(
        "settled",
        "OutputPath(str)",
        "When no worker runs again: the dataset committed and checked here, for "
        "finalize_shards to point at (JSON); else empty.",
    ),
)
FINALIZE_SHARDS = (
    passed("dataset_uri"),
    Param(
        "worker_reports",
        "list[str]",
        "The shard workers' JSON reports (the shard step's outputs, collected).",
    ),
    Param(
        "dataset",
        "Output[Dataset]",
        "Points at dataset_uri, with the dataset's row counts, label and splits.",
    ),
    passed("serving_uri"),
    passed("data_checks"),
    passed("data_check_limits"),
    Param(
        "data_checks_report",
        "Output[Markdown]",
        "The data checks against the served model's training data, as Markdown.",
    ),
    Param(
        "settled",
        "str",
        "settle_shards' settled output: the dataset it committed and checked ('' when "
        "workers ran again: then committed and checked here).",
    ),
)
TRAIN = (
    Param("dataset", "Input[Dataset]", "The sharded dataset (finalize_shards' output)."),
    Param(
        "model",
        "Output[Model]",
        "Points at model_dir, with the SavedModel export, its step and the TensorBoard logs.",
    ),
    passed("model_dir"),
    passed("local"),
    Param(
        "run_id", "str", "The pipeline run's id: names the training job, so every run gets its own."
    ),
    passed("train_timeout", "timeout"),
    passed("image"),
    passed("namespace"),
    passed("tfjob_workers", "workers"),
    passed("gpus_per_worker"),
    passed("evaluator"),
    passed("secret_name", "secret"),
    passed("service_account"),
    passed("worker_cpu", "cpu"),
    passed("worker_memory", "memory"),
    passed("train_steps"),
    passed("batch_size"),
    passed("checkpoint_every"),
    passed("task"),
    passed("train_flags"),
    passed("queue", default=""),
    passed("gang_scheduler", default=""),
    passed("priority_class", default=""),
    passed("job_api", default="auto"),
)
EVALUATE = (
    Param("dataset", "Input[Dataset]", "The sharded dataset, whose statistics the report shows."),
    Param("model", "Input[Model]", "The trained model (train's output)."),
    Param(
        "metrics",
        "Output[Metrics]",
        "The final evaluation's headline metrics (auc, accuracy, log_loss; a regression's "
        "rmse, mae, r2...), num_examples, step, blessed (1 or 0) and the served model's "
        "metrics as baseline_<metric>.",
    ),
    Param(
        "classification",
        "Output[ClassificationMetrics]",
        "The final evaluation's ROC curve and confusion matrix.",
    ),
    Param(
        "sliced",
        "Output[SlicedClassificationMetrics]",
        "A classifier's ROC curve and confusion matrix per slice_by value.",
    ),
    Param(
        "report",
        "Output[Markdown]",
        "The blessing decision, the evaluation and the data's statistics, as Markdown.",
    ),
    passed("serving_uri"),
    passed("thresholds"),
    passed("slice_by"),
    Param(
        "html_report",
        "Output[HTML]",
        "The same as pictures, one self-contained page: distributions and drift against the "
        "served model's data, training curve, ROC, precision-recall, confusion, calibration "
        "(a regression's predicted against actual, residuals), slices, rejects.",
    ),
)
#: What ``evaluate`` returns (its ``Output``) and the pipeline outputs as ``blessed``: the
#: export runs only when it is true.
BLESSED = Param("blessed", "bool", "Every threshold holds: the model may replace the served one.")
EXPORT = (
    Param("model", "Input[Model]", "The trained model (train's output)."),
    passed("serving_uri"),
    Param("served_model", "Output[Model]", "Points at the published version."),
)

DEPLOY = (
    Param("served_model", "Input[Model]", "The published model (export's output)."),
    passed("serving_uri"),
    passed("deploy_name", "name"),
    passed("deploy_namespace", "namespace"),
    passed("secret_name", "secret"),
    passed("local"),
    Param(
        "inference_service",
        "Output[Artifact]",
        "The ServiceAccount and the KServe InferenceService that serve serving_uri (YAML).",
    ),
)


# --------------------------------------------------------------------------------------------
# The check of a run's arguments, before anything costs
# --------------------------------------------------------------------------------------------

#: What the train step's ``job_api`` may be.
JOB_APIS = ("auto", "trainjob", "tfjob")
#: The parameters naming locations the steps read or write.
URI_PARAMETERS = ("sources", "dataset_uri", "model_dir", "serving_uri")


def check_arguments(values: Mapping[str, Any], *, cluster: bool) -> None:
    """Refuse a run whose arguments a later step would refuse, before anything is sharded
    or trained: ``pipeline compile -p``, ``submit`` and ``run-local`` call it on the
    arguments given, and the pipeline's first step (``plan_shards``) again on all of them,
    so that a bad run ends there, not after training.

    Each value is read by the parser of the step that uses it, so that the check and the
    use never disagree: the sharding options by
    :class:`~shardtrain.data.shard_config.ShardConfig`, ``thresholds`` and ``slice_by`` by
    :class:`~shardtrain.train.blessing.EvaluateConfig` (with the metrics of ``task`` when it
    is not ``auto``), ``data_check_limits`` by
    :meth:`~shardtrain.data.validation.Limits.parse`, the training job's settings
    (quantities, names, counts, ``train_flags``) by the TFJob's
    :class:`~shardtrain.kubeflow.jobs.tfjob.JobConfig`, ``train_flags`` also by
    ``shardtrain train``'s own parser (:func:`shardtrain.commands.train_command`), ``shard_cpu``
    by the one quantity
    parser. A parameter left out of ``values`` keeps the pipeline's default; a required one
    left out is not checked (``compile`` takes some). ``label`` and ``key`` are not compared
    with the sources' header here (the first step reads no data): each shard worker does, in
    one line, before it writes anything.

    Args:
        values: pipeline arguments by name (typed: :func:`shardtrain.kubeflow.client.
            parse_arguments`).
        cluster: the steps and the training job run in pods: every location must be an
            ``s3://`` or ``gs://`` URI (a local path names a file only one machine has).
            False for ``kfp.local`` runs, whose steps run here and read local paths.

    Raises:
        ConfigError: the first value a step would refuse, in one line naming the parameter.
    """
    import shlex

    from shardtrain.commands import check_arguments as check_flags
    from shardtrain.commands import train_command
    from shardtrain.data.validation import DATA_CHECK_MODES, Limits
    from shardtrain.errors import ConfigError
    from shardtrain.kubeflow.jobs import settings
    from shardtrain.storage import uri as uris
    from shardtrain.train.thresholds import check_task

    given = {k: v for k, v in values.items() if v is not None}
    v = {p.name: p.default for p in PIPELINE if not p.required} | given

    def where(name: str, exc: Exception) -> ConfigError:
        text = str(exc)
        return ConfigError(text if text.startswith(name) else f"{name}: {text}")

    # Locations: pods read only object storage; every step reads its scheme's store.
    for name in URI_PARAMETERS:
        value = given.get(name)
        for location in value if isinstance(value, list | tuple) else [value]:
            if not location:
                continue
            if cluster:
                settings.check_pod_uris(**{name: location})
            else:
                try:
                    uris.check_scheme(location)
                except ShardtrainError as exc:
                    raise where(name, exc) from None
    # The sharding options, as every shard step builds them.
    sharding = {p.name: v[p.name] for p in SHARDING if p.name in v}
    if all(v.get(name) for name in ("sources", "dataset_uri")):
        ShardConfig(**from_params(ShardConfig, sharding))
    else:
        from_params(ShardConfig, {k: x for k, x in sharding.items() if k in given})
    if int(v["shard_workers"]) < 1:
        raise ConfigError(f"shard_workers must be at least 1, not {v['shard_workers']}")
    settings.check_quantities(shard_cpu=v["shard_cpu"])
    # The evaluation's thresholds and slices, as the evaluate step reads them.
    evaluation = _check_options(
        EvaluateConfig, {p.name: v[p.name] for p in EVALUATION if p.name in v}
    )
    task = str(v.get("task") or "auto")
    if task != "auto":
        check_task(evaluation["thresholds"], task, f"task '{task}'")
    # The data checks, as the step that commits the dataset runs them.
    if v["data_checks"] not in DATA_CHECK_MODES:
        raise ConfigError(
            f"data_checks must be one of {', '.join(DATA_CHECK_MODES)}, not '{v['data_checks']}'"
        )
    Limits.parse(v["data_check_limits"])
    # The training job, as the train step builds it (its name and namespace come from the
    # run; the URIs were checked above).
    if v["job_api"] not in JOB_APIS:
        raise ConfigError(f"job_api '{v['job_api']}' is not one of {', '.join(JOB_APIS)}")
    _check_options(TrainConfig, {p.name: v[p.name] for p in TRAINING if p.name in v})
    try:
        flags = tuple(shlex.split(str(v["train_flags"] or "")))
    except ValueError as exc:
        raise ConfigError(f"train_flags: {exc}") from None
    if flags:  # by `shardtrain train`'s own parser, as every replica will parse them
        check_flags(train_command(), flags, "train_flags")
    job = {
        "image": v["image"],
        "namespace": v["namespace"] or JobConfig.default("namespace"),
        "workers": int(v["tfjob_workers"]),
        "gpus_per_worker": int(v["gpus_per_worker"]),
        "evaluator": bool(v["evaluator"]),
        "secret": v["secret_name"] or None,
        "service_account": v["service_account"],
        "queue": v["queue"] or None,
        "gang_scheduler": v["gang_scheduler"] or None,
        "priority_class": v["priority_class"] or None,
    }
    settings.check_quantities(worker_cpu=v["worker_cpu"], worker_memory=v["worker_memory"])
    JobConfig(
        data=v.get("dataset_uri") or "s3://unset/dataset",
        model_dir=v.get("model_dir") or "s3://unset/model",
        cpu=v["worker_cpu"],
        memory=v["worker_memory"],
        train_args=flags,
        **job,
    )


def _check_options(cls: type, params: Mapping[str, Any]) -> dict[str, Any]:
    """The field values of ``cls``'s pipeline parameters (:func:`shardtrain.options.
    from_params`), each checked against its option's range and choices as the class's own
    ``__post_init__`` checks them.

    Raises:
        ConfigError: a value that does not parse or is out of range, named by its option.
    """
    fields = from_params(cls, params)
    for opt in options(cls):
        if opt.path in fields:
            try:
                opt.check(fields[opt.path])
            except ShardtrainError as exc:  # named by its flag: say the parameter's name
                named = str(exc).replace(opt.flag, opt.spec.pipeline or opt.flag, 1)
                raise type(exc)(named) from None
    return fields


def arguments(params: Iterable[Param], values: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of a component's parameters that come from pipeline parameters, taken
    from ``values`` (the pipeline's parameters by name), by the component's names."""
    return {p.name: values[p.source] for p in params if p.source is not None}


# --------------------------------------------------------------------------------------------
# Functions generated from the lists
# --------------------------------------------------------------------------------------------


def docstring(summary: str, params: Iterable[Param], returns: Iterable[Param] = ()) -> str:
    """A Google-style docstring: ``summary``, ``Args:`` for the inputs, ``Returns:`` for the
    ``Output[...]`` parameters and ``returns`` (KFP reads outputs' descriptions there)."""
    params = tuple(params)
    inputs = [p for p in params if not p.output]
    outputs = [p for p in params if p.output] + list(returns)
    text = textwrap.dedent(summary).strip() + "\n"
    for title, entries in (("Args", inputs), ("Returns", outputs)):
        if entries:
            text += f"\n{title}:\n" + "".join(f"    {p.name}: {p.help}\n" for p in entries)
    return text


def function_source(
    name: str, params: Iterable[Param], *, returns: str | None, doc: str, body: str
) -> str:
    """The source of function ``name``: the signature of ``params`` (defaults as literals),
    ``doc`` as its docstring, then ``body``."""
    if '"""' in doc:
        raise ValueError(f"{name}: a description holds a triple quote")
    lines = [f"def {name}("]
    for p in params:
        default = "" if p.required else f" = {p.default!r}"
        lines.append(f"    {p.name}: {p.annotation}{default},")
    lines.append(f"){f' -> {returns}' if returns else ''}:")
    lines.append(textwrap.indent(f'r"""{doc}"""', "    "))
    lines.append(textwrap.indent(textwrap.dedent(body).strip(), "    "))
    return "\n".join(lines) + "\n"


def define(
    name: str,
    params: Iterable[Param],
    *,
    module: str,
    doc: str,
    body: str,
    returns: str | None = None,
    namespace: Mapping[str, Any] | None = None,
) -> Callable[..., Any]:
    """The function :func:`function_source` writes, executed as if defined in ``module``
    (where KFP and :func:`inspect.getsource` look), with kfp.dsl's names in scope (as in a
    component's pod) besides ``namespace``."""
    from kfp import dsl

    source = function_source(name, params, returns=returns, doc=doc, body=body)
    filename = f"<generated by shardtrain.kubeflow.parameters: {module}.{name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    scope = {"__name__": module, **{n: getattr(dsl, n) for n in dsl.__all__}, **(namespace or {})}
    exec(compile(source, filename, "exec", dont_inherit=True), scope)
    function: Callable[..., Any] = scope[name]
    return function
