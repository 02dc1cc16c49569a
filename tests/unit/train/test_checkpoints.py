"""The checkpoint store: the pointer is published last, old checkpoints are pruned."""

from __future__ import annotations

import os

import pytest

from shardtrain.errors import StorageError
from shardtrain.train.checkpoints import CheckpointStore


def test_checkpoint_store_publishes_pointer_last_and_prunes(tmp_path):
    model_dir = str(tmp_path / "model")
    store = CheckpointStore(model_dir, str(tmp_path / "stage"), max_to_keep=2)
    assert store.latest() is None
    with pytest.raises(StorageError, match="no staged checkpoint"):
        store.publish(1)
    for step in (10, 20, 30):
        for suffix in (".index", ".data-00000-of-00001"):
            with open(store.local_prefix(step) + suffix, "w") as f:
                f.write(f"step {step}")
        store.publish(step, final=step == 30)
    latest = store.latest()
    assert (latest.step, latest.prefix, latest.final) == (30, "ckpt-30", True)
    remote = sorted(os.listdir(os.path.join(model_dir, "checkpoints")))
    assert remote == [
        "ckpt-20.data-00000-of-00001",
        "ckpt-20.index",
        "ckpt-30.data-00000-of-00001",
        "ckpt-30.index",
        "latest.json",
    ]
    reader = CheckpointStore(model_dir, str(tmp_path / "other"))
    prefix = reader.fetch(latest)
    with open(prefix + ".index") as f:
        assert f.read() == "step 30"
