"""shardtrain.kernels.example_encode against protobuf.

Every compiled routine is compared with an independent implementation on random inputs that
include the awkward cases (empty values, varint length boundaries, NaN payloads, int64
extremes, sliced Arrow buffers): Examples built and serialised by the protobuf runtime from
``tf.train.Example``'s own message definition (tests/example_proto.py). TensorFlow parsing
them back is tests/integration/kernels/test_tf_interop.py's job.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import example_proto
from kernel_inputs import (
    protobuf_bytes_in_column_order,
    protobuf_example,
    random_table,
    records,
)
from shardtrain.kernels import example_encode, tfrecord
from shardtrain.kernels.example_encode import FeatureColumn

REPO = Path(__file__).resolve().parents[3]


def test_examples_parse_and_equal_protobuf_built_examples():
    rng = np.random.default_rng(5)
    n = 400
    columns, arrays, values = random_table(rng, n)
    data, offsets = example_encode.encode_examples(columns, arrays, n)
    assert data.dtype == np.uint8 and offsets.dtype == np.int64
    assert offsets.shape == (n + 1,) and offsets[0] == 0 and offsets[-1] == len(data)
    for row, record in enumerate(records(data, offsets)):
        expected = protobuf_example(example_proto, columns, values, row)
        assert example_proto.Example.FromString(record) == expected, row
        assert record == protobuf_bytes_in_column_order(example_proto, expected, columns), row


def test_bytes_equal_pure_python_protobuf():
    """Whole-record byte identity with protobuf's pure-Python serialiser (insertion order).

    Runs in a subprocess because the protobuf implementation is chosen at import time.
    """
    script = """
import sys, types
import numpy as np
from google.protobuf.internal import api_implementation
assert api_implementation.Type() == "python", api_implementation.Type()
import example_proto as pb
from shardtrain.kernels import example_encode
import kernel_inputs as t

n = 150
columns, arrays, values = t.random_table(np.random.default_rng(11), n)
data, offsets = example_encode.encode_examples(columns, arrays, n)
for row, record in enumerate(t.records(data, offsets)):
    expected = t.protobuf_example(pb, columns, values, row).SerializeToString()
    assert record == expected, (row, record, expected)
print("identical", n)
"""
    env = {
        **os.environ,
        "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO / "tests")]),
    }
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "identical 150" in out.stdout


def test_known_encoding():
    """The docstring's worked example, byte for byte."""
    out, _ = example_encode.encode_examples(
        [FeatureColumn("age", "float")], [(np.array([42.0]), None)], 1
    )
    assert out.tobytes() == bytes.fromhex("0a11 0a0f 0a03616765 1208 1206 0a0400002842")
    out, _ = example_encode.encode_examples(
        [FeatureColumn("n", "int")], [(np.array([-1]), None)], 1
    )
    # A negative int64 is a 10-byte varint of its two's complement.
    assert out.tobytes() == bytes.fromhex("0a15 0a13 0a016e 120e 1a0c 0a0a ffffffffffffffffff01")


@pytest.mark.parametrize("framed", [False, True])
def test_any_row_order_gives_the_same_records(framed):
    """Records come out the same whatever the row order (the kernel scatters permutations
    and gathers subsets), including when the record ends in a string or an int: the
    eight-byte moves must never run into a neighbouring record."""
    rng = np.random.default_rng(11)
    n = 300
    base_columns, base_arrays, _ = random_table(rng, n, with_empty_name=False)
    for last in ("text", "i64", "f32"):  # each kind as the last feature of the record
        picked = [j for j, c in enumerate(base_columns) if c.name != last]
        picked.append(next(j for j, c in enumerate(base_columns) if c.name == last))
        columns = [base_columns[j] for j in picked]
        arrays = [base_arrays[j] for j in picked]
        data, offsets = example_encode.encode_examples(columns, arrays, n, framed=framed)
        in_order = records(data, offsets)
        for order in (
            rng.permutation(n),
            np.argsort(rng.integers(0, 7, size=n), kind="stable"),
            np.array([5, 5, 0, n - 1]),
        ):
            data, offsets = example_encode.encode_examples(
                columns, arrays, n, order=order, framed=framed
            )
            assert records(data, offsets) == [in_order[i] for i in order]


