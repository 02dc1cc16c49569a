"""Atomic objects on the local file system: a write is all or nothing, text and gzip round trips."""

from __future__ import annotations

import gzip
import os

import pytest

from shardtrain import storage


def test_write_is_atomic_and_read_back(tmp_path):
    target = tmp_path / "sub" / "obj.bin"
    with storage.open(str(target), "wb") as f:
        f.write(b"hello ")
        # Nothing visible under the final name until the block exits.
        assert not target.exists()
        f.write(b"world")
    assert target.read_bytes() == b"hello world"
    assert os.listdir(target.parent) == ["obj.bin"]  # no temporary left behind


def test_failed_write_leaves_nothing(tmp_path):
    target = tmp_path / "obj.bin"
    with pytest.raises(RuntimeError), storage.open(str(target), "wb") as f:
        f.write(b"partial")
        raise RuntimeError("writer crashed")
    assert not target.exists()
    assert os.listdir(tmp_path) == []


def test_text_and_gzip_round_trip(tmp_path):
    uri = f"file://{tmp_path}/t.csv.gz"
    with storage.open(uri, "w", compression="infer") as f:
        f.write("a,b\n1,2\n")
    assert gzip.decompress((tmp_path / "t.csv.gz").read_bytes()) == b"a,b\n1,2\n"
    with storage.open(uri, "r", compression="infer") as f:
        assert f.read() == "a,b\n1,2\n"
