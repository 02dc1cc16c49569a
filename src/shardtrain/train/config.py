"""The training configuration: typed, documented, resolved once and saved beside the model.

Values come from three layers, later ones winning (as in Model Garden's ``params.yaml``):

1. the defaults below;
2. a YAML/JSON file (``shardtrain train --config train.yaml``), nested like the dataclasses;
3. command-line flags (``--train-steps 5000``), which map onto the same fields.

The resolved configuration is written to ``MODEL_DIR/train_config.yaml`` by the chief, so a
model directory always says how its model was trained. Every replica of a job (chief,
workers, evaluator) is started with the same arguments and resolves the same configuration.

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

import yaml

from shardtrain import storage
from shardtrain.errors import ConfigError

CONFIG_NAME = "train_config.yaml"


@dataclass
class ModelConfig:
    """Which model to build and its hyper-parameters.

    Attributes:
        name: ``auto`` (``image`` for image datasets, else ``tabular``), ``tabular`` or
            ``image`` (built in), or ``MODULE:FUNCTION`` returning a Keras model.
        backbone: the ``image`` model's network: ``small_cnn``, ``mobilenet_v3_small``,
            ``mobilenet_v3_large`` or ``resnet50`` (always ``weights=None``).
        image_size: image datasets: images are resized to ``image_size`` squared.
        mixed_precision: ``auto`` (``mixed_float16`` when training on GPUs), ``on`` or
            ``off``.
        hidden_units: widths of the DNN's hidden layers.
        dropout: dropout rate after each hidden layer (0 disables it).
        embedding_dim: largest embedding width for a categorical column.
        extra: free-form hyper-parameters passed on to a user model function.
    """

    name: str = "auto"
    backbone: str = "small_cnn"
    image_size: int = 224
    mixed_precision: str = "auto"
    hidden_units: list[int] = field(default_factory=lambda: [128, 64])
    dropout: float = 0.0
    embedding_dim: int = 8
    extra: dict[str, Any] = field(default_factory=dict)

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
    """How shards are read.

    Attributes:
        train_split: split trained on.
        eval_split: split evaluated on.
        exclude_columns: columns left out of the model besides the label and the split key.
        shuffle_buffer: records shuffled in memory per input pipeline (after file shuffling).
        cycle_length: shard files read in parallel per input pipeline.
        cache_dir: where shards TensorFlow cannot open (s3://) are staged; a temporary
            directory when empty.
        cache_mb: bound on staged-but-unread shard bytes per input pipeline.
    """

    train_split: str = "train"
    eval_split: str = "eval"
    exclude_columns: list[str] = field(default_factory=list)
    shuffle_buffer: int = 10_000
    cycle_length: int = 4
    cache_dir: str = ""
    cache_mb: int = 1024


@dataclass
class TrainConfig:
    """Everything ``train_and_evaluate`` needs; see the module docstring for how it resolves.

    Attributes:
        data: the sharded dataset's URI (holding ``metadata.json``).
        model_dir: where checkpoints, summaries, exports and eval metrics go (local, s3://,
            gs://).
        train_steps: total global steps; training stops there (also after a restart).
        batch_size: global batch size, split evenly over every replica of every worker.
        learning_rate: Adam's (initial) learning rate.
        lr_schedule: ``constant``, or ``cosine``: decays from ``learning_rate`` to 0 at
            ``train_steps`` (steadier final weights; resumes where it was after a restart).
        steps_per_loop: steps run inside one ``tf.function`` call (fewer Python round trips).
        checkpoint_every: steps between checkpoints (and the last step always).
        eval_every: steps between in-process evaluations when the job has no evaluator.
        eval_batch_size: batch size of evaluation.
        eval_steps: evaluate on at most this many batches (0: the whole eval split).
        max_checkpoints: checkpoints kept in the model directory.
        seed: seed for weights and shuffling.
        devices: devices per worker (GPUs, or logical CPUs standing in for them); 0 = all GPUs
            or the CPU.
        evaluator_poll_secs: how often the sidecar evaluator looks for a new checkpoint.
        evaluator_timeout_secs: the evaluator gives up after this long without a new one.
        final_eval_wait_secs: how long the chief waits for the sidecar evaluator's metrics of
            the final checkpoint before evaluating it itself.
        model: the model section.
        input: the input section.
    """

    data: str = ""
    model_dir: str = ""
    train_steps: int = 1000
    batch_size: int = 256
    learning_rate: float = 1e-3
    lr_schedule: str = "constant"
    steps_per_loop: int = 50
    checkpoint_every: int = 500
    eval_every: int = 500
    eval_batch_size: int = 1024
    eval_steps: int = 0
    max_checkpoints: int = 3
    seed: int = 0
    devices: int = 0
    evaluator_poll_secs: float = 2.0
    evaluator_timeout_secs: float = 3600.0
    final_eval_wait_secs: float = 600.0
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
            "steps_per_loop",
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
        if not 8 <= self.model.image_size <= 4096:
            raise ConfigError(
                f"train: model.image_size must be 8-4096, got {self.model.image_size}"
            )
        if self.input.cache_mb < 1 or self.input.cycle_length < 1:
            raise ConfigError("train: input.cache_mb and input.cycle_length must be >= 1")
        return self

    def to_dict(self) -> dict[str, Any]:
        """The configuration as plain data (what ``train_config.yaml`` holds)."""
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        """The configuration as YAML."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def save(self, model_dir: str | None = None) -> str:
        """Write ``train_config.yaml`` into ``model_dir`` (default: this config's)."""
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
    if isinstance(current, bool) or current is None or isinstance(current, dict):
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
    target = storage.join(model_dir, CONFIG_NAME)
    if not storage.exists(target):
        return None
    return _merge(TrainConfig(), yaml.safe_load(storage.read_text(target)) or {}, target)
