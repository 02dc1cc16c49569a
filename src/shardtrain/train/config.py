"""The training configuration: typed, documented, resolved once and saved beside the model.

Values come from three layers, later ones winning (as in Model Garden's ``params.yaml``):

1. the defaults below;
2. a YAML/JSON file (``shardtrain train --config train.yaml``), nested like the dataclasses;
3. command-line flags (``--train-steps 5000``), one per field, generated from the fields
   (:func:`shardtrain.options.option` declares each with its help).

The resolved configuration is written to ``MODEL_DIR/train_config.yaml`` by the chief, so a
model directory always says how its model was trained. Every replica of a job (chief,
workers, evaluator) is started with the same arguments and resolves the same configuration.

Importing this module loads neither PyYAML nor the storage layer (``shardtrain train
--help`` builds its flags from the fields); the functions that read or write import them.

Example ``train.yaml``::

    train_steps: 20000
    batch_size: 1024          # global batch, split over all replicas
    model:
      name: tabular
      hidden_units: [256, 128, 64]
      dropout: 0.1
    input:
      cache_mb: 4096          # bound on shards staged from s3:// per input pipeline
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from shardtrain.errors import ConfigError
from shardtrain.options import check, option

CONFIG_NAME = "train_config.yaml"
#: ``steps_per_loop: 0`` (auto) runs about this many examples per ``tf.function`` call.
AUTO_LOOP_EXAMPLES = 100_000


def parse_extra(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``("units=64", "act=relu")`` → ``{"units": 64, "act": "relu"}``: ``--extra NAME=VALUE``
    flags, each VALUE read as YAML (numbers, booleans, lists stay typed).

    Raises:
        ConfigError: an item that is not NAME=VALUE.
    """
    import yaml

    out = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--extra: '{pair}' is not NAME=VALUE")
        try:
            out[name.strip()] = yaml.safe_load(text)
        except yaml.YAMLError:
            out[name.strip()] = text
    return out


@dataclass
class ModelConfig:
    """Which model to build and its hyper-parameters (the ``model`` section).

    Each field's help is its documentation (``shardtrain train --help`` shows it); see
    :class:`TrainConfig`.
    """

    name: str = option(
        "auto",
        flags=("--model",),
        help="auto (image for image datasets, else tabular), tabular or image (built in), or "
        "MODULE:FUNCTION returning a Keras model.",
    )
    backbone: str = option(
        "small_cnn",
        help="The image model's network: small_cnn, mobilenet_v3_small, mobilenet_v3_large or "
        "resnet50 (always weights=None).",
    )
    image_size: int | None = option(
        None,
        min=8,
        max=4096,
        help="Image datasets: images are resized to this side squared [default: from the "
        "data's statistics: the images' own size when they all have one, else their mean "
        "larger side rounded to a multiple of 32; at most 224, at least 32].",
    )
    mixed_precision: str = option(
        "auto",
        choices=("auto", "on", "off"),
        help="float16 compute (mixed_float16); auto: for image models on GPUs.",
    )
    hidden_units: list[int] = option(  # noqa: RUF009 (option() is a dataclasses.field)
        default_factory=lambda: [128, 64], help="Widths of the DNN's hidden layers, e.g. 256,128."
    )
    dropout: float = option(
        0.0, min=0, max=1, max_open=True, help="Dropout rate after each hidden layer (0: none)."
    )
    embedding_dim: int = option(8, min=1, help="Largest embedding width of a categorical column.")
    extra: dict[str, Any] = option(  # noqa: RUF009 (option() is a dataclasses.field)
        default_factory=dict,
        multiple=True,
        metavar="NAME=VALUE",
        parse=parse_extra,
        format=lambda extra: tuple(f"{k}={v}" for k, v in extra.items()),
        help="A free-form hyper-parameter for a user model function (repeatable; VALUE is "
        "read as YAML).",
    )

    def hparams(self) -> dict[str, Any]:
        """The dict a model function receives."""
        return {
            "hidden_units": list(self.hidden_units),
            "dropout": self.dropout,
            "embedding_dim": self.embedding_dim,
            "backbone": self.backbone,
            **self.extra,
        }


