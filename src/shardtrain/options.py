"""Options: configuration fields that carry their own help, command-line flag and pipeline
parameter.

The configuration dataclasses (:class:`~shardtrain.data.sharding.ShardConfig`,
:class:`~shardtrain.train.config.TrainConfig`) are the one definition of their options. Each
user-facing field is declared with :func:`option`, which keeps a :class:`Spec` in the field's
metadata: its help, and how a user writes it. From that

* the CLI generates the command's flags (:mod:`shardtrain.commands`): name, type, range,
  choices, help and the default shown;
* the Kubeflow steps turn pipeline parameters into field values (:func:`from_params`), the
  same conversion as the flags' (:meth:`Option.value`);
* the configuration checks its ranges and choices (:func:`check`), the same as the flags';
* the pipeline's and its components' parameters, signatures and descriptions are generated
  from it (:mod:`shardtrain.kubeflow.parameters`; a parameter's description is its option's
  help, :func:`pipeline_help`).

A flag or a pipeline parameter holds an option in its *user form*, as a person writes it:
megabytes for a size kept in bytes (``unit``), text for a value with a parser (``--split
train=0.9,eval=0.1``, ``--resize 224x224``), ``a,b`` for a list; and, in the pipeline, whose
parameters cannot be None, ``''`` or ``0`` for an option that is not set.

Only the standard library is imported here: the CLI reads these specs at start-up.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, dataclass
from typing import Any

from shardtrain.errors import ConfigError

#: The key of a field's :class:`Spec` in its ``dataclasses.field`` metadata.
METADATA_KEY = "option"


@dataclass(frozen=True)
class Spec:
    """How a user sets one configuration field (kept in the field's metadata).

    Attributes:
        help: what the option does: one or two sentences, the flag's help.
        flags: the command-line flag names; default ``--field-name``.
        argument: a positional command-line argument instead of a flag.
        metavar: the value's name in the help (``WxH``).
        choices: the only values allowed.
        min, max: the range of the user form (in ``unit`` s); ``min_open``/``max_open``
            exclude the bound itself.
        unit: the field holds the user form times this (sizes given in MiB, kept in bytes).
        parse: user form → field value, for values written as text (``train=0.9,eval=0.1``).
        format: field value → user form: the inverse of ``parse`` (the default shown).
        multiple: a repeatable flag (each use adds one item).
        envvar: an environment variable the flag is read from when not given.
        pipeline: the pipeline parameter that carries the option; None when the pipeline has
            no parameter of its own for it.
    """

    help: str
    flags: tuple[str, ...] = ()
    argument: bool = False
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    min: float | None = None
    max: float | None = None
    min_open: bool = False
    max_open: bool = False
    unit: int = 1
    parse: Callable[[Any], Any] | None = None
    format: Callable[[Any], Any] | None = None
    multiple: bool = False
    envvar: str | None = None
    pipeline: str | None = None


def option(default: Any = MISSING, *, default_factory: Any = MISSING, **spec: Any) -> Any:
    """A dataclass field with its :class:`Spec` (``help=`` and the other attributes)."""
    return dataclasses.field(
        default=default, default_factory=default_factory, metadata={METADATA_KEY: Spec(**spec)}
    )


@dataclass(frozen=True)
class Option:
    """One option of a configuration class: its field, where it sits, its spec and type."""

    #: ``name``, or ``section.name`` for a field of a nested configuration section.
    path: str
    field: dataclasses.Field
    spec: Spec
    #: The field's type without ``| None``.
    type: Any
    #: The field may be None (not set).
    optional: bool

    @property
    def name(self) -> str:
        return self.field.name

    @property
    def flags(self) -> tuple[str, ...]:
        return self.spec.flags or ("--" + self.name.replace("_", "-"),)

    @property
    def flag(self) -> str:
        """The flag's name in messages: the first long one."""
        return next((f for f in self.flags if f.startswith("--")), self.flags[0])

    @property
    def required(self) -> bool:
        return self.field.default is MISSING and self.field.default_factory is MISSING

    @property
    def default(self) -> Any:
        """The field's default value (MISSING when it has none)."""
        if self.field.default_factory is not MISSING:
            return self.field.default_factory()
        return self.field.default

    @property
    def user_type(self) -> Any:
        """The type of the user form: ``float`` MiB for bytes, ``str`` for parsed text,
        ``list[T]`` for a sequence, else the field's own type."""
        if self.spec.unit != 1:
            return float
        if self.spec.parse is not None:
            return tuple[str, ...] if self.spec.multiple else str
        origin = typing.get_origin(self.type)
        if origin in (list, tuple):
            item: Any = typing.get_args(self.type)[0]
            return list[item]
        return self.type

    def user_default(self) -> Any:
        """The default in its user form (None: not set, or no default)."""
        return None if self.required else self.to_user(self.default)

    def pipeline_default(self) -> Any:
        """The default a pipeline parameter has: the user form, ``''``/``0`` for None."""
        value = self.user_default()
        if value is None and not self.required:
            return {str: "", int: 0, float: 0.0}.get(self.user_type)
        return value

    def to_user(self, value: Any) -> Any:
        """A field value in its user form (None, and an empty text, stay None)."""
        if value is None or value == "":
            return None
        if self.spec.format is not None:
            return self.spec.format(value)
        if self.spec.unit != 1:
            user = value / self.spec.unit
            return int(user) if user.is_integer() else user
        if isinstance(value, list | tuple) and not self.spec.multiple and not self.spec.argument:
            return ",".join(str(v) for v in value)
        if isinstance(value, list | tuple):
            return tuple(value)
        return value

    def value(self, user: Any) -> Any:
        """The field value of a user form (a flag's or a pipeline parameter's value).

        Raises:
            ConfigError: a value that does not parse.
        """
        if user is None:
            return None
        if self.optional and not isinstance(user, bool) and user in ("", 0):
            return None  # the pipeline's "not set"
        if self.spec.parse is not None:
            return self.spec.parse(user)
        if self.spec.unit != 1:
            return int(user * self.spec.unit)
        origin = typing.get_origin(self.type)
        if origin in (list, tuple):
            items = user.split(",") if isinstance(user, str) else user
            item_type = typing.get_args(self.type)[0]
            try:
                return origin(item_type(str(v).strip()) for v in items if str(v).strip())
            except ValueError:
                raise ConfigError(
                    f"{self.flag}: expected {item_type.__name__} values, got {user!r}"
                ) from None
        return user

    def check(self, value: Any) -> None:
        """Raise ConfigError when a field value is outside the option's choices or range."""
        if value is None:
            return
        spec = self.spec
        if spec.choices and value not in spec.choices:
            allowed = ", ".join(spec.choices[:-1]) + f" or {spec.choices[-1]}"
            raise ConfigError(f"{self.flag} must be {allowed}, not {value!r}")
        if spec.min is None and spec.max is None:
            return
        user = value / spec.unit
        # The bounds in the field's unit, truncated as a user value is when parsed (--task-mb
        # 0.01 is 10,485 bytes, which is 0.0099993 MB: still the minimum).
        lo, hi = spec.min, spec.max
        if spec.unit != 1:
            lo, hi = (None if b is None else float(int(b * spec.unit)) for b in (lo, hi))
        low_ok = lo is None or value > lo or (value == lo and not spec.min_open)
        high_ok = hi is None or value < hi or (value == hi and not spec.max_open)
        if not (low_ok and high_ok):
            raise ConfigError(f"{self.flag} must be {self.range_text()}, not {user:g}")

    def range_text(self) -> str:
        """``between 1 and 9``, ``at least 1``, ``in [0, 1)``... of the user form."""
        lo, hi, spec = self.spec.min, self.spec.max, self.spec
        if lo is not None and hi is not None:
            if spec.min_open or spec.max_open:
                left, right = "(["[not spec.min_open], ")]"[not spec.max_open]
                return f"in {left}{lo:g}, {hi:g}{right}"
            return f"between {lo:g} and {hi:g}"
        if lo is not None:
            return f"{'greater than' if spec.min_open else 'at least'} {lo:g}"
        return f"{'less than' if spec.max_open else 'at most'} {hi:g}"


def _strip_none(hint: Any) -> tuple[Any, bool]:
    """``(T, True)`` for ``T | None``, else ``(hint, False)``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) < len(typing.get_args(hint)):
            return functools.reduce(operator.or_, args), True
    return hint, False


@functools.cache
def options(cls: type) -> tuple[Option, ...]:
    """Every option of configuration class ``cls``, in field order, nested sections (fields
    that are dataclasses themselves) included with their section's name as a prefix."""
    return tuple(_walk(cls, ""))


def _walk(cls: type, prefix: str) -> Iterator[Option]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint, optional = _strip_none(hints[f.name])
        spec = f.metadata.get(METADATA_KEY)
        if spec is not None:
            yield Option(prefix + f.name, f, spec, hint, optional)
        elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
            yield from _walk(hint, f"{prefix}{f.name}.")


def check(config: Any) -> None:
    """Check every option of ``config`` against its choices and range.

    Raises:
        ConfigError: the first option out of range, named by its flag.
    """
    cls: type = type(config)
    for opt in options(cls):
        value = config
        for part in opt.path.split("."):
            value = getattr(value, part)
        opt.check(value)


def from_params(cls: type, params: Mapping[str, Any]) -> dict[str, Any]:
    """Field values of ``cls`` from pipeline parameters, by name (:attr:`Spec.pipeline`),
    each in its user form (``task_mb=128.0`` → ``task_bytes=134217728``; ``key=''`` → None).

    Raises:
        ConfigError: a parameter that is no option's, or a value that does not parse.
    """
    by_param = {o.spec.pipeline: o for o in options(cls) if o.spec.pipeline}
    unknown = sorted(set(params) - set(by_param))
    if unknown:
        raise ConfigError(f"{cls.__name__} has no option for parameter(s) {', '.join(unknown)}")
    return {by_param[name].path: by_param[name].value(value) for name, value in params.items()}


def pipeline_help(cls: type, opt: Option) -> str:
    """``opt``'s help as a pipeline parameter's description: each flag of an option of
    ``cls`` that has a pipeline parameter is written as that parameter (``--no-header`` →
    ``no_header``), since a pipeline's user sets parameters, not flags."""
    names = {flag: o.spec.pipeline for o in options(cls) if o.spec.pipeline for flag in o.flags}
    return re.sub(r"--[a-z][a-z0-9-]*", lambda m: names.get(m.group(), m.group()), opt.spec.help)
