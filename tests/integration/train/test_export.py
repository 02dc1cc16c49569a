"""Any column name, from a source file to a served prediction.

Each case is sharded and trained (30 steps) through the ``shardtrain`` command as a user
runs it, then its export is loaded once in this process and the source's own rows are
scored through both signatures: ``predict_csv`` with the raw lines and ``serving_default``
with one tensor per input, named as ``shardtrain_model.json`` lists them. The headers are
what real files hold: palmerpenguins' raw file (``Delta 15 N (o/oo)``), Japanese quest logs
in UTF-8 and cp932, names that differ only in case or punctuation, a leading digit, ``#``,
``.``, ``:``, Python keywords and the model's own layer names, in CSV, Parquet and JSON
lines.
"""

from __future__ import annotations

import csv
import importlib.resources
import io
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import run_cli

pytestmark = [pytest.mark.slow]

TRAIN = ("--train-steps", "30", "--batch-size", "64", "--checkpoint-every", "30")
#: Rows of each source scored through both signatures.
SCORED = 40

#: Names that differ only in case or punctuation, a leading digit, '#', '.', ':', keywords,
#: and names of the tabular model's own layers.
ODD = [
    "a b",
    "a_b",
    "A b",
    "Ab",
    "ab",
    "1st",
    "x#y",
    "p.q",
    "k:v",
    "class",
    "self",
    "logits",
    "hidden_0",
    "Delta 15 N (o/oo)",
    "ラベル前",
]


@dataclass
class Case:
    source: Path
    label: str
    encoding: str = "utf-8"
    text: bool = True  # a CSV file (its raw lines are scored as they are)


def _quest_jp(path: Path, encoding: str) -> None:
    rng = random.Random(1)
    kinds = ["討伐", "採集", "護衛", "探索"]
    lines = ["プレイヤーID,レベル,クエスト種別,所要時間(分),クリア"]
    for i in range(600):
        level, kind = rng.randint(1, 60), rng.choice(kinds)
        p = 0.2 + 0.6 * level / 60 - (0.2 if kind == "討伐" else 0)
        cleared = "はい" if rng.random() < p else "いいえ"
        lines.append(f"P{100000 + i},{level},{kind},{rng.uniform(3, 90):.1f},{cleared}")
    path.write_text("\n".join(lines) + "\n", encoding=encoding)


