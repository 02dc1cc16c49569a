"""shardtrain.kernels.tfrecord against the references: google_crc32c, xxhash, protobuf and
TensorFlow.

Every compiled routine is compared with an independent implementation on random inputs that
include the awkward cases (empty values, varint length boundaries, NaN payloads, int64
extremes, sliced Arrow buffers), and the TFRecord files are read back by TensorFlow itself.
"""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import google_crc32c
import numpy as np
import pyarrow as pa
import pytest
import xxhash

from shardtrain.kernels import tfrecord
from shardtrain.kernels.tfrecord import FeatureColumn

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tf():
    """TensorFlow, imported only by the tests that compare against it (it takes seconds)."""
    import tensorflow

    return tensorflow


def _arrow_layout(values: list[bytes], dtype=np.int32, pad: int = 0):
    """``(data, offsets)`` in Arrow layout; ``pad`` junk bytes first, like a sliced array."""
    data = b"\xee" * pad + b"".join(values)
    offsets = np.zeros(len(values) + 1, dtype=dtype)
    np.cumsum([len(v) for v in values], out=offsets[1:])
    offsets += pad
    return np.frombuffer(data, dtype=np.uint8), offsets


def _arrow_buffers(array: pa.Array):
    """``(data, offsets)`` of a (possibly sliced) Arrow string/binary array, zero-copy."""
    offset_type = np.int64 if pa.types.is_large_binary(array.type) else np.int32
    _, offsets_buf, data_buf = array.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=offset_type)[
        array.offset : array.offset + len(array) + 1
    ]
    return np.frombuffer(data_buf, dtype=np.uint8), offsets


# --------------------------------------------------------------------------------------------
# Random columns with every awkward value, and the same rows as Python values
# --------------------------------------------------------------------------------------------

_FLOAT_SPECIALS = [
    np.nan,
    -np.nan,
    np.inf,
    -np.inf,
    -0.0,
    0.0,
    1e-45,  # float32 denormal
    -1e-40,
    3.4028234663852886e38,  # float32 max
    0.1,  # needs rounding to float32
    1 / 3,
    16777217.0,  # 2**24 + 1: not representable in float32
]
_INT_SPECIALS = [
    0,
    -1,
    1,
    127,
    128,  # first 2-byte varint
    -128,
    300,
    2**31 - 1,
    -(2**31),
    2**32,
    2**56,
    2**62 + 12345,
    2**63 - 1,
    -(2**63),
]
_BYTES_SPECIALS = [
    b"",
    b"a",
    "żółw".encode(),
    "日本語テキスト".encode(),
    "emoji 🙂".encode(),
    b"\x00",
    b"\x00\xff\x00",
    b"x" * 125,  # value length 125: BytesList of 127 bytes, Feature of 129 (2-byte length)
    b"y" * 127,
    b"z" * 128,
    b"w" * 300,
]


def _random_floats(rng, n, dtype):
    values = rng.normal(size=n) * 10.0 ** rng.uniform(-30, 30, size=n)
    special = rng.random(n) < 0.3
    values[special] = rng.choice(_FLOAT_SPECIALS, size=int(special.sum()))
    values = values.astype(dtype)
    if dtype == np.float32 and n > 3:  # a quiet NaN with a payload must survive bit for bit
        values[3] = np.array([0x7FC12345], dtype=np.uint32).view(np.float32)[0]
    return values


def _random_ints(rng, n):
    values = rng.integers(-(2**63), 2**63 - 1, size=n, endpoint=True, dtype=np.int64)
    small = rng.random(n) < 0.3
    values[small] = rng.integers(-1000, 1000, size=int(small.sum()))
    special = rng.random(n) < 0.3
    values[special] = rng.choice(np.array(_INT_SPECIALS, dtype=np.int64), size=int(special.sum()))
    return values


def _random_bytes(rng, n):
    out = []
    for _ in range(n):
        if rng.random() < 0.4:
            out.append(_BYTES_SPECIALS[rng.integers(len(_BYTES_SPECIALS))])
        else:
            out.append(
                rng.integers(0, 256, size=int(rng.integers(0, 200)), dtype=np.uint8).tobytes()
            )
    return out


def _random_valid(rng, n, choice):
    if choice == "none":
        return None
    if choice == "all":
        return np.ones(n, dtype=bool)
    if choice == "empty":
        return np.zeros(n, dtype=bool)
    return rng.random(n) < float(choice)


