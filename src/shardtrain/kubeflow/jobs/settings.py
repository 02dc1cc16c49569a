"""What every job API's settings have in common: the checks of their values, and how the CLI
builds them from its options.

A job's settings (e.g. :class:`shardtrain.kubeflow.jobs.tfjob.JobConfig`) are a frozen
dataclass deriving from :class:`JobSettings` (a training job's from
:class:`TrainingJobSettings`, which holds the settings every training job's pods have); its
``__post_init__`` runs the checks here on the values every job has (names, environment,
train arguments, the global batch), so a bad value fails with one line before anything is
rendered or sent to a cluster.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Self

from shardtrain.errors import ConfigError, ShardtrainError
from shardtrain.kubeflow import pods
from shardtrain.storage import uri as uris

_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_dns1035_label(name: Any) -> bool:
    """True for a valid job name: a-z, 0-9 and '-', a letter first, at most 63 characters."""
    return isinstance(name, str) and bool(_DNS1035_LABEL.match(name)) and len(name) <= 63


def check_job_name(kind: str, name: str) -> None:
    """A job name must be a DNS-1035 label (its pods' and Services' names derive from it)."""
    if not is_dns1035_label(name):
        raise ConfigError(
            f"{kind} name '{name}' is not a DNS-1035 label (lower-case letters, digits and '-', "
            "starting with a letter, at most 63 characters)"
        )


def check_namespace(namespace: str) -> None:
    if not _DNS1123_LABEL.match(namespace) or len(namespace) > 63:
        raise ConfigError(f"namespace '{namespace}' is not a DNS-1123 label")


def check_image(image: str) -> None:
    if not image or any(c.isspace() for c in image):
        raise ConfigError(f"image '{image}' is not an image reference")


def check_quantities(**quantities: str) -> None:
    """CPU and memory settings (``cpu="4"``, ``memory="16Gi"``): positive Kubernetes
    quantities, read by the one quantity parser (:func:`shardtrain.kubeflow.pods.quantity`),
    so that what a render or a pipeline parameter check accepts is what the steps use and
    the API server takes.

    Raises:
        ConfigError: a value that is no quantity (``lots``), or not above zero (``-1Gi``,
            ``0``), naming the setting.
    """
    for what, value in quantities.items():
        try:
            number = pods.quantity(value)
        except ConfigError:
            raise ConfigError(
                f"{what} '{value}' is not a Kubernetes quantity (e.g. 4, 500m, 16Gi)"
            ) from None
        if not math.isfinite(number) or number <= 0:
            raise ConfigError(f"{what} '{value}' must be a positive quantity (e.g. 4, 500m, 16Gi)")


def check_pod_uris(**locations: str | None) -> None:
    """Locations a cluster's pods read or write (``data``, ``model_dir``...): ``s3://`` or
    ``gs://`` URIs. A local path names a file on this machine only (every pod has its own
    file system), so a job given one fails inside its pods; local runs (``shardtrain
    run-local``, ``pipeline run-local``) take local paths and do not call this.

    Raises:
        ConfigError: a local path or an unsupported scheme, naming the setting.
    """
    for what, location in locations.items():
        if location is None:
            continue
        if uris.is_local(location):
            raise ConfigError(
                f"{what} '{location}' is a local path, which no pod can read (each pod has its "
                "own file system): give an s3:// or gs:// URI"
            )
        try:
            uris.check_scheme(location)
        except ShardtrainError as exc:
            raise ConfigError(f"{what}: {exc}") from None


def check_object_names(**names: str | None) -> None:
    """Names of Kubernetes objects (a Secret, a service account …): DNS-1123 subdomains."""
    for what, name in names.items():
        if name is not None and not _DNS1123_SUBDOMAIN.match(name):
            raise ConfigError(f"{what} '{name}' is not a valid Kubernetes name")


def check_counts(counts: Iterable[tuple[str, int | None, int]]) -> None:
    """Each ``(what, count, low)``: None, or an integer >= ``low``."""
    for what, count, low in counts:
        if count is not None and (not isinstance(count, int) or count < low):
            raise ConfigError(f"{what} must be an integer >= {low}, not {count!r}")


def check_queue(queue: str | None) -> None:
    if queue is not None and (not _DNS1123_LABEL.match(queue) or len(queue) > 63):
        raise ConfigError(
            f"queue '{queue}' is not a valid queue name (a DNS-1123 label: a-z, 0-9, '-', at "
            "most 63 characters)"
        )


def check_env(env: Mapping[str, str], reserved: Iterable[str]) -> None:
    """Extra variables of the pods: valid names, none that shardtrain or the operator set."""
    taken = set(reserved)
    for name in env:
        if not _ENV_NAME.match(name):
            raise ConfigError(f"env: '{name}' is not a valid variable name")
        if name in taken:
            raise ConfigError(
                f"env: {name} is set by shardtrain or the operator (storage credentials come "
                "from the Secret)"
            )


def check_train_args(train_args: Sequence[str], replicas: int, training_pods: int) -> None:
    """The trainer's extra arguments: no ``--data``/``--model-dir`` (fields of the job), and
    an explicit ``--batch-size`` that splits evenly over the ``replicas`` in sync (on
    ``training_pods`` pods)."""
    for arg in train_args:
        if arg.split("=", 1)[0] in ("--data", "--model-dir"):
            raise ConfigError(f"train args: give {arg.split('=', 1)[0]} as the job's own field")
    given = train_arg(tuple(train_args), "--batch-size")
    if given is not None:
        batch = int_arg("--batch-size", given)
        if batch % replicas:
            raise ConfigError(
                f"train args: --batch-size {batch} is not divisible by the {replicas} "
                f"replicas in sync ({training_pods} training pods x "
                f"{replicas // training_pods} device(s)); use "
                f"{_nearest_multiples(batch, replicas)}"
            )


def replicas_in_sync(training_pods: int, gpus_per_pod: int, train_args: Sequence[str] = ()) -> int:
    """Replicas a job's global batch is split over: ``training_pods`` x devices per pod (their
    GPUs, at most ``--devices``; one CPU device without GPUs)."""
    per_pod = max(gpus_per_pod, 1)
    devices = train_arg(tuple(train_args), "--devices")
    if devices is not None and int_arg("--devices", devices) > 0:
        per_pod = min(per_pod, int_arg("--devices", devices))
    return training_pods * per_pod


def round_batch(batch: int, replicas: int) -> int:
    """``batch`` rounded to the nearest multiple of ``replicas`` (at least one per replica)."""
    return max(replicas, round(batch / replicas) * replicas)


def pod_train_args(train_args: tuple[str, ...], replicas: int) -> tuple[str, ...]:
    """The train arguments the pods get: ``train_args``, and when they leave the batch size to
    the trainer's default (and to no ``--config`` file), that default rounded to the nearest
    multiple of ``replicas`` so that it splits evenly. An explicit ``--batch-size`` is never
    changed (:func:`check_train_args` checks it instead)."""
    if train_arg(train_args, "--batch-size") is not None or any(
        a.split("=", 1)[0] == "--config" for a in train_args
    ):
        return train_args
    from shardtrain.train.config import TrainConfig

    default = TrainConfig.__dataclass_fields__["batch_size"].default
    assert isinstance(default, int)
    if default % replicas == 0:
        return train_args
    return (*train_args, "--batch-size", str(round_batch(default, replicas)))


def train_arg(args: tuple[str, ...], flag: str) -> str | None:
    """The value of the last ``flag VALUE`` or ``flag=VALUE`` in ``args`` (None: absent)."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def int_arg(flag: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"train args: {flag} must be an integer, not {value!r}") from None


