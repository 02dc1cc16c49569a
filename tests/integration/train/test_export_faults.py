"""What a failed export leaves: nothing once it is rerun. A full disk (a real tmpfs, when this
process may mount one) or a lost connection midway deletes the partial folder; what a killed
exporter left is deleted by the next export; ``export/latest.json`` names the complete one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from shardtrain import storage
from shardtrain.errors import StorageError
from shardtrain.storage import transfer
from shardtrain.train import export
from shardtrain.train.features import FeatureSpec, NumericFeature
from shardtrain.train.models import build_model

SPEC = FeatureSpec(
    numeric=(NumericFeature("level", "float", input_name="level"),),
    categorical=(),
    label="y",
    label_type="string",
    classes=("no", "yes"),
    csv_columns=(("level", "float"), ("y", "string")),
)


@pytest.fixture(scope="module")
def model():
    return build_model("tabular", SPEC, {"hidden_units": [4], "dropout": 0.0})


def _versions(model_dir: Path) -> list[Path]:
    return sorted(p for p in (model_dir / "export").iterdir() if p.name.isdigit())


def _assert_one_complete_export_published(model_dir: Path, uri: str) -> None:
    (only,) = _versions(model_dir)
    assert Path(uri).resolve() == only.resolve()
    assert {"saved_model.pb", "fingerprint.pb", "variables", export.MODEL_INFO} <= {
        p.name for p in only.iterdir()
    }
    assert json.loads((only / export.MODEL_INFO).read_text())["step"] == 7
    pointer = json.loads((model_dir / "export" / export.EXPORT_POINTER).read_text())
    assert pointer["path"] == f"export/{only.name}"


def test_a_full_disk_midway_leaves_no_partial_export_after_the_rerun(model, tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    # Room for fingerprint.pb (the first file uploaded), not for saved_model.pb.
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(small)],
                             capture_output=True, text=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        model_dir = small / "model"
        with pytest.raises(StorageError, match="no space left"):
            export.export_saved_model(model, SPEC, str(model_dir), step=7)
        assert _versions(model_dir) == []
        assert not (model_dir / "export" / export.EXPORT_POINTER).exists()
        subprocess.run(["mount", "-o", "remount,size=64m", str(small)], check=True)
        uri = export.export_saved_model(model, SPEC, str(model_dir), step=7)
        _assert_one_complete_export_published(model_dir, uri)
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_an_upload_failing_midway_deletes_what_it_wrote(model, tmp_path, monkeypatch):
    real = storage.upload_file
    done: list[str] = []

    def lose_the_connection_after_one_file(src, dst):
        if done:
            raise StorageError(f"{dst}: connection lost")
        real(src, dst)
        done.append(dst)

    for where in (storage, transfer):  # export.py's and upload_dir's upload_file
        monkeypatch.setattr(where, "upload_file", lose_the_connection_after_one_file)
    with pytest.raises(StorageError, match="connection lost"):
        export.export_saved_model(model, SPEC, str(tmp_path), step=7)
    assert done and _versions(tmp_path) == []
    monkeypatch.undo()
    uri = export.export_saved_model(model, SPEC, str(tmp_path), step=7)
    _assert_one_complete_export_published(tmp_path, uri)


def test_the_next_export_deletes_what_a_killed_exporter_left(model, tmp_path):
    killed = tmp_path / "export" / "1700000000"  # stopped after its first file
    killed.mkdir(parents=True)
    (killed / "fingerprint.pb").write_bytes(b"\0")
    uri = export.export_saved_model(model, SPEC, str(tmp_path), step=7)
    assert not killed.exists()
    _assert_one_complete_export_published(tmp_path, uri)


def test_older_complete_exports_are_kept(model, tmp_path):
    first = export.export_saved_model(model, SPEC, str(tmp_path), step=7)
    older = tmp_path / "export" / "1700000000"
    Path(first).rename(older)
    export.export_saved_model(model, SPEC, str(tmp_path), step=7)
    assert older in _versions(tmp_path) and len(_versions(tmp_path)) == 2