@dataclass
class InputConfig:
    """How shards are read (the ``input`` section); see :class:`TrainConfig`."""

    train_split: str = option("train", help="Split trained on.")
    eval_split: str = option("eval", help="Split evaluated on.")
    exclude_columns: list[str] = option(  # noqa: RUF009 (option() is a dataclasses.field)
        default_factory=list,
        flags=("--exclude",),
        multiple=True,
        help="A column left out of the model besides the label and the split key (repeatable).",
    )
    include_columns: list[str] = option(  # noqa: RUF009 (option() is a dataclasses.field)
        default_factory=list,
        flags=("--include",),
        multiple=True,
        help="A column kept as a feature although its statistics say it carries no signal "
        "(all missing, constant or ID-like: such columns are left out by default) "
        "(repeatable).",
    )
    shuffle_buffer: int = option(
        10_000,
        min=1,
        help="Records shuffled in memory per input pipeline (after file shuffling).",
    )
    cycle_length: int = option(4, min=1, help="Shard files read in parallel per input pipeline.")
    permute_rows: str = option(
        "auto",
        choices=("auto", "always"),
        help="Columnar shards: permute each group of blocks' rows before batches are cut "
        "(always), or only when a step or the shuffle buffer spans fewer than 4 blocks (1024 "
        "rows) or the dataset predates hash-ordered blocks (auto; ~30% less input CPU a "
        "row). Consider always when the source is sorted by something tied to the label.",
    )
    cache_dir: str = option(
        "",
        help="Where shards TensorFlow cannot open (s3://; gs:// under a GCS emulator) are "
        "staged [default: a temporary directory].",
    )
    cache_mb: int = option(
        1024,
        min=1,
        help="Bound on staged shard MB per input pipeline (s3://): shards are streamed "
        "through it, or downloaded once and kept for every epoch when a pipeline's share fits.",
    )