def _nearest_multiples(batch: int, replicas: int) -> str:
    below = batch // replicas * replicas
    above = below + replicas
    return f"--batch-size {above}" if below == 0 else f"--batch-size {below} or {above}"


class JobSettings:
    """The CLI's view of a job's settings dataclass: build it from options, show defaults.

    Subclasses are frozen dataclasses and set :attr:`KIND` (for messages) and
    :attr:`OPTIONAL` (settings where an empty string means none).
    """

    KIND: ClassVar[str] = "job"
    OPTIONAL: ClassVar[tuple[str, ...]] = ()
    REQUIRED: ClassVar[tuple[str, ...]] = ("data", "model_dir")

    def normalise(self) -> None:
        """What every job's ``__post_init__`` starts with: ``train_args`` as a tuple of str,
        ``env`` as a dict of str, and a dataset and model URI.

        Raises:
            ConfigError: no data or model_dir.
        """
        me: Any = self  # a frozen dataclass deriving from this class
        object.__setattr__(me, "train_args", tuple(str(a) for a in me.train_args))
        object.__setattr__(me, "env", {str(k): str(v) for k, v in dict(me.env).items()})
        for what, value in (("data", me.data), ("model_dir", me.model_dir)):
            if not value or not str(value).strip():
                raise ConfigError(f"a {self.KIND} needs {what} (a dataset/model URI)")

    @classmethod
    def from_overrides(cls, **overrides: Any) -> Self:
        """The defaults with every override that is not None applied (what the CLI passes).

        An empty value of a setting in :attr:`OPTIONAL` means none.

        Raises:
            ConfigError: a required setting is missing, or a value is invalid.
        """
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(f"unknown {cls.KIND} settings: {', '.join(unknown)}")
        given = {k: v for k, v in overrides.items() if v is not None}
        for optional in cls.OPTIONAL:
            if given.get(optional) == "":
                given[optional] = None
        for required in cls.REQUIRED:
            if required not in given:
                raise ConfigError(f"a {cls.KIND} needs {required} (--{required.replace('_', '-')})")
        return cls(**given)

    @classmethod
    def default(cls, name: str) -> Any:
        """The default value of field ``name`` (for ``--help`` texts)."""
        for f in fields(cls):  # type: ignore[arg-type]
            if f.name == name:
                return f.default
        raise KeyError(name)


