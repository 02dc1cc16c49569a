"""The synthetic quest-log generator: schema, determinism, malformed rows, learnability."""

from __future__ import annotations

import gzip
import io

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pytest

from shardtrain.data import datagen
from shardtrain.errors import ConfigError


def _read(path) -> pa.Table:
    options = pacsv.ConvertOptions(strings_can_be_null=True)
    return pacsv.read_csv(str(path), convert_options=options)


def test_columns_and_types(tmp_path):
    path = tmp_path / "q.csv"
    summary = datagen.generate_quest_logs(str(path), 2_000, seed=1)
    table = _read(path)
    assert table.column_names == [n for n, _ in summary.columns]
    assert table.column_names[0] == "attempt_id" and table.column_names[-1] == "cleared"
    types = dict(summary.columns)
    for name, typ in types.items():
        arrow = table.schema.field(name).type
        expected = {
            "int": pa.types.is_integer,
            "float": lambda t: pa.types.is_floating(t) or pa.types.is_integer(t),
            "string": pa.types.is_string,
            "bool": pa.types.is_boolean,
        }[typ]
        assert expected(arrow), (name, typ, arrow)
    assert table.num_rows == summary.rows == 2_000
    assert len(set(table.column("attempt_id").to_pylist())) == 2_000
    assert datagen.quest_schema(30, 7)[-3][0] == "cat_01"
    features = datagen.quest_schema(30, 5)[:-1]  # without the label
    assert sum(1 for _, t in features if t in ("int", "float")) == 30


def test_deterministic_and_seeded(tmp_path):
    a, b, c = (tmp_path / n for n in ("a.csv", "b.csv", "c.csv"))
    datagen.generate_quest_logs(str(a), 3_000, seed=4, bad_fraction=0.01, chunk_rows=1_000)
    datagen.generate_quest_logs(str(b), 3_000, seed=4, bad_fraction=0.01, chunk_rows=1_000)
    datagen.generate_quest_logs(str(c), 3_000, seed=5, bad_fraction=0.01, chunk_rows=1_000)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()


def test_gzip_output(tmp_path):
    path = tmp_path / "q.csv.gz"
    summary = datagen.generate_quest_logs(str(path), 500, seed=2)
    text = gzip.decompress(path.read_bytes())
    assert len(text) == summary.bytes_written and text.count(b"\n") == 501


def test_malformed_rows_are_exactly_counted(tmp_path):
    path = tmp_path / "q.csv"
    summary = datagen.generate_quest_logs(str(path), 20_000, seed=3, bad_fraction=0.02)
    wrong = []
    good = pacsv.read_csv(
        str(path),
        parse_options=pacsv.ParseOptions(invalid_row_handler=lambda r: wrong.append(r) or "skip"),
        convert_options=pacsv.ConvertOptions(
            column_types={n: pa.string() for n, _ in summary.columns}
        ),
    )
    assert len(wrong) == summary.bad_rows_by_kind["wrong_field_count"]
    bad_values = np.zeros(good.num_rows, dtype=bool)
    for name, typ in summary.columns:
        if typ not in ("int", "float"):
            continue
        values = good.column(name).combine_chunks()
        target = pa.int64() if typ == "int" else pa.float64()
        # Empty values are missing, not bad: null, like the missing ones.
        values = pc.if_else(pc.equal(values, ""), pa.scalar(None, pa.string()), values)
        bad_values[_uncastable(values, target)] = True
    assert int(bad_values.sum()) == summary.bad_rows_by_kind["bad_value"]
    assert 0.01 < sum(summary.bad_rows_by_kind.values()) / summary.rows < 0.03


def _uncastable(values: pa.Array, target: pa.DataType, offset: int = 0) -> list[int]:
    """The indices of the values Arrow cannot cast to ``target``: an array casts when every
    value does, so halves that fail are split down to the single values (a few hundred
    casts where one per value took 200,000)."""
    try:
        values.cast(target)
        return []
    except (pa.ArrowInvalid, ValueError):
        if len(values) == 1:
            return [offset]
    half = len(values) // 2
    return _uncastable(values.slice(0, half), target, offset) + _uncastable(
        values.slice(half), target, offset + half
    )


def test_missing_values_and_label(tmp_path):
    path = tmp_path / "q.csv"
    summary = datagen.generate_quest_logs(str(path), 30_000, seed=6)
    table = _read(path)
    for name in ("latency_ms", "deaths_last_10", "region"):
        rate = table.column(name).null_count / table.num_rows
        assert 0.01 < rate < 0.06, (name, rate)
    assert table.column("player_level").null_count == 0
    assert 0.3 < summary.positive_rate < 0.65
    assert 0.85 < summary.bayes_auc < 0.92


def test_learnable_by_a_linear_model(tmp_path):
    """Logistic regression on standardised numerics + one-hot categoricals: eval AUC ≥ 0.80."""
    path = tmp_path / "q.csv"
    summary = datagen.generate_quest_logs(str(path), 20_000, seed=8)  # AUC 0.849
    df = _read(path).to_pandas()
    y = df.pop("cleared").to_numpy()
    df = df.drop(columns=["attempt_id", "player_id"])
    numeric = [n for n, t in summary.columns if t in ("int", "float") and n in df]
    x_num = df[numeric].astype(float)
    x_num = ((x_num - x_num.mean()) / x_num.std()).fillna(0.0).to_numpy()
    cats = [n for n, t in summary.columns if t == "string" and n in df]
    import pandas as pd

    x_cat = pd.get_dummies(df[cats].fillna("?")).to_numpy(dtype=float)
    x = np.hstack([x_num, x_cat, df[["is_weekend"]].to_numpy(dtype=float), np.ones((len(df), 1))])
    split = int(0.8 * len(x))
    w = np.zeros(x.shape[1])
    # Full-batch gradient descent; the problem is small and convex. einsum, not BLAS: a
    # threaded matrix product spins its threads for more CPU than the product itself.
    for _ in range(150):
        p = 1 / (1 + np.exp(-np.einsum("ij,j->i", x[:split], w)))
        w -= 0.5 * np.einsum("ij,i->j", x[:split], p - y[:split]) / split
    scores = np.einsum("ij,j->i", x[split:], w)
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = y[split:] == 1
    auc = (ranks[pos].sum() - pos.sum() * (pos.sum() + 1) / 2) / (pos.sum() * (~pos).sum())
    assert auc >= 0.80, auc


def test_bad_arguments():
    with pytest.raises(ConfigError, match="at least 1"):
        datagen.generate_quest_logs(str(io.BytesIO()), 0)
    with pytest.raises(ConfigError, match=r"between 0 and 0\.5"):
        datagen.generate_quest_logs("/tmp/x.csv", 10, bad_fraction=0.9)