def _odd_rows(n: int = 400) -> list[dict]:
    rng = random.Random(3)
    rows = []
    for _ in range(n):
        row = {name: round(rng.gauss(0, 1), 3) for name in ODD}
        row["1st"] = rng.randint(0, 9)
        row["class"] = rng.choice(["warrior", "mage", "rogue"])
        row["ラベル前"] = rng.choice(["x", "y", None])
        # A timestamp per row: read as time (seconds, day of week, hour), not left out as an id.
        when = 1_700_000_000 + rng.randint(0, 90 * 86400)
        row["when (UTC)"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))
        score = row["a b"] - row["A b"] + (row["class"] == "mage")
        row["y/n label"] = "yes" if score > 0 else "no"
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Case]:
    tmp = tmp_path_factory.mktemp("sources")
    penguins = importlib.resources.files("palmerpenguins") / "data" / "penguins-raw.csv"
    cases = {"penguins-raw": Case(Path(str(penguins)), "Species")}
    for encoding in ("utf-8", "cp932"):
        path = tmp / f"quest-{encoding}.csv"
        _quest_jp(path, encoding)
        cases[f"quest-{encoding}"] = Case(path, "クリア", encoding)
    rows = _odd_rows()
    header = [*ODD, "when (UTC)", "y/n label"]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([["" if r[c] is None else r[c] for c in header] for r in rows])
    (tmp / "odd.csv").write_text(buf.getvalue(), encoding="utf-8")
    cases["odd-csv"] = Case(tmp / "odd.csv", "y/n label")
    pq.write_table(pa.Table.from_pylist(rows), tmp / "odd.parquet")
    cases["odd-parquet"] = Case(tmp / "odd.parquet", "y/n label", text=False)
    with open(tmp / "odd.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    cases["odd-jsonl"] = Case(tmp / "odd.jsonl", "y/n label", text=False)
    return cases


@pytest.fixture(scope="module")
def trained(sources, tmp_path_factory):
    """``{case: (dataset, model_dir, train stderr)}``, trained on first use."""
    tmp = tmp_path_factory.mktemp("trained")
    done: dict[str, tuple[str, str, str]] = {}

    def get(name: str) -> tuple[str, str, str]:
        if name not in done:
            case = sources[name]
            data, model_dir = str(tmp / f"{name}-data"), str(tmp / f"{name}-model")
            extra = ("--encoding", case.encoding) if case.encoding != "utf-8" else ()
            shard = run_cli(
                "shard", str(case.source), "--output", data, "--label", case.label, *extra
            )
            assert shard.returncode == 0, shard.stderr[-3000:]
            assert "Traceback" not in shard.stderr
            train = run_cli("train", "--data", data, "--model-dir", model_dir, *TRAIN)
            assert train.returncode == 0, train.stderr[-3000:]
            assert "Traceback" not in train.stderr
            done[name] = (data, model_dir, train.stderr)
        return done[name]

    return get


def _source_rows(case: Case) -> tuple[list[str], list[list[str | None]], list[str] | None]:
    """(header, rows as field texts with None for missing, the raw CSV lines or None)."""
    if case.text:
        text = case.source.read_text(encoding=case.encoding)
        lines = text.splitlines()[1 : SCORED + 1]
        table = list(csv.reader(io.StringIO(text)))
        return table[0], [list(r) for r in table[1 : SCORED + 1]], lines
    if case.source.suffix == ".parquet":
        records = pq.read_table(case.source).to_pylist()[:SCORED]
    else:
        with open(case.source, encoding="utf-8") as f:
            records = [json.loads(line) for line, _ in zip(f, range(SCORED), strict=False)]
    header = list(records[0])
    rows = [[None if r[c] is None else str(r[c]) for c in header] for r in records]
    return header, rows, None


def _score(model_dir: str, case: Case):
    import tensorflow as tf

    pointer = json.loads((Path(model_dir) / "export" / "latest.json").read_text())
    export = Path(model_dir) / pointer["path"]
    info = json.loads((export / "shardtrain_model.json").read_text())
    spec = info["feature_spec"]
    nulls = set(spec["null_values"])
    header, rows, lines = _source_rows(case)
    if lines is None:  # Parquet / JSON lines: CSV lines in the dataset's column order
        order = [name for name, _ in spec["csv_columns"]]
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        for row in rows:
            by_name = dict(zip(header, row, strict=True))
            writer.writerow(["" if by_name[c] is None else by_name[c] for c in order])
        lines = buf.getvalue().splitlines()
    loaded = tf.saved_model.load(str(export))
    from_csv = loaded.signatures["predict_csv"](lines=tf.constant(lines))
    kwargs = {}
    for item in info["inputs"]:
        texts = [r[header.index(item["column"])] for r in rows]
        missing = [t is None or t in nulls for t in texts]
        if item["dtype"] == "float32":
            values = [math.nan if m else float(t) for t, m in zip(texts, missing, strict=True)]
            kwargs[item["input"]] = tf.constant(values, tf.float32)
        else:
            kwargs[item["input"]] = tf.constant(
                ["" if m else t for t, m in zip(texts, missing, strict=True)]
            )
    served = loaded.signatures["serving_default"](**kwargs)
    # The restored module also takes the features keyed by the columns' own names.
    by_column = {i["column"]: kwargs[i["input"]] for i in info["inputs"]}
    direct = loaded.serve(by_column)
    return info, from_csv, served, direct


CASES = ["penguins-raw", "quest-utf-8", "quest-cp932", "odd-csv", "odd-parquet", "odd-jsonl"]


@pytest.mark.parametrize("name", CASES)
def test_any_column_name_trains_exports_and_serves(name, sources, trained):
    case = sources[name]
    data, model_dir, log = trained(name)
    info, from_csv, served, direct = _score(model_dir, case)
    classes = info["feature_spec"]["classes"]
    for out in (from_csv, served, direct):
        probs = out["probabilities"].numpy()
        assert probs.shape == (SCORED, len(classes))
        assert np.isfinite(probs).all() and (probs >= 0).all() and (probs <= 1).all()
        np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
        assert {c.decode() for c in out["classes"].numpy()} <= set(classes)
    # Both signatures see the same inputs: the raw line and the parsed tensors agree.
    np.testing.assert_allclose(from_csv["probabilities"], served["probabilities"], atol=1e-5)
    np.testing.assert_allclose(direct["probabilities"], served["probabilities"], atol=1e-6)
    renamed = {i["column"]: i["input"] for i in info["inputs"] if i["column"] != i["input"]}
    for column, input_name in renamed.items():
        assert input_name in log and column in log  # training logs the mapping
    inspect = run_cli("inspect", data)
    assert inspect.returncode == 0 and "Traceback" not in inspect.stderr
    assert "model inputs" in inspect.stdout
    for column, input_name in renamed.items():
        assert input_name in inspect.stdout, (column, input_name)


def test_the_mapping_and_what_is_left_out(sources, trained):
    _, model_dir, log = trained("quest-cp932")
    pointer = json.loads((Path(model_dir) / "export" / "latest.json").read_text())
    info = json.loads((Path(model_dir) / pointer["path"] / "shardtrain_model.json").read_text())
    inputs = {i["column"]: i["input"] for i in info["inputs"]}
    assert set(inputs) == {"レベル", "クエスト種別", "所要時間(分)"}
    assert all(v.startswith("col_") for v in inputs.values())
    # A player id per row carries no signal: left out, with the flag that keeps it.
    assert "column 'プレイヤーID' left out of the features: ID-like" in log
    assert "--include 'プレイヤーID' keeps it" in log
    _, model_dir, log = trained("penguins-raw")
    assert "column 'Region' left out of the features: constant ('Anvers' in all 344 rows)" in log
    _, model_dir, _ = trained("odd-csv")
    pointer = json.loads((Path(model_dir) / "export" / "latest.json").read_text())
    info = json.loads((Path(model_dir) / pointer["path"] / "shardtrain_model.json").read_text())
    inputs = {i["column"]: i["input"] for i in info["inputs"]}
    assert inputs["a_b"] == "a_b" and inputs["logits"] == "logits"
    assert inputs["hidden_0"] == "hidden_0"
    for odd in ("a b", "A b", "Ab", "ab", "1st", "x#y", "p.q", "k:v", "class", "self"):
        assert inputs[odd] != odd
    assert len({v.lower() for v in inputs.values()}) == len(inputs)
    assert "when (UTC)" in inputs  # a serving input of its own, taking the strings
    assert [d["name"] for d in info["feature_spec"]["dates"]] == ["when (UTC)"]
    _, model_dir, log = trained("penguins-raw")
    pointer = json.loads((Path(model_dir) / "export" / "latest.json").read_text())
    info = json.loads((Path(model_dir) / pointer["path"] / "shardtrain_model.json").read_text())
    assert [d["name"] for d in info["feature_spec"]["dates"]] == ["Date Egg"]