@dataclass(frozen=True)
class TrainingJobSettings(JobSettings):
    """The settings every training job API's pods have (a TFJob's, a TrainJob's), and their
    checks.

    Subclasses are frozen dataclasses adding their API's own settings (replicas, GPUs …,
    which they document with these); they set :attr:`GANG_SCHEDULERS` and
    :attr:`RESERVED_ENV`, and define ``replicas_in_sync``.
    """

    data: str
    model_dir: str
    name: str = "shardtrain"
    namespace: str = "shardtrain"
    image: str = pods.DEFAULT_IMAGE
    secret: str | None = "shardtrain-storage"
    service_account: str = "shardtrain-trainer"
    train_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cpu: str = "4"
    memory: str = "16Gi"
    active_deadline_seconds: int | None = None
    termination_grace_seconds: int = 120
    queue: str | None = None
    gang_scheduler: str | None = None
    priority_class: str | None = None

    #: The gang schedulers the job API can ask for.
    GANG_SCHEDULERS: ClassVar[tuple[str, ...]] = ()
    #: Variables the operator sets besides ours (``TF_CONFIG``, the storage variables).
    RESERVED_ENV: ClassVar[frozenset[str]] = frozenset()

    @property
    def replicas_in_sync(self) -> int:
        """Replicas the global batch is split over (the job API's :func:`replicas_in_sync`)."""
        raise NotImplementedError

    def check_pods(self, **names: str | None) -> None:
        """The checks of the settings every job's pods have: namespace, image, the names of
        the objects they use (the Secret, the service account and ``names``), quantities,
        queue and gang scheduler.

        Raises:
            ConfigError: the first bad value, named.
        """
        check_namespace(self.namespace)
        check_image(self.image)
        check_object_names(secret=self.secret, service_account=self.service_account, **names)
        check_quantities(cpu=self.cpu, memory=self.memory)
        check_queue(self.queue)
        if self.gang_scheduler is not None and self.gang_scheduler not in self.GANG_SCHEDULERS:
            raise ConfigError(
                f"gang_scheduler '{self.gang_scheduler}' is not supported (use "
                f"{', '.join(self.GANG_SCHEDULERS)}, or none)"
            )

    def check_training(self, training_pods: int) -> None:
        """The checks of what the trainer gets: ``env`` sets no variable shardtrain or the
        operator sets, and ``train_args`` split evenly over the replicas on ``training_pods``.

        Raises:
            ConfigError: the first bad variable or argument, named.
        """
        storage = {k for k, _ in pods.STORAGE_ENV}
        check_env(self.env, {"TF_CONFIG", "PYTHONUNBUFFERED"} | self.RESERVED_ENV | storage)
        check_train_args(self.train_args, self.replicas_in_sync, training_pods)

    def shared_settings(self) -> dict[str, Any]:
        """The settings every training job has (this class's fields), by name: what carries
        over to a job of another API."""
        return {f.name: getattr(self, f.name) for f in fields(TrainingJobSettings)}

    def container_train_args(self) -> tuple[str, ...]:
        """The train arguments the pods get: ``train_args``, and when they leave the batch size
        to the trainer's default (and to no ``--config`` file), that default rounded to the
        nearest multiple of :attr:`replicas_in_sync` so that it splits evenly. An explicit
        ``--batch-size`` is never changed (it is checked instead)."""
        return pod_train_args(self.train_args, self.replicas_in_sync)