@pytest.mark.parametrize("seed", range(6))
def test_example_groups_sit_at_their_page_phase_with_room_before_them(seed):
    """Each group holds exactly its records, in order, starts ``phase`` bytes past a page
    boundary with the page's first ``phase`` bytes free (after the previous group's end),
    and the buffer is page-aligned; empty groups take no room."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    columns, arrays, _ = random_table(rng, n, with_empty_name=False)
    slots = rng.integers(0, 9, size=n)
    order = np.argsort(slots, kind="stable")
    counts = np.bincount(slots, minlength=9)
    bounds = np.concatenate(([0], np.cumsum(counts)))
    phases = rng.integers(0, example_encode.PAGE, size=9)
    phases[0] = example_encode.PAGE - 1
    packed, offsets = example_encode.encode_examples(columns, arrays, n, order=order, framed=True)
    data, starts, ends = example_encode.encode_example_groups(
        columns, arrays, n, order=order, bounds=bounds, phases=phases
    )
    assert data.ctypes.data % example_encode.PAGE == 0
    previous_end = 0
    for g in range(9):
        want = packed[offsets[bounds[g]] : offsets[bounds[g + 1]]]
        assert data[starts[g] : ends[g]].tobytes() == want.tobytes()
        if counts[g]:
            assert starts[g] % example_encode.PAGE == phases[g]
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
        ([0, 4], [example_encode.PAGE], "phases"),
    ):
        with pytest.raises(ValueError, match=match):
            example_encode.encode_example_groups(
                columns, arrays, 4, order=order, bounds=np.array(bounds), phases=np.array(phases)
            )


def test_encode_examples_rejects_bad_input():
    ones = np.ones(3)
    with pytest.raises(ValueError, match="duplicate"):
        example_encode.encode_examples(
            [FeatureColumn("a", "float"), FeatureColumn("a", "int")], [(ones, None)] * 2, 3
        )
    with pytest.raises(ValueError, match="kind"):
        FeatureColumn("a", "double")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shape"):
        example_encode.encode_examples([FeatureColumn("a", "float")], [(ones, None)], 4)
    with pytest.raises(ValueError, match="valid"):
        example_encode.encode_examples([FeatureColumn("a", "float")], [(ones, np.ones(2, bool))], 3)
    with pytest.raises(ValueError, match="columns"):
        example_encode.encode_examples([FeatureColumn("a", "float")], [], 3)
    with pytest.raises(ValueError, match="expected"):
        example_encode.encode_examples([FeatureColumn("a", "bytes")], [(ones, None)], 3)
    data = np.zeros(4, np.uint8)
    for bad in ([0, 2, 1, 4], [0, 1, 2, 5], [-1, 0, 1, 2]):
        with pytest.raises(ValueError, match="offsets"):
            example_encode.encode_examples(
                [FeatureColumn("s", "bytes")], [(data, np.array(bad), None)], 3
            )
    with pytest.raises(TypeError):  # uint64 does not fit int64
        example_encode.encode_examples(
            [FeatureColumn("i", "int")], [(np.ones(3, np.uint64), None)], 3
        )
    with pytest.raises(TypeError):  # floats are not silently truncated to ints
        example_encode.encode_examples([FeatureColumn("i", "int")], [(ones, None)], 3)


# --------------------------------------------------------------------------------------------
# Import hygiene and throughput
# --------------------------------------------------------------------------------------------


def test_import_has_no_side_effects():
    script = """
import sys
from shardtrain.kernels import crc32c, example_encode, tfrecord, xxh64
assert "tensorflow" not in sys.modules and "google.protobuf" not in sys.modules
modules = (crc32c, example_encode, tfrecord, xxh64)
kernels = {
    id(v): v
    for m in modules
    for v in vars(m).values()
    if hasattr(v, "py_func") and hasattr(v, "signatures")
}
assert len(kernels) > 20, kernels
assert all(not k.signatures for k in kernels.values()), "compiled at import"
assert crc32c.crc32c_tables.cache_info().currsize == 0, "tables built at import"
print("clean")
"""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "clean"


def test_throughput_report():
    """Prints rows/s of encode + frame (run with -s to see it); not asserted: shared CI."""
    rng = np.random.default_rng(9)
    n = 50_000
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
    tfrecord.frame_records(*example_encode.encode_examples(columns, arrays, n))  # compile / load

    best_encode = best_frame = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        data, offsets = example_encode.encode_examples(columns, arrays, n)
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
