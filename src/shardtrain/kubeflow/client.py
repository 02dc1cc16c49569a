"""The Kubeflow pipeline ``csv_to_model`` from the outside: load, compile, submit, run here.

What ``shardtrain pipeline params|compile|submit|run-local`` call:

* :func:`load_pipeline` imports the pipeline definition (a KFP ``GraphComponent``);
  :func:`parameters` lists its parameters, and :func:`parse_arguments` turns ``NAME=VALUE``
  strings into typed arguments by them.
* :func:`compile_pipeline` writes the IR YAML the Kubeflow Pipelines UI uploads;
  :func:`compile_definitions` writes it and every component's YAML (the checked-in
  ``pipelines/`` and ``components/`` folders of the repository).
* :func:`submit` creates a run on a Kubeflow Pipelines server with ``kfp.Client``.
* :func:`run_local` runs the whole pipeline on this machine with ``kfp.local``; the steps
  execute the same component bodies as on a cluster (:mod:`shardtrain.kubeflow.steps`),
  in a :func:`local_session` that leaves no temporary folder and no replaced ``print``.

Where the pipeline definition comes from
----------------------------------------
The components (:mod:`shardtrain.kubeflow.components`) and the pipeline graphs
(:mod:`shardtrain.kubeflow.pipelines`) are part of the package: KFP compiles them from the
installed package, in a checkout or in the image alike. The component *bodies* import only
:mod:`shardtrain`: KFP embeds each body's source in the compiled YAML.

kfp itself (~0.4 s to import) is imported by the functions that need it, when they run.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from shardtrain import storage
from shardtrain.errors import ConfigError, ShardtrainError, one_line
from shardtrain.kubeflow.pipelines import PIPELINE_NAME
from shardtrain.kubeflow.pointers import read_pointer

log = logging.getLogger(__name__)


def load_pipeline(name: str = PIPELINE_NAME) -> Any:
    """The pipeline ``shardtrain.kubeflow.pipelines.<name>`` defines (a KFP ``GraphComponent``).

    Raises:
        ConfigError: there is no pipeline of that name.
    """
    try:
        module = importlib.import_module(f"shardtrain.kubeflow.pipelines.{name}")
    except ModuleNotFoundError as exc:
        raise ConfigError(f"no pipeline named {name!r} in shardtrain.kubeflow.pipelines") from exc
    return getattr(module, name)


@dataclass(frozen=True)
class Parameter:
    """One pipeline parameter: its KFP type, default and documentation."""

    name: str
    type: str
    default: Any
    required: bool
    description: str


def parameters(pipeline: Any = None) -> list[Parameter]:
    """The pipeline's parameters, in signature order."""
    pipeline = pipeline or load_pipeline()
    return [
        Parameter(
            name=name,
            type=str(spec.type),
            default=spec.default,
            required=not spec.optional,
            description=" ".join((spec.description or "").split()),
        )
        for name, spec in pipeline.component_spec.inputs.items()
    ]


_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")

#: Parameters of earlier versions → what to write instead, given the old value.
REPLACED = {
    "min_auc": lambda value: f'set thresholds="auc>={value}"',
    "max_rmse": lambda value: f'set thresholds="rmse<={value}"',
}


def _coerce(param: Parameter, text: str) -> Any:
    """``text`` as a value of ``param``'s KFP type (see :func:`parse_arguments`)."""
    kind = param.type.split("[", 1)[0]
    try:
        if kind == "Integer":
            return int(text)
        if kind == "Float":
            return float(text)
        if kind == "Boolean":
            if text.lower() not in _TRUE + _FALSE:
                raise ValueError("expected true or false")
            return text.lower() in _TRUE
        if kind == "List":
            if text.lstrip().startswith("["):
                value = json.loads(text)
                if not isinstance(value, list):
                    raise ValueError("expected a JSON list")
                return value
            return [item.strip() for item in text.split(",") if item.strip()]
        if kind in ("Dict", "Struct"):
            value = json.loads(text)
            if not isinstance(value, dict):
                raise ValueError("expected a JSON object")
            return value
    except ValueError as exc:
        raise ConfigError(
            f"pipeline parameter {param.name} ({param.type}): '{text}': {exc}"
        ) from None
    return text


