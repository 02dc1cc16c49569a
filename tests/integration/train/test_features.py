"""Date and timestamp columns read as time, in TensorFlow, against Python's datetime."""

from __future__ import annotations

import csv
import datetime as dt
import math
import random

import numpy as np
import pytest

from helpers import ALL_TYPES
from shardtrain.data import sharding
from shardtrain.train.dates import time_parts
from shardtrain.train.features import FeatureSpec

FORMS = [
    "%Y-%m-%d",
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%d %H:%M",
    "%Y-%m-%dT%H:%M:%SZ",
    "%Y-%m-%dT%H:%M:%S.250+09:00",
    "%Y/%m/%d",
    "%Y/%m/%d %H:%M",
]


def test_time_parts_match_python_datetime():
    import tensorflow as tf

    rng = random.Random(0)
    stamps = [
        dt.datetime(1900, 1, 1) + dt.timedelta(seconds=rng.randint(0, 200 * 365 * 86400))
        for _ in range(400)
    ]
    stamps.append(dt.datetime(2024, 2, 29, 23, 59, 59))
    texts = [s.strftime(rng.choice(FORMS)) for s in stamps]
    mean, std = 1.2e9, 3.0e8
    seconds, dow_sin, dow_cos, hour_sin, hour_cos = (
        t.numpy() for t in time_parts(tf.constant(texts), mean=mean, std=std, with_time=True)
    )
    for i, slashed in enumerate(texts):
        text = slashed.replace("/", "-")
        written = dt.datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S") if len(text) >= 19 else None
        if len(text) == 10:
            written = dt.datetime.strptime(text, "%Y-%m-%d")
        elif len(text) == 16:
            written = dt.datetime.strptime(text, "%Y-%m-%d %H:%M")
        assert written is not None
        epoch = (written - dt.datetime(1970, 1, 1)).total_seconds()
        assert seconds[i] == pytest.approx((epoch - mean) / std, rel=1e-6, abs=2e-6), text
        day = written.weekday()
        assert dow_sin[i] == pytest.approx(math.sin(2 * math.pi * day / 7), abs=1e-5)
        assert dow_cos[i] == pytest.approx(math.cos(2 * math.pi * day / 7), abs=1e-5)
        hour = written.hour + written.minute / 60
        assert hour_sin[i] == pytest.approx(math.sin(2 * math.pi * hour / 24), abs=1e-5)
        assert hour_cos[i] == pytest.approx(math.cos(2 * math.pi * hour / 24), abs=1e-5)


def test_what_is_not_a_date_is_missing():
    import tensorflow as tf

    texts = ["", "garbage", "2020-13-01", "2020-01-01T25:00", "N1A1", "2020-01-01"]
    parts = time_parts(tf.constant(texts), mean=0.0, std=1.0, with_time=False)
    assert len(parts) == 3
    seconds = parts[0].numpy()
    assert np.isnan(seconds[:5]).all() and np.isfinite(seconds[5])


@pytest.mark.parametrize("record_format", ["columnar", "example"])
def test_examples_and_csv_lines_parse_to_the_same_features(all_types, record_format, tmp_path):
    """The training parsers (columnar blocks, the default, and per-row Examples) and the
    serving parser (raw CSV) must agree exactly."""
    import tensorflow as tf

    uri, meta = all_types
    assert meta.record_format == "columnar"  # the default
    if record_format == "example":
        uri = str(tmp_path / "per_row")
        meta = sharding.shard(
            sharding.ShardConfig(
                sources=(str(ALL_TYPES),), output=uri, label="cleared", key="id",
                compression="none", num_shards=1, processes=1, max_bad_fraction=1.0,
                record_format="example",
            )
        ).metadata  # fmt: skip
    spec = FeatureSpec.from_metadata(meta)
    shard = meta.shard_uris(uri, "train") + meta.shard_uris(uri, "eval")
    serialized = tf.stack(list(tf.data.TFRecordDataset(shard)))
    parse = spec.parse_blocks if record_format == "columnar" else spec.parse_examples
    from_examples, labels, keys = parse(serialized, with_key=True)

    with open(ALL_TYPES, newline="") as f:
        rows = {r[0]: r for r in csv.reader(f) if r[0] != "id"}
    lines = []
    for k in keys.numpy():
        row = rows[k.decode()]
        lines.append(",".join(f'"{v}"' if "," in v else v for v in row))
    from_csv = spec.parse_csv(tf.constant(lines))
    assert len(lines) >= 4
    for name in spec.feature_names:
        a, b = from_examples[name].numpy(), from_csv[name].numpy()
        if a.dtype.kind == "f":
            np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=name)
            np.testing.assert_array_equal(a[~np.isnan(a)], b[~np.isnan(b)], err_msg=name)
        else:
            assert list(a) == list(b), name
    by_key = dict(zip([k.decode() for k in keys.numpy()], labels.numpy(), strict=True))
    assert by_key["r1"] == 1 and by_key["r2"] == 0
    r3 = [k.decode() for k in keys.numpy()].index("r3")
    assert np.isnan(from_examples["level"].numpy()[r3])  # missing int → NaN
    assert from_examples["cls"].numpy()[r3] == b""  # missing string → ""


