"""Real files from data packages on PyPI, from the raw file to a served prediction.

Each file is sharded (:func:`shardtrain.data.sharding.shard`, as ``shardtrain shard`` runs
it), trained for a few dozen steps with a tiny model, exported, and its own raw rows are
scored through ``predict_csv`` (the lines as they are in the file, quoted fields and all) and
``serving_default`` (one tensor per input, named as ``shardtrain_model.json`` lists them).
Training, export and scoring of every file run in this one TensorFlow process, one after the
other, as :func:`shardtrain.train.trainer.train_and_evaluate` does for ``shardtrain train``.
A file that cannot be sharded as it is gives one clear line, asserted here, and the flag a
user passes then. The files: palmerpenguins (both), bokeh_sampledata, vega_datasets and the
demo's own generated quest logs with junk values; Japanese headers (UTF-8, cp932) and odd
names in CSV, Parquet and JSON lines are in ``tests/integration/train/test_export.py``.
"""

from __future__ import annotations

import csv
import gzip
import importlib.util
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from exports import latest_export, score
from helpers import run_cli
from shardtrain.data import sharding
from shardtrain.errors import DataError

pytestmark = [pytest.mark.slow]

#: Rows of each file scored through both signatures (all of them in a smaller file).
SCORED = 40
TRAIN = {
    "train_steps": 40,
    "batch_size": 32,
    "checkpoint_every": 40,
    "model.hidden_units": [16],
}


def _package_dir(name: str) -> Path:
    """A data package's folder, found without importing it (vega_datasets imports pandas)."""
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations, name
    return Path(next(iter(spec.submodule_search_locations)))


PENGUINS = _package_dir("palmerpenguins") / "data"
BOKEH = _package_dir("bokeh_sampledata") / "_data"
VEGA = _package_dir("vega_datasets") / "_data"


@dataclass(frozen=True)
class Case:
    source: Path
    label: str
    #: ``binary``, ``multiclass`` or ``regression``: what sharding makes of the label.
    task: str
    #: Extra ShardConfig fields a user passes for this file (flags of ``shardtrain shard``).
    shard: tuple[tuple[str, object], ...] = ()
    #: Extra training options a user passes (flags of ``shardtrain train``).
    train: tuple[tuple[str, object], ...] = ()
    #: Columns read as time (the export's date features).
    dates: tuple[str, ...] = ()
    #: Columns left out of the features as ID-like (among others).
    ids: tuple[str, ...] = ()


CASES = {
    "penguins": Case(PENGUINS / "penguins.csv", "species", "multiclass"),
    "penguins-raw": Case(
        PENGUINS / "penguins-raw.csv", "Species", "multiclass", dates=("Date Egg",)
    ),
    # `name`: 301 car names in 392 rows, a vocabulary (not ID-like).
    "auto-mpg": Case(BOKEH / "auto-mpg.csv", "mpg", "regression"),
    # Quoted names holding commas ("Allen, Miss Elisabeth Walton"): ID-like, left out.
    "titanic": Case(BOKEH / "titanic_all.csv", "survived", "binary", ids=("name",)),
    "forensic-glass": Case(BOKEH / "forensic_glass.csv", "type", "multiclass"),
    # gzip; headers `Sub-Category`, `Postal Code`.
    "superstore": Case(BOKEH / "SampleSuperstore.csv.gz", "Profit", "regression"),
    # Every field quoted, numbers too; a DATE column; one row without TMAX (see below).
    "lincoln-weather": Case(
        BOKEH / "lincoln_weather.csv",
        "TMAX",
        "regression",
        (("max_bad_fraction", 0.01),),
        dates=("DATE",),
    ),
    # gzip; `time (UTC)` ISO timestamps.
    "sea-surface": Case(
        BOKEH / "sea_surface_temperature.csv.gz",
        "temperature (celsius)",
        "regression",
        dates=("time (UTC)",),
    ),
    # Headers with spaces, `IE-1`, a `#FFFFFF` colour column; 118 rows.
    "elements": Case(BOKEH / "elements.csv", "metal", "multiclass"),
    # Fields padded with spaces after the commas (`"Usain Bolt",     "JAM",   "GOLD",`): a
    # user must pass --skip-initial-space, else the classes are `   "GOLD"` and so on (no
    # warning says so). predict_csv reads the padded lines in that dialect.
    "sprint": Case(BOKEH / "sprint.csv", "Medal", "multiclass", (("skip_initial_space", True),)),
    # Its only feature is one name per row (ID-like, left out: see the error test): a user
    # keeps it with --include.
    "browsers": Case(
        BOKEH / "browsers_nov_2013.csv",
        "Market Share Perc. (Nov 2013)",
        "regression",
        train=(("input.include_columns", ["Browser Version"]),),
    ),
    "cows": Case(BOKEH / "cows.csv", "breed", "multiclass"),
    # `2012/01/01` dates (read as time, like `2010/01/01 00:00` in seattle-temps).
    "seattle-weather": Case(VEGA / "seattle-weather.csv", "weather", "multiclass", dates=("date",)),
    "seattle-temps": Case(VEGA / "seattle-temps.csv", "temp", "regression", dates=("date",)),
    # 63 rows: an eval split of 4, all 'Male': AUC is NaN (documented), the rest is fine.
    "la-riots": Case(VEGA / "la-riots.csv", "gender", "binary", dates=("death_date",)),
}


