"""The training input's decisions without TensorFlow: when columnar rows are permuted."""

from __future__ import annotations

import pytest

from shardtrain.errors import ConfigError


def test_columnar_input_permutes_rows_only_when_whole_blocks_would_mix_too_little():
    """Rows in hash order and a step of >= 4 blocks: whole blocks, no permutation; a smaller
    step or shuffle buffer, a dataset written in source order, or ``--permute-rows always``:
    permuted."""
    from types import SimpleNamespace

    from shardtrain.data.column_blocks import BLOCK_ROWS, ROW_ORDER
    from shardtrain.train.dataset import MIN_MIXED_BLOCKS, permute_columnar_rows

    hashed = SimpleNamespace(options={"record_format": "columnar", "row_order": ROW_ORDER})
    source_order = SimpleNamespace(options={"record_format": "columnar"})
    enough = MIN_MIXED_BLOCKS * BLOCK_ROWS
    assert enough == 1024  # the default --batch-size takes the fast path
    assert not permute_columnar_rows(hashed, enough)
    assert permute_columnar_rows(hashed, enough - 1)
    assert permute_columnar_rows(source_order, 1 << 20)
    assert permute_columnar_rows(hashed, enough, "auto", shuffle_buffer=enough - 1)
    assert permute_columnar_rows(hashed, enough, "always")
    with pytest.raises(ConfigError, match="permute_rows"):
        permute_columnar_rows(hashed, enough, "sometimes")
