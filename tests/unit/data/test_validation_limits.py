"""Limits of the data checks for single columns name columns the data has: a misspelled
column's limit would never apply, so it is refused in one line listing the known columns.
And :class:`Limits` is light to import: the pipeline's first step parses the limits before
anything is sharded, in a pod that loads neither NumPy nor Arrow."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import run_cli_here, shard
from shardtrain.data import datagen
from shardtrain.data.validation import Limits
from shardtrain.errors import ConfigError


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("quest")
    datagen.generate_quest_logs(str(tmp / "q.csv"), 1_000, seed=8)
    shard([tmp / "q.csv"], tmp / "ds", key="attempt_id")
    return tmp / "ds"


def test_validate_refuses_a_limit_for_a_column_no_dataset_has(dataset):
    proc = run_cli_here(
        "validate", str(dataset), "--against", str(dataset),
        "--limits", "numeric_drift=0.1,missing_rate.nosuchcol=0.1",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout
    (line,) = proc.stderr.strip().splitlines()
    assert "missing_rate.nosuchcol: no column 'nosuchcol' in" in line, line
    assert "gold" in line and "gear_score" in line  # the known columns are listed
    ok = run_cli_here(
        "validate", str(dataset), "--against", str(dataset), "--limits", "missing_rate.gold=0.1"
    )
    assert ok.returncode == 0, ok.stderr


def test_check_columns_names_every_unknown_column():
    limits = Limits.parse("missing_rate.a=0.1,numeric_drift.zz=0.2,missing_rate.b=0.1")
    limits.check_columns(["a", "b", "zz"], "ds")
    with pytest.raises(ConfigError) as info:
        limits.check_columns(["a"], "s3://b/ds")
    assert str(info.value) == (
        "data check limit(s) missing_rate.b, numeric_drift.zz: no column 'b', 'zz' in "
        "s3://b/ds (its columns: a)"
    )


def test_limits_import_without_numpy_or_arrow():
    code = (
        "import json, sys\n"
        "from shardtrain.data.validation import Limits\n"
        "Limits.parse('numeric_drift=0.1,missing_rate.gold=0.2')\n"
        "print(json.dumps([m in sys.modules for m in ('numpy', 'pyarrow')]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [False, False]
