"""Compiled (numba) kernels: the byte-level hot paths of sharding.

CSV record bounds (:mod:`.csv_records`), parsing (:mod:`.csv_parse`, with the field pieces of
:mod:`.csv_fields` and the float32 conversion of :mod:`.csv_float`) and typing
(:mod:`.csv_types`), ``tf.train.Example`` encoding (:mod:`.example_encode`),
TFRecord framing (:mod:`.tfrecord`), CRC-32C (:mod:`.crc32c`) and xxHash64 (:mod:`.xxh64`),
the column statistics' summaries (:mod:`.moments`), histograms (:mod:`.histogram`) and value
counts (:mod:`.value_counts`),
Arrow buffers read and built in place (:mod:`.arrow`), and the intrinsics they share
(:mod:`.native`). Nothing here knows about files, schemas' meaning or storage: callers pass
flat NumPy/Arrow buffers and get buffers back.

Each module of kernels imports :mod:`.native` (or, without it, :mod:`.cache`) first, which
makes numba look for them in the shipped cache before any kernel is defined (numba picks a
kernel's cache folder when it is defined); this package itself imports nothing, so that
code which only reads Arrow buffers (:mod:`.arrow`) does not import numba.
"""
