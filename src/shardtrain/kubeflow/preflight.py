"""Preflight: what a job or a pipeline run needs of the cluster, checked before anything is
created, so that a run that cannot start says why before it starts.

On a real cluster a submission fails late and obscurely when something around it is missing:
a storage Secret (or one of its keys) absent from the namespace leaves the pods in
``CreateContainerConfigError`` and the job looks hung; a service account that does not exist
keeps the pods from being created at all; a launcher without RBAC for
``trainer.kubeflow.org`` gets its 403 only after sharding has finished; a local path as a URI
names a file no pod has. ``shardtrain trainjob|tfjob|pipeline submit`` therefore check first:

* the job API is served (discovery) and, for a TrainJob, our ClusterTrainingRuntime exists;
* the namespaces, the service accounts, and the storage Secret with every key a
  ``secretKeyRef`` that is not ``optional`` names (the keys the pods cannot start without);
* RBAC, with SelfSubjectAccessReview for what we do ourselves (create the job, wait for it,
  read its pods and logs) and SubjectAccessReview for what another identity does for us (the
  pipeline's runner service account creates the job and, with ``deploy``, the
  InferenceService); the job's own service account needs none (the trainer only reads and
  writes object storage, and its pods mount no API token), only to exist;
* the locations the pods read and write are URIs they can reach
  (:func:`shardtrain.kubeflow.jobs.settings.check_pod_uris`);
* for a pipeline run, the Kubeflow Pipelines backend's version where it reports one
  (:func:`backend_problem`).

What a submission needs is described as data (:class:`Needs`: built from the job's manifest by
:func:`job_needs`, or from a run's arguments by :func:`pipeline_needs`) and checked against a
:class:`Cluster` (the Kubernetes API, :mod:`shardtrain.kubeflow.preflight_cluster`; tests
pass a stand-in). Every failure is one :class:`Problem`: what is missing and the command that
fixes it; :func:`check` lists them all, not just the first, and :func:`raise_for` raises
:class:`PreflightError` (exit code 1, a configuration error) with one line each. What this
account may not look at (a Secret it may not read, a SubjectAccessReview it may not create) is
not a failure: it is reported as not checked and left to the cluster.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from shardtrain.errors import ConfigError, ShardtrainError
from shardtrain.kubeflow.jobs import settings
from shardtrain.kubeflow.jobs.submit import ClusterError
from shardtrain.kubeflow.jobs.tfjob import spec as tfjob_spec
from shardtrain.kubeflow.jobs.trainjob import spec as trainjob_spec
from shardtrain.kubeflow.jobs.trainjob.render import DEFAULT_SERVICE_ACCOUNT
from shardtrain.kubeflow.pods import STORAGE_ENV

log = logging.getLogger(__name__)

#: The oldest Kubeflow Pipelines backend that runs csv_to_model as compiled: 2.15 keeps
#: ``optional`` on Secret keys (``use_secret_as_env(optional=True)``; older drivers drop it and
#: every step without AWS_ENDPOINT_URL/AWS_REGION in its Secret stays in
#: CreateContainerConfigError); ``dsl.Collected`` needs 2.14.
MIN_BACKEND = (2, 15)
#: Kubeflow Pipelines' default runner of a run: ``pipeline-runner`` in its own namespace
#: (standalone installs); in a Kubeflow profile's namespace (multi-user) ``default-editor``.
PIPELINE_RUNNER = "pipeline-runner"
PROFILE_RUNNER = "default-editor"
#: The namespace of a standalone Kubeflow Pipelines install (kfp.Client's default).
KFP_NAMESPACE = "kubeflow"
#: The namespace and launcher Role of ``k8s/rbac``.
RBAC_NAMESPACE = "shardtrain"
LAUNCHER_ROLE = "shardtrain-launcher"

_TRAINER_INSTALL = (
    "kubectl apply --server-side -k "
    "'https://github.com/kubeflow/trainer.git/manifests/overlays/manager?ref=v2.3.0'"
)
_OPERATOR_INSTALL = (
    "kubectl apply --server-side -k "
    "'https://github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref=v1.9.4'"
)
_RUNTIME_INSTALL = "kubectl apply --server-side -k k8s/trainer-v2"


class PreflightError(ConfigError):
    """The cluster lacks what a submission needs; the message has one line per problem."""

    def __init__(self, what: str, problems: Iterable[Problem]):
        self.problems = tuple(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(
            f"preflight: {what} cannot start ({len(self.problems)} problem(s); "
            f"--no-preflight skips these checks):\n{lines}"
        )


@dataclass(frozen=True)
class Problem:
    """One thing a submission needs and the cluster lacks: what, and the command that fixes it."""

    missing: str
    fix: str

    def __str__(self) -> str:
        return f"{self.missing}; fix: {self.fix}"


@dataclass(frozen=True)
class Access:
    """A request an identity will make: ``verb`` on ``resource`` (a plural) of ``group``."""

    verb: str
    resource: str
    group: str = ""
    subresource: str = ""

    @property
    def what(self) -> str:
        """``trainjobs.trainer.kubeflow.org``, ``pods/log``: as kubectl names resources."""
        name = f"{self.resource}.{self.group}" if self.group else self.resource
        return f"{name}/{self.subresource}" if self.subresource else name


@dataclass(frozen=True)
class Identity:
    """Who makes requests: this account (``service_account`` None) or a service account."""

    namespace: str = ""
    service_account: str | None = None
    #: This account, known by its user name or service account (for messages only: access
    #: reviews of this account are SelfSubjectAccessReviews).
    me: bool = False
    user_name: str | None = None

    @property
    def user(self) -> str | None:
        """The user name the API server knows a service account by (None: this account)."""
        if self.service_account is None or self.me:
            return None
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"

    @property
    def groups(self) -> list[str]:
        """The groups every token of the service account carries."""
        if self.service_account is None:
            return []
        return [
            "system:serviceaccounts",
            f"system:serviceaccounts:{self.namespace}",
            "system:authenticated",
        ]

    def __str__(self) -> str:
        if self.service_account is None:
            return f"your account ({self.user_name})" if self.user_name else "your account"
        mine = "your account, " if self.me else ""
        return f"{mine}service account {self.namespace}/{self.service_account}"


@dataclass(frozen=True)
class Grant:
    """What ``who`` must be allowed in ``namespace``, and why (for the message)."""

    who: Identity
    namespace: str
    access: tuple[Access, ...]
    why: str


@dataclass(frozen=True)
class SecretNeed:
    """A Secret the pods of ``namespace`` read, with the keys they cannot start without."""

    namespace: str
    name: str
    keys: tuple[str, ...]
    optional_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class Api:
    """A job API: its group, version, plural and kind, and how to install it."""

    group: str
    version: str
    plural: str
    kind: str
    install: str


TRAINJOB_API = Api(
    trainjob_spec.GROUP,
    trainjob_spec.VERSION,
    trainjob_spec.PLURAL,
    trainjob_spec.KIND,
    f"install Kubeflow Trainer v2: {_TRAINER_INSTALL}",
)
TFJOB_API = Api(
    tfjob_spec.API_VERSION.split("/")[0],
    tfjob_spec.API_VERSION.split("/")[1],
    "tfjobs",
    tfjob_spec.KIND,
    f"install the Kubeflow training operator: {_OPERATOR_INSTALL}",
)
KSERVE_API = Api(
    "serving.kserve.io",
    "v1beta1",
    "inferenceservices",
    "InferenceService",
    "install KServe (https://kserve.github.io/website/docs/admin-guide/serverless)",
)


@dataclass(frozen=True)
class Needs:
    """Everything a submission needs of the cluster (see the module docstring).

    Attributes:
        what: the submission, as messages name it (``TrainJob ns/name``).
        apis: the APIs that must be served.
        runtime: the ClusterTrainingRuntime a TrainJob names (None: no TrainJob).
        namespaces: namespaces that must exist.
        service_accounts: ``(namespace, name)`` of service accounts that must exist.
        secrets: Secrets the pods read.
        grants: what each identity must be allowed.
        locations: the URIs the pods read or write, by the setting that gives them.
    """

    what: str
    apis: tuple[Api, ...] = ()
    runtime: str | None = None
    namespaces: tuple[str, ...] = ()
    service_accounts: tuple[tuple[str, str], ...] = ()
    secrets: tuple[SecretNeed, ...] = ()
    grants: tuple[Grant, ...] = ()
    locations: Mapping[str, str] = field(default_factory=dict)


class Cluster(Protocol):
    """What the checks ask of the Kubernetes API. Each answer is True/False, or None when this
    account may not ask (the check is then skipped, never failed)."""

    def serves(self, api: Api) -> bool: ...

    def runtime_exists(self, name: str) -> bool | None: ...

    def namespace_exists(self, namespace: str) -> bool | None: ...

    def service_account_exists(self, namespace: str, name: str) -> bool | None: ...

    def secret_keys(self, namespace: str, name: str) -> frozenset[str] | None:
        """The Secret's keys; raises :class:`LookupError` when there is no such Secret."""

    def allowed(self, who: Identity, namespace: str, access: Access) -> bool | None: ...

    def whoami(self) -> str | None:
        """This account's user name (None: the cluster does not say)."""


