"""The square side an image column trains at by default, chosen from the dataset's image
statistics (``--image-size`` overrides it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The image size used when the statistics say nothing about the images' sizes.
DEFAULT_IMAGE_SIZE = 224
#: Bounds of an image size chosen from the data (``--image-size`` may set any 8-4096): the
#: usual input of ImageNet-sized networks, and the smallest ``keras.applications`` accepts.
MAX_AUTO_IMAGE_SIZE = 224
MIN_AUTO_IMAGE_SIZE = 32
#: A size chosen from varied images is rounded to a multiple of this: the backbones
#: downsample by 32 (the small CNN by 16), so their feature maps come out whole.
AUTO_IMAGE_MULTIPLE = 32


def image_size_from_stats(stats: Mapping[str, Any] | None) -> tuple[int, str]:
    """The square side to train an image column at by default, and why (for the log).

    ``stats`` is the column's entry in ``metadata.json``'s ``stats.columns`` (count, and
    min/max/mean of ``height`` and ``width``; :class:`~shardtrain.data.statistics.ImageStats`).
    The most common size is not recorded, so the rule works from the range and mean:

    * every image the same size (min == max for both sides), ``W x H``: the larger side,
      ``max(W, H)`` -- the images' own size, no detail lost (64x64 images → 64);
    * varied sizes: the larger of the mean height and mean width, rounded to the nearest
      multiple of 32;
    * either way, capped at 224 and raised to at least 32;
    * no usable statistics (no images, an older metadata.json): 224.

    Returns:
        ``(size, reason)``, e.g. ``(64, "every image is 64x64")``.
    """
    stats = stats or {}
    sides = (stats.get("height") or {}, stats.get("width") or {})
    figures = [side.get(k) for side in sides for k in ("min", "max", "mean")]
    numbers = [float(v) for v in figures if isinstance(v, int | float)]
    if not stats.get("count") or len(numbers) < len(figures):
        return DEFAULT_IMAGE_SIZE, "no image sizes in the statistics: the default"
    h_min, h_max, h_mean, w_min, w_max, w_mean = numbers
    if h_min == h_max and w_min == w_max:
        size = int(max(h_max, w_max))
        reason = f"every image is {w_max:.0f}x{h_max:.0f}"
    else:
        mean = max(h_mean, w_mean)
        size = round(mean / AUTO_IMAGE_MULTIPLE) * AUTO_IMAGE_MULTIPLE
        reason = (
            f"images are {w_min:.0f}-{w_max:.0f} px wide and {h_min:.0f}-{h_max:.0f} px "
            f"high, mean {w_mean:.0f}x{h_mean:.0f}: the larger mean side rounded to a "
            f"multiple of {AUTO_IMAGE_MULTIPLE}"
        )
    if size > MAX_AUTO_IMAGE_SIZE:
        size, reason = MAX_AUTO_IMAGE_SIZE, f"{reason}, capped at {MAX_AUTO_IMAGE_SIZE}"
    elif size < MIN_AUTO_IMAGE_SIZE:
        size, reason = MIN_AUTO_IMAGE_SIZE, f"{reason}, raised to {MIN_AUTO_IMAGE_SIZE}"
    return size, reason
