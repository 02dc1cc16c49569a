"""What every pod has in common: container commands run here, and Kubernetes quantities."""

from __future__ import annotations

import sys

import pytest

from shardtrain.errors import ConfigError
from shardtrain.kubeflow import pods


def test_container_commands_map_to_this_interpreter():
    assert pods.local_argv(["shardtrain", "inspect", "x"]) == (
        sys.executable,
        "-m",
        "shardtrain.cli",
        "inspect",
        "x",
    )
    assert pods.local_argv(["/usr/local/bin/shardtrain"])[:3] == (
        sys.executable,
        "-m",
        "shardtrain.cli",
    )
    assert pods.local_argv(["python3", "-c", "pass"]) == (sys.executable, "-c", "pass")
    assert pods.local_argv(["/bin/echo", "hi"]) == ("/bin/echo", "hi")


def test_quantities():
    assert pods.quantity("500m") == 0.5
    assert pods.quantity("2") == 2
    assert pods.quantity("16Gi") == 16 * 2**30
    assert pods.quantity("1k") == 1000
    with pytest.raises(ConfigError, match="'four' is not a Kubernetes quantity"):
        pods.quantity("four")