# --------------------------------------------------------------------------------------------
# What a submission needs
# --------------------------------------------------------------------------------------------


def _walk(node: Any, key: str) -> Iterator[Any]:
    """Every value stored under ``key`` anywhere in a manifest."""
    if isinstance(node, Mapping):
        for k, v in node.items():
            if k == key:
                yield v
            yield from _walk(v, key)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item, key)


def secret_refs(manifest: Mapping[str, Any]) -> dict[str, tuple[set[str], set[str]]]:
    """The Secrets a manifest's pods read: name → (required keys, optional keys), from every
    ``secretKeyRef`` (a key not ``optional`` is required) and ``envFrom.secretRef`` (the
    Secret itself is required unless optional)."""
    found: dict[str, tuple[set[str], set[str]]] = {}
    for ref in _walk(manifest, "secretKeyRef"):
        if isinstance(ref, Mapping) and ref.get("name") and ref.get("key"):
            required, optional = found.setdefault(str(ref["name"]), (set(), set()))
            (optional if ref.get("optional") else required).add(str(ref["key"]))
    for ref in _walk(manifest, "secretRef"):
        if isinstance(ref, Mapping) and ref.get("name") and not ref.get("optional"):
            found.setdefault(str(ref["name"]), (set(), set()))
    return found


def pod_locations(manifest: Mapping[str, Any]) -> dict[str, str]:
    """``--data`` and ``--model-dir`` of the containers' arguments (the trainer's)."""
    locations: dict[str, str] = {}
    for args in _walk(manifest, "args"):
        if not isinstance(args, list):
            continue
        words = [str(a) for a in args]
        for i, word in enumerate(words):
            for flag in ("--data", "--model-dir"):
                if word == flag and i + 1 < len(words):
                    locations[flag] = words[i + 1]
                elif word.startswith(flag + "="):
                    locations[flag] = word.split("=", 1)[1]
    return locations


