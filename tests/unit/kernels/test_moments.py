"""The compiled numeric summaries against Python references (fsum, two passes).

They read Arrow buffers in place, so the inputs include nulls, slices whose offset is not a
multiple of 8, NaN/±inf and all-null arrays. How the statistics fold the summaries together
is tested in ``tests/unit/data/test_statistics.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from shardtrain.kernels.moments import Moments, count_true, moments


def _reference(values: list) -> Moments:
    present = [float(v) for v in values if v is not None]
    finite = [x for x in present if math.isfinite(x)]
    if not finite:
        return Moments(len(present), 0, math.inf, -math.inf, 0.0, 0.0)
    mean = math.fsum(finite) / len(finite)
    m2 = math.fsum((x - mean) ** 2 for x in finite)
    return Moments(len(present) - len(finite), len(finite), min(finite), max(finite), mean, m2)


@pytest.mark.parametrize("type", [pa.float32(), pa.float64(), pa.int64(), pa.uint8()])
def test_moments_match_the_reference(type):
    rng = np.random.default_rng(1)
    raw = rng.normal(100, 30, 3001).clip(0, 255).astype(type.to_pandas_dtype())
    if pa.types.is_floating(type):
        raw[rng.random(raw.size) < 0.02] = np.nan
        raw[rng.random(raw.size) < 0.01] = -np.inf
    array = pa.array(raw, type=type, mask=rng.random(raw.size) < 0.1)
    for values in (array, array.slice(11, 2900), pa.array(raw, type=type)):
        got, want = moments(values), _reference(values.to_pylist())
        assert got[:4] == want[:4]
        assert got.mean == pytest.approx(want.mean, rel=1e-12)
        assert got.m2 == pytest.approx(want.m2, rel=1e-9)


def test_moments_of_nothing_valid():
    for array in (pa.array([None, None], pa.float32()), pa.array([np.nan, None, np.inf])):
        assert moments(array) == _reference(array.to_pylist())


def test_moments_refuse_types_without_a_numpy_view():
    with pytest.raises(TypeError, match="halffloat"):
        moments(pa.array(np.array([1.5], np.float16)))


def test_count_true_counts_valid_trues_only():
    rng = np.random.default_rng(2)
    array = pa.array(rng.random(1003) < 0.4, mask=rng.random(1003) < 0.2)
    for values in (array, array.slice(3, 990), pa.array([True] * 9), pa.array([None], pa.bool_())):
        assert count_true(values) == sum(v is True for v in values.to_pylist())
    with pytest.raises(TypeError):
        count_true(pa.array([1, 0]))


@pytest.mark.parametrize("type", [pa.float32(), pa.float64(), pa.int64(), pa.int32()])
@pytest.mark.parametrize("inverse_step", [1.0, 0.5, 10.0, 1e300])
def test_moments_count_the_histogram_as_add_counts_does(type, inverse_step):
    """``moments(values, counts)`` adds to ``counts`` exactly what ``add_counts`` adds, and
    its moments are those without counts: nulls, slices, NaN/±inf, values beyond the bins
    and products that overflow to ±inf, in groups of eight and one by one."""
    from shardtrain.kernels.histogram import add_counts

    rng = np.random.default_rng(11)
    dtype = type.to_pandas_dtype()
    floating = pa.types.is_floating(type)
    special = [np.inf, -np.inf, 1e30, -1e30, np.nan] if floating else [2**31 - 1, -(2**31)]
    parts = [
        np.array(special, dtype=dtype),
        np.full(40, 3, dtype=dtype),  # whole groups of eight, all finite and in one bin
        np.round(rng.normal(10, 30, 3001)).astype(dtype) if not floating else
        np.where(rng.random(3001) < 0.01, np.nan, rng.normal(10, 30, 3001)).astype(dtype),
    ]  # fmt: skip
    raw = np.concatenate(parts)
    array = pa.array(raw, type=type, mask=rng.random(raw.size) < 0.05)
    for values in (array, array.slice(13, 2000), pa.array(raw, type=type), array.slice(5, 0)):
        want = np.zeros(12, dtype=np.int64)
        add_counts(values, want, first=-3, inverse_step=inverse_step)
        got = np.zeros(12, dtype=np.int64)
        summary = moments(values, got, first=-3, inverse_step=inverse_step)
        assert got.tolist() == want.tolist()
        assert summary == moments(values)
