"""The columnar record format: blocks of rows per Example, the same rows as the per-row shards.

Read back without TensorFlow (``example_proto``); the TensorFlow parse of both formats is
compared in tests/integration/kernels/test_tf_interop.py.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

from example_proto import iter_records, parse_example
from helpers import ALL_TYPES, read_examples
from shardtrain import storage
from shardtrain.data import column_blocks, datagen, sharding
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.errors import ConfigError


def _shard(source, out, **kw) -> DatasetMetadata:
    config = sharding.ShardConfig(
        sources=(str(source),), output=str(out), label=kw.pop("label", "cleared"), processes=1, **kw
    )
    return sharding.shard(config).metadata


def _block_rows(uri: str, split: str) -> list[dict]:
    """Every row of a columnar split, in shard and record order, as {column: value}."""
    meta = DatasetMetadata.load(uri)
    rows = []
    for shard_uri in meta.shard_uris(uri, split):
        compressed = meta.compression == "GZIP"
        for record in iter_records(storage.local_path(shard_uri), compressed):
            block = parse_example(record)
            sizes = {len(values) for values in block.values()}
            assert len(sizes) == 1, sizes  # every column holds one value per row
            (n,) = sizes
            assert 1 <= n <= column_blocks.BLOCK_ROWS
            rows += [{k: v[i] for k, v in block.items()} for i in range(n)]
    return rows


def _as_missing(row: dict, types: dict[str, str]) -> dict:
    """A per-row Example's values with absent features as the columnar format stores them."""
    out = {}
    for name, kind in types.items():
        value = row.get(name)
        if value is None:
            value = {"float": math.nan, "int": column_blocks.INT_MISSING, "bytes": b""}[kind]
        out[name] = value
    return out


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or np.float32(a) == np.float32(b)
    return a == b


@pytest.mark.parametrize("compression", ["gzip", "none"])
def test_columnar_shards_hold_the_per_row_shards_rows_in_blocks(tmp_path, compression):
    rows_out, cols_out = tmp_path / "rows", tmp_path / "cols"
    common = dict(key="id", compression=compression, min_shards=2)
    rows_meta = _shard(ALL_TYPES, rows_out, record_format="example", **common)
    cols_meta = _shard(ALL_TYPES, cols_out, record_format="columnar", **common)
    assert rows_meta.record_format == "example" and "record_format" not in rows_meta.options
    assert cols_meta.record_format == "columnar"
    types = {c.name: c.example_kind for c in cols_meta.schema.written}
    assert cols_meta.options["row_order"] == column_blocks.ROW_ORDER
    for split, info in cols_meta.splits.items():
        # The same rows in the same shards (in hash order: compared by key); num_records
        # counts rows.
        assert [s.num_records for s in info.shards] == [
            s.num_records for s in rows_meta.splits[split].shards
        ]
        want = [
            _as_missing({k: v for k, v in r.items() if k != "__split__"}, types)
            for r in read_examples(str(rows_out), split)
        ]
        got = _block_rows(str(cols_out), split)
        assert len(got) == len(want) == info.num_records
        want.sort(key=lambda r: r["id"])
        got.sort(key=lambda r: r["id"])
        for g, w in zip(got, want, strict=True):
            assert set(g) == set(w)
            assert all(_same(g[k], w[k]) for k in w), (g, w)
    # Missing values of each kind are in the data, stored explicitly.
    every = [
        v
        for split in cols_meta.splits
        for r in _block_rows(str(cols_out), split)
        for v in r.values()
    ]
    assert column_blocks.INT_MISSING in every and b"" in every
    assert any(isinstance(v, float) and math.isnan(v) for v in every)


def test_big_shards_are_cut_into_blocks_of_at_most_block_rows(tmp_path):
    csv = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv), 3000, seed=3)
    meta = _shard(csv, tmp_path / "ds", record_format="columnar", num_shards=2, compression="none")
    for shard_uri in meta.shard_uris(str(tmp_path / "ds"), "train"):
        sizes = [
            len(parse_example(r)["cleared"])
            for r in iter_records(storage.local_path(shard_uri), False)
        ]
        assert max(sizes) == column_blocks.BLOCK_ROWS and sum(sizes) > column_blocks.BLOCK_ROWS