def _job_access(api: Api, *, logs: bool, delete: bool) -> tuple[Access, ...]:
    """What a launcher does with a job of ``api``: create it, read it while waiting (and to
    attach to the same job), list its pods, follow the chief's log, delete it."""
    verbs = ["create", "get"] + (["delete"] if delete else [])
    access = [Access(v, api.plural, api.group) for v in verbs]
    access.append(Access("list", "pods"))
    if logs:
        access.append(Access("get", "pods", subresource="log"))
    return tuple(access)


def job_needs(manifest: Mapping[str, Any], *, logs: bool = True, delete: bool = False) -> Needs:
    """What creating the job ``manifest`` (a TrainJob or a TFJob) and waiting for it need:
    its API (and runtime), its namespace, its pods' service account and Secrets, and our own
    RBAC for creating it, reading it and its pods (and logs with ``logs``, deleting it with
    ``delete``).

    Raises:
        ConfigError: ``manifest`` is neither a TrainJob nor a TFJob.
    """
    kind = manifest.get("kind")
    meta = manifest.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    if kind == trainjob_spec.KIND:
        api = TRAINJOB_API
        runtime = str(((manifest.get("spec") or {}).get("runtimeRef") or {}).get("name") or "")
        accounts = {str(a) for a in _walk(manifest, "serviceAccountName")} or {
            DEFAULT_SERVICE_ACCOUNT
        }
    elif kind == tfjob_spec.KIND:
        api, runtime = TFJOB_API, ""
        accounts = {str(a) for a in _walk(manifest, "serviceAccountName")} or {"default"}
    else:
        raise ConfigError(f"preflight: cannot check a {kind or 'manifest without a kind'}")
    secrets = tuple(
        SecretNeed(namespace, secret, tuple(sorted(keys)), tuple(sorted(optional - keys)))
        for secret, (keys, optional) in sorted(secret_refs(manifest).items())
    )
    return Needs(
        what=f"{api.kind} {namespace}/{name}",
        apis=(api,),
        runtime=runtime or None,
        namespaces=(namespace,),
        service_accounts=tuple((namespace, a) for a in sorted(accounts)),
        secrets=secrets,
        grants=(
            Grant(
                Identity(),
                namespace,
                _job_access(api, logs=logs, delete=delete),
                f"to create the {api.kind} and wait for it",
            ),
        ),
        locations=pod_locations(manifest),
    )