def parse_arguments(pairs: Iterable[str], pipeline: Any = None) -> dict[str, Any]:
    """``NAME=VALUE`` strings → typed pipeline arguments.

    Values are converted by the parameter's type: integers, floats, booleans
    (true/false/yes/no/1/0), lists (``a,b`` or a JSON list) and dicts (JSON).

    Raises:
        ConfigError: a pair without ``=``, an unknown name, or a value of the wrong type.
    """
    params = {p.name: p for p in parameters(pipeline)}
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        name = name.strip().replace("-", "_")
        if not sep:
            raise ConfigError(f"'{pair}': give pipeline arguments as NAME=VALUE")
        if name in REPLACED:
            raise ConfigError(f"pipeline parameter {name} was replaced: {REPLACED[name](text)}")
        if name not in params:
            raise ConfigError(
                f"unknown pipeline parameter '{name}' (known: {', '.join(sorted(params))})"
            )
        out[name] = _coerce(params[name], text)
    return out


def _check_required(arguments: Mapping[str, Any], pipeline: Any) -> None:
    """Fail with the names of the required parameters ``arguments`` lack, before KFP would."""
    missing = [p.name for p in parameters(pipeline) if p.required and p.name not in arguments]
    if missing:
        raise ConfigError(f"missing pipeline argument(s): {', '.join(missing)} (-p NAME=VALUE)")


def compile_pipeline(path: str, defaults: Mapping[str, Any] | None = None) -> str:
    """Compile ``csv_to_model`` to the IR YAML the Kubeflow Pipelines UI uploads.

    Args:
        path: the output file (``.yaml``).
        defaults: new defaults for pipeline parameters (e.g. ``{"image": ...}``).

    Returns:
        ``path``.
    """
    from kfp import compiler

    pipeline = load_pipeline()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    compiler.Compiler().compile(
        pipeline_func=pipeline, package_path=path, pipeline_parameters=dict(defaults or {}) or None
    )
    return path


#: The components, by module of :mod:`shardtrain.kubeflow.components` (each defines a
#: component function of the module's name).
COMPONENTS = (
    "plan_shards",
    "shard",
    "settle_shards",
    "finalize_shards",
    "train",
    "evaluate",
    "export",
    "deploy",
)


def compile_definitions(root: str) -> list[str]:
    """Compile the pipeline and each component into ``root/pipelines/<name>.yaml`` and
    ``root/components/<name>.yaml``.

    The repository keeps these files (``make pipeline-yaml`` writes them, a test keeps them
    equal to the package): the pipeline YAML uploads in the Kubeflow Pipelines UI as it is,
    and a component YAML plugs one step into a pipeline of your own with
    ``kfp.components.load_component_from_file`` — no shardtrain install needed for either.

    Returns:
        The files written.
    """
    from kfp import compiler

    written = [compile_pipeline(os.path.join(root, "pipelines", f"{PIPELINE_NAME}.yaml"))]
    os.makedirs(os.path.join(root, "components"), exist_ok=True)
    for name in COMPONENTS:
        module = importlib.import_module(f"shardtrain.kubeflow.components.{name}")
        path = os.path.join(root, "components", f"{name}.yaml")
        compiler.Compiler().compile(getattr(module, name), package_path=path)
        written.append(path)
    return written


@dataclass(frozen=True)
class SubmittedRun:
    """A run created on a Kubeflow Pipelines server."""

    run_id: str
    url: str
    state: str | None = None


