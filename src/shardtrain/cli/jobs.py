"""``shardtrain tfjob render|submit``: the training job as a Kubeflow TFJob manifest, and running
it on a cluster.

Both commands take the same settings (:func:`_tfjob_options`), those of
:class:`shardtrain.kubeflow.jobs.tfjob.JobConfig`. A setting left out keeps the base manifest's
value, which the option's help shows; it is read only when help is shown (:class:`SettingsOption`),
so that importing the CLI reads no manifest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click


class SettingsOption(click.Option):
    """An option whose help ends with its default in a job's settings class (JobConfig's: the
    base manifest's value).

    The default is looked up when help is shown, not when the CLI is defined: that reads
    the base manifest with PyYAML, which every command's start-up would pay otherwise.
    ``settings`` returns the class (imported then); without it, the TFJob's ``JobConfig``.
    """

    def __init__(
        self,
        *args: Any,
        default_of: str,
        settings: Callable[[], Any] | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.default_of = default_of
        self.settings = settings or _tfjob_config

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        if self.default_of:
            value = self.settings().default(self.default_of)
            if isinstance(value, bool) or value is None:
                value = {None: "none", True: "yes", False: "no"}[value]
            self.help = f"{self.help} [default: {value}]"
            self.default_of = ""
        return super().get_help_record(ctx)


def _tfjob_config() -> Any:
    from shardtrain.kubeflow.jobs.tfjob import JobConfig

    return JobConfig


def _tfjob_help(name: str, text: str) -> dict[str, Any]:
    """Keyword arguments of ``click.option`` for help ``text`` + the default of ``name``."""
    return {"cls": SettingsOption, "default_of": name, "help": text}


def decorate_with(options: list[Any]) -> Any:
    """A decorator applying ``options`` (click options) in their order."""

    def decorate(func):
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def _seconds_option(flag: str, default: float, text: str) -> Any:
    return click.option(
        flag, type=click.FloatRange(min=1), default=default, show_default=True, help=text
    )


#: How `submit` commands wait (every job API).
WAIT_OPTIONS = [
    _seconds_option(
        "--wait-timeout",
        86400,
        "Seconds to wait for the job to end, in total (time queued included).",
    ),
    _seconds_option("--poll-interval", 15, "Seconds between status polls."),
    click.option(
        "--logs/--no-logs", default=True, show_default=True, help="Stream the chief's log."
    ),
    click.option(
        "--delete/--no-delete",
        default=False,
        show_default=True,
        help="Delete the job when it ends.",
    ),
]


#: The queue a job waits in (every job API).
QUEUE_OPTION = click.option(
    "--queue",
    default=None,
    help="Queue to wait in: a Kueue LocalQueue (label kueue.x-k8s.io/queue-name, created "
    "suspended until admitted), or with --gang-scheduler volcano a Volcano queue "
    "[default: none].",
)


#: Check the cluster before anything is created (every `submit` command).
PREFLIGHT_OPTION = click.option(
    "--preflight/--no-preflight",
    default=True,
    show_default=True,
    help="Before creating anything, check that the cluster has what the job needs (its API "
    "and runtime, the namespace, the service account, the storage Secret with every key, "
    "RBAC, URIs pods can read) and list every problem with the command that fixes it.",
)


def submit_options(kind: str) -> list[Any]:
    """`submit`'s own options for a job of ``kind``: a manifest file instead of the settings,
    how to wait (:data:`WAIT_OPTIONS`), and the preflight (:data:`PREFLIGHT_OPTION`)."""
    file_option = click.option(
        "-f",
        "--file",
        "manifest_file",
        default=None,
        help=f"Submit this {kind} manifest instead of building one from the options.",
    )
    return [file_option, *WAIT_OPTIONS, PREFLIGHT_OPTION]


def preflight_job(manifest: Any, *, logs: bool, delete: bool) -> None:
    """Check the cluster of kubeconfig for what the job ``manifest`` (a TrainJob's or a
    TFJob's, as a dict) needs (:mod:`shardtrain.kubeflow.preflight`), before it is created.

    Raises:
        PreflightError: one line per problem, each with the command that fixes it.
    """
    from shardtrain.kubeflow import preflight, preflight_cluster

    needs = preflight.job_needs(manifest, logs=logs, delete=delete)
    preflight.raise_for(needs, preflight_cluster.kubernetes_cluster())


def pod_options(d: Callable[[str, str], dict[str, Any]], *, required: bool, per: str) -> list:
    """The settings every job API's pods have (``d`` gives an option's help and default;
    ``per`` names a pod: 'pod', 'node')."""
    return [
        click.option("--data", required=required, help="Sharded dataset URI."),
        click.option("--model-dir", required=required, help="Model URI."),
        click.option(
            "--secret",
            default=None,
            **d("secret", "Secret with the storage variables ('' for none, e.g. GCS)."),
        ),
        click.option(
            "--service-account",
            default=None,
            **d("service_account", "The pods' service account."),
        ),
        click.option(
            "--cpu",
            default=None,
            **d("cpu", f"CPU request per {per} (a TrainJob's limit too when it has no GPU)."),
        ),
        click.option("--memory", default=None, **d("memory", f"Memory per {per}.")),
        click.option(
            "--termination-grace-seconds",
            type=click.IntRange(min=0),
            default=None,
            **d(
                "termination_grace_seconds",
                f"Seconds between SIGTERM and SIGKILL: a {per} needs one training step plus "
                "a checkpoint write to stop cleanly.",
            ),
        ),
        click.option(
            "--active-deadline-seconds",
            type=click.IntRange(min=1),
            default=None,
            help="Fail the job after this many seconds [default: no limit].",
        ),
    ]


def check_for_pods(config: Any, *, uris: bool = True) -> Any:
    """What a job's pods would refuse, refused before it is rendered or submitted: a
    ``--data``/``--model-dir`` no pod can read (a local path: ``shardtrain run-local`` runs
    jobs on this machine and takes them from a manifest or its own command line), and
    train arguments ``shardtrain train`` would not accept, parsed by its own parser (the
    settings' own checks ran when ``config`` was built: names, counts, quantities).
    ``uris=False`` leaves the locations to the preflight, which lists them among its problems.

    Returns:
        ``config``.

    Raises:
        ConfigError: one line naming the setting or the argument.
    """
    from shardtrain.cli.train import train_cmd
    from shardtrain.commands import check_arguments
    from shardtrain.kubeflow.jobs import settings

    if uris:
        settings.check_pod_uris(**{"--data": config.data, "--model-dir": config.model_dir})
    check_arguments(train_cmd, config.train_args, "train args (after --)")
    return config


def job_to_submit(
    manifest_file: str | None,
    train_args: tuple[str, ...],
    settings: dict[str, Any],
    *,
    from_file: Callable[[str], Any],
    from_settings: Callable[..., Any],
) -> Any:
    """The job `submit` sends: the manifest file's, or the one its settings build.

    Raises:
        click.UsageError: a manifest file together with job options or train args.
    """
    if manifest_file is None:
        return from_settings(train_args=train_args, **settings)
    if train_args or any(v is not None for v in settings.values()):
        raise click.UsageError("-f FILE cannot be combined with job options or train args")
    return from_file(manifest_file)


def identity_options(d: Callable[[str, str], dict[str, Any]], kind: str) -> list[Any]:
    """The options naming a job of ``kind``, where it runs and its image (``d`` gives an
    option's help and default)."""
    return [
        click.option("--name", default=None, **d("name", f"{kind} name.")),
        click.option("--namespace", default=None, **d("namespace", "Namespace.")),
        click.option("--image", default=None, **d("image", "Project image.")),
    ]


def count_option(flag: str, low: int, help_and_default: dict[str, Any]) -> Any:
    """An integer option >= ``low`` whose None means the settings' default."""
    return click.option(flag, type=click.IntRange(min=low), default=None, **help_and_default)


def _as_is(job: Any) -> Any:
    return job


@dataclass(frozen=True)
class JobCommands:
    """What `render` and `submit` need of one job API (built inside the command, so that
    importing the CLI imports no job module)."""

    #: the job API's module (``tfjob``, ``trainjob``): its ``KIND``, ``to_yaml``,
    #: ``validate`` (the job's own checks, on its manifest) and ``submit_and_wait``, looked
    #: up when used.
    api: Any
    #: the settings class (a :class:`~shardtrain.kubeflow.jobs.settings.JobSettings`).
    settings: Any
    #: settings -> the job, as the API's ``submit_and_wait`` takes it.
    build: Callable[[Any], Any]
    #: a manifest file -> the job; None: the file's job of ``api.KIND`` as a dict.
    load: Callable[[str], Any] | None = None
    #: the job -> its manifest (a dict), for the checks.
    manifest: Callable[[Any], Any] = _as_is

    def render(self, train_args: tuple[str, ...], settings: dict[str, Any]) -> None:
        """`render`: print the manifest of the job the settings build."""
        config = self.settings.from_overrides(train_args=train_args, **settings)
        check_for_pods(config)
        click.echo(self.api.to_yaml(self.build(config)), nl=False)

    def submit(self, train_args: tuple[str, ...], options: dict[str, Any]) -> None:
        """`submit`: the job of the manifest file or of the settings (the rest of
        ``options`` besides :func:`submit_options`'), checked (unless ``--no-preflight``),
        created and waited for."""
        from shardtrain.kubeflow.jobs.manifests import load_manifest

        settings = dict(options)
        manifest_file, wait_timeout, poll_interval, logs, delete, preflight = (
            settings.pop(name)
            for name in (
                "manifest_file",
                "wait_timeout",
                "poll_interval",
                "logs",
                "delete",
                "preflight",
            )
        )
        job = job_to_submit(
            manifest_file,
            train_args,
            settings,
            from_file=self.load or (lambda path: load_manifest(path, self.api.KIND)),
            from_settings=lambda **s: self.build(
                check_for_pods(self.settings.from_overrides(**s), uris=not preflight)
            ),
        )
        if preflight:
            manifest = self.manifest(job)
            self.api.validate(manifest)  # the job's own faults first: they need no cluster
            preflight_job(manifest, logs=logs, delete=delete)
        self.api.submit_and_wait(
            job,
            wait_timeout=wait_timeout,
            poll_interval=poll_interval,
            stream_logs=logs,
            delete_after=delete,
        )


def _tfjob_commands() -> JobCommands:
    from shardtrain.kubeflow.jobs import tfjob

    return JobCommands(
        tfjob,
        tfjob.JobConfig,
        tfjob.build_tfjob,
        load=lambda path: tfjob.from_manifest(tfjob.load_manifest(path)),
        manifest=tfjob.to_manifest,
    )


def add_job_commands(
    group: click.Group,
    options: Callable[..., Any],
    commands: Callable[[], JobCommands],
    kind: str,
    *,
    render_help: str,
    submit_help: str,
) -> tuple[click.Command, click.Command]:
    """Add a job API's `render` and `submit` to ``group``: both take its settings
    (``options(required=...)``) and train arguments; ``commands`` gives what they run.

    Returns:
        The `render` and the `submit` command.
    """

    def render(train_args: tuple[str, ...], **settings: Any) -> None:
        commands().render(train_args, settings)

    def submit(train_args: tuple[str, ...], **options: Any) -> None:
        commands().submit(train_args, options)

    train_args = click.argument("train_args", nargs=-1, type=click.UNPROCESSED)
    render.__doc__, submit.__doc__ = render_help, submit_help
    render_cmd = group.command("render")(options(required=True)(train_args(render)))
    submit_cmd = group.command("submit")(
        options(required=False)(decorate_with(submit_options(kind))(train_args(submit)))
    )
    return render_cmd, submit_cmd


def _tfjob_options(*, required: bool):
    """The TFJob settings of `tfjob render` and `tfjob submit`; None means the default."""
    d = _tfjob_help
    options = [
        *identity_options(d, "TFJob"),
        count_option("--workers", 0, d("workers", "Worker replicas besides the chief.")),
        count_option(
            "--gpus-per-worker",
            0,
            d("gpus_per_worker", "nvidia.com/gpu of the chief and each worker (0: CPU only)."),
        ),
        click.option(
            "--evaluator/--no-evaluator",
            default=None,
            **d("evaluator", "Add an evaluator replica."),
        ),
        *pod_options(d, required=required, per="replica"),
        count_option(
            "--backoff-limit", 0, d("backoff_limit", "Pod restarts before the job fails.")
        ),
        count_option(
            "--ttl-seconds-after-finished",
            0,
            d("ttl_seconds_after_finished", "Seconds a finished job is kept."),
        ),
        click.option(
            "--clean-pod-policy",
            type=click.Choice(["None", "Running", "All"]),
            default=None,
            **d("clean_pod_policy", "Pods deleted when the job ends."),
        ),
        QUEUE_OPTION,
        click.option(
            "--gang-scheduler",
            type=click.Choice(["volcano"]),
            default=None,
            help="Start all replicas together or none (runPolicy.schedulingPolicy, "
            "schedulerName); the operator must run with --gang-scheduler-name=volcano "
            "[default: none].",
        ),
        click.option(
            "--priority-class",
            default=None,
            help="PriorityClass of every pod (and of the Volcano PodGroup) [default: none].",
        ),
    ]
    return decorate_with(options)


@click.group("tfjob")
def tfjob_group() -> None:
    """Kubeflow TFJobs: render the training job's manifest, or submit it and wait for it."""


_TFJOB_RENDER_HELP = """\
Print the TFJob manifest (YAML) that trains on --data into --model-dir.

TRAIN_ARGS (after `--`) go to `shardtrain train` in every replica. Apply the output with
`kubectl apply -f`, or run it locally with `shardtrain run-local FILE`.

Example: shardtrain tfjob render --data s3://b/quest --model-dir s3://b/m -- --train-steps 5000
"""

_TFJOB_SUBMIT_HELP = """\
Create the TFJob (kubeconfig or in-cluster credentials), stream the chief's log and wait
until it ends; exit non-zero when it Failed or did not end within --wait-timeout.

First (unless --no-preflight) the cluster is checked for what the job needs; every
problem is listed with the command that fixes it, and nothing is created. A job in a
Kueue queue (--queue) is reported as queued until Kueue admits it; the wait timeout
counts queue time too.

Example: shardtrain tfjob submit --data s3://b/quest --model-dir s3://b/m --delete
"""


tfjob_render_cmd, tfjob_submit_cmd = add_job_commands(
    tfjob_group,
    _tfjob_options,
    _tfjob_commands,
    "TFJob",
    render_help=_TFJOB_RENDER_HELP,
    submit_help=_TFJOB_SUBMIT_HELP,
)