def _random_table(rng, n, with_empty_name=True):
    """``(columns, arrays, values)``: encode_examples input, and ``values[name][row]`` as a
    Python float/int/bytes (or None when missing) for building the expected Examples."""
    columns, arrays, values = [], [], {}
    masks = ["none", "all", "empty", "0.1", "0.5", "0.9"]

    def add(name, kind, column_data, python_values):
        valid = _random_valid(rng, n, masks[len(columns) % len(masks)])
        columns.append(FeatureColumn(name, kind))
        arrays.append((*column_data, valid))
        values[name] = [
            v if valid is None or valid[i] else None for i, v in enumerate(python_values)
        ]

    f32 = _random_floats(rng, n, np.float32)
    add("f32", "float", (f32,), [float(v) for v in f32])
    i64 = _random_ints(rng, n)
    add("i64", "int", (i64,), [int(v) for v in i64])
    text = _random_bytes(rng, n)
    add("text", "bytes", _arrow_layout(text, np.int32), text)
    f64 = _random_floats(rng, n, np.float64)
    add("f64", "float", (f64,), [float(v) for v in f64])
    # A 130-byte key: its length and its entry's length are 2-byte varints.
    long_ints = _random_ints(rng, n)
    add("k" * 130, "int", (long_ints,), [int(v) for v in long_ints])
    sliced = _random_bytes(rng, n)
    add("sliced", "bytes", _arrow_layout(sliced, np.int64, pad=37), sliced)
    i32 = rng.integers(-(2**31), 2**31, size=n, dtype=np.int32)
    add("größe", "int", (i32,), [int(v) for v in i32])
    flag = rng.random(n) < 0.5
    add("flag", "int", (flag,), [int(v) for v in flag])
    small = rng.normal(size=n)
    add("small_float", "float", (small,), [float(v) for v in small])
    # Real Arrow arrays sliced at a non-zero offset, like a filtered/sliced record batch.
    pool = _random_bytes(rng, n + 9)
    arrow = pa.array(pool, type=pa.binary()).slice(9, n)
    add("arrow", "bytes", _arrow_buffers(arrow), pool[9:])
    large = pa.array(pool, type=pa.large_binary()).slice(4, n)
    add("arrow_large", "bytes", _arrow_buffers(large), pool[4 : 4 + n])
    if with_empty_name:
        add("", "float", (f64[::-1].copy(),), [float(v) for v in f64[::-1]])
    return columns, arrays, values


def _protobuf_example(pb, columns, values, row):
    """Row ``row`` built with the protobuf API, features inserted in column order.

    ``pb`` is ``tf.train`` (or anything with ``Example`` and ``Features`` classes).
    """
    example = pb.Example(features=pb.Features())
    for column in columns:
        value = values[column.name][row]
        if value is None:
            continue
        feature = example.features.feature[column.name]
        if column.kind == "float":
            feature.float_list.value.append(value)
        elif column.kind == "int":
            feature.int64_list.value.append(value)
        else:
            feature.bytes_list.value.append(value)
    return example


def _protobuf_bytes_in_column_order(pb, example, columns):
    """protobuf's own serialisation of ``example`` with map entries in column order.

    Why not just ``example.SerializeToString()``: the C (upb) protobuf runtime that
    TensorFlow uses writes map entries in hash-table order, not insertion order (keys
    inserted as zeta, alpha, mid, b, a come out as a, b, zeta, mid, alpha), and
    ``deterministic=True`` sorts them by upb's own key order (a prefix sorts *after* its
    extensions: "alpha" before "a"). A ``Features`` message is nothing but its map entries
    back to back, so serialising each entry on its own (a one-entry map has only one order)
    and concatenating them in column order gives protobuf's bytes for that order; the
    Example header (tag and length) comes from the full serialisation, whose length does not
    depend on entry order. ``test_bytes_equal_pure_python_protobuf`` checks the same thing
    against protobuf's pure-Python serialiser, which does keep insertion order.
    """
    feature_map = example.features.feature
    entries = b"".join(
        pb.Features(feature={c.name: feature_map[c.name]}).SerializeToString()
        for c in columns
        if c.name in feature_map
    )
    whole = example.SerializeToString()
    return whole[: len(whole) - len(entries)] + entries


def _records(data, offsets):
    return [data[offsets[i] : offsets[i + 1]].tobytes() for i in range(len(offsets) - 1)]