def submit(
    host: str,
    arguments: Mapping[str, Any],
    *,
    experiment: str = "shardtrain",
    run_name: str | None = None,
    namespace: str | None = None,
    service_account: str | None = None,
    wait: bool = False,
    wait_timeout: float = 86400,
    preflight: bool = True,
) -> SubmittedRun:
    """Create a ``csv_to_model`` run on the Kubeflow Pipelines server at ``host``.

    With ``preflight`` the run is first checked against the server and the cluster of
    kubeconfig (:func:`preflight_run`): a run that cannot start is refused, every problem
    named, before it is created.

    Authentication is kfp.Client's: in a pod, the token at ``$KF_PIPELINES_SA_TOKEN_PATH``;
    from a workstation, a port-forward to ``ml-pipeline-ui`` needs none.

    Args:
        host: the API endpoint, e.g. ``http://localhost:8080`` (a port-forward).
        arguments: pipeline arguments (see :func:`parse_arguments`).
        experiment: the experiment the run is filed under.
        run_name: the run's display name (default: KFP's).
        namespace: the Kubeflow profile namespace (multi-user installs).
        service_account: the run's Kubernetes service account (default: Kubeflow Pipelines'
            ``pipeline-runner``, in a profile namespace ``default-editor``); it must be
            allowed to create TrainJobs (or TFJobs) in the job's namespace, and with
            ``deploy`` InferenceServices: ``k8s/rbac`` and ``k8s/rbac/deploy`` grant that.
        wait: wait for the run to finish; a run that did not succeed is an error.
        wait_timeout: seconds to wait with ``wait``.
        preflight: check what the run needs before creating it.

    Raises:
        ConfigError: a required argument is missing, or ``local`` is set.
        PreflightError: the backend or the cluster lacks what the run needs (one line each).
        ShardtrainError: the server refused the run, or (``wait``) it did not succeed.
    """
    import datetime

    import kfp

    pipeline = load_pipeline()
    _check_required(arguments, pipeline)
    if arguments.get("local"):
        raise ConfigError("local=true runs the TFJob inside a step pod: use `pipeline run-local`")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # "only works with KFP v2.0.0-beta.2+"
        try:
            client = kfp.Client(host=host, namespace=namespace or "kubeflow")
        except Exception as exc:  # the client raises ApiException, MaxRetryError, ValueError …
            raise ShardtrainError(f"{host}: cannot reach the server: {one_line(exc)}") from exc
        if preflight:
            values = {p.name: p.default for p in parameters(pipeline) if not p.required}
            preflight_run(
                host, {**values, **arguments}, namespace, service_account, _backend_version(client)
            )
        try:
            run = client.create_run_from_pipeline_func(
                pipeline,
                arguments=dict(arguments),
                run_name=run_name,
                experiment_name=experiment,
                namespace=namespace,
                service_account=service_account,
            )
        except Exception as exc:  # the client raises ApiException, MaxRetryError, ValueError …
            raise ShardtrainError(f"{host}: cannot create the run: {one_line(exc)}") from exc
    url = f"{host.rstrip('/')}/#/runs/details/{run.run_id}"
    if not wait:
        return SubmittedRun(run.run_id, url)
    try:
        detail = client.wait_for_run_completion(
            run.run_id, timeout=datetime.timedelta(seconds=wait_timeout)
        )
    except Exception as exc:
        raise ShardtrainError(f"run {run.run_id}: {one_line(exc)} ({url})") from exc
    state = str(getattr(detail, "state", "") or "")
    if state != "SUCCEEDED":
        raise ShardtrainError(f"run {run.run_id} ended {state or 'without a state'}: {url}")
    return SubmittedRun(run.run_id, url, state)


def _backend_version(client: Any) -> str | None:
    """The Kubeflow Pipelines version the server at ``client``'s host reports, if any.

    kfp 2.17's ``get_kfp_healthz`` (``/apis/v2beta1/healthz``) reports only ``multi_user``;
    ``/apis/v1beta1/healthz`` of the UI server (``ml-pipeline-ui``, what a port-forward
    reaches) also reports the API server's and the UI's release tags. Asked once, with the
    client's credentials; no answer is no version (the check is then skipped).
    """
    api_client = getattr(getattr(client, "_healthz_api", None), "api_client", None)
    if api_client is None:
        return None
    try:
        answer = api_client.call_api(
            "/apis/v1beta1/healthz", "GET", response_type="object",
            auth_settings=["Bearer"], _return_http_data_only=True, _request_timeout=10,
        )  # fmt: skip
    except Exception as exc:  # an old server, a proxy in the way: the version stays unknown
        log.info("the server does not report its version (%s)", one_line(exc))
        return None
    from shardtrain.kubeflow.preflight import backend_version

    return backend_version(answer) if isinstance(answer, Mapping) else None


def preflight_run(
    host: str,
    values: Mapping[str, Any],
    namespace: str | None,
    service_account: str | None,
    version: str | None,
    cluster: Any = None,
) -> None:
    """Refuse a run that cannot start, before it is created: the backend at ``host`` older
    than the pipeline needs (``version``, where it reports one), and on the cluster of
    kubeconfig (or ``cluster``) what the run's steps and training job need
    (:func:`shardtrain.kubeflow.preflight.pipeline_needs`): the job API and runtime, the
    namespaces, the runner's and the job's service accounts, the storage Secret's keys in
    both namespaces, and the runner's RBAC (``pipeline-runner`` unless
    ``service_account``).

    Args:
        values: every pipeline parameter (the defaults filled in).

    Raises:
        PreflightError: one line per problem, each with the command that fixes it.
    """
    from shardtrain.kubeflow import preflight, preflight_cluster
    from shardtrain.kubeflow.jobs.trainjob.spec import runtime_name

    if cluster is None:
        cluster = preflight_cluster.kubernetes_cluster()
    runner = preflight.runner_of(namespace, service_account)
    runtime = runtime_name(str(values.get("gang_scheduler") or "") or None)
    api = preflight.pipeline_job_api(str(values.get("job_api") or "auto"), cluster, runtime)
    needs = preflight.pipeline_needs(values, runner, api)
    problems = preflight.check(needs, cluster)
    old = preflight.backend_problem(version, host)
    if old is not None:
        problems.insert(0, old)
    if problems:
        raise preflight.PreflightError(needs.what, problems)


