"""``shardtrain report``: the HTML report of a dataset, written where asked or beside the
working directory, its path printed; a dataset that is not one is one line on stderr."""

from __future__ import annotations

import subprocess
import sys

from shardtrain.data import datagen, sharding


def _report(*args: str, cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shardtrain.cli", "report", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def test_report_writes_the_page_and_prints_its_path(tmp_path):
    csv = str(tmp_path / "quest.csv")
    datagen.generate_quest_logs(csv, 300, seed=4)
    data = str(tmp_path / "quest")
    sharding.shard(
        sharding.ShardConfig(
            sources=(csv,), output=data, label="cleared", key="attempt_id", processes=1
        )
    )
    proc = _report(data, "--against", data, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "quest-report.html"  # the default: here, by the dataset's name
    text = (tmp_path / "quest-report.html").read_text()
    assert 'id="chart-label-balance"' in text and "Data checks passed" in text

    out = tmp_path / "elsewhere" / "r.html"
    proc = _report(data, "-o", str(out), cwd=str(tmp_path))
    assert proc.returncode == 0 and proc.stdout.strip() == str(out) and out.exists()


def test_report_of_no_dataset_is_one_line(tmp_path):
    proc = _report(str(tmp_path / "nothing"), cwd=str(tmp_path))
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "nothing" in lines[0]