def _storage_secret(namespace: str, name: str) -> SecretNeed:
    return SecretNeed(
        namespace,
        name,
        tuple(k for k, optional in STORAGE_ENV if not optional),
        tuple(k for k, optional in STORAGE_ENV if optional),
    )


def runner_of(namespace: str | None, service_account: str | None) -> Identity:
    """The identity a pipeline run's steps act as: ``service_account``, else Kubeflow
    Pipelines' default (``pipeline-runner`` in ``kubeflow``; ``default-editor`` in a profile
    namespace)."""
    run_namespace = namespace or KFP_NAMESPACE
    default = PIPELINE_RUNNER if run_namespace == KFP_NAMESPACE else PROFILE_RUNNER
    return Identity(run_namespace, service_account or default)


def pipeline_needs(arguments: Mapping[str, Any], runner: Identity, job_api: Api) -> Needs:
    """What a ``csv_to_model`` run needs of the cluster, when its steps act as ``runner``
    (in ``runner.namespace``, the run's namespace) and train on ``job_api``.

    The step pods read the storage Secret (``secret_name``) in the run's namespace; the train
    step creates the training job in ``namespace`` (the run's when ''), whose pods run as
    ``service_account`` and read the same Secret there; it waits for the job, reads its pods,
    follows the chief's log and reads the job's events; with ``deploy`` the deploy step
    server-side applies a ServiceAccount and an InferenceService in ``deploy_namespace``.
    ``arguments`` are all of the run's parameters (the pipeline's defaults filled in).
    """
    run_ns = runner.namespace
    job_ns = str(arguments.get("namespace") or run_ns)
    secret = str(arguments.get("secret_name", "") or "")
    job_account = str(arguments.get("service_account") or "")
    namespaces = dict.fromkeys([run_ns, job_ns])
    secrets = tuple(_storage_secret(ns, secret) for ns in namespaces) if secret else ()
    accounts = [(run_ns, str(runner.service_account))]
    if job_account:
        accounts.append((job_ns, job_account))
    launch = (*_job_access(job_api, logs=True, delete=True), Access("list", "events"))
    grants = [Grant(runner, job_ns, launch, f"for the train step to run the {job_api.kind}")]
    apis = [job_api]
    if arguments.get("deploy"):
        deploy_ns = str(arguments.get("deploy_namespace") or run_ns)
        namespaces[deploy_ns] = None
        apply = tuple(
            Access(verb, resource, group)
            for resource, group in (
                (KSERVE_API.plural, KSERVE_API.group),
                ("serviceaccounts", ""),
            )
            for verb in ("get", "create", "patch")
        )
        grants.append(Grant(runner, deploy_ns, apply, "for the deploy step"))
        apis.append(KSERVE_API)
    locations = {
        name: str(value)
        for name in ("dataset_uri", "model_dir", "serving_uri")
        if (value := arguments.get(name))
    }
    return Needs(
        what=f"pipeline run (as {runner})",
        apis=tuple(apis),
        runtime=(
            trainjob_spec.runtime_name(arguments.get("gang_scheduler") or None)
            if job_api is TRAINJOB_API
            else None
        ),
        namespaces=tuple(namespaces),
        service_accounts=tuple(accounts),
        secrets=secrets,
        grants=tuple(grants),
        locations=locations,
    )


def pipeline_job_api(job_api: str, cluster: Cluster | None, runtime: str) -> Api:
    """The API the train step will use: ``job_api``, or for ``auto`` what
    :func:`shardtrain.kubeflow.steps.resolve_job_api` will choose (the TrainJob where the
    cluster serves it and has ``runtime``, else the TFJob where it is served; else the
    TrainJob, which the check then reports as not served)."""
    if job_api == "tfjob":
        return TFJOB_API
    if job_api == "trainjob" or cluster is None:
        return TRAINJOB_API
    if cluster.serves(TRAINJOB_API) and cluster.runtime_exists(runtime) is not False:
        return TRAINJOB_API
    return TFJOB_API if cluster.serves(TFJOB_API) else TRAINJOB_API