def test_blocks_hold_rows_in_hash_order_not_source_order(tmp_path):
    """A block is a random sample of the rows one input batch sent to its shard (this CSV is
    one batch): sorted by label, every full block still holds both labels (in source order
    each would hold one); the same rows as the per-row shards hold; a re-run writes the same
    bytes (the order comes from the rows' hashes and places)."""
    import pyarrow.csv as pacsv

    quest = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(quest), 6000, seed=7)
    table = pacsv.read_csv(quest)
    ordered = tmp_path / "sorted.csv"
    pacsv.write_csv(table.sort_by("cleared"), ordered)
    common = dict(key="attempt_id", num_shards=2, compression="none")
    meta = _shard(ordered, tmp_path / "a", record_format="columnar", **common)
    again = _shard(ordered, tmp_path / "b", record_format="columnar", **common)
    rows = _shard(ordered, tmp_path / "rows", record_format="example", **common)
    assert meta.options["row_order"] == column_blocks.ROW_ORDER
    full_blocks = 0
    for a_uri, b_uri in zip(
        meta.shard_uris(str(tmp_path / "a"), "train"),
        again.shard_uris(str(tmp_path / "b"), "train"),
        strict=True,
    ):
        a, b = Path(storage.local_path(a_uri)), Path(storage.local_path(b_uri))
        assert a.read_bytes() == b.read_bytes()
        for record in iter_records(a, False):
            labels = parse_example(record)["cleared"]
            if len(labels) == column_blocks.BLOCK_ROWS:
                full_blocks += 1
                assert 0.25 < float(np.mean(labels)) < 0.75, np.mean(labels)
    assert full_blocks >= 10
    # Per shard, the same rows as the per-row format's shard (which keeps source order).
    for c_uri, r_uri in zip(
        meta.shard_uris(str(tmp_path / "a"), "train"),
        rows.shard_uris(str(tmp_path / "rows"), "train"),
        strict=True,
    ):
        keys = [
            k for rec in iter_records(storage.local_path(c_uri), False)
            for k in parse_example(rec)["attempt_id"]
        ]  # fmt: skip
        per_row = [
            parse_example(rec)["attempt_id"][0]
            for rec in iter_records(storage.local_path(r_uri), False)
        ]
        assert sorted(keys) == sorted(per_row) and keys != per_row


def test_rows_of_a_repeated_key_are_spread_over_blocks(tmp_path):
    """``--key player_id`` repeats a key over many rows: they share a hash, and sorting by the
    hash alone would put them side by side in a block."""
    quest = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(quest), 6000, seed=3)
    meta = _shard(quest, tmp_path / "ds", key="player_id", num_shards=2, compression="none",
                  record_format="columnar")  # fmt: skip
    same = pairs = 0
    for uri in meta.shard_uris(str(tmp_path / "ds"), "train"):
        for record in iter_records(storage.local_path(uri), False):
            players = parse_example(record)["player_id"]
            same += sum(a == b for a, b in itertools.pairwise(players))
            pairs += len(players) - 1
    assert pairs > 1000 and same / pairs < 0.05, (same, pairs)


def test_a_complete_columnar_dataset_of_the_earlier_version_is_kept(tmp_path):
    """Written before hash order (no ``row_order`` in its plan): re-running the same command
    keeps it (it reads correctly, permuted); half-written, one clear error and --overwrite."""
    import json

    from shardtrain.data.sharding.plan import PLAN_NAME, Plan
    from shardtrain.errors import DataError

    quest = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(quest), 2000, seed=4)
    out = tmp_path / "ds"
    common = dict(key="attempt_id", compression="none", record_format="columnar")
    _shard(quest, out, **common)
    # Make it what the earlier version wrote: no row_order, the fingerprint without it.
    plan_file, meta_file = out / PLAN_NAME, out / "metadata.json"
    stored = json.loads(plan_file.read_text())
    earlier = Plan.from_dict(str(out), stored).earlier_fingerprint()
    assert earlier and earlier != stored["fingerprint"]
    stored["options"].pop("row_order")
    stored["fingerprint"] = earlier
    plan_file.write_text(json.dumps(stored))
    meta = json.loads(meta_file.read_text())
    meta["options"].pop("row_order")
    meta_file.write_text(json.dumps(meta))
    before = meta_file.read_bytes()

    again = _shard(quest, out, **common)  # nothing to do: kept as it is
    assert meta_file.read_bytes() == before and "row_order" not in again.options

    meta_file.unlink()  # as if killed before it finished
    with pytest.raises(DataError, match=r"earlier shardtrain version.*--overwrite"):
        _shard(quest, out, **common)
    fresh = _shard(quest, out, overwrite=True, **common)
    assert fresh.options["row_order"] == column_blocks.ROW_ORDER