@dataclass
class TrainConfig:
    """Everything ``train_and_evaluate`` needs; see the module docstring for how it resolves.

    Each field (and each field of the ``model`` and ``input`` sections) is declared with
    :func:`shardtrain.options.option`: its help is its documentation, and ``shardtrain train``
    has one flag per field, generated from it (``--train-steps``, ``--dropout`` for
    ``model.dropout``...). The pipeline passes ``model_dir``, ``train_steps``, ``batch_size``,
    ``checkpoint_every`` and ``task`` as parameters of their own
    (:attr:`~shardtrain.options.Spec.pipeline`) and any other flag in ``train_flags``.
    """

    data: str = option("", help="Sharded dataset URI (holding metadata.json).")
    model_dir: str = option(
        "",
        help="Where checkpoints, summaries, exports and eval metrics go (local, s3://, gs://).",
        pipeline="model_dir",
    )
    train_steps: int = option(
        1000,
        min=1,
        help="Total global steps; training stops there (also after a restart).",
        pipeline="train_steps",
    )
    batch_size: int = option(
        256,
        min=1,
        help="Global batch size, split evenly over every replica of every worker.",
        pipeline="batch_size",
    )
    task: str = option(
        "auto",
        choices=("auto", "binary", "multiclass", "regression"),
        help="What the model learns: auto (a label of 2 values: binary; bool or string: "
        "classes; numbers: classes when at most 20 distinct whole values, all 0-99, else "
        "regression), binary, multiclass or regression (mean squared error of the "
        "standardised label; RMSE, MAE, R2).",
        pipeline="task",
    )
    learning_rate: float = option(
        1e-3, min=0, min_open=True, help="Adam's (initial) learning rate."
    )
    lr_schedule: str = option(
        "constant",
        choices=("constant", "cosine"),
        help="constant, or cosine: decays the learning rate to 0 at --train-steps (steadier "
        "final weights; resumes where it was after a restart).",
    )
    steps_per_loop: int = option(
        0,
        min=0,
        help="Steps run inside one tf.function call (fewer Python round trips); 0: auto, "
        "about 100,000 examples a call (at least 20 steps, at most 1000).",
    )
    checkpoint_every: int = option(
        500,
        min=1,
        help="Steps between checkpoints (and the last step always).",
        pipeline="checkpoint_every",
    )
    eval_every: int = option(
        500, min=1, help="Steps between in-process evaluations when the job has no evaluator."
    )
    eval_batch_size: int = option(1024, min=1, help="Batch size of evaluation.")
    eval_steps: int = option(
        0, min=0, help="Evaluate on at most this many batches (0: the whole eval split)."
    )
    max_checkpoints: int = option(3, min=1, help="Checkpoints kept in the model directory.")
    seed: int = option(0, help="Seed for weights and shuffling.")
    devices: int = option(
        0,
        min=0,
        help="Devices per worker (GPUs, or logical CPUs standing in for them); 0: all GPUs or "
        "the CPU.",
    )
    evaluator_poll_secs: float = option(
        2.0, min=0, min_open=True, help="How often the sidecar evaluator looks for a checkpoint."
    )
    evaluator_timeout_secs: float = option(
        3600.0, min=0, help="The evaluator gives up after this long without a new checkpoint."
    )
    final_eval_wait_secs: float = option(
        600.0,
        min=0,
        help="How long the chief waits for the evaluator's metrics of the final checkpoint "
        "before evaluating it itself.",
    )
    model: ModelConfig = field(default_factory=ModelConfig)
    input: InputConfig = field(default_factory=InputConfig)

    def validate(self) -> TrainConfig:
        """Check values that would otherwise fail deep inside TensorFlow.

        Raises:
            ConfigError: one line naming the field and what is wrong.
        """
        if not self.data:
            raise ConfigError("train: --data (the sharded dataset URI) is required")
        if not self.model_dir:
            raise ConfigError("train: --model-dir is required")
        positive = (
            "train_steps",
            "batch_size",
            "checkpoint_every",
            "eval_every",
            "eval_batch_size",
            "max_checkpoints",
        )
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"train: {name} must be a positive integer, got {value!r}")
        if self.eval_steps < 0 or self.devices < 0:
            raise ConfigError("train: eval_steps and devices must be >= 0")
        if type(self.steps_per_loop) is not int or self.steps_per_loop < 0:
            raise ConfigError(
                f"train: steps_per_loop must be >= 0 (0: auto), got {self.steps_per_loop!r}"
            )
        if self.lr_schedule not in ("constant", "cosine"):
            raise ConfigError(
                f"train: lr_schedule must be constant or cosine, got {self.lr_schedule!r}"
            )
        if not self.learning_rate > 0:
            raise ConfigError(f"train: learning_rate must be > 0, got {self.learning_rate}")
        if not 0 <= self.model.dropout < 1:
            raise ConfigError(f"train: model.dropout must be in [0, 1), got {self.model.dropout}")
        if not self.model.hidden_units or any(u < 1 for u in self.model.hidden_units):
            raise ConfigError("train: model.hidden_units must be a non-empty list of widths")
        if self.model.mixed_precision not in ("auto", "on", "off"):
            raise ConfigError("train: model.mixed_precision must be auto, on or off")
        size = self.model.image_size
        if size is not None and (type(size) is not int or not 8 <= size <= 4096):
            raise ConfigError(f"train: model.image_size must be 8-4096, got {size!r}")
        if self.input.cache_mb < 1 or self.input.cycle_length < 1:
            raise ConfigError("train: input.cache_mb and input.cycle_length must be >= 1")
        check(self)  # the ranges and choices of the flags, for values from a file too
        return self

    @property
    def loop_steps(self) -> int:
        """The steps of one ``tf.function`` call: ``steps_per_loop``, or when that is 0
        (auto) about :data:`AUTO_LOOP_EXAMPLES` examples' worth, 20-1000 steps.

        A call costs a fixed few milliseconds around its steps (reading the step, loss and
        learning rate back, summaries, the stop vote — a collective on a cluster), a real
        share of a short call of a small model (figures in benchmarks/RESULTS.md). The
        same on every replica (it depends on the configuration only), as the controller
        needs. Calls still end on every checkpoint step, and a signal stops a call after the
        current step whatever its length.
        """
        if self.steps_per_loop:
            return self.steps_per_loop
        return max(20, min(1000, -(-AUTO_LOOP_EXAMPLES // self.batch_size)))

    def to_dict(self) -> dict[str, Any]:
        """The configuration as plain data (what ``train_config.yaml`` holds)."""
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        """The configuration as YAML."""
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def save(self, model_dir: str | None = None) -> str:
        """Write ``train_config.yaml`` into ``model_dir`` (default: this config's)."""
        from shardtrain import storage

        target = storage.join(model_dir or self.model_dir, CONFIG_NAME)
        storage.write_text(target, self.to_yaml())
        return target


def _merge(obj: Any, values: dict[str, Any], where: str) -> Any:
    """A copy of dataclass ``obj`` with ``values`` applied, recursing into nested sections."""
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(values).__name__}")
    known = {f.name: f for f in dataclasses.fields(obj)}
    changes = {}
    for key, value in values.items():
        name = key.replace("-", "_")
        if name not in known:
            raise ConfigError(
                f"{where}: unknown setting '{key}' (known: {', '.join(sorted(known))})"
            )
        current = getattr(obj, name)
        if dataclasses.is_dataclass(current):
            changes[name] = _merge(current, value, f"{where}.{name}")
        elif value is None:
            continue
        else:
            changes[name] = _coerce(current, value, f"{where}.{name}")
    return dataclasses.replace(obj, **changes)


def _coerce(current: Any, value: Any, where: str) -> Any:
    if isinstance(current, dict):  # free-form: later layers add and replace entries
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return {**current, **value}
    if isinstance(current, bool) or current is None:
        return value
    if isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(current, list):
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        if current and isinstance(current[0], int):
            try:
                return [int(v) for v in value]
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"{where}: expected integers, got {value!r}") from exc
        return list(value)
    if type(current) is not type(value):
        raise ConfigError(
            f"{where}: expected {type(current).__name__}, got {type(value).__name__} {value!r}"
        )
    return value


def resolve_config(
    config_file: str | None = None, overrides: dict[str, Any] | None = None
) -> TrainConfig:
    """Defaults, then ``config_file`` (YAML or JSON, local or a URI), then ``overrides``.

    Args:
        config_file: optional file whose nested mapping mirrors :class:`TrainConfig`.
        overrides: flat or nested values; ``None`` values are ignored (an unset flag). Keys
            with a dot (``"model.dropout"``) address nested sections.

    Returns:
        The validated configuration.

    Raises:
        ConfigError: unreadable file, unknown key, wrong type, or an invalid value.
    """
    import yaml

    from shardtrain import storage

    config = TrainConfig()
    if config_file:
        text = storage.read_text(config_file)
        try:
            values = yaml.safe_load(text) if not config_file.endswith(".json") else json.loads(text)
        except (yaml.YAMLError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{config_file}: not valid YAML/JSON: {exc}") from exc
        config = _merge(config, values or {}, config_file)
    nested: dict[str, Any] = {}
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        section, dot, name = key.partition(".")
        if dot:
            nested.setdefault(section, {})[name] = value
        else:
            nested[key] = value
    config = _merge(config, nested, "command line")
    return config.validate()


def load_saved_config(model_dir: str) -> TrainConfig | None:
    """The configuration saved in ``model_dir``, or None when there is none."""
    import yaml

    from shardtrain import storage

    target = storage.join(model_dir, CONFIG_NAME)
    if not storage.exists(target):
        return None
    return _merge(TrainConfig(), yaml.safe_load(storage.read_text(target)) or {}, target)
