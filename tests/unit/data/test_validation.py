"""The data checks: each one firing and not firing, the limits' syntax, the report."""

from __future__ import annotations

import copy
import json

import pytest

from helpers import run_cli, shard
from shardtrain.data import datagen
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.data.profile import TRAINING_DATA, DataProfile, write_profile
from shardtrain.data.validation import Limits, validate, validate_uris
from shardtrain.errors import ConfigError, DataError


@pytest.fixture(scope="module")
def quest(tmp_path_factory) -> dict:
    """metadata.json of 4,000 quest rows."""
    tmp = tmp_path_factory.mktemp("quest")
    datagen.generate_quest_logs(str(tmp / "q.csv"), 4_000, seed=8)
    return shard([tmp / "q.csv"], tmp / "ds", key="attempt_id")


def _profile(meta: dict, uri: str) -> DataProfile:
    return DataProfile(uri=uri, metadata=DatasetMetadata.from_dict(meta), source=uri)


def _check(new: dict, old: dict, limits: str = ""):
    return validate(_profile(new, "new"), _profile(old, "old"), Limits.parse(limits))


def _failed(result) -> set[tuple[str, str]]:
    return {(f.check, f.column) for f in result.failures}


def test_the_same_data_passes_every_check(quest):
    result = _check(quest, quest)
    assert result.passed and not result.failures
    checks = {f.check for f in result.findings}
    assert checks == {"missing_rate", "numeric_drift", "categorical_drift", "label_drift"}
    assert result.summary() == "new: every data check holds against old"


def test_two_generations_of_the_same_data_pass_every_default_check(tmp_path):
    """Independent samples of one distribution (20,000 rows each, other seeds, so other
    planning samples and histogram bins) hold under the default limits, with room to spare."""
    metas = []
    for seed in (1, 2):
        datagen.generate_quest_logs(str(tmp_path / f"q{seed}.csv"), 20_000, seed=seed)
        metas.append(shard([tmp_path / f"q{seed}.csv"], tmp_path / f"ds{seed}", key="attempt_id"))
    old_bins = metas[1]["stats"]["columns"]["gold"]["histogram"]["edges"]
    assert metas[0]["stats"]["columns"]["gold"]["histogram"]["edges"] != old_bins
    result = _check(*metas)
    assert result.passed, result.summary()
    for f in result.findings:
        assert f.value is not None and f.limit is not None and f.value <= f.limit / 4, f
    # Histograms in other bins compare as exactly as in the same bins (split by width, gold
    # binned by 1,000 and 2,000 moved by 0.005).
    assert max(f.value or 0 for f in result.findings if f.check == "numeric_drift") < 0.003


def test_missing_new_and_retyped_columns(quest):
    new = copy.deepcopy(quest)
    columns = new["schema"]["columns"]
    columns[:] = [c for c in columns if c["name"] != "region"]  # missing
    next(c for c in columns if c["name"] == "party_size")["type"] = "string"  # retyped
    columns.append({"name": "server", "type": "string", "drop": False})  # new
    result = _check(new, quest)
    assert _failed(result) == {
        ("missing_columns", "region"),
        ("retyped_columns", "party_size"),
        ("new_columns", "server"),
    }
    line = result.summary()
    assert "retyped_columns: party_size (int → string)" in line
    assert "missing_columns: region (string column missing)" in line
    assert _check(new, quest, "missing_columns=off,new_columns=off,retyped_columns=off").passed


def test_label_classes_appearing_and_vanishing(quest):
    new = copy.deepcopy(quest)
    counts = new["stats"]["label"]["counts"]
    counts["2"] = 17
    result = _check(new, quest)
    assert _failed(result) == {("label_classes", "cleared")}
    assert "new class '2' (17 rows)" in result.summary()
    del counts["1"]
    assert "class '1' vanished" in _check(new, quest).summary()
    # A vanished class also moves the balance of those left (label_drift).
    assert _failed(_check(new, quest, "label_classes=off")) == {("label_drift", "cleared")}
    assert _check(new, quest, "label_classes=off,label_drift=off").passed


def test_label_balance_shifts(quest):
    """The same classes in other proportions: not label_classes, but label_drift."""
    new = copy.deepcopy(quest)
    counts = new["stats"]["label"]["counts"]
    total = sum(counts.values())
    old_share = counts["1"] / total
    counts["1"] = round(total * (old_share + 0.15))
    counts["0"] = total - counts["1"]
    result = _check(new, quest)
    assert _failed(result) == {("label_drift", "cleared")}
    finding = result.failures[0]
    assert finding.value == pytest.approx(0.15, abs=1e-3) and finding.limit == 0.1
    assert "L-inf distance of class frequencies" in finding.detail
    assert _check(new, quest, "label_drift=0.2").passed
    assert _check(new, quest, "label_drift.cleared=off").passed


def test_regression_label_drift(tmp_path):
    """A regression label (many values) is compared by its histogram, which it now has."""
    datagen.generate_quest_logs(str(tmp_path / "q.csv"), 4_000, seed=8)
    meta = shard([tmp_path / "q.csv"], tmp_path / "ds", key="attempt_id", label="gold")
    assert meta["label_info"]["task"] == "regression"
    numeric = meta["stats"]["label"]["numeric"]
    assert sum(numeric["histogram"]["counts"]) == numeric["count"]
    result = _check(meta, meta)
    assert result.passed and any(f.check == "label_drift" for f in result.findings)
    new = copy.deepcopy(meta)
    counts = new["stats"]["label"]["numeric"]["histogram"]["counts"]
    counts[:] = [0] * 10 + counts[:-11] + [sum(counts[-11:])]  # much higher
    result = _check(new, meta)
    assert _failed(result) == {("label_drift", "gold")}
    assert "JS divergence" in result.failures[0].detail


