"""Arrow arrays built and read through buffers (shardtrain.kernels.arrow) equal pyarrow's own, and a
sharding run never imports pandas."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from shardtrain.data import datagen
from shardtrain.kernels import arrow


@pytest.mark.parametrize("type", [pa.string(), pa.large_string(), pa.binary()])
def test_strings_equal_pa_array(type):
    values = ["", "true", "ünïcode", "x" * 300, ""]
    got = arrow.strings(values, type)
    got.validate(full=True)
    assert got.equals(pa.array(values, type))
    assert arrow.strings([], type).equals(pa.array([], type))


@pytest.mark.parametrize("dtype", [np.bool_, np.int64, np.float32, np.uint16])
def test_from_numpy_with_and_without_nulls(dtype):
    rng = np.random.default_rng(3)
    values = (rng.random(37) * 100).astype(dtype)
    valid = rng.random(37) < 0.7
    got = arrow.from_numpy(values)
    got.validate(full=True)
    assert got.equals(pa.array(values))
    masked = arrow.from_numpy(values, valid)
    masked.validate(full=True)
    assert masked.null_count == int((~valid).sum())
    assert masked.equals(pa.array(values, mask=~valid))
    assert arrow.from_numpy(values, np.ones(37, bool)).null_count == 0
    with pytest.raises(ValueError, match="1-D"):
        arrow.from_numpy(values.reshape(1, -1))


def test_scalars():
    assert arrow.null(pa.string()).equals(pa.scalar(None, pa.string()))
    assert arrow.null(pa.bool_()).equals(pa.scalar(None, pa.bool_()))
    assert arrow.scalar(True).equals(pa.scalar(True))
    assert arrow.scalar("").equals(pa.scalar(""))
    filled = pc.fill_null(pa.array(["a", None]), arrow.scalar(""))
    assert filled.to_pylist() == ["a", ""]


@pytest.mark.parametrize("offset", [0, 3, 8, 13])
def test_to_bools_and_valid_mask_of_sliced_arrays(offset):
    rng = np.random.default_rng(offset)
    values = rng.random(50) < 0.5
    valid = rng.random(50) < 0.8
    array = pa.array(values, mask=~valid).slice(offset, 30)
    want_valid = valid[offset : offset + 30]
    assert np.array_equal(arrow.valid_mask(array), want_valid)
    assert np.array_equal(arrow.to_bools(array), values[offset : offset + 30] & want_valid)
    assert np.array_equal(arrow.to_bools(array.is_null()), ~want_valid)
    chunked = pa.chunked_array([array, array.slice(5)])
    want = values[offset : offset + 30] & want_valid
    assert np.array_equal(arrow.to_bools(chunked), np.concatenate([want, want[5:]]))
    assert arrow.to_bools(array.slice(0, 0)).size == 0
    assert arrow.valid_mask(pa.array([1, 2])).all()


def test_to_numpy_is_a_view_of_the_values():
    array = pa.array(np.arange(20, dtype=np.int64)).slice(5, 10)
    view = arrow.to_numpy(array)
    assert view.tolist() == list(range(5, 15))
    assert not view.flags.owndata
    assert arrow.to_numpy(pa.chunked_array([array, array])).tolist() == list(range(5, 15)) * 2
    with pytest.raises(TypeError, match="bool"):
        arrow.to_numpy(pa.array([True]))


def test_sharding_and_inspect_never_import_pandas(tmp_path):
    """pyarrow imports pandas (~0.2 s) on the first pa.array/pa.scalar/to_numpy call; a run
    with bad rows, gzip, statistics and finalize must go through none of them."""
    src, out = tmp_path / "quest.csv", tmp_path / "out"
    datagen.generate_quest_logs(str(src), 3000, seed=5, bad_fraction=0.02)
    code = textwrap.dedent(
        f"""
        import sys
        from shardtrain import cli
        for argv in (
            ["shard", {str(src)!r}, "--output", {str(out)!r}, "--label", "cleared",
             "--max-bad-fraction", "0.5", "--processes", "1"],
            ["inspect", {str(out)!r}],
        ):
            try:
                cli.main(argv)
            except SystemExit as exc:
                assert not exc.code, exc.code
        loaded = sorted(m for m in sys.modules if m.split(".")[0] == "pandas")
        print("PANDAS", loaded[:3])
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "PANDAS []" in run.stdout, run.stdout[-500:]


def test_edge_cases_nulls_empty_buffers_and_byte_order():
    assert not arrow.valid_mask(pa.nulls(3)).any()  # the null type has no validity buffer
    assert arrow.valid_mask(pa.chunked_array([pa.array([1, None])])).tolist() == [True, False]
    empty = pa.Array.from_buffers(pa.int64(), 0, [None, None])
    assert arrow.to_numpy(empty).dtype == np.int64 and arrow.to_numpy(empty).size == 0
    big_endian = np.array([1.0, 2.0], dtype=">f8")
    assert arrow.from_numpy(big_endian).to_pylist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="validity flags"):
        arrow.from_numpy(np.zeros(3), np.ones(2, dtype=bool))