# --------------------------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------------------------


def _rbac_fix(grant: Grant, denied: list[Access]) -> str:
    """A command granting ``denied`` to ``grant.who`` in ``grant.namespace``."""
    who = grant.who
    ns = grant.namespace
    if ns == RBAC_NAMESPACE and (who.namespace, who.service_account) in (
        (KFP_NAMESPACE, PIPELINE_RUNNER),
        (RBAC_NAMESPACE, LAUNCHER_ROLE),
    ):
        # Their RoleBindings name kubeflow/pipeline-runner and shardtrain/shardtrain-launcher.
        deploying = any(a.resource in (KSERVE_API.plural, "serviceaccounts") for a in denied)
        return f"kubectl apply -k k8s/rbac{'/deploy' if deploying else ''}"
    verbs = ",".join(sorted({a.verb for a in denied}))
    resources = ",".join(sorted({a.what for a in denied}))
    role = f"shardtrain-{denied[0].resource}"
    subject = (
        f"--serviceaccount={who.namespace}:{who.service_account}"
        if who.service_account is not None
        else f"--user={who.user_name or '<you>'}"
    )
    return (
        f"kubectl -n {ns} create role {role} --verb={verbs} --resource={resources} && "
        f"kubectl -n {ns} create rolebinding {role} --role={role} {subject}"
    )


def _secret_fix(need: SecretNeed, keys: Iterable[str], *, exists: bool) -> str:
    literals = " ".join(f"--from-literal={k}=..." for k in keys)
    if not exists:
        return f"kubectl -n {need.namespace} create secret generic {need.name} {literals}"
    data = ",".join(f'"{k}":"..."' for k in keys)
    return (
        f"kubectl -n {need.namespace} patch secret {need.name} -p '{{\"stringData\":{{{data}}}}}'"
    )


def check(needs: Needs, cluster: Cluster | None) -> list[Problem]:
    """Every problem of ``needs`` on ``cluster`` (None: no cluster configuration; only the
    locations are checked, and that is itself a problem), in the order a user fixes them.
    """
    problems = list(_location_problems(needs.locations))
    if cluster is None:
        return [*problems, no_cluster_problem()]
    for api in needs.apis:
        if not cluster.serves(api):
            problems.append(
                Problem(
                    f"the cluster does not serve {api.group}/{api.version} {api.kind}s",
                    api.install,
                )
            )
    if (
        needs.runtime is not None
        and TRAINJOB_API in needs.apis
        and cluster.serves(TRAINJOB_API)
        and cluster.runtime_exists(needs.runtime) is False
    ):
        problems.append(
            Problem(
                f"the cluster has no ClusterTrainingRuntime {needs.runtime} (shardtrain's "
                "TensorFlow runtime)",
                _RUNTIME_INSTALL,
            )
        )
    missing_ns = set()
    for ns in needs.namespaces:
        if cluster.namespace_exists(ns) is False:
            missing_ns.add(ns)
            problems.append(Problem(f"namespace {ns} does not exist", f"kubectl create ns {ns}"))
    for ns, account in needs.service_accounts:
        if ns in missing_ns:
            continue
        exists = cluster.service_account_exists(ns, account)
        if exists is False:
            problems.append(
                Problem(
                    f"service account {ns}/{account} does not exist (pods cannot be created)",
                    f"kubectl -n {ns} create serviceaccount {account}",
                )
            )
        elif exists is None:
            log.warning("preflight: not allowed to read service account %s/%s", ns, account)
    for need in needs.secrets:
        if need.namespace not in missing_ns:
            problems.extend(_secret_problems(need, cluster))
    for grant in needs.grants:
        if grant.namespace not in missing_ns:
            problems.extend(_rbac_problems(grant, cluster))
    return problems


def _location_problems(locations: Mapping[str, str]) -> Iterator[Problem]:
    for what, uri in locations.items():
        try:
            settings.check_pod_uris(**{what: uri})
        except ShardtrainError as exc:
            yield Problem(str(exc), f"copy the data to object storage and give {what} its URI")