def test_a_csv_line_with_another_number_of_fields_names_the_expected_columns(all_types):
    import tensorflow as tf

    _, meta = all_types
    spec = FeatureSpec.from_metadata(meta)
    names = [n for n, _ in spec.csv_columns]
    good = ",".join("" for _ in names)
    assert spec.parse_csv(tf.constant([good, '"a, b"' + good]))  # a quoted comma is no separator
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        spec.parse_csv(tf.constant([good, good + ",extra"]))
    text = str(caught.value)
    assert f"every line must have {len(names)} comma-separated fields" in text
    assert ", ".join(names[:3]) in text


def _spec_of(tmp_path, name: str, text: str, **shard) -> FeatureSpec:
    from shardtrain.data import sharding
    from shardtrain.data.metadata import DatasetMetadata

    source = tmp_path / name
    source.write_text(text, encoding="utf-8")
    out = tmp_path / f"{name}.ds"
    config = sharding.ShardConfig(
        sources=(str(source),), output=str(out), label="label", min_shards=1, **shard
    )
    sharding.shard(config)
    return FeatureSpec.from_metadata(DatasetMetadata.load(str(out)), include=("name",))


@pytest.mark.parametrize(
    ("dialect", "shard"),
    [
        ("semicolon, decimal comma", {"decimal": ","}),
        ("tab", {}),
        ("padded after the commas", {"skip_initial_space": True}),
    ],
)
def test_predict_csv_reads_lines_in_the_dialect_the_data_was_sharded_in(tmp_path, dialect, shard):
    """The file's own lines, as a serving client sends them, parse to the values the sharder
    read: the delimiter, the decimal mark and padded fields follow the dataset's dialect."""
    import tensorflow as tf

    rows = [(f"n{i}", 1.5 + i, f"c{i % 3}", i % 2) for i in range(60)]
    if dialect.startswith("semicolon"):
        lines = [f"{n};{str(x).replace('.', ',')};{c};{y}" for n, x, c, y in rows]
        header = "name;x;cat;label"
    elif dialect == "tab":
        lines = [f"{n}\t{x}\t{c}\t{y}" for n, x, c, y in rows]
        header = "name\tx\tcat\tlabel"
    else:
        lines = [f'"{n}",   {x},  "{c}",   {y}' for n, x, c, y in rows]
        header = "name,x,cat,label"
    spec = _spec_of(tmp_path, "d.csv", "\n".join([header, *lines]) + "\n", **shard)
    features = spec.parse_csv(tf.constant(lines))
    np.testing.assert_allclose(features["x"].numpy(), [x for _, x, _, _ in rows], rtol=1e-6)
    assert [v.decode() for v in features["cat"].numpy()] == [c for _, _, c, _ in rows]
    assert [v.decode() for v in features["name"].numpy()] == [n for n, _, _, _ in rows]
    with pytest.raises(tf.errors.InvalidArgumentError, match="every line must have 4"):
        spec.parse_csv(tf.constant([lines[0] + spec.csv_delimiter + "9"]))
    # Spreadsheet junk in a numeric column (the sharder rejects its row): one message naming
    # the column and the value, not TensorFlow's "could not correctly convert string".
    d = spec.csv_delimiter
    fields = lines[1].split(d)
    fields[1] = fields[1][: len(fields[1]) - len(fields[1].lstrip())] + "#REF!"
    junk = d.join(fields)
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"(?s)column 'x' takes numbers.*#REF!"
    ):
        spec.parse_csv(tf.constant([lines[0], junk]))
    # What to_number reads stays a number: signs, exponents, inf and nan.
    odd = d.join([fields[0], "-1e3", *fields[2:]]), d.join([fields[0], "inf", *fields[2:]])
    assert list(spec.parse_csv(tf.constant(list(odd)))["x"].numpy()) == [-1000.0, float("inf")]


def test_predict_csv_takes_lines_with_their_line_ends(tmp_path):
    """A client reading the file the data came from sends its lines as Python reads them:
    ``readlines()`` keeps each line's ``\\n`` (and a Windows file's ``\\r\\n`` with
    ``newline=""``). The sharder ends a line before its line feed and one carriage return,
    so predict_csv does too; only one line end is taken off."""
    import tensorflow as tf

    rows = [(f"n{i}", 0.5 * i, f"c{i % 3}", i % 2) for i in range(40)]
    text = "".join(f"{n},{x},{c},{y}\r\n" for n, x, c, y in [("name", "x", "cat", "label"), *rows])
    spec = _spec_of(tmp_path, "crlf.csv", text)
    with open(tmp_path / "crlf.csv", newline="", encoding="utf-8") as f:
        raw = f.readlines()[1:]
    assert raw[0].endswith("\r\n")
    bare = [line.rstrip("\r\n") for line in raw]
    expected = spec.parse_csv(tf.constant(bare))
    for ends in (raw, [b + "\n" for b in bare], [b + "\r" for b in bare]):
        got = spec.parse_csv(tf.constant(ends))
        for name in ("x", "cat", "name"):
            assert got[name].numpy().tolist() == expected[name].numpy().tolist(), name
    np.testing.assert_allclose(expected["x"].numpy(), [x for _, x, _, _ in rows])
    with pytest.raises(tf.errors.InvalidArgumentError):
        spec.parse_csv(tf.constant([bare[0] + "\r\n\r\n"]))  # a line end and a blank line