# --------------------------------------------------------------------------------------------
# CRC-32C
# --------------------------------------------------------------------------------------------


def test_crc32c_matches_google_crc32c_for_every_size_and_alignment():
    rng = np.random.default_rng(1)
    buf = rng.integers(0, 256, size=5000 + 16, dtype=np.uint8)
    raw = buf.tobytes()
    for size in range(5001):
        start = size % 11  # unaligned starts, all residues mod 8
        expected = google_crc32c.value(raw[start : start + size])
        assert tfrecord.crc32c(buf[start : start + size]) == expected, size
    assert tfrecord.crc32c(raw) == google_crc32c.value(raw)
    assert tfrecord.crc32c(bytearray(raw[:77])) == google_crc32c.value(raw[:77])
    assert tfrecord.crc32c(memoryview(raw)[3:99]) == google_crc32c.value(raw[3:99])
    words = rng.integers(0, 2**32, size=33, dtype=np.uint32)  # raw bytes of any array
    assert tfrecord.crc32c(words) == google_crc32c.value(words.tobytes())
    assert tfrecord.crc32c(b"123456789") == 0xE3069283  # the standard check value
    assert tfrecord.crc32c(b"") == 0


def test_crc32c_continuation_matches_extend():
    rng = np.random.default_rng(2)
    for _ in range(300):
        a = rng.integers(0, 256, size=int(rng.integers(0, 300)), dtype=np.uint8).tobytes()
        b = rng.integers(0, 256, size=int(rng.integers(0, 300)), dtype=np.uint8).tobytes()
        head = tfrecord.crc32c(a)
        assert tfrecord.crc32c(b, head) == google_crc32c.value(a + b)
        assert tfrecord.crc32c(b, head) == google_crc32c.extend(google_crc32c.value(a), b)
    with pytest.raises(ValueError):
        tfrecord.crc32c(b"x", 2**32)


def test_table_driven_crc32c_matches_google_crc32c():
    """The slicing-by-8 CRC that CPUs without SSE4.2 (ARM) compile in, tested on any CPU."""
    rng = np.random.default_rng(5)
    tables = tfrecord._crc32c_tables()
    for size in [*range(0, 40), 255, 4096 + 3]:
        data = rng.integers(0, 256, size=size, dtype=np.uint8)
        start = int(rng.integers(0, 4)) if size > 4 else 0
        head = google_crc32c.value(b"seed")
        got = tfrecord._crc32c_buffer_sw(tables, head, data, start, size)
        assert got == google_crc32c.extend(head, data[start:].tobytes())


def test_masked_crc32c():
    for crc in (0, 1, 0xFFFFFFFF, 0x12345678, google_crc32c.value(b"tfrecord")):
        rotated = ((crc >> 15) | (crc << 17)) & 0xFFFFFFFF
        assert tfrecord.masked_crc32c(crc) == (rotated + 0xA282EAD8) % 2**32
    with pytest.raises(ValueError):
        tfrecord.masked_crc32c(-1)


# --------------------------------------------------------------------------------------------
# xxHash64
# --------------------------------------------------------------------------------------------

_SEEDS = [0, 1, 0x9E3779B1, 2**32 + 5, 2**63, 2**64 - 1]


def test_xxh64_matches_xxhash():
    rng = np.random.default_rng(3)
    buf = rng.integers(0, 256, size=5000, dtype=np.uint8)
    raw = buf.tobytes()
    sizes = [*range(101), 127, 128, 129, 1000, 4099]  # every tail shape around 32-byte stripes
    for seed in _SEEDS:
        for size in sizes:
            start = size % 7
            expected = xxhash.xxh64_intdigest(raw[start : start + size], seed)
            assert tfrecord.xxh64(buf[start : start + size], seed) == expected, (seed, size)
    assert tfrecord.xxh64(b"") == 0xEF46DB3751D8E999  # reference value for the empty input
    assert tfrecord.xxh64(b"abc", 7) == xxhash.xxh64_intdigest(b"abc", 7)
    with pytest.raises(ValueError):
        tfrecord.xxh64(b"x", 2**64)


