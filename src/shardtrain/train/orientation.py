"""The EXIF orientation of JPEG bytes, read and applied in TensorFlow ops.

A phone or camera stores a photo as its sensor saw it and records how to turn it in the EXIF
``Orientation`` tag (0x0112): ``6`` is a portrait photo stored sideways, to be turned 90
degrees clockwise. Viewers honour the tag; ``tf.io.decode_image`` does not, so without this a
model trains on (and is served) sideways and upside-down copies of what people photographed.

:func:`exif_orientation` reads the tag from the encoded bytes and :func:`orient` turns the
decoded pixels as a viewer shows them (what Pillow's ``ImageOps.exif_transpose`` does). Both
are plain TensorFlow ops, so the training input and the SavedModel's serving signature, which
takes the same raw bytes a client sends, turn images the same way. The sharder stores the
files as they are and reads the tag by the same rule in Python
(:func:`shardtrain.data.sources.images.exif_orientation`, tested equal) to record the width
and height as shown; ``--resize`` turns an image before resizing it, since the re-encoded
file carries no EXIF.

Only JPEG's APP1 ``Exif`` segment in the first 64 KiB is read (where cameras write it); PNG,
a missing or malformed tag, or a value outside 1-8 mean 1: as stored.
"""

from __future__ import annotations

from typing import Any

# The rule's parameters, the sharder's: the APP1 header, the bytes searched for it (cameras
# write it first, after the SOI marker), the tag, the IFD0 entries read.
from shardtrain.data.sources.images import (
    EXIF_HEADER,
    EXIF_SEARCH_BYTES,
    MAX_IFD_ENTRIES,
    ORIENTATION_TAG,
)

__all__ = ["exif_orientation", "orient"]


def _bytes_at(data: Any, offset: Any, n: int) -> Any:
    """``n`` bytes of the scalar string ``data`` from ``offset`` as int64, zeros past its end
    (or before its start): never an out-of-range error."""
    import tensorflow as tf

    length = tf.cast(tf.strings.length(data), tf.int64)
    start = tf.clip_by_value(tf.cast(offset, tf.int64), 0, length)
    size = tf.clip_by_value(length - start, 0, n)
    raw = tf.io.decode_raw(tf.strings.substr(data, start, size), tf.uint8)
    raw = tf.cast(tf.reshape(raw, [-1]), tf.int64)
    raw = tf.pad(raw, [[0, n - tf.shape(raw, out_type=tf.int64)[0]]])
    return tf.where(tf.cast(offset, tf.int64) >= 0, raw, tf.zeros([n], tf.int64))


def _number(raw: Any, little: Any) -> Any:
    """The unsigned integer of the int64 bytes ``raw`` (a static length), in either order."""
    import tensorflow as tf

    n = int(raw.shape[-1])
    up = tf.constant([256**i for i in range(n)], tf.int64)
    down = tf.constant([256 ** (n - 1 - i) for i in range(n)], tf.int64)
    return tf.where(little, tf.reduce_sum(raw * up, -1), tf.reduce_sum(raw * down, -1))


def exif_orientation(data: Any) -> Any:
    """The EXIF orientation (int32 scalar, 1-8) of the encoded image ``data`` (a scalar
    string); 1 for anything but a JPEG whose APP1 segment says otherwise."""
    import tensorflow as tf

    head = tf.strings.substr(data, 0, EXIF_SEARCH_BYTES)
    parts = tf.strings.split(head, sep=EXIF_HEADER.decode("latin-1"), maxsplit=1)
    found = tf.size(parts) > 1
    at = tf.cast(tf.strings.length(parts[0]), tf.int64)  # where "Exif\0\0" starts
    jpeg = tf.reduce_all(tf.equal(_bytes_at(head, 0, 2), [0xFF, 0xD8]))
    app1 = tf.reduce_all(tf.equal(_bytes_at(head, at - 4, 2), [0xFF, 0xE1]))
    tiff = at + 6
    order = _bytes_at(head, tiff, 2)
    little = tf.reduce_all(tf.equal(order, [0x49, 0x49]))  # "II"; "MM" is big-endian
    big = tf.reduce_all(tf.equal(order, [0x4D, 0x4D]))
    magic = tf.equal(_number(_bytes_at(head, tiff + 2, 2), little), 42)
    ifd = tiff + _number(_bytes_at(head, tiff + 4, 4), little)
    count = tf.minimum(_number(_bytes_at(head, ifd, 2), little), MAX_IFD_ENTRIES)
    entries = tf.reshape(_bytes_at(head, ifd + 2, 12 * MAX_IFD_ENTRIES), [MAX_IFD_ENTRIES, 12])
    tags = _number(entries[:, 0:2], little)
    values = _number(entries[:, 8:10], little)  # a SHORT sits in the value field's first two
    hits = tf.logical_and(
        tf.equal(tags, ORIENTATION_TAG), tf.range(MAX_IFD_ENTRIES, dtype=tf.int64) < count
    )
    value = tf.reduce_max(tf.where(hits, values, tf.zeros_like(values)))
    ok = tf.reduce_all(
        tf.stack([found, jpeg, app1, tf.logical_or(little, big), magic, value >= 1, value <= 8])
    )
    return tf.cast(tf.where(ok, value, 1), tf.int32)


def orient(image: Any, orientation: Any) -> Any:
    """The decoded ``image`` ``[height, width, channels]`` turned as EXIF ``orientation``
    (1-8) says it is shown: flipped, rotated or transposed, as Pillow's ``exif_transpose``
    turns it."""
    import tensorflow as tf

    branches = [
        lambda: image,  # 0: not a value
        lambda: image,  # 1: as stored
        lambda: tf.image.flip_left_right(image),  # 2: mirrored
        lambda: tf.image.rot90(image, 2),  # 3: upside down
        lambda: tf.image.flip_up_down(image),  # 4: mirrored upside down
        lambda: tf.image.transpose(image),  # 5: mirrored, on its side
        lambda: tf.image.rot90(image, 3),  # 6: turned 90 degrees clockwise to be shown
        lambda: tf.image.rot90(tf.image.transpose(image), 2),  # 7: the other diagonal
        lambda: tf.image.rot90(image, 1),  # 8: turned 90 degrees counter-clockwise
    ]
    index = tf.clip_by_value(tf.cast(orientation, tf.int32), 0, len(branches) - 1)
    return tf.switch_case(index, branches)
