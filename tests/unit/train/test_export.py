"""Export's local staging: what a killed export leaves is cleaned by the next one."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from shardtrain.train import export


def test_staging_folders_of_dead_exporters_are_removed_and_live_ones_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    orphan = tmp_path / f"shardtrain-export-{dead.stdout.strip()}-k3j2"
    live = tmp_path / f"shardtrain-export-{os.getpid()}-a9x1"
    other = tmp_path / "shardtrain-exports-notes"
    for folder in (orphan, live, other):
        (folder / "1700000000").mkdir(parents=True)
    export._remove_orphaned_staging()
    assert not orphan.exists()
    assert live.exists() and other.exists()
