"""TrainConfig: defaults, then a config file, then flags; errors in one line; steps per
tf.function call."""

from __future__ import annotations

import textwrap

import pytest

from shardtrain.errors import ConfigError
from shardtrain.train.config import CONFIG_NAME, TrainConfig, load_saved_config, resolve_config


def test_config_defaults_file_then_flags(tmp_path):
    cfg_file = tmp_path / "train.yaml"
    cfg_file.write_text(
        textwrap.dedent(
            """
            train_steps: 50
            batch_size: 64
            model: {hidden_units: [16, 8], dropout: 0.1}
            input: {cache_mb: 64}
            """
        )
    )
    cfg = resolve_config(
        str(cfg_file),
        {"data": "d", "model_dir": str(tmp_path / "m"), "batch_size": 32, "learning_rate": None},
    )
    assert cfg.train_steps == 50 and cfg.batch_size == 32  # flag beats file
    assert cfg.learning_rate == TrainConfig().learning_rate  # unset flag keeps the default
    assert cfg.model.hidden_units == [16, 8] and cfg.input.cache_mb == 64
    cfg = resolve_config(None, {"data": "d", "model_dir": "m", "model.hidden_units": "32,4"})
    assert cfg.model.hidden_units == [32, 4]
    saved = resolve_config(str(cfg_file), {"data": "d", "model_dir": str(tmp_path / "m")})
    saved.save()
    assert (tmp_path / "m" / CONFIG_NAME).exists()
    assert load_saved_config(str(tmp_path / "m")) == saved


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"train_stepz": 5}, "unknown setting 'train_stepz'"),
        ({"train_steps": 0}, "train_steps must be a positive integer"),
        ({"train_steps": "many"}, "expected int"),
        ({"model": {"dropout": 1.5}}, "dropout"),
        ({"data": ""}, "--data"),
    ],
)
def test_config_errors_are_one_clear_line(values, message):
    base = {"data": "d", "model_dir": "m"}
    with pytest.raises(ConfigError, match=message):
        resolve_config(None, {**base, **values})


def test_steps_per_loop_auto_runs_about_100k_examples_a_call():
    assert TrainConfig(batch_size=128).loop_steps == 782
    assert TrainConfig(batch_size=1024).loop_steps == 98
    assert TrainConfig(batch_size=1 << 20).loop_steps == 20  # at least 20
    assert TrainConfig(batch_size=8).loop_steps == 1000  # at most 1000
    assert TrainConfig(batch_size=128, steps_per_loop=7).loop_steps == 7  # as given
