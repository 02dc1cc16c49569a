"""Inputs for the kernel tests: Arrow-layout string buffers, random columns with every
awkward value (and the same rows as Python values), and Examples built with protobuf."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from shardtrain.kernels.example_encode import FeatureColumn


def arrow_layout(values: list[bytes], dtype=np.int32, pad: int = 0):
    """``(data, offsets)`` in Arrow layout; ``pad`` junk bytes first, like a sliced array."""
    data = b"\xee" * pad + b"".join(values)
    offsets = np.zeros(len(values) + 1, dtype=dtype)
    np.cumsum([len(v) for v in values], out=offsets[1:])
    offsets += pad
    return np.frombuffer(data, dtype=np.uint8), offsets


def arrow_buffers(array: pa.Array):
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


def random_bytes(rng, n):
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


def random_table(rng, n, with_empty_name=True):
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
    text = random_bytes(rng, n)
    add("text", "bytes", arrow_layout(text, np.int32), text)
    f64 = _random_floats(rng, n, np.float64)
    add("f64", "float", (f64,), [float(v) for v in f64])
    # A 130-byte key: its length and its entry's length are 2-byte varints.
    long_ints = _random_ints(rng, n)
    add("k" * 130, "int", (long_ints,), [int(v) for v in long_ints])
    sliced = random_bytes(rng, n)
    add("sliced", "bytes", arrow_layout(sliced, np.int64, pad=37), sliced)
    i32 = rng.integers(-(2**31), 2**31, size=n, dtype=np.int32)
    add("größe", "int", (i32,), [int(v) for v in i32])
    flag = rng.random(n) < 0.5
    add("flag", "int", (flag,), [int(v) for v in flag])
    small = rng.normal(size=n)
    add("small_float", "float", (small,), [float(v) for v in small])
    # Real Arrow arrays sliced at a non-zero offset, like a filtered/sliced record batch.
    pool = random_bytes(rng, n + 9)
    arrow = pa.array(pool, type=pa.binary()).slice(9, n)
    add("arrow", "bytes", arrow_buffers(arrow), pool[9:])
    large = pa.array(pool, type=pa.large_binary()).slice(4, n)
    add("arrow_large", "bytes", arrow_buffers(large), pool[4 : 4 + n])
    if with_empty_name:
        add("", "float", (f64[::-1].copy(),), [float(v) for v in f64[::-1]])
    return columns, arrays, values


def protobuf_example(pb, columns, values, row):
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


def protobuf_bytes_in_column_order(pb, example, columns):
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


def records(data, offsets):
    return [data[offsets[i] : offsets[i + 1]].tobytes() for i in range(len(offsets) - 1)]