def test_varints_match_protobuf():
    from example_proto import Example

    values = np.array([0, 1, 127, 128, 300, 2**35, -1, -(2**63), 2**63 - 1], dtype=np.int64)
    table = pa.table({"v": values})

    schema = SimpleNamespace(written=[SimpleNamespace(name="v", example_kind="int")])
    record = column_blocks.encode_block(table, schema)  # type: ignore[arg-type]
    assert list(Example.FromString(record).features.feature["v"].int64_list.value) == list(values)


def test_encoded_blocks_parse_back_with_protobuf_on_awkward_values():
    """The vectorised encoder against protobuf's own parser: nulls, empty and 70 kB strings,
    non-ASCII, binary and large_string columns, extreme ints, a sliced and a chunked table,
    blocks of 1 and of several rows."""
    from example_proto import Example

    rng = np.random.default_rng(0)
    n = 1500
    text = [
        None if rng.random() < 0.1 else "é" * int(rng.integers(0, 150)) + str(i) for i in range(n)
    ]
    text[5], text[7] = "", "x" * 70_000
    ints = [None if rng.random() < 0.1 else int(v) for v in rng.integers(-(2**62), 2**62, n)]
    ints[3:10] = [-(2**63), 2**63 - 1, 0, 127, 128, -1, 16383]
    floats = [None if rng.random() < 0.1 else float(v) for v in rng.normal(size=n)]
    table = pa.table({
        "s": pa.array(text),
        "ls": pa.array(text, pa.large_string()),
        "bin": pa.array([None if t is None else t.encode() for t in text], pa.binary()),
        "i": pa.array(ints, pa.int64()),
        "f": pa.array(floats),
        "b": pa.array([None if rng.random() < 0.2 else bool(rng.random() < 0.5) for _ in range(n)]),
    })  # fmt: skip
    kinds = {"s": "bytes", "ls": "bytes", "bin": "bytes", "i": "int", "f": "float", "b": "int"}
    schema = SimpleNamespace(
        written=[SimpleNamespace(name=k, example_kind=v) for k, v in kinds.items()]
    )
    chunked = pa.concat_tables([table.slice(0, 300), table.slice(700, 500)])
    for t in (table, table.slice(17, 900), chunked):
        groups = [(0, 1), (1, 260), (260, t.num_rows)]
        framed, spans = column_blocks.encode_blocks(t, schema, groups, block_rows=128)  # type: ignore[arg-type]
        records = list(iter_records_from(framed.tobytes()))
        # The compiled assembly is the Python reference's, byte for byte.
        ranges = [(0, 1), (1, 129), (129, 257), (257, 260), (260, t.num_rows)]
        python = column_blocks._encode(t, schema, ranges)  # type: ignore[arg-type]
        compiled, offsets = column_blocks._assemble(t, schema, ranges)  # type: ignore[arg-type]
        assert [len(p) for p in python] == np.diff(offsets).tolist()
        assert compiled.tobytes() == b"".join(python)
        rows: list[dict] = []
        for record in records:
            feature = Example.FromString(record).features.feature
            lists = {
                "s": feature["s"].bytes_list.value, "ls": feature["ls"].bytes_list.value,
                "bin": feature["bin"].bytes_list.value, "i": feature["i"].int64_list.value,
                "f": feature["f"].float_list.value, "b": feature["b"].int64_list.value,
            }  # fmt: skip
            (size,) = {len(v) for v in lists.values()}
            rows += [{k: v[j] for k, v in lists.items()} for j in range(size)]
        assert [r for _, _, r in spans] == [1, 259, t.num_rows - 260]
        assert len(rows) == t.num_rows
        for row, want in zip(rows, t.to_pylist(), strict=True):
            text_want = (want["s"] or "").encode()
            assert row["s"] == row["ls"] == row["bin"] == text_want
            assert row["i"] == (column_blocks.INT_MISSING if want["i"] is None else want["i"])
            b_want = column_blocks.INT_MISSING if want["b"] is None else int(want["b"])
            assert row["b"] == b_want
            if want["f"] is None:
                assert math.isnan(row["f"])
            else:
                assert row["f"] == np.float32(want["f"])