def test_hash_strings_and_slices_match_xxhash():
    rng = np.random.default_rng(4)
    strings = [b"", "żółw".encode(), b"\x00", *_random_bytes(rng, 400)]
    strings += [bytes(rng.integers(0, 256, size=k, dtype=np.uint8)) for k in range(1, 101)]
    for seed in _SEEDS:
        expected = np.array([xxhash.xxh64_intdigest(s, seed) for s in strings], dtype=np.uint64)
        for dtype, pad in ((np.int32, 0), (np.int64, 0), (np.int32, 13), (np.int64, 5)):
            data, offsets = _arrow_layout(strings, dtype, pad=pad)
            got = tfrecord.hash_strings(data, offsets, seed)
            assert got.dtype == np.uint64
            np.testing.assert_array_equal(got, expected)
            # A slice of the offsets (a sliced Arrow array) starts mid-buffer.
            np.testing.assert_array_equal(
                tfrecord.hash_strings(data, offsets[50:120], seed), expected[50:119]
            )
            np.testing.assert_array_equal(
                tfrecord.hash_slices(data, offsets[:-1], offsets[1:], seed), expected
            )
    arrow = pa.array([s.decode("latin-1") for s in strings]).slice(7)
    data, offsets = _arrow_buffers(arrow)
    latin = [s.decode("latin-1").encode() for s in strings[7:]]
    np.testing.assert_array_equal(
        tfrecord.hash_strings(data, offsets),
        np.array([xxhash.xxh64_intdigest(s) for s in latin], dtype=np.uint64),
    )
    assert tfrecord.hash_strings(np.empty(0, np.uint8), np.zeros(1, np.int64)).shape == (0,)


def test_hash_strings_rejects_bad_offsets():
    data = np.zeros(10, np.uint8)
    with pytest.raises(ValueError):
        tfrecord.hash_strings(data, np.array([0, 5, 3]))
    with pytest.raises(ValueError):
        tfrecord.hash_strings(data, np.array([0, 11]))
    with pytest.raises(ValueError):
        tfrecord.hash_slices(data, np.array([4]), np.array([2]))


# --------------------------------------------------------------------------------------------
# tf.train.Example encoding
# --------------------------------------------------------------------------------------------


def test_examples_parse_and_equal_protobuf_built_examples(tf):
    rng = np.random.default_rng(5)
    n = 400
    columns, arrays, values = _random_table(rng, n)
    data, offsets = tfrecord.encode_examples(columns, arrays, n)
    assert data.dtype == np.uint8 and offsets.dtype == np.int64
    assert offsets.shape == (n + 1,) and offsets[0] == 0 and offsets[-1] == len(data)
    for row, record in enumerate(_records(data, offsets)):
        expected = _protobuf_example(tf.train, columns, values, row)
        assert tf.train.Example.FromString(record) == expected, row
        assert record == _protobuf_bytes_in_column_order(tf.train, expected, columns), row


@pytest.mark.slow
def test_bytes_equal_pure_python_protobuf():
    """Whole-record byte identity with protobuf's pure-Python serialiser (insertion order).

    Runs in a subprocess because the protobuf implementation is chosen at import time.
    """
    script = """
import sys, types
import numpy as np
from google.protobuf.internal import api_implementation
assert api_implementation.Type() == "python", api_implementation.Type()
from tensorflow.core.example import example_pb2, feature_pb2
from shardtrain.kernels import tfrecord
import test_tfrecord as t

pb = types.SimpleNamespace(Example=example_pb2.Example, Features=feature_pb2.Features)
n = 150
columns, arrays, values = t._random_table(np.random.default_rng(11), n)
data, offsets = tfrecord.encode_examples(columns, arrays, n)
for row, record in enumerate(t._records(data, offsets)):
    expected = t._protobuf_example(pb, columns, values, row).SerializeToString()
    assert record == expected, (row, record, expected)
print("identical", n)
"""
    env = {
        **os.environ,
        "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(Path(__file__).parent)]),
    }
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "identical 150" in out.stdout