def test_missing_rate_jumps(quest):
    new = copy.deepcopy(quest)
    gear = new["stats"]["columns"]["gear_score"]
    moved = int(gear["count"] * 0.1)
    gear["count"] -= moved
    gear["missing"] += moved
    result = _check(new, quest, "numeric_drift=off")
    assert _failed(result) == {("missing_rate", "gear_score")}
    assert "missing rate 0.00% → 10.00%" in result.summary()
    assert _check(new, quest, "numeric_drift=off,missing_rate=0.2").passed
    assert _check(new, quest, "numeric_drift=off,missing_rate.gear_score=off").passed


def test_numeric_drift(quest):
    new = copy.deepcopy(quest)
    hist = new["stats"]["columns"]["player_level"]["histogram"]
    counts = hist["counts"]
    hist["counts"] = [0] * 5 + counts[:-6] + [sum(counts[-6:])]  # 10 levels higher
    result = _check(new, quest)
    assert _failed(result) == {("numeric_drift", "player_level")}
    finding = result.failures[0]
    assert finding.value is not None and finding.value > 0.05 and finding.limit == 0.05
    assert _check(new, quest, "numeric_drift.player_level=1").passed
    # Statistics without histograms (sharded before them): not compared, said so.
    del new["stats"]["columns"]["player_level"]["histogram"]
    result = _check(new, quest)
    assert result.passed and any("player_level: no histogram" in n for n in result.notes)


def test_empty_histograms_on_both_sides_are_not_drift(quest):
    new, old = copy.deepcopy(quest), copy.deepcopy(quest)
    for meta in (new, old):
        hist = meta["stats"]["columns"]["gold"]["histogram"]
        hist["counts"] = [0] * len(hist["counts"])
    result = _check(new, old)
    assert result.passed and ("numeric_drift", "gold") not in {
        (f.check, f.column) for f in result.findings
    }
    assert "column 'gold': empty histograms on both sides; distributions not compared" in (
        result.notes
    )
    with pytest.raises(DataError, match=r"^old: malformed statistics of column 'gold': values but"):
        _check(quest, old)


def test_a_malformed_baseline_is_a_one_line_error(tmp_path):
    """A hand-edited training_data.json: exit 1 with one line naming it, no traceback."""
    datagen.generate_quest_logs(str(tmp_path / "q.csv"), 2_000, seed=4)
    shard([tmp_path / "q.csv"], tmp_path / "ds", key="attempt_id")
    written = write_profile(str(tmp_path / "model"), str(tmp_path / "ds"))
    doc = json.loads((tmp_path / "model" / TRAINING_DATA).read_text())
    doc["metadata"]["stats"]["columns"]["gold"]["histogram"]["counts"] = [1]
    (tmp_path / "model" / TRAINING_DATA).write_text(json.dumps(doc))
    with pytest.raises(DataError, match="malformed statistics of column 'gold'"):
        validate_uris(str(tmp_path / "ds"), str(tmp_path / "model"))
    proc = run_cli("validate", str(tmp_path / "ds"), "--against", str(tmp_path / "model"))
    assert proc.returncode == 1, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: {written}: malformed statistics of column 'gold': ")


def test_categorical_drift(quest):
    new = copy.deepcopy(quest)
    top = new["stats"]["columns"]["platform"]["top"]
    top[0]["count"], top[1]["count"] = top[0]["count"] + top[1]["count"], 0  # one platform gone
    result = _check(new, quest)
    assert _failed(result) == {("categorical_drift", "platform")}
    assert "L-inf distance" in result.summary()
    assert _check(new, quest, "categorical_drift=0.9").passed


def test_the_report_names_failures_and_every_column(quest):
    new = copy.deepcopy(quest)
    new["schema"]["columns"][2]["type"] = "string"
    text = _check(new, quest).to_markdown()
    assert "**Result: FAILED (1 finding(s))**" in text
    assert "| retyped_columns | player_level | int → string |" in text
    assert "| gear_score | numeric_drift | 0 | 0.05 | ok |" in text
    doc = _check(new, quest).to_dict()
    assert doc["passed"] is False and doc["failures"][0]["column"] == "player_level"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("drift=0.1", "CHECK one of"),
        ("numeric_drift", "expected CHECK=VALUE"),
        ("numeric_drift=-1", "a number >= 0 or off"),
        ("numeric_drift=lots", "a number >= 0 or off"),
        ("new_columns=0.5", "new_columns is on or off"),
        ("new_columns.x=off", "new_columns is on or off"),
    ],
)
def test_malformed_limits_are_one_line_errors(text, message):
    with pytest.raises(ConfigError, match=message):
        Limits.parse(text)


def test_limits_parse_and_describe():
    limits = Limits.parse(" numeric_drift=0.2, new_columns=off ,missing_rate.gold=off,"
                          "categorical_drift.Market Share Perc. (Nov 2013)=0.3")  # fmt: skip
    assert limits.numeric_drift == 0.2 and limits.new_columns is False
    assert limits.limit("missing_rate", "gold") is None
    assert limits.limit("missing_rate", "other") == 0.05
    assert limits.limit("categorical_drift", "Market Share Perc. (Nov 2013)") == 0.3
    assert Limits.parse(limits.describe()) == limits
    assert Limits.parse("") == Limits()
