"""The image size trained at by default: chosen from the dataset's image statistics."""

from __future__ import annotations

import logging

import pytest

from shardtrain.data import datagen, sharding
from shardtrain.errors import ConfigError
from shardtrain.train.config import TrainConfig, resolve_config
from shardtrain.train.features import FeatureSpec
from shardtrain.train.image_size import image_size_from_stats
from shardtrain.train.trainer import resolve_image_size


def _stats(h: tuple[float, float, float], w: tuple[float, float, float], count=10) -> dict:
    """An image column's statistics as metadata.json has them: (min, max, mean) per side."""
    return {
        "kind": "image",
        "count": count,
        "height": dict(zip(("min", "max", "mean"), h, strict=True)),
        "width": dict(zip(("min", "max", "mean"), w, strict=True)),
        "formats": {"jpeg": count},
        "bytes": 1000 * count,
    }


@pytest.mark.parametrize(
    ("h", "w", "size", "why"),
    [
        ((64, 64, 64), (64, 64, 64), 64, "every image is 64x64"),
        ((100, 100, 100), (100, 100, 100), 100, "every image is 100x100"),  # not rounded
        ((48, 48, 48), (64, 64, 64), 64, "every image is 64x48"),  # the larger side
        ((375, 375, 375), (500, 500, 500), 224, "every image is 500x375, capped at 224"),
        ((28, 28, 28), (28, 28, 28), 32, "every image is 28x28, raised to 32"),
        # Varied sizes: the larger mean side (130) to the nearest multiple of 32.
        ((50, 300, 130.0), (40, 200, 90.0), 128, "the larger mean side rounded"),
        ((50, 900, 600.0), (40, 800, 500.0), 224, "capped at 224"),
        ((5, 20, 12.0), (5, 20, 12.0), 32, "raised to 32"),
    ],
)
def test_the_rule(h, w, size, why):
    chosen, reason = image_size_from_stats(_stats(h, w))
    assert chosen == size
    assert why in reason


@pytest.mark.parametrize(
    "stats",
    [
        None,
        {},
        _stats((0, 0, 0), (0, 0, 0), count=0),
        {"kind": "image", "count": 5, "height": {"min": None, "max": None, "mean": None}},
    ],
)
def test_no_usable_statistics_give_224(stats):
    assert image_size_from_stats(stats) == (224, "no image sizes in the statistics: the default")


def test_the_option_defaults_to_the_data_and_validates_an_explicit_size():
    assert TrainConfig().model.image_size is None
    config = resolve_config(None, {"data": "d", "model_dir": "m", "model.image_size": 96})
    assert config.model.image_size == 96
    with pytest.raises(ConfigError, match="image_size must be 8-4096, got 4"):
        resolve_config(None, {"data": "d", "model_dir": "m", "model.image_size": 4})


@pytest.fixture(scope="module")
def image_metadata(tmp_path_factory):
    """A sharded set of 40x40 images: its metadata."""
    root = tmp_path_factory.mktemp("imgs")
    datagen.generate_images(str(root / "files"), 24, size=40, seed=1, manifest=False)
    config = sharding.ShardConfig(
        sources=(str(root / "files"),), output=str(root / "ds"), images=True, processes=1
    )
    return sharding.shard(config).metadata


def _config(tmp_path, **model) -> TrainConfig:
    config = TrainConfig(data="ds", model_dir=str(tmp_path / "model"), batch_size=64)
    for name, value in model.items():
        setattr(config.model, name, value)
    return config


def test_the_trainer_resolves_the_size_from_the_data_and_logs_why(image_metadata, tmp_path, caplog):
    assert FeatureSpec.from_metadata(image_metadata).image.height == 40  # type: ignore[union-attr]
    with caplog.at_level(logging.INFO, logger="shardtrain.train.trainer"):
        config = resolve_image_size(_config(tmp_path), image_metadata)
    assert config.model.image_size == 40
    assert "image size 40 from the data: every image is 40x40" in caplog.text
    assert "a decoded batch of 64 takes 1 MB" in caplog.text
    # What the chief saves, and so what the evaluator, a restart and the export read back.
    assert "image_size: 40" in config.to_yaml()


def test_an_explicit_size_wins_and_a_resumed_run_keeps_its_saved_size(
    image_metadata, tmp_path, caplog
):
    explicit = resolve_image_size(_config(tmp_path, image_size=96), image_metadata)
    assert explicit.model.image_size == 96
    explicit.save()  # a model directory trained at 96 (train_config.yaml)

    # Restarted without --image-size: the saved size, not the data's 40.
    with caplog.at_level(logging.INFO, logger="shardtrain.train.trainer"):
        resumed = resolve_image_size(_config(tmp_path), image_metadata)
    assert resumed.model.image_size == 96
    assert "image size 96 as saved in" in caplog.text

    # An explicit size still wins, with a warning that the weights were trained at another.
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="shardtrain.train.trainer"):
        other = resolve_image_size(_config(tmp_path, image_size=64), image_metadata)
    assert other.model.image_size == 64
    assert "differs from the 96 this model directory was trained at" in caplog.text


def test_tabular_data_leaves_the_size_unset(all_types, tmp_path):
    _, meta = all_types
    assert resolve_image_size(_config(tmp_path), meta).model.image_size is None
