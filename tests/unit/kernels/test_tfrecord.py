"""shardtrain.kernels.tfrecord: frames byte-identical to TensorFlow's writer, and the
pure-Python reader and writer."""

from __future__ import annotations

import io

import numpy as np
import pytest

from kernel_inputs import arrow_layout
from shardtrain.kernels import tfrecord


def test_frame_records_with_order_groups_by_shard():
    rng = np.random.default_rng(8)
    records = [
        rng.integers(0, 256, size=int(k), dtype=np.uint8).tobytes()
        for k in rng.integers(0, 300, size=200)
    ]
    data, offsets = arrow_layout(records, np.int64)
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
