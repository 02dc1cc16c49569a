"""``shardtrain validate`` on datasets in a live MinIO: a column turned into strings and a
column multiplied by 3 are flagged with the column named (exit 1), an unchanged re-shard
passes (exit 0)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pytest

from helpers import run_cli
from shardtrain import storage
from shardtrain.data import datagen

pytestmark = pytest.mark.minio

ROWS = 6_000


def drifted_copies(csv_path, out_dir) -> dict[str, str]:
    """The quest CSV at ``csv_path`` with ``player_level`` as strings (``lvl35``) and with
    ``gear_score`` multiplied by 3, written beside it."""
    table = pacsv.read_csv(csv_path)
    level = table.column_names.index("player_level")
    gear = table.column_names.index("gear_score")
    as_text = pc.binary_join_element_wise("lvl", pc.cast(table["player_level"], pa.string()), "")
    paths = {"retyped": str(out_dir / "retyped.csv"), "shifted": str(out_dir / "shifted.csv")}
    pacsv.write_csv(table.set_column(level, "player_level", as_text), paths["retyped"])
    tripled = pc.multiply(table["gear_score"], 3)
    pacsv.write_csv(table.set_column(gear, "gear_score", tripled), paths["shifted"])
    return paths


def _shard(source: str, output: str) -> None:
    run_cli("shard", source, "-o", output, "--label", "cleared", "--key", "attempt_id",
            "--processes", "1", check=True)  # fmt: skip


def test_validate_flags_retyped_and_shifted_columns_on_minio(minio, tmp_path):
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), ROWS, seed=31)
    sources = {"base": str(csv_path), **drifted_copies(csv_path, tmp_path)}
    datasets = {}
    for name, path in sources.items():
        uri = minio.uri("validate", "raw", f"{name}.csv")
        storage.upload_file(path, uri)
        datasets[name] = minio.uri("validate", name)
        _shard(uri, datasets[name])
    datasets["again"] = minio.uri("validate", "again")
    _shard(minio.uri("validate", "raw", "base.csv"), datasets["again"])

    retyped = run_cli("validate", datasets["retyped"], "--against", datasets["base"])
    assert retyped.returncode == 1, retyped.stderr
    [line] = retyped.stderr.strip().splitlines()
    assert line == (
        f"error: {datasets['retyped']}: data checks failed against {datasets['base']}: "
        "retyped_columns: player_level (int → string)"
    )
    assert "| retyped_columns | player_level | int → string |" in retyped.stdout

    report = minio.uri("validate", "reports", "shifted.json")
    shifted = run_cli(
        "validate", datasets["shifted"], "--against", datasets["base"], "--json-report", report
    )
    assert shifted.returncode == 1, shifted.stderr
    assert "numeric_drift: gear_score (JS divergence" in shifted.stderr
    assert len(shifted.stderr.strip().splitlines()) == 1
    doc = storage.read_json(report)
    assert doc["passed"] is False
    assert [(f["check"], f["column"]) for f in doc["failures"]] == [("numeric_drift", "gear_score")]

    same = run_cli("validate", datasets["again"], "--against", datasets["base"])
    assert same.returncode == 0, same.stderr
    assert "every data check holds" in same.stdout
    # The drift limit raised for that one column: the shifted data passes.
    limited = run_cli("validate", datasets["shifted"], "--against", datasets["base"],
                      "--limits", "numeric_drift.gear_score=1")  # fmt: skip
    assert limited.returncode == 0, limited.stderr


def test_validate_errors_are_one_line(minio):
    missing = minio.uri("validate", "nothing")
    proc = run_cli("validate", missing, "--against", missing)
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith(f"error: {missing}: neither a dataset")
    bad = run_cli("validate", missing, "--against", missing, "--limits", "drift=1")
    assert bad.returncode == 1 and "data check limit 'drift=1'" in bad.stderr