def test_missing_features_are_omitted_and_empty_rows_are_valid(tf):
    columns = [FeatureColumn("a", "float"), FeatureColumn("b", "int"), FeatureColumn("c", "bytes")]
    none = np.zeros(3, dtype=bool)
    data, offsets = _arrow_layout([b"x", b"y", b"z"])
    arrays = [(np.ones(3), none), (np.ones(3, np.int64), none), (data, offsets, none)]
    out, out_offsets = tfrecord.encode_examples(columns, arrays, 3)
    empty = tf.train.Example(features=tf.train.Features())
    assert _records(out, out_offsets) == [empty.SerializeToString()] * 3 == [b"\n\x00"] * 3

    # No columns at all: num_rows empty Examples; zero rows: nothing.
    out, out_offsets = tfrecord.encode_examples([], [], 2)
    assert _records(out, out_offsets) == [b"\n\x00"] * 2
    out, out_offsets = tfrecord.encode_examples(
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
    out, out_offsets = tfrecord.encode_examples(columns, arrays, 3)
    parsed = [tf.train.Example.FromString(r) for r in _records(out, out_offsets)]
    assert sorted(parsed[0].features.feature) == ["a", "b", "c"]
    assert sorted(parsed[1].features.feature) == ["a", "c"]
    assert parsed[1].features.feature["a"].float_list.value == [2.0]
    assert parsed[2].features.feature["b"].int64_list.value == [2]


def test_known_encoding():
    """The docstring's worked example, byte for byte."""
    out, _ = tfrecord.encode_examples(
        [FeatureColumn("age", "float")], [(np.array([42.0]), None)], 1
    )
    assert out.tobytes() == bytes.fromhex("0a11 0a0f 0a03616765 1208 1206 0a0400002842")
    out, _ = tfrecord.encode_examples([FeatureColumn("n", "int")], [(np.array([-1]), None)], 1)
    # A negative int64 is a 10-byte varint of its two's complement.
    assert out.tobytes() == bytes.fromhex("0a15 0a13 0a016e 120e 1a0c 0a0a ffffffffffffffffff01")


@pytest.mark.parametrize("framed", [False, True])
def test_any_row_order_gives_the_same_records(framed):
    """Records come out the same whatever the row order (the kernel scatters permutations
    and gathers subsets), including when the record ends in a string or an int: the
    eight-byte moves must never run into a neighbouring record."""
    rng = np.random.default_rng(11)
    n = 300
    base_columns, base_arrays, _ = _random_table(rng, n, with_empty_name=False)
    for last in ("text", "i64", "f32"):  # each kind as the last feature of the record
        picked = [j for j, c in enumerate(base_columns) if c.name != last]
        picked.append(next(j for j, c in enumerate(base_columns) if c.name == last))
        columns = [base_columns[j] for j in picked]
        arrays = [base_arrays[j] for j in picked]
        data, offsets = tfrecord.encode_examples(columns, arrays, n, framed=framed)
        in_order = _records(data, offsets)
        for order in (
            rng.permutation(n),
            np.argsort(rng.integers(0, 7, size=n), kind="stable"),
            np.array([5, 5, 0, n - 1]),
        ):
            data, offsets = tfrecord.encode_examples(columns, arrays, n, order=order, framed=framed)
            assert _records(data, offsets) == [in_order[i] for i in order]


@pytest.mark.parametrize("seed", range(6))
def test_example_groups_sit_at_their_page_phase_with_room_before_them(seed):
    """Each group holds exactly its records, in order, starts ``phase`` bytes past a page
    boundary with the page's first ``phase`` bytes free (after the previous group's end),
    and the buffer is page-aligned; empty groups take no room."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    columns, arrays, _ = _random_table(rng, n, with_empty_name=False)
    slots = rng.integers(0, 9, size=n)
    order = np.argsort(slots, kind="stable")
    counts = np.bincount(slots, minlength=9)
    bounds = np.concatenate(([0], np.cumsum(counts)))
    phases = rng.integers(0, tfrecord.PAGE, size=9)
    phases[0] = tfrecord.PAGE - 1
    packed, offsets = tfrecord.encode_examples(columns, arrays, n, order=order, framed=True)
    data, starts, ends = tfrecord.encode_example_groups(
        columns, arrays, n, order=order, bounds=bounds, phases=phases
    )
    assert data.ctypes.data % tfrecord.PAGE == 0
    previous_end = 0
    for g in range(9):
        want = packed[offsets[bounds[g]] : offsets[bounds[g + 1]]]
        assert data[starts[g] : ends[g]].tobytes() == want.tobytes()
        if counts[g]:
            assert starts[g] % tfrecord.PAGE == phases[g]
            assert starts[g] - phases[g] >= previous_end
        else:
            assert starts[g] == ends[g] == previous_end
        previous_end = ends[g]
    assert len(data) == ends[-1]


def test_example_groups_reject_bad_layouts():
    columns = [FeatureColumn("x", "int")]
    arrays = [(np.arange(4), None)]
    order = np.arange(4)
    for bounds, phases, match in (
        ([0, 3], [0], "run from 0 to 4"),
        ([0, 3, 2, 4], [0, 0, 0], "decrease"),
        ([0, 4], [0, 0], "phases"),
        ([0, 4], [tfrecord.PAGE], "phases"),
    ):
        with pytest.raises(ValueError, match=match):
            tfrecord.encode_example_groups(
                columns, arrays, 4, order=order, bounds=np.array(bounds), phases=np.array(phases)
            )


def test_encode_examples_rejects_bad_input():
    ones = np.ones(3)
    with pytest.raises(ValueError, match="duplicate"):
        tfrecord.encode_examples(
            [FeatureColumn("a", "float"), FeatureColumn("a", "int")], [(ones, None)] * 2, 3
        )
    with pytest.raises(ValueError, match="kind"):
        FeatureColumn("a", "double")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shape"):
        tfrecord.encode_examples([FeatureColumn("a", "float")], [(ones, None)], 4)
    with pytest.raises(ValueError, match="valid"):
        tfrecord.encode_examples([FeatureColumn("a", "float")], [(ones, np.ones(2, bool))], 3)
    with pytest.raises(ValueError, match="columns"):
        tfrecord.encode_examples([FeatureColumn("a", "float")], [], 3)
    with pytest.raises(ValueError, match="expected"):
        tfrecord.encode_examples([FeatureColumn("a", "bytes")], [(ones, None)], 3)
    data = np.zeros(4, np.uint8)
    for bad in ([0, 2, 1, 4], [0, 1, 2, 5], [-1, 0, 1, 2]):
        with pytest.raises(ValueError, match="offsets"):
            tfrecord.encode_examples(
                [FeatureColumn("s", "bytes")], [(data, np.array(bad), None)], 3
            )
    with pytest.raises(TypeError):  # uint64 does not fit int64
        tfrecord.encode_examples([FeatureColumn("i", "int")], [(np.ones(3, np.uint64), None)], 3)
    with pytest.raises(TypeError):  # floats are not silently truncated to ints
        tfrecord.encode_examples([FeatureColumn("i", "int")], [(ones, None)], 3)


def test_tfrecord_dataset_and_parse_example_round_trip(tf, tmp_path):
    rng = np.random.default_rng(6)
    n = 500
    # parse_example needs non-empty keys.
    columns, arrays, values = _random_table(rng, n, with_empty_name=False)
    data, offsets = tfrecord.encode_examples(columns, arrays, n)
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
    assert serialized == _records(data, offsets)
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


# --------------------------------------------------------------------------------------------
# TFRecord framing, writing and reading
# --------------------------------------------------------------------------------------------


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

    data, offsets = _arrow_layout(records, np.int64)
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
    assert length_crc == tfrecord.masked_crc32c(google_crc32c.value(b"\x00" * 8))


def test_frame_records_with_order_groups_by_shard():
    rng = np.random.default_rng(8)
    records = [
        rng.integers(0, 256, size=int(k), dtype=np.uint8).tobytes()
        for k in rng.integers(0, 300, size=200)
    ]
    data, offsets = _arrow_layout(records, np.int64)
    shard_of_row = rng.integers(0, 5, size=len(records))
    order = np.argsort(shard_of_row, kind="stable")
    framed, framed_offsets = tfrecord.frame_records(data, offsets, order)
    assert len(framed_offsets) == len(records) + 1 and framed_offsets[-1] == len(framed)

    bounds = np.concatenate(([0], np.cumsum(np.bincount(shard_of_row, minlength=5))))
    for shard in range(5):
        chunk = framed[framed_offsets[bounds[shard]] : framed_offsets[bounds[shard + 1]]]
        got = list(tfrecord.read_tfrecords(io.BytesIO(chunk.tobytes())))
        assert got == [records[i] for i in np.flatnonzero(shard_of_row == shard)]
    for k in (0, 17, 199):  # each frame alone
        frame = framed[framed_offsets[k] : framed_offsets[k + 1]].tobytes()
        assert list(tfrecord.read_tfrecords(io.BytesIO(frame))) == [records[order[k]]]

    # Subsets and repeats are allowed; nothing is empty.
    picked = np.array([3, 3, 0], dtype=np.int32)
    framed, _ = tfrecord.frame_records(data, offsets, picked)
    assert list(tfrecord.read_tfrecords(io.BytesIO(framed.tobytes()))) == [
        records[3],
        records[3],
        records[0],
    ]
    framed, framed_offsets = tfrecord.frame_records(data, offsets, np.empty(0, np.int64))
    assert len(framed) == 0 and framed_offsets.tolist() == [0]
    with pytest.raises(ValueError):
        tfrecord.frame_records(data, offsets, np.array([len(records)]))
    with pytest.raises(ValueError):
        tfrecord.frame_records(data, offsets, np.array([-1]))


def test_read_tfrecords_detects_corruption():
    records = [b"first record", b"second, the one we damage", b"third"]
    buffer = io.BytesIO()
    tfrecord.write_tfrecords(buffer, records)
    clean = buffer.getvalue()
    second = 12 + len(records[0]) + 4  # byte offset of the second record
    third = second + 12 + len(records[1]) + 4
    damage = {  # flipped byte -> the check that must catch it
        second + 2: "length CRC mismatch",  # in the length
        second + 9: "length CRC mismatch",  # in the length's CRC
        second + 12 + 5: "data CRC mismatch",  # in the data
        second + 12 + len(records[1]) + 1: "data CRC mismatch",  # in the data's CRC
    }
    for position, message in damage.items():
        damaged = bytearray(clean)
        damaged[position] ^= 0x10
        reader = tfrecord.read_tfrecords(io.BytesIO(bytes(damaged)))
        assert next(reader) == records[0]
        with pytest.raises(ValueError, match=f"byte offset {second}: {message}"):
            next(reader)

    # Without verification the damaged data comes through.
    damaged = bytearray(clean)
    damaged[second + 12 + 5] ^= 0x10
    got = list(tfrecord.read_tfrecords(io.BytesIO(bytes(damaged)), verify=False))
    assert got[0] == records[0] and got[1] != records[1] and got[2] == records[2]

    for cut, start in ((second + 5, second), (second + 20, second), (len(clean) - 1, third)):
        with pytest.raises(ValueError, match=f"truncated TFRecord.* byte offset {start}:"):
            list(tfrecord.read_tfrecords(io.BytesIO(clean[:cut])))
    assert list(tfrecord.read_tfrecords(io.BytesIO(b""))) == []


# --------------------------------------------------------------------------------------------
# Import hygiene and throughput
# --------------------------------------------------------------------------------------------


def test_import_has_no_side_effects():
    script = """
import sys
from shardtrain.kernels import tfrecord
assert "tensorflow" not in sys.modules and "google.protobuf" not in sys.modules
kernels = [v for v in vars(tfrecord).values() if hasattr(v, "py_func") and hasattr(v, "signatures")]
assert len(kernels) > 10, kernels
assert all(not k.signatures for k in kernels), "compiled at import"
assert tfrecord._crc32c_tables.cache_info().currsize == 0, "tables built at import"
print("clean")
"""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "clean"


def test_throughput_report():
    """Prints rows/s of encode + frame (run with -s to see it); not asserted: shared CI."""
    rng = np.random.default_rng(9)
    n = 200_000
    columns, arrays = [], []
    for j in range(30):
        columns.append(FeatureColumn(f"feature_{j:02d}", "float"))
        arrays.append((rng.normal(size=n), rng.random(n) > 0.05))
    for j in range(5):
        lengths = rng.integers(0, 16, size=n)
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        data = rng.integers(97, 123, size=int(offsets[-1]), dtype=np.uint8)
        columns.append(FeatureColumn(f"category_{j}", "bytes"))
        arrays.append((data, offsets, rng.random(n) > 0.01))
    columns.append(FeatureColumn("label", "int"))
    arrays.append((rng.integers(0, 2, size=n), None))
    order = np.argsort(rng.integers(0, 16, size=n), kind="stable")
    tfrecord.frame_records(*tfrecord.encode_examples(columns, arrays, n))  # compile / load

    best_encode = best_frame = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        data, offsets = tfrecord.encode_examples(columns, arrays, n)
        t1 = time.perf_counter()
        framed, _ = tfrecord.frame_records(data, offsets, order)
        t2 = time.perf_counter()
        best_encode, best_frame = min(best_encode, t1 - t0), min(best_frame, t2 - t1)
    print(
        f"\n[tfrecord throughput] {n} rows x 36 features ({len(data) / n:.0f} B/Example): "
        f"encode {n / best_encode:,.0f} rows/s, frame {n / best_frame:,.0f} rows/s "
        f"({len(framed) / best_frame / 1e9:.2f} GB/s), "
        f"encode+frame {n / (best_encode + best_frame):,.0f} rows/s"
    )
