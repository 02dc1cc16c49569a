"""The evaluator's sample predictions: about 200 rows per call whatever the record format."""

from __future__ import annotations


def test_sample_predictions_predict_about_200_rows_per_call_whatever_the_record_format():
    from shardtrain.data.column_blocks import BLOCK_ROWS
    from shardtrain.train.evaluator import SAMPLE_SIZE, sample_chunk_records

    assert sample_chunk_records("example", False) == SAMPLE_SIZE  # a row per record
    columnar = sample_chunk_records("columnar", False)  # up to BLOCK_ROWS rows per record
    assert columnar * BLOCK_ROWS >= SAMPLE_SIZE > (columnar - 1) * BLOCK_ROWS
    assert sample_chunk_records("example", True) == 32
