"""Compiled (numba) kernels: the byte-level hot paths of sharding.

CSV parsing (:mod:`.csv_parse`), ``tf.train.Example`` encoding and TFRecord framing with
CRC-32C and xxHash64 (:mod:`.tfrecord`), Arrow buffers read and built in place
(:mod:`.arrow`), and the intrinsics they share (:mod:`.native`). Nothing here knows about
files, schemas' meaning or storage: callers pass flat NumPy/Arrow buffers and get buffers back.
"""
