"""Directory upload and download on local storage."""

from __future__ import annotations

from shardtrain import storage


def test_upload_download_dir_local(tmp_path):
    src = tmp_path / "src"
    (src / "x" / "y").mkdir(parents=True)
    (src / "a.txt").write_text("A")
    (src / "x" / "y" / "b.txt").write_text("B")
    written = storage.upload_dir(str(src), str(tmp_path / "remote"))
    assert [w.rsplit("remote/", 1)[1] for w in written] == ["a.txt", "x/y/b.txt"]
    storage.download_dir(str(tmp_path / "remote"), str(tmp_path / "back"))
    assert (tmp_path / "back" / "x" / "y" / "b.txt").read_text() == "B"
