"""Pointers: what a step's Dataset or Model artifact holds (the data stays at its URI)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kfp import dsl

from shardtrain.errors import (
    ConfigError,
)
from shardtrain.kubeflow import pointers


def _artifact(kind, root: Path, name: str):
    return kind(name=name, uri=str(root / "artifacts" / name), metadata={})


def test_pointers_round_trip_through_artifacts(tmp_path):
    model = _artifact(dsl.Model, tmp_path, "m")
    pointers.write_pointer(model, "s3://b/m", step=3)
    assert model.metadata == {"uri": "s3://b/m", "step": 3}
    fresh = dsl.Model(name="m", uri=model.uri, metadata={})  # the next step's view
    assert pointers.read_pointer(fresh) == {"uri": "s3://b/m", "step": 3}
    with pytest.raises(ConfigError, match="not a shardtrain pointer"):
        pointers.read_pointer(_artifact(dsl.Model, tmp_path, "missing"))
