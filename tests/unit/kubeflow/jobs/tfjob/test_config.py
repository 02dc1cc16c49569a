"""A TFJob's settings: bad values fail with one line; the CLI's overrides."""

from __future__ import annotations

import pytest

from shardtrain.errors import ConfigError
from shardtrain.kubeflow.jobs import tfjob
from tfjob_examples import DATA, MODEL_DIR, make_config


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"name": "Quest_Train"}, "DNS-1035"),
        ({"name": "1quest"}, "DNS-1035"),
        ({"workers": -1}, "workers must be an integer >= 0"),
        ({"gpus_per_worker": -2}, "gpus_per_worker"),
        ({"clean_pod_policy": "Sometimes"}, "clean_pod_policy"),
        ({"env": {"AWS_SECRET_ACCESS_KEY": "x"}}, "Secret"),
        ({"env": {"TF_CONFIG": "{}"}}, "TF_CONFIG"),
        ({"train_args": ("--data=s3://other",)}, "--data"),
        (
            {"train_args": ("--batch-size", "256")},
            r"--batch-size 256 is not divisible by the 3 replicas in sync "
            r"\(3 training pods x 1 device\(s\)\); use --batch-size 255 or 258",
        ),
        (
            {"train_args": ("--batch-size=100",), "workers": 3, "gpus_per_worker": 2},
            "not divisible by the 8 replicas",
        ),
        ({"train_args": ("--batch-size", "many")}, "--batch-size must be an integer"),
        ({"image": ""}, "image"),
        ({"secret": "Not A Name"}, "secret"),
        ({"name": "q" * 60}, "longer than 63 characters"),
    ],
)
def test_bad_settings_fail_with_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        tfjob.build_tfjob(make_config(**overrides))
    assert "\n" not in str(err.value)


def test_from_overrides_keeps_defaults_for_none_and_empty_secret_means_none():
    cfg = tfjob.JobConfig.from_overrides(
        data=DATA, model_dir=MODEL_DIR, workers=None, secret="", train_args=("--seed", "1")
    )
    assert cfg.workers == 2 and cfg.secret is None and cfg.train_args == ("--seed", "1")
    with pytest.raises(ConfigError, match="needs model_dir"):
        tfjob.JobConfig.from_overrides(data=DATA)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"queue": "Team_A"}, "queue 'Team_A' is not a valid queue name"),
        ({"queue": "q" * 64}, "is not a valid queue name"),
        ({"gang_scheduler": "yunikorn"}, "gang_scheduler 'yunikorn' is not supported"),
        ({"priority_class": "High!"}, "priority_class 'High!' is not a valid name"),
    ],
)
def test_bad_queue_settings_fail_with_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message):
        make_config(**overrides)


def test_empty_queue_settings_mean_none():
    cfg = tfjob.JobConfig.from_overrides(
        data=DATA, model_dir=MODEL_DIR, queue="", gang_scheduler="", priority_class=""
    )
    assert cfg.queue is cfg.gang_scheduler is cfg.priority_class is None
