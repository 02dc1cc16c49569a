"""The publish-last pattern: a manifest written after the objects it names."""

from __future__ import annotations

import pytest

from shardtrain import storage
from shardtrain.errors import NotCommittedError


def test_publish_pattern(tmp_path):
    out = str(tmp_path / "dataset")
    storage.write_bytes(storage.join(out, "part-0"), b"x")
    assert not storage.is_committed(out)
    with pytest.raises(NotCommittedError, match="not committed"):
        storage.read_committed(out)
    storage.publish(out, {"files": ["part-0"]})
    assert storage.read_committed(out) == {"files": ["part-0"]}