@dataclass(frozen=True)
class LocalRun:
    """What a local run of ``csv_to_model`` produced.

    Attributes:
        model_dir: the model directory (checkpoints, ``logs/``, ``eval/``, ``export/``).
        export: the SavedModel the trainer exported.
        served: the copy this run published at the serving URI (None: not blessed, so not
            exported).
        blessed: the evaluate step blessed the model.
        tensorboard: the TensorBoard log directory.
        metrics: the scalars of the ``dsl.Metrics`` output.
        classification: the ``dsl.ClassificationMetrics`` metadata (ROC, confusion matrix).
        sliced: the ``dsl.SlicedClassificationMetrics`` metadata (per slice).
        report: the path of the ``dsl.Markdown`` report.
        pipeline_root: where kfp.local keeps every task's artifacts and outputs.
    """

    model_dir: str
    export: str
    served: str | None
    blessed: bool
    tensorboard: str
    metrics: dict[str, Any]
    classification: dict[str, Any]
    sliced: dict[str, Any]
    report: str
    pipeline_root: str


def _absolute(value: Any) -> Any:
    """Local paths as absolute paths: the steps may run in another working directory."""
    if isinstance(value, str) and value and storage.is_local(value):
        return os.path.abspath(storage.local_path(value))
    return value


#: Parameters holding URIs (local ones are made absolute for local runs).
_URI_PARAMETERS = ("sources", "dataset_uri", "model_dir", "serving_uri")


def run_local(
    arguments: Mapping[str, Any], *, pipeline_root: str, cluster: bool = False
) -> LocalRun:
    """Run the whole pipeline on this machine with ``kfp.local``, training on a local TFJob.

    Every step runs as a subprocess of this Python environment
    (``SubprocessRunner(use_venv=False)``) and inherits its environment (``AWS_*`` for MinIO);
    the TFJob's replicas run as local processes (``local=True`` is forced). Storage may be
    local paths or ``s3://``/``gs://`` URIs.

    With ``cluster=True`` the train step runs as on a cluster instead (``local=False``): it
    submits the TFJob to the Kubernetes API of the step's environment (``KUBECONFIG``, e.g. the
    local control plane of ``scripts/k8s-up`` with a node of ``scripts/node-up``) and waits for it.

    Args:
        arguments: pipeline arguments (see :func:`parse_arguments`).
        pipeline_root: directory for the tasks' artifacts (reports, metrics, pointers).
        cluster: submit the TFJob to the cluster of ``KUBECONFIG`` instead of running it here.

    Returns:
        Where the model, metrics, report and TensorBoard logs are.

    Raises:
        ConfigError: a required argument is missing.
        ShardtrainError: a task failed (its log is above).
    """
    pipeline = load_pipeline()
    args = {**arguments, "local": not cluster}
    for name in _URI_PARAMETERS:
        if name in args:
            value = args[name]
            args[name] = (
                [_absolute(v) for v in value] if isinstance(value, list) else _absolute(value)
            )
    _check_required(args, pipeline)
    from shardtrain.kubeflow import shard_steps
    from shardtrain.kubeflow.parameters import SHARDING

    # The sources as the shard workers will see them (label, key, files): refused here, not
    # in a step's log after the pipeline started.
    shard_steps.check_inputs({p.name: args.get(p.name, p.default) for p in SHARDING})
    root = os.path.abspath(pipeline_root)
    os.makedirs(root, exist_ok=True)
    with local_session(root), warnings.catch_warnings():
        # kfp.local warns that an image without "python" in its name may not be Python (ours
        # is), and that resource requests do not apply locally (they are for the cluster).
        warnings.filterwarnings(
            "ignore", message=".*non-Python base image.*", category=RuntimeWarning
        )
        warnings.filterwarnings(
            "ignore", message=".*no effect in the current local runner.*", category=UserWarning
        )
        try:
            task = pipeline(**args)
        except RuntimeError as exc:
            raise ShardtrainError(f"pipeline {PIPELINE_NAME} failed: {one_line(exc)}") from exc
    outputs = task.outputs
    model = read_pointer(outputs["model"])
    return LocalRun(
        model_dir=model["uri"],
        export=model["export"],
        served=_published(outputs["report"].path),
        blessed=bool(outputs["blessed"]),
        tensorboard=model["tensorboard"],
        metrics=dict(outputs["metrics"].metadata),
        classification=dict(outputs["classification"].metadata),
        sliced=dict(outputs["sliced"].metadata),
        report=outputs["report"].path,
        pipeline_root=root,
    )


