"""TensorFlow reads what shardtrain writes, and writes what it reads: Examples parsed by
``tf.train.Example`` and ``tf.io.parse_example``, TFRecord frames byte-identical to
``tf.io.TFRecordWriter``, shards through ``TFRecordDataset``."""

from __future__ import annotations

import io
import struct

import google_crc32c
import numpy as np
import pytest

from helpers import ALL_TYPES
from kernel_inputs import arrow_layout, random_table, records
from shardtrain.data import sharding
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.kernels import crc32c, example_encode, tfrecord
from shardtrain.kernels.example_encode import FeatureColumn


@pytest.fixture(scope="module")
def tf():
    """TensorFlow, imported only by the tests that compare against it (it takes seconds)."""
    import tensorflow

    return tensorflow


def test_parse_example_batched_reads_the_csv_values(tmp_path):
    """The standard TF path: TFRecordDataset → batch → tf.io.parse_example with defaults, on
    the per-row shards written for it (--record-format example)."""
    import tensorflow as tf

    out = tmp_path / "ds"
    sharding.shard(
        sharding.ShardConfig(
            sources=(str(ALL_TYPES),), output=str(out), label="cleared", key="id",
            splits=(("all", 1.0),), min_shards=1, processes=1, record_format="example",
        )
    )  # fmt: skip
    meta = DatasetMetadata.load(str(out)).to_dict()
    spec = {
        "id": tf.io.FixedLenFeature([], tf.string),
        "level": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
        "score": tf.io.FixedLenFeature([], tf.float32, default_value=-99.0),
        "cls": tf.io.FixedLenFeature([], tf.string, default_value="<missing>"),
        "weekend": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
        "cleared": tf.io.FixedLenFeature([], tf.int64),
    }
    files = [str(out / s["path"]) for s in meta["splits"]["all"]["shards"]]
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP").batch(16)
    parsed = [tf.io.parse_example(b, spec) for b in ds]
    got = {k: np.concatenate([p[k].numpy() for p in parsed]) for k in spec}
    by_id = {i.decode(): n for n, i in enumerate(got["id"])}
    assert got["level"][by_id["r3"]] == -1 and got["level"][by_id["r2"]] == -7
    assert got["score"][by_id["r4"]] == -99.0 and got["score"][by_id["r1"]] == np.float32(0.5)
    assert got["cls"][by_id["r3"]] == b"<missing>" and got["weekend"][by_id["r4"]] == -1


def test_missing_features_are_omitted_and_empty_rows_are_valid(tf):
    columns = [FeatureColumn("a", "float"), FeatureColumn("b", "int"), FeatureColumn("c", "bytes")]
    none = np.zeros(3, dtype=bool)
    data, offsets = arrow_layout([b"x", b"y", b"z"])
    arrays = [(np.ones(3), none), (np.ones(3, np.int64), none), (data, offsets, none)]
    out, out_offsets = example_encode.encode_examples(columns, arrays, 3)
    empty = tf.train.Example(features=tf.train.Features())
    assert records(out, out_offsets) == [empty.SerializeToString()] * 3 == [b"\n\x00"] * 3

    # No columns at all: num_rows empty Examples; zero rows: nothing.
    out, out_offsets = example_encode.encode_examples([], [], 2)
    assert records(out, out_offsets) == [b"\n\x00"] * 2
    out, out_offsets = example_encode.encode_examples(
        columns,
        [
            (np.ones(0), None),
            (np.ones(0, np.int64), None),
            (np.empty(0, np.uint8), np.zeros(1, np.int32), None),
        ],
        0,
    )
    assert len(out) == 0 and out_offsets.tolist() == [0]

    # Only the missing feature disappears; the others keep their order.
    valid = np.array([True, False, True])
    arrays = [(np.array([1.0, 2.0, 3.0]), None), (np.arange(3), valid), (data, offsets, None)]
    out, out_offsets = example_encode.encode_examples(columns, arrays, 3)
    parsed = [tf.train.Example.FromString(r) for r in records(out, out_offsets)]
    assert sorted(parsed[0].features.feature) == ["a", "b", "c"]
    assert sorted(parsed[1].features.feature) == ["a", "c"]
    assert parsed[1].features.feature["a"].float_list.value == [2.0]
    assert parsed[2].features.feature["b"].int64_list.value == [2]


def test_tfrecord_dataset_and_parse_example_round_trip(tf, tmp_path):
    rng = np.random.default_rng(6)
    n = 500
    # parse_example needs non-empty keys.
    columns, arrays, values = random_table(rng, n, with_empty_name=False)
    data, offsets = example_encode.encode_examples(columns, arrays, n)
    framed, _ = tfrecord.frame_records(data, offsets)
    path = tmp_path / "examples.tfrecord"
    path.write_bytes(framed.tobytes())

    defaults = {"float": -12345.5, "int": -777, "bytes": b"<missing>"}
    dtypes = {"float": tf.float32, "int": tf.int64, "bytes": tf.string}
    spec = {
        c.name: tf.io.FixedLenFeature([], dtypes[c.kind], default_value=defaults[c.kind])
        for c in columns
    }
    batches = list(tf.data.TFRecordDataset(str(path)).batch(128))
    serialized = [s for b in batches for s in b.numpy().tolist()]
    assert serialized == records(data, offsets)
    parsed = {c.name: [] for c in columns}
    for batch in batches:
        for name, tensor in tf.io.parse_example(batch, spec).items():
            parsed[name].append(tensor.numpy())

    for column in columns:
        want = [defaults[column.kind] if v is None else v for v in values[column.name]]
        got = np.concatenate(parsed[column.name])
        if column.kind == "float":  # bit-exact float32, NaN payloads and -0.0 included
            want_bits = np.array(want, dtype=np.float32).view(np.uint32)
            np.testing.assert_array_equal(got.view(np.uint32), want_bits, err_msg=column.name)
        else:
            assert got.tolist() == want, column.name


def _sample_records(rng):
    sizes = [0, 1, 7, 8, 9, 127, 128, 255, 256, 1000, 65536 + 3, 70000]
    return [rng.integers(0, 256, size=s, dtype=np.uint8).tobytes() for s in sizes]


def test_frames_are_byte_identical_to_tf_record_writer(tf, tmp_path):
    records = _sample_records(np.random.default_rng(7))
    path = tmp_path / "tf.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
    reference = path.read_bytes()

    data, offsets = arrow_layout(records, np.int64)
    framed, framed_offsets = tfrecord.frame_records(data, offsets)
    assert framed.tobytes() == reference
    assert np.diff(framed_offsets).tolist() == [len(r) + 16 for r in records]

    buffer = io.BytesIO()
    tfrecord.write_tfrecords(buffer, records)
    assert buffer.getvalue() == reference
    assert list(tfrecord.read_tfrecords(io.BytesIO(reference))) == records

    # Known header: the masked CRC-32C of the little-endian length, as TensorFlow wrote it.
    length, length_crc = struct.unpack_from("<QI", reference)
    assert length == 0
    assert length_crc == crc32c.masked_crc32c(google_crc32c.value(b"\x00" * 8))