def _secret_problems(need: SecretNeed, cluster: Cluster) -> Iterator[Problem]:
    where = f"Secret {need.namespace}/{need.name}"
    try:
        keys = cluster.secret_keys(need.namespace, need.name)
    except LookupError:
        yield Problem(
            f"{where} does not exist (the pods would stay in CreateContainerConfigError)",
            _secret_fix(need, need.keys or need.optional_keys, exists=False),
        )
        return
    if keys is None:
        log.warning("preflight: not allowed to read %s: its keys are not checked", where)
        return
    missing = [k for k in need.keys if k not in keys]
    if missing:
        yield Problem(
            f"{where} has no key {', '.join(missing)} (the pods would stay in "
            "CreateContainerConfigError)",
            _secret_fix(need, missing, exists=True),
        )


def _named(who: Identity, cluster: Cluster) -> Identity:
    """``who``, with this account's name when it is this account and the cluster says it
    (a service account's token: named as that service account)."""
    if who.service_account is not None:
        return who
    user = cluster.whoami() if hasattr(cluster, "whoami") else None
    parts = (user or "").split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
        return Identity(parts[2], parts[3], me=True)
    return Identity(user_name=user) if user else who


def _rbac_problems(grant: Grant, cluster: Cluster) -> Iterator[Problem]:
    answers = [(a, cluster.allowed(grant.who, grant.namespace, a)) for a in grant.access]
    grant = Grant(_named(grant.who, cluster), grant.namespace, grant.access, grant.why)
    if any(allowed is None for _, allowed in answers):
        log.warning(
            "preflight: cannot ask what %s may do in %s (no SubjectAccessReview allowed): "
            "not checked",
            grant.who,
            grant.namespace,
        )
    by_resource: dict[str, list[Access]] = {}
    for access, allowed in answers:
        if allowed is False:
            by_resource.setdefault(access.what, []).append(access)
    for what, denied in by_resource.items():
        verbs = ", ".join(a.verb for a in denied)
        yield Problem(
            f"{grant.who} may not {verbs} {what} in {grant.namespace} ({grant.why})",
            _rbac_fix(grant, denied),
        )


def raise_for(needs: Needs, cluster: Cluster | None) -> None:
    """Check ``needs`` and raise when anything is missing.

    Raises:
        PreflightError: one line per :class:`Problem` (exit code 1).
        ClusterError: there is no cluster configuration (and nothing else is wrong).
    """
    problems = check(needs, cluster)
    if cluster is None and len(problems) == 1:
        # Nothing to check against: the one line the submission itself would end with.
        raise ClusterError(f"{problems[0].missing}: {problems[0].fix}")
    if problems:
        raise PreflightError(needs.what, problems)


# --------------------------------------------------------------------------------------------
# The Kubeflow Pipelines backend
# --------------------------------------------------------------------------------------------

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def backend_version(healthz: Mapping[str, Any]) -> str | None:
    """The backend's version in a ``/apis/v1beta1/healthz`` answer, where it reports one: the
    UI server (``ml-pipeline-ui``, what a port-forward reaches) gives ``apiServerTagName`` and
    ``frontendTagName``; the API server itself only says whether it is multi-user."""
    for key in ("apiServerTagName", "tag_name", "frontendTagName"):
        value = healthz.get(key)
        if isinstance(value, str) and _VERSION.search(value):
            return value
    return None


def backend_problem(version: str | None, host: str) -> Problem | None:
    """A problem when the backend at ``host`` is older than :data:`MIN_BACKEND` (None: the
    version is unknown or new enough)."""
    match = _VERSION.search(version or "")
    if match is None:
        return None
    major, minor = int(match.group(1)), int(match.group(2))
    if (major, minor) >= MIN_BACKEND:
        return None
    need = ".".join(map(str, MIN_BACKEND))
    return Problem(
        f"Kubeflow Pipelines at {host} is {version}; csv_to_model needs {need} or newer "
        "(2.15 keeps optional Secret keys, 2.14 resolves dsl.Collected)",
        f"upgrade Kubeflow Pipelines to {need}+ (standalone: kubectl apply -k "
        f"'github.com/kubeflow/pipelines/manifests/kustomize/env/platform-agnostic?ref=2.15.0')",
    )


def no_cluster_problem() -> Problem:
    """The problem of having no cluster configuration to check against."""
    return Problem(
        "no Kubernetes configuration (kubeconfig or in-cluster account) to check the cluster with",
        "set KUBECONFIG (or kubectl config use-context), or pass --no-preflight",
    )