def _text(path: Path) -> str:
    raw = path.read_bytes()
    return (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8")


def _rows(case: Case, skip: frozenset[int] = frozenset()):
    """(header, the first rows' fields, their lines) as the file holds them; ``skip``: line
    numbers (1-based, the header is line 1) left out."""
    lines = _text(case.source).splitlines()
    padded = bool(dict(case.shard).get("skip_initial_space", False))
    header = [h.strip() for h in next(csv.reader(lines[:1], skipinitialspace=padded))]
    kept = [line for n, line in enumerate(lines[1:], start=2) if n not in skip][:SCORED]
    rows = list(csv.reader(kept, skipinitialspace=padded))
    return header, rows, kept


def _shard(case: Case, out: Path):
    config = sharding.ShardConfig(
        sources=(str(case.source),), output=str(out), label=case.label, **dict(case.shard)
    )
    return sharding.shard(config).metadata


def _train(data: Path, model_dir: Path, **options):
    from shardtrain.train.config import resolve_config
    from shardtrain.train.trainer import train_and_evaluate

    options = {"data": str(data), "model_dir": str(model_dir), **TRAIN, **options}
    return train_and_evaluate(resolve_config(None, options))


def _check(case: Case, tmp_path: Path, skip: frozenset[int] = frozenset()):
    """Shard, train, export, and score the file's first rows through both signatures."""
    meta = _shard(case, tmp_path / "data")
    assert meta.label_info.task == case.task
    options = {**TRAIN, **dict(case.train)}
    result = _train(tmp_path / "data", tmp_path / "model", **options)
    assert result.step == options["train_steps"] and result.export_uri and result.metrics
    export, info = latest_export(tmp_path / "model")
    spec = info["feature_spec"]
    assert [d["name"] for d in spec["dates"]] == list(case.dates)
    assert set(case.ids) <= set(spec["excluded"])
    header, rows, lines = _rows(case, skip)
    outputs = score(export, info, header, rows, lines)
    if case.task == "regression":
        stats = meta.stats.label["numeric"]
        low, high = stats["min"], stats["max"]
        spread = high - low
        for out in outputs:
            values = out["predictions"].numpy().reshape(-1)
            assert values.shape == (len(rows),)
            assert np.isfinite(values).all()
            # A few dozen steps: not a good model, but values in the label's units.
            assert (values > low - spread).all() and (values < high + spread).all(), values
        key, atol = "predictions", 1e-4 * max(spread, 1.0)
        assert all(math.isfinite(result.metrics[k]) for k in ("rmse", "mae", "r2"))
    else:
        classes = info["feature_spec"]["classes"]
        assert list(classes) == list(meta.label_info.classes)
        for out in outputs:
            probs = out["probabilities"].numpy()
            assert probs.shape == (len(rows), len(classes))
            assert np.isfinite(probs).all() and (probs >= 0).all() and (probs <= 1).all()
            np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
            assert {c.decode() for c in out["classes"].numpy().reshape(-1)} <= set(classes)
        key, atol = "probabilities", 1e-5
        assert math.isfinite(result.metrics["accuracy"])
        assert math.isfinite(result.metrics["log_loss"])
    # The raw line and the parsed tensors give the same predictions.
    from_csv, served, direct = outputs
    np.testing.assert_allclose(from_csv[key], served[key], atol=atol)
    np.testing.assert_allclose(direct[key], served[key], atol=atol)
    return meta, result


@pytest.mark.parametrize("name", list(CASES))
def test_a_real_file_shards_trains_exports_and_serves_its_own_rows(name, tmp_path, caplog):
    _, result = _check(CASES[name], tmp_path)
    assert not [r.getMessage() for r in caplog.records if r.exc_info]  # no traceback logged
    assert result.metrics is not None
    if name == "la-riots":
        assert result.metrics["num_examples"] < 10 and math.isnan(result.metrics["auc"])
    elif CASES[name].task != "regression":
        assert math.isfinite(result.metrics["auc"])


@pytest.mark.parametrize(
    ("case", "message"),
    [
        pytest.param(
            Case(BOKEH / "lincoln_weather.csv", "TMAX", "regression"),
            "1 of 366 rows (0.27%) were rejected (missing_label=1), more than "
            "--max-bad-fraction 0.001; see ",
            id="lincoln-weather",
        ),
        pytest.param(
            Case(BOKEH / "elements.csv", "standard state", "multiclass"),
            "19 of 118 rows (16.10%) were rejected (missing_label=19), more than "
            "--max-bad-fraction 0.001; see ",
            id="elements-standard-state",
        ),
    ],
)
def test_a_file_with_too_many_rows_without_a_label_is_one_clear_line(case, message, tmp_path):
    """Rows without a label are rejects: past --max-bad-fraction sharding stops, naming the
    rejects file (lincoln_weather trains with --max-bad-fraction 0.01, above)."""
    with pytest.raises(DataError) as err:
        _shard(case, tmp_path / "data")
    text = str(err.value)
    assert "\n" not in text and message in text and "rejects.jsonl" in text


def test_a_file_whose_only_feature_is_an_id_is_one_clear_line(tmp_path):
    case = CASES["browsers"]
    _shard(case, tmp_path / "data")
    with pytest.raises(DataError) as err:
        _train(tmp_path / "data", tmp_path / "model")
    text = str(err.value)
    assert "\n" not in text
    assert text.endswith(
        "no feature columns left besides the label (left out: Browser Version: ID-like "
        "(118 distinct values in 118 non-missing rows); --include COLUMN keeps one)"
    )


@pytest.fixture(scope="module")
def quest_csv(tmp_path_factory) -> Path:
    """The demo's generator with junk: malformed rows, '?' and '12abc' in number columns."""
    path = tmp_path_factory.mktemp("quest") / "quest.csv"
    run_cli(
        "gen-data",
        "quest",
        "--rows",
        "20000",
        "--bad-fraction",
        "0.0005",
        "-o",
        str(path),
        check=True,
    )
    return path


def test_the_demo_data_with_junk_values_keeps_its_numbers_and_a_binary_label(quest_csv, tmp_path):
    # Long enough to learn something (`make demo`: AUC 0.85 after 400 steps).
    steps = (("train_steps", 300), ("checkpoint_every", 300), ("batch_size", 128))
    case = Case(quest_csv, "cleared", "binary", train=steps)
    meta = _shard(case, tmp_path / "data")
    rejected = frozenset(
        json.loads(line)["line"]
        for line in (tmp_path / "data" / "rejects" / "rejects.jsonl").read_text().splitlines()
    )
    assert rejected and meta.rows_rejected == len(rejected)
    numeric = [c.name for c in meta.schema.features if c.type in ("int", "float")]
    assert len(numeric) == 12, numeric
    assert meta.label_info.classes == ("0", "1")
    # Junk rows are rejects, not served: score the accepted rows.
    _, result = _check(case, tmp_path / "run", skip=rejected)
    assert result.metrics is not None and result.metrics["auc"] > 0.75, result.metrics