def test_blocks_in_a_given_order_are_those_of_the_permuted_table():
    """``encode_blocks(..., order=)`` gathers the rows while serializing them: the same
    bytes as encoding ``table.take(order)`` with the Python reference, on nulls (including
    all-null and empty columns), sliced and chunked tables, casts and every column kind."""
    rng = np.random.default_rng(1)
    n = 700
    text = [
        None if rng.random() < 0.2 else "日本" * int(rng.integers(0, 5)) + str(i) for i in range(n)
    ]
    ints = [None if v % 5 == 0 else int(v) for v in rng.integers(-(2**63), 2**62, n)]
    floats = [None if rng.random() < 0.1 else float(v) for v in rng.normal(size=n)]
    table = pa.table({
        "s": pa.array(text),
        "ls": pa.array(text, pa.large_string()),
        "i": pa.array(ints, pa.int64()),
        "i32": pa.array(rng.integers(-1000, 1000, n), pa.int32()),
        "f": pa.array(floats, pa.float32()),
        "f64": pa.array([float("nan"), None, 1e300, *rng.normal(size=n - 3)]),
        "b": pa.array([None if rng.random() < 0.2 else bool(rng.random() < 0.5) for _ in range(n)]),
        "nf": pa.nulls(n, pa.float32()),
        "ni": pa.nulls(n, pa.int64()),
        "ns": pa.nulls(n, pa.string()),
        "d": pa.array(np.arange(n, dtype=np.int32), pa.int32()).cast(pa.date32()),
    })  # fmt: skip
    kinds = {"s": "bytes", "ls": "bytes", "i": "int", "i32": "int", "f": "float", "f64": "float"}
    kinds |= {"b": "int", "nf": "float", "ni": "int", "ns": "bytes", "d": "bytes"}
    schema = SimpleNamespace(
        written=[SimpleNamespace(name=k, example_kind=v) for k, v in kinds.items()]
    )
    chunked = pa.concat_tables([table.slice(0, 300), table.slice(400, 300)])
    for t in (table, table.slice(33, 500), chunked, table.slice(0, 0)):
        order = rng.permutation(t.num_rows)
        groups = [(0, t.num_rows // 3), (t.num_rows // 3, t.num_rows)]
        got = column_blocks.encode_blocks(t, schema, groups, block_rows=64, order=order)  # type: ignore[arg-type]
        want = column_blocks.encode_blocks(t.take(order), schema, groups, block_rows=64)  # type: ignore[arg-type]
        assert got[0].tobytes() == want[0].tobytes() and got[1] == want[1]
        ranges = [(a, min(a + 64, t.num_rows)) for a in range(0, t.num_rows, 64)]
        python = column_blocks._encode(t.take(order), schema, ranges)  # type: ignore[arg-type]
        compiled, _ = column_blocks._assemble(t, schema, ranges, order)  # type: ignore[arg-type]
        assert compiled.tobytes() == b"".join(python)


def iter_records_from(data: bytes):
    """TFRecord frames of ``data``, payloads only (CRCs are checked elsewhere)."""
    pos = 0
    while pos < len(data):
        (length,) = np.frombuffer(data[pos : pos + 8], dtype="<u8")
        yield data[pos + 12 : pos + 12 + int(length)]
        pos += 16 + int(length)


def test_images_cannot_be_columnar(tmp_path):
    with pytest.raises(ConfigError, match="columnar applies to tabular data only"):
        sharding.ShardConfig(
            sources=(str(tmp_path),), output=str(tmp_path / "o"), images=True,
            record_format="columnar",
        )  # fmt: skip


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_planner_sizes_columnar_shards_from_columnar_bytes(tmp_path, compression):
    """``--target-shard-mb`` holds for columnar shards: the planner measures its sample
    encoded as blocks, not as per-row Examples (~5x bigger uncompressed: shards came out
    ~5x under the target)."""
    csv = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv), 60_000, seed=4)
    target = 1 << 20
    meta = _shard(
        csv,
        tmp_path / "ds",
        record_format="columnar",
        compression=compression,
        target_shard_bytes=target,
        min_shards=1,
    )
    shards = meta.splits["train"].shards
    mean = sum(s.bytes for s in shards) / len(shards)
    assert len(shards) >= 2 and 0.6 * target <= mean <= 1.2 * target, (len(shards), mean)
