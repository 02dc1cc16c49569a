"""Object operations on local paths (the interface S3 and GCS share): list, glob, size, delete,
copy, and errors that name the URI."""

from __future__ import annotations

import pytest

from shardtrain import storage
from shardtrain.errors import StorageError


def test_list_glob_size_delete_copy(tmp_path):
    for name in ("a.csv", "b.csv", "c.txt", "d/e.csv"):
        storage.write_text(str(tmp_path / name), name)
    base = str(tmp_path)
    assert storage.glob(f"{base}/*.csv") == [f"{base}/a.csv", f"{base}/b.csv"]
    assert storage.glob(f"{base}/**/*.csv")[-1] == f"{base}/d/e.csv"
    assert storage.size(f"{base}/c.txt") == 5
    assert storage.exists(f"{base}/d")
    storage.copy(f"{base}/a.csv", f"{base}/copy/a.csv")
    assert storage.read_text(f"{base}/copy/a.csv") == "a.csv"
    storage.delete(f"{base}/d", recursive=True)
    assert not storage.exists(f"{base}/d")
    storage.delete(f"{base}/never-there")  # missing is fine


def test_missing_object_errors_name_the_uri(tmp_path):
    missing = str(tmp_path / "nope.json")
    with pytest.raises(StorageError, match=r"nope.json: no such file or object"):
        storage.read_json(missing)
    with (
        pytest.raises(StorageError, match=r"nope.json: no such file or object"),
        storage.open(missing),
    ):
        pass
    with pytest.raises(StorageError, match="no such directory or prefix"):
        storage.download_dir(str(tmp_path / "nodir"), str(tmp_path / "out"))


def test_malformed_json_is_a_clear_error(tmp_path):
    storage.write_text(str(tmp_path / "m.json"), "{not json")
    with pytest.raises(StorageError, match=r"m.json: not valid JSON"):
        storage.read_json(str(tmp_path / "m.json"))


def test_read_json_if_exists_is_none_only_when_absent(tmp_path):
    assert storage.read_json_if_exists(str(tmp_path / "nope.json")) is None
    storage.write_json(str(tmp_path / "d.json"), {"k": [1]})
    assert storage.read_json_if_exists(str(tmp_path / "d.json")) == {"k": [1]}
    storage.write_text(str(tmp_path / "m.json"), "{not json")
    with pytest.raises(StorageError, match=r"m.json: not valid JSON"):
        storage.read_json_if_exists(str(tmp_path / "m.json"))
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(StorageError, match=r"dir\.json"):
        storage.read_json_if_exists(str(tmp_path / "dir.json"))
