"""Commands whose options are generated from a configuration dataclass, and the parser
check that uses them without running a command.

``shard`` and ``train`` take one flag per field of their configuration
(:class:`~shardtrain.data.sharding.ShardConfig`, :class:`~shardtrain.train.config.TrainConfig`):
:func:`config_command` makes each from the field's :class:`~shardtrain.options.Spec` (flag
names, type, range or choices, help, the default in its user form), so a new field gets a flag
without touching the CLI. A flag's value is converted to the field's value as the pipeline's
parameters are (``--task-mb 64`` → ``task_bytes``; ``--split``, ``--resize`` parsed).

Below the library's layers (no command runs from here), so that a step that is not the CLI
can parse the flags it will hand to one: the pipeline's first step parses ``train_flags`` with
``shardtrain train``'s own parser (:func:`check_arguments`), as ``pipeline compile -p`` does.

The options are made the first time the command needs them (to parse its arguments or print
its help), not when the CLI is imported, which every command and every TFJob replica pays for.
The configuration modules are light themselves (no pyarrow, numpy or PyYAML), so ``--help``
stays fast too.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

#: The configuration whose fields are ``shardtrain train``'s flags (every replica's command).
TRAIN_CONFIG = "shardtrain.train.config:TrainConfig"


def train_command(function: Callable[..., Any] | None = None) -> ConfigCommand:
    """``shardtrain train``'s command: a flag per field of :data:`TRAIN_CONFIG` and
    ``--config`` (a YAML/JSON file), running ``function(config_file, options)``.

    Without ``function``: the same parser with nothing to run, for :func:`check_arguments`
    where the CLI is out of reach (the pipeline's first step checks ``train_flags`` with it).
    """

    def nothing(config_file: str | None, options: dict[str, Any]) -> None:
        return None

    config_file = click.option(
        "--config", "config_file", default=None, help="YAML/JSON training config file."
    )
    return config_command("train", TRAIN_CONFIG)(config_file(function or nothing))


def config_command(name: str, config: str) -> Callable[[Callable[..., Any]], ConfigCommand]:
    """``@click.command(name)`` with one option per field of ``config`` (``module:Class``).

    The command function receives the options set on the command line (or by an environment
    variable) as ``options``, a mapping of field path (``dropout``, ``model.dropout``) → field
    value; an option left out is not in it, so the configuration's own default (or a config
    file's value) applies.
    """
    return click.command(name, cls=ConfigCommand, config=config)


class ConfigCommand(click.Command):
    """A click command whose ``params`` end with options generated from a configuration
    class, made when first used (see :func:`config_command`)."""

    def __init__(self, *args: Any, config: str, **kwargs: Any):
        self.config = config
        self._declared: list[click.Parameter] = []
        self._params: list[click.Parameter] | None = None
        self._paths: dict[str, str] = {}  # click parameter name → field path
        super().__init__(*args, **kwargs)

    @property
    def params(self) -> list[click.Parameter]:
        if self._params is None:
            module, _, name = self.config.partition(":")
            cls = getattr(importlib.import_module(module), name)
            from shardtrain.options import options

            generated = {opt.path: _parameter(opt) for opt in options(cls)}
            self._paths = {param.name: path for path, param in generated.items()}
            self._params = [*self._declared, *generated.values()]
        return self._params

    @params.setter
    def params(self, value: list[click.Parameter]) -> None:
        self._declared, self._params = list(value), None

    def invoke(self, ctx: click.Context) -> Any:
        given = {}
        for name, path in self._paths.items():
            value = ctx.params.pop(name)
            if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT):
                given[path] = value
        ctx.params["options"] = given
        return super().invoke(ctx)


def _parameter(opt: Any) -> click.Parameter:
    """The click argument or option of one :class:`~shardtrain.options.Option`."""
    spec = opt.spec
    name = opt.path.replace(".", "__")

    def convert(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        return opt.value(value)

    if spec.argument:
        sequence = opt.user_type not in (str, int, float)
        return click.Argument(
            [name], nargs=-1 if sequence else 1, required=opt.required, callback=convert
        )
    kind = opt.user_type
    if spec.choices:
        click_type: Any = click.Choice(spec.choices)
    elif kind in (int, float) and (spec.min is not None or spec.max is not None):
        range_type = click.IntRange if kind is int else click.FloatRange
        click_type = range_type(spec.min, spec.max, min_open=spec.min_open, max_open=spec.max_open)
    elif kind in (int, float, bool):
        click_type = kind
    else:
        click_type = click.STRING
    return click.Option(
        [*opt.flags, name],
        type=click_type,
        is_flag=kind is bool,
        multiple=spec.multiple,
        required=opt.required,
        default=opt.user_default(),
        show_default=True,
        envvar=spec.envvar,
        metavar=spec.metavar,
        help=spec.help,
        callback=convert,
    )


def check_arguments(command: click.Command, args: tuple[str, ...] | list[str], what: str) -> None:
    """Parse ``args`` with ``command``'s own click parser, without running it: what a render
    checks of the arguments its pods will pass (``shardtrain train`` in every replica), so
    that an unknown flag or a value out of range fails here, in one line, not in the pods.

    ``--data`` and ``--model-dir`` are the job's own settings (refused in ``args`` by the
    job's checks): placeholders stand in for them. No file is read and nothing runs (a
    ``--config`` file is read by the trainer).

    Raises:
        ConfigError: the parser refuses ``args``, with its message, prefixed by ``what``.
    """
    from shardtrain.errors import ConfigError

    fixed = ["--data", "s3://render-check/data", "--model-dir", "s3://render-check/model"]
    try:
        # No help option: ``--help`` would print the command's help and exit.
        command.make_context(command.name, [*fixed, *args], help_option_names=[])
    except click.ClickException as exc:
        raise ConfigError(f"{what}: {' '.join(exc.format_message().split())}") from None