@contextlib.contextmanager
def local_session(pipeline_root: str) -> Iterator[None]:
    """A ``kfp.local`` session (steps as subprocesses of this environment) for what runs
    inside, which leaves neither temporary folders nor a replaced ``print`` behind.

    Args:
        pipeline_root: directory for the tasks' artifacts.
    """
    from kfp import local

    with _scratch_of_steps() as scratch, _print_swaps_in_turn():
        local.init(
            runner=local.SubprocessRunner(use_venv=False),
            pipeline_root=pipeline_root,
            workspace_root=scratch,
            raise_on_error=True,
        )
        yield


@contextlib.contextmanager
def _print_swaps_in_turn() -> Iterator[None]:
    """Make kfp.local's indenting of the steps' logs safe for steps that run at once.

    While a step runs, kfp.local (``logging_utils.indented_print``) sets ``builtins.print``
    to a closure and then sets back what it found. The steps of a ``ParallelFor`` run in
    threads, each swapping on its own: when the first to start ends first, the other
    "restores" the first one's closure, which stays after the run (and indents every later
    line once more). numba, imported after that (the demo's summary reads a columnar
    dataset), checks that each builtin it types is its module's attribute by that name
    (``@infer_global(print)``) and fails: ``AttributeError: module 'kfp.local.logging_utils'
    has no attribute 'indented_print_function'``. Here the first step to start swaps and the
    last to end restores, and ``print`` is this process's own again when the session ends.
    """
    import builtins

    from kfp.local import logging_utils

    original_print = builtins.print
    kfp_swap = logging_utils.indented_print
    lock = threading.Lock()
    running = 0

    @contextlib.contextmanager
    def in_turn(num_spaces: int = 4) -> Iterator[None]:
        nonlocal running
        with lock:
            running += 1
            if running == 1:
                pad = " " * num_spaces

                def indented(*args: Any, **kwargs: Any) -> None:
                    original_print(pad, end="")
                    original_print(*args, **kwargs)

                builtins.print = indented
        try:
            yield
        finally:
            with lock:
                running -= 1
                if not running:
                    builtins.print = original_print

    logging_utils.indented_print = in_turn
    try:
        yield
    finally:
        logging_utils.indented_print = kfp_swap
        builtins.print = original_print


@contextlib.contextmanager
def _scratch_of_steps() -> Iterator[str]:
    """A temporary folder for the steps of a local run, deleted when the run ends.

    Each step's command (KFP's, for every Python component) starts with ``mktemp -d`` and
    never deletes that folder, and kfp.local makes a workspace folder per run: left in
    ``$TMPDIR``, they piled up run after run. The steps get this folder as their ``TMPDIR``
    (what they and the processes they start leave there goes with it); this process keeps
    its own temporary directory.
    """
    tempfile.gettempdir()  # this process's own, fixed before TMPDIR changes
    scratch = tempfile.mkdtemp(prefix="shardtrain-run-local-")
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = scratch
    try:
        yield scratch
    finally:
        if before is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = before
        shutil.rmtree(scratch, ignore_errors=True)


def _published(report_path: str) -> str | None:
    """The version the run's export task published (None: it did not run), read from the
    task's outputs in the run's directory (``<run>/evaluate/report`` → ``<run>/export/``):
    the export runs under ``dsl.If``, so its output is not a pipeline output."""
    run_dir = os.path.dirname(os.path.dirname(report_path))
    path = os.path.join(run_dir, "export", "executor_output.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        output = json.load(f)
    served = output["artifacts"]["served_model"]["artifacts"][0]["metadata"]
    return str(served["uri"])
