"""EXIF orientation read and applied in TensorFlow, against Pillow's ``exif_transpose``; the
sharder's reading of it (Python) against TensorFlow's; ``--resize`` and training turn the same."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest

from shardtrain.train.orientation import exif_orientation, orient


def _picture() -> np.ndarray:
    """A 40 x 64 image that looks different in each of the eight orientations."""
    img = np.zeros((40, 64, 3), np.uint8)
    img[:, :, 0] = np.arange(64, dtype=np.uint8) * 4
    img[:, :, 1] = (np.arange(40, dtype=np.uint8) * 6)[:, None]
    img[:5, :10, 2] = 255  # a corner mark
    return img


def _jpeg(exif: bytes | None = None, *, mode: str = "RGB") -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    image = Image.fromarray(_picture()).convert(mode)
    image.save(buf, "JPEG", quality=95, **({"exif": exif} if exif is not None else {}))
    return buf.getvalue()


def _little_endian(orientation: int) -> bytes:
    from PIL import Image

    exif = Image.Exif()
    exif.endian = "<"  # Intel order ("II"); Pillow writes Motorola's by default
    exif[0x0110] = "model"  # another tag first: the orientation is not always entry 0
    exif[0x0112] = orientation
    return exif.tobytes()


def _big_endian(orientation: int) -> bytes:
    """An IFD0 in Motorola order ("MM"), as many cameras write it: a Make entry, then the
    orientation."""
    entries = struct.pack(">HHII", 0x010F, 2, 4, 0x41424300)  # Make: "ABC\0", inline
    entries += struct.pack(">HHIHH", 0x0112, 3, 1, orientation, 0)
    ifd = struct.pack(">H", 2) + entries + struct.pack(">I", 0)  # no next IFD
    return b"Exif\x00\x00MM\x00\x2a" + struct.pack(">I", 8) + ifd


def _shown(data: bytes) -> np.ndarray:
    from PIL import Image, ImageOps

    return np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))


def _ours(data: bytes) -> tuple[int, np.ndarray]:
    import tensorflow as tf

    value = int(exif_orientation(tf.constant(data)))
    pixels = tf.io.decode_image(data, channels=3, expand_animations=False)
    return value, orient(pixels, value).numpy()


@pytest.mark.parametrize("order", ["little", "big"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_every_orientation_turns_the_pixels_as_pillow_shows_them(orientation, order):
    exif = (_little_endian if order == "little" else _big_endian)(orientation)
    data = _jpeg(exif)
    value, pixels = _ours(data)
    assert value == orientation
    expected = _shown(data)
    assert pixels.shape == expected.shape == ((64, 40, 3) if orientation >= 5 else (40, 64, 3))
    # The same pixels up to the two JPEG decoders' rounding; a wrong turn differs by ~100.
    assert np.abs(pixels.astype(int) - expected.astype(int)).mean() < 3


def test_anything_else_is_shown_as_stored():
    import tensorflow as tf
    from PIL import Image

    png = io.BytesIO()
    Image.fromarray(_picture()).save(png, "PNG")
    for data in (
        _jpeg(),  # no EXIF
        _jpeg(_little_endian(9)),  # not an orientation
        _jpeg(mode="L"),
        png.getvalue(),
        b"",
        b"\xff\xd8\xff\xe1\x00\x10Exif\x00\x00MM",  # cut inside the TIFF header
        b"\xff\xd8" + b"Exif\x00\x00II*\x00" + b"\x08\x00\x00\x00" + b"\x01\x00" + b"\x12\x01",
    ):
        assert int(exif_orientation(tf.constant(data))) == 1, data[:40]


def _corpus() -> list[bytes]:
    """JPEGs whose orientation a reader may get wrong: every value in both byte orders, a
    JPEG smaller than the entries read at once, the tag pushed past the bytes searched by a
    64 KiB segment before it, malformed headers."""
    from PIL import Image

    exif = Image.Exif()
    exif[0x0112] = 6
    tiny = io.BytesIO()
    Image.new("RGB", (4, 2), (200, 10, 10)).save(tiny, "JPEG", quality=50, exif=exif.tobytes())
    sideways = _jpeg(_little_endian(6))
    pushed = sideways[:2] + b"\xff\xe2" + struct.pack(">H", 0xFFFF) + bytes(0xFFFD) + sideways[2:]
    return [
        *(_jpeg(make(o)) for make in (_little_endian, _big_endian) for o in range(1, 10)),
        tiny.getvalue(),
        pushed,
        _jpeg(),
        sideways[:30],
        sideways.replace(b"Exif\x00\x00II", b"Exif\x00\x00IX"),
        sideways.replace(b"\xff\xe1", b"\xff\xe9", 1),
        b"",
    ]


def test_the_sharder_reads_the_orientation_as_the_trainer_does():
    """The sharder's reading (Python, for the width and height it records) and the trainer's
    (TensorFlow, for the pixels) agree on every case of the corpus."""
    import tensorflow as tf

    from shardtrain.data.sources.images import exif_orientation as sharder_reads

    corpus = _corpus()
    ours = [sharder_reads(data) for data in corpus]
    assert ours == [int(exif_orientation(tf.constant(data))) for data in corpus]
    assert ours[:18] == [*range(1, 9), 1, *range(1, 9), 1]  # 9 is not an orientation
    assert ours[18:] == [6, 1, 1, 1, 1, 1, 1]  # the tiny JPEG is read, the rest as stored


@pytest.mark.parametrize("orientation", range(1, 9))
def test_resizing_turns_first_as_pillow_shows_it(orientation):
    """``--resize`` re-encodes without EXIF, so the sharder turns the image first; its size
    is the one asked for and its pixels those of the image as shown, resized."""
    from PIL import Image

    from shardtrain.data.sources.images import decode

    data = _jpeg(_little_endian(orientation))
    image = decode(data, resize=(32, 48))
    assert not isinstance(image, tuple), image
    assert (image.width, image.height) == (32, 48)
    stored = np.asarray(Image.open(io.BytesIO(image.data)).convert("RGB")).astype(int)
    expected = Image.fromarray(_shown(data)).resize((32, 48), Image.Resampling.BILINEAR)
    assert np.abs(stored - np.asarray(expected).astype(int)).mean() < 3


def test_a_stored_sideways_photo_trains_and_serves_upright(tmp_path):
    """Shard a tree with a portrait photo stored sideways (orientation 6): its width and
    height are recorded as shown, and the trainer's decoder (the one the serving signature
    uses too) gives the upright pixels; ``--resize`` stores it upright."""
    from PIL import Image

    from shardtrain.data import sharding
    from shardtrain.data.metadata import DatasetMetadata
    from shardtrain.train.features import FeatureSpec

    upright = Image.fromarray(_picture()).transpose(Image.Transpose.ROTATE_90)  # 64 x 40
    stored = upright.transpose(Image.Transpose.ROTATE_90)  # as a camera stores it
    exif = Image.Exif()
    exif[0x0112] = 6
    for cls in ("a", "b"):
        (tmp_path / "root" / cls).mkdir(parents=True)
        for i in range(3):
            stored.save(tmp_path / "root" / cls / f"{i}.jpg", quality=95, exif=exif.tobytes())
    shown = np.asarray(upright).astype(float) / 255
    for resize in (None, (40, 64)):
        out = str(tmp_path / f"ds-{resize}")
        sharding.shard(
            sharding.ShardConfig(
                sources=(str(tmp_path / "root"),), output=out, images=True, resize=resize,
                processes=1, min_shards=1,
            )
        )  # fmt: skip
        meta = DatasetMetadata.load(out)
        stats = meta.stats.columns
        assert (stats["image/width"]["max"], stats["image/height"]["min"]) == (40, 64)
        spec = FeatureSpec.from_metadata(meta)
        size = [spec.image.height, spec.image.width]  # the larger side: 64 x 64
        import tensorflow as tf

        records = [
            r
            for split in meta.splits
            for r in tf.data.TFRecordDataset(meta.shard_uris(out, split), "GZIP")
        ]
        pixels = spec.parse_examples(tf.stack(records))[0][spec.image.name].numpy()
        assert len(pixels) == 6
        upright = tf.image.resize(shown, size).numpy()
        sideways = tf.image.resize(np.asarray(stored).astype(float) / 255, size).numpy()
        assert np.abs(pixels - upright).mean() < 0.02, resize
        assert np.abs(pixels - sideways).mean() > 0.1, resize  # what it was before
