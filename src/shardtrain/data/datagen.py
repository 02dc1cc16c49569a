"""Synthetic game quest logs: the project's reference dataset, at any size, in bounded memory.

One row per quest attempt. The label ``cleared`` (0/1) is drawn from a logistic model of the
attempt, so a model can learn it, but not perfectly:

* the gap between ``player_level`` and ``quest_level`` matters most (over-levelled players
  clear quests, under-levelled ones fail), more so on harder ``difficulty`` levels;
* a bigger ``party_size`` helps on group content (``raid``, ``boss``) and barely elsewhere;
* ``gear_score`` helps with diminishing returns; high ``latency_ms`` and recent
  ``deaths_last_10`` hurt; each ``player_class`` is good at some ``quest_type`` s;
* extra ``stat_NN`` / ``cat_NN`` columns (for wide benchmark files) carry small effects;
* logistic noise on top: the Bayes-optimal AUC (of the true probability) is about 0.87.

Some values are missing (``latency_ms``, ``deaths_last_10``, ``region``: 2–4% empty fields);
a missing feature contributes its average effect. With ``bad_fraction`` some rows are
malformed on purpose (a field too few or too many, or an unparsable number), and the summary
says exactly how many of each, so tests can check the sharder's reject accounting.

Rows are generated in chunks of ``chunk_rows`` with a random generator seeded by
``(seed, chunk index)`` and streamed to any storage URI (``.gz`` → gzip): the same arguments
give byte-identical output, and memory stays bounded whatever the number of rows.

:func:`generate_images` writes the image counterpart: a labelled set of shapes (see its
docstring) as a directory tree ``DIR/<class>/*.{jpg,png}`` plus ``DIR/manifest.csv``.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from shardtrain import storage
from shardtrain.errors import ConfigError

# (name, type, missing rate); the first `numeric` of these (then stat_NN floats) are written.
_NUMERIC = (
    ("player_level", "int", 0.0),
    ("quest_level", "int", 0.0),
    ("party_size", "int", 0.0),
    ("gear_score", "float", 0.0),
    ("attempt_no", "int", 0.0),
    ("latency_ms", "float", 0.03),
    ("deaths_last_10", "int", 0.04),
    ("hours_played", "float", 0.0),
    ("gold", "float", 0.0),
    ("achievement_pts", "int", 0.0),
    ("win_rate", "float", 0.0),
    ("session_minutes", "float", 0.0),
)
_CATEGORICAL = (
    ("player_class", ("warrior", "mage", "rogue", "cleric", "ranger", "bard"), 0.0),
    ("difficulty", ("easy", "normal", "hard", "nightmare"), 0.0),
    ("quest_type", ("raid", "dungeon", "escort", "fetch", "boss", "puzzle"), 0.0),
    ("region", ("na-east", "na-west", "eu-north", "eu-south", "asia", "sa", "oce", "me"), 0.02),
    ("platform", ("pc", "console", "mobile"), 0.0),
)
_DIFFICULTY_PENALTY = np.array([-0.8, 0.0, 0.7, 1.5])
_DIFFICULTY_GAP_WEIGHT = np.array([0.10, 0.14, 0.18, 0.22])
_GROUP_CONTENT = np.array([1, 0, 0, 0, 1, 0], dtype=bool)  # raid, boss
# class x quest_type affinity
_AFFINITY = np.array(
    [
        [0.6, 0.3, 0.2, -0.2, 0.5, -0.6],
        [0.3, 0.1, -0.3, 0.0, 0.4, 0.8],
        [-0.2, 0.6, 0.3, 0.4, -0.3, 0.3],
        [0.5, 0.2, 0.6, 0.0, 0.3, 0.0],
        [0.0, 0.3, 0.5, 0.6, -0.1, -0.2],
        [-0.4, -0.2, 0.4, 0.3, -0.5, 0.5],
    ]
)
_BAD_VALUES = ("n/a!", "12abc", "?", "1.2.3", "#REF!")


@dataclass
class QuestLogSummary:
    """What :func:`generate_quest_logs` wrote."""

    rows: int
    bad_rows_by_kind: dict[str, int]
    bytes_written: int
    columns: list[tuple[str, str]]
    label: str = "cleared"
    key: str = "attempt_id"
    positive_rate: float = 0.0
    bayes_auc: float = 0.0
    seed: int = 0
    extra: dict = field(default_factory=dict)


def quest_schema(numeric: int = 12, categorical: int = 5) -> list[tuple[str, str]]:
    """The generated columns ``(name, type)`` in file order; types: int, float, string, bool."""
    if numeric < 1 or categorical < 1:
        raise ConfigError("quest logs need at least one numeric and one categorical column")
    cols = [("attempt_id", "string"), ("player_id", "string")]
    cols += [(n, t) for n, t, _ in _NUMERIC[:numeric]]
    cols += [(f"stat_{i:02d}", "float") for i in range(max(0, numeric - len(_NUMERIC)))]
    cols += [(n, "string") for n, _, _ in _CATEGORICAL[:categorical]]
    cols += [(f"cat_{i:02d}", "string") for i in range(max(0, categorical - len(_CATEGORICAL)))]
    cols += [("is_weekend", "bool"), ("cleared", "int")]
    return cols


def _with_missing(rng: np.random.Generator, values: np.ndarray, rate: float) -> pa.Array:
    if rate <= 0:
        return pa.array(values)
    return pa.array(values, mask=rng.random(values.size) < rate)


def _chunk(
    rng: np.random.Generator, first: int, n: int, numeric: int, categorical: int, players: int
) -> tuple[dict[str, pa.Array], np.ndarray]:
    """One chunk of columns and the true probability of `cleared` for each row."""
    cols: dict[str, pa.Array] = {}
    ids = np.arange(first, first + n)
    cols["attempt_id"] = pa.array(np.char.add("a", np.char.zfill(ids.astype(str), 11)))
    player = rng.integers(0, players, n)
    cols["player_id"] = pa.array(np.char.add("p", np.char.zfill(player.astype(str), 8)))

    level = np.clip(np.round(rng.normal(32, 14, n)), 1, 60).astype(np.int64)
    qlevel = np.clip(level + np.round(rng.normal(0, 7, n)), 1, 60).astype(np.int64)
    party = rng.integers(1, 6, n)
    gear = np.round(np.clip(rng.normal(400 + 8 * level, 90), 50, None), 1)
    attempt = np.minimum(rng.geometric(0.45, n), 10)
    latency = np.round(rng.lognormal(4.0, 0.6, n), 1)
    deaths = np.minimum(rng.poisson(2.0, n), 10)
    hours = np.round(rng.gamma(2.0, 60 + 3 * level), 1)
    gold = np.round(rng.lognormal(7 + level / 30, 1.0, n), 2)
    achievements = np.round(level * 25 + rng.normal(0, 120, n)).astype(np.int64)
    win_rate = np.round(np.clip(rng.beta(5, 5, n) + 0.002 * (level - 30), 0, 1), 4)
    session = np.round(rng.gamma(3.0, 15.0, n), 1)
    named: list[np.ndarray] = [
        level,
        qlevel,
        party,
        gear,
        attempt,
        latency,
        deaths,
        hours,
        gold,
        achievements,
        win_rate,
        session,
    ]
    extra_stats = [np.round(rng.normal(0, 1, n), 4) for _ in range(max(0, numeric - len(named)))]

    cats = {name: rng.integers(0, len(values), n) for name, values, _ in _CATEGORICAL}
    extra_cats = [rng.integers(0, 20, n) for _ in range(max(0, categorical - len(_CATEGORICAL)))]
    weekend = rng.random(n) < 2 / 7

    diff, qtype, klass = cats["difficulty"], cats["quest_type"], cats["player_class"]
    gap = (level - qlevel).astype(np.float64)
    logit = (
        0.35
        + _DIFFICULTY_GAP_WEIGHT[diff] * gap
        - _DIFFICULTY_PENALTY[diff]
        + np.where(_GROUP_CONTENT[qtype], 0.55, 0.08) * np.log(party)
        - np.where(_GROUP_CONTENT[qtype], 0.7, 0.0)
        + 0.9 * np.tanh((gear - (400 + 8 * level)) / 150)
        - 0.5 * (latency > 150)
        - 0.12 * (deaths - 2.0)
        + 1.1 * _AFFINITY[klass, qtype]
        + 0.6 * (win_rate - 0.5)
        - 0.08 * (attempt - 1.8)
        + 0.15 * weekend
    )
    for i, s in enumerate(extra_stats):
        logit = logit + (0.25 if i % 3 == 0 else 0.0) * s
    for c in extra_cats:
        logit = logit + 0.2 * ((c % 4) == 0) - 0.05
    prob = 1.0 / (1.0 + np.exp(-1.35 * logit))

    numeric_values = (named + extra_stats)[:numeric]
    schema = quest_schema(numeric, categorical)
    numeric_names = [name for name, _ in schema[2 : 2 + numeric]]
    missing = {n: r for n, _, r in _NUMERIC}
    for name, values in zip(numeric_names, numeric_values, strict=True):
        cols[name] = _with_missing(rng, values, missing.get(name, 0.0))
    for name, levels, rate in _CATEGORICAL[:categorical]:
        cols[name] = _with_missing(rng, np.asarray(levels)[cats[name]], rate)
    for i, c in enumerate(extra_cats):
        cols[f"cat_{i:02d}"] = pa.array(np.char.add("v", c.astype(str)))
    cols["is_weekend"] = pa.array(weekend)
    cols["cleared"] = pa.array((rng.random(n) < prob).astype(np.int64))
    return cols, prob


def _corrupt(
    text: bytes, rng: np.random.Generator, bad_fraction: float, numeric_positions: list[int]
) -> tuple[bytes, dict[str, int]]:
    """Make ~bad_fraction of the data lines malformed; returns the text and exact counts."""
    counts = {"wrong_field_count": 0, "bad_value": 0}
    lines = text.split(b"\n")
    has_trailing = lines and lines[-1] == b""
    body = lines[:-1] if has_trailing else lines
    picks = np.flatnonzero(rng.random(len(body)) < bad_fraction)
    for i in picks:
        fields = body[i].split(b",")
        kind = rng.integers(0, 3)
        if kind == 0:
            fields = fields[:-1]  # a truncated row
            counts["wrong_field_count"] += 1
        elif kind == 1:
            fields = [*fields, b"extra"]
            counts["wrong_field_count"] += 1
        else:
            pos = numeric_positions[int(rng.integers(0, len(numeric_positions)))]
            fields[pos] = _BAD_VALUES[int(rng.integers(0, len(_BAD_VALUES)))].encode()
            counts["bad_value"] += 1
        body[i] = b",".join(fields)
    return b"\n".join(body) + (b"\n" if has_trailing else b""), counts


def _binned_auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """AUC from per-bin counts of positives and negatives (ties within a bin count half)."""
    neg_below = np.cumsum(neg) - neg
    total = pos.sum() * neg.sum()
    return float((pos * (neg_below + 0.5 * neg)).sum() / total) if total else 0.5


def generate_quest_logs(
    output: str,
    rows: int,
    *,
    seed: int = 0,
    bad_fraction: float = 0.0,
    numeric: int = 12,
    categorical: int = 5,
    chunk_rows: int = 100_000,
    progress: Callable[[int, int], None] | None = None,
) -> QuestLogSummary:
    """Write ``rows`` synthetic quest attempts as CSV to ``output`` (streamed, any size).

    Args:
        output: a local path or URI; a ``.gz`` suffix writes gzip.
        rows: data rows to write (malformed ones included).
        seed: random seed; same arguments → byte-identical output.
        bad_fraction: fraction of rows made malformed on purpose (0 to 0.5).
        numeric: numeric feature columns (named ones first, then ``stat_NN``).
        categorical: categorical columns (named ones first, then ``cat_NN``).
        chunk_rows: rows generated at once (bounds memory; part of the determinism).
        progress: called with ``(rows_done, bytes_done)`` after each chunk.

    Returns:
        A :class:`QuestLogSummary` with exact counts of malformed rows.
    """
    if rows < 1:
        raise ConfigError(f"--rows must be at least 1 (got {rows})")
    if not 0.0 <= bad_fraction <= 0.5:
        raise ConfigError(f"--bad-fraction must be between 0 and 0.5 (got {bad_fraction})")
    if chunk_rows < 1:
        raise ConfigError("chunk_rows must be at least 1")
    schema = quest_schema(numeric, categorical)
    names = [n for n, _ in schema]
    numeric_positions = [i for i, (_, t) in enumerate(schema) if t in ("int", "float")]
    players = max(rows // 20, 1)
    bins = 4096
    pos_hist = np.zeros(bins)
    neg_hist = np.zeros(bins)
    bad = {"wrong_field_count": 0, "bad_value": 0}
    positives = 0
    written = 0
    with storage.open(output, "wb", compression="infer") as f:
        for index, first in enumerate(range(0, rows, chunk_rows)):
            n = min(chunk_rows, rows - first)
            rng = np.random.default_rng([seed, index])
            cols, prob = _chunk(rng, first, n, numeric, categorical, players)
            # Generated strings never hold commas, quotes or line breaks: no quoting needed.
            table = pa.table([cols[name] for name in names], names=names)
            buf = io.BytesIO()
            pacsv.write_csv(
                table,
                buf,
                write_options=pacsv.WriteOptions(include_header=False, quoting_style="none"),
            )
            text = buf.getvalue()
            if index == 0:
                text = (",".join(names) + "\n").encode() + text
            label = np.asarray(cols["cleared"].to_numpy())
            if bad_fraction > 0:
                header = b""
                if index == 0:
                    cut = text.index(b"\n") + 1
                    header, text = text[:cut], text[cut:]
                text, counts = _corrupt(text, rng, bad_fraction, numeric_positions)
                text = header + text
                for k, v in counts.items():
                    bad[k] += v
            which = np.minimum((prob * bins).astype(np.int64), bins - 1)
            pos_hist += np.bincount(which[label == 1], minlength=bins)
            neg_hist += np.bincount(which[label == 0], minlength=bins)
            positives += int(label.sum())
            f.write(text)
            written += len(text)
            if progress:
                progress(first + n, written)
    return QuestLogSummary(
        rows=rows,
        bad_rows_by_kind={k: v for k, v in bad.items() if v},
        bytes_written=written,
        columns=schema,
        positive_rate=positives / rows,
        bayes_auc=_binned_auc(pos_hist, neg_hist),
        seed=seed,
    )


# --------------------------------------------------------------------------------------------
# Synthetic images
# --------------------------------------------------------------------------------------------

#: Shape classes, in label order; ``classes=K`` uses the first K.
IMAGE_CLASSES = ("circle", "square", "triangle", "cross", "diamond", "ring")


@dataclass
class ImageSetSummary:
    """What :func:`generate_images` wrote."""

    count: int
    bytes_written: int
    classes: dict[str, int]
    formats: dict[str, int]
    manifest: str | None = None


def _shape_points(kind: str, cx: float, cy: float, r: float) -> list[tuple[float, float]]:
    if kind == "triangle":
        return [(cx, cy - r), (cx + 0.87 * r, cy + 0.5 * r), (cx - 0.87 * r, cy + 0.5 * r)]
    if kind == "diamond":
        return [(cx, cy - r), (cx + 0.7 * r, cy), (cx, cy + r), (cx - 0.7 * r, cy)]
    t = 0.33 * r  # cross: half the arm width
    return [
        (cx - t, cy - r), (cx + t, cy - r), (cx + t, cy - t), (cx + r, cy - t),
        (cx + r, cy + t), (cx + t, cy + t), (cx + t, cy + r), (cx - t, cy + r),
        (cx - t, cy + t), (cx - r, cy + t), (cx - r, cy - t), (cx - t, cy - t),
    ]  # fmt: skip


def render_image(index: int, *, size: int, seed: int, classes: int) -> tuple[str, str, bytes]:
    """One synthetic image: ``(class name, format, encoded bytes)``; deterministic per index.

    A filled shape of a random colour, position and size on a random two-colour gradient
    background with pixel noise. Shapes are axis-aligned, so every class is unambiguous.
    """
    from PIL import Image, ImageDraw

    rng = np.random.default_rng([seed, index])
    kind = IMAGE_CLASSES[int(rng.integers(classes))]
    fmt = "png" if rng.random() < 0.5 else "jpeg"
    c0, c1 = rng.integers(0, 256, size=(2, 3))
    ramp = np.linspace(0.0, 1.0, size, dtype=np.float32)[:, None, None]
    background = (c0 * (1 - ramp) + c1 * ramp) * np.ones((size, size, 3), np.float32)
    img = Image.fromarray(background.astype(np.uint8))
    # A colour far from the background's mean, so the shape always stands out.
    colour = rng.integers(0, 256, size=3)
    if np.abs(colour - (c0 + c1) / 2).sum() < 200:
        colour = 255 - ((c0 + c1) // 2)
    fill = tuple(int(v) for v in colour)
    r = size * rng.uniform(0.18, 0.34)
    cx, cy = rng.uniform(r, size - r, size=2)
    draw = ImageDraw.Draw(img)
    box = (cx - r, cy - r, cx + r, cy + r)
    if kind == "circle":
        draw.ellipse(box, fill=fill)
    elif kind == "square":
        s = 0.8 * r
        draw.rectangle((cx - s, cy - s, cx + s, cy + s), fill=fill)
    elif kind == "ring":
        draw.ellipse(box, outline=fill, width=max(2, int(r * 0.3)))
    else:
        draw.polygon(_shape_points(kind, cx, cy, r), fill=fill)
    pixels = np.asarray(img, dtype=np.int16) + rng.normal(0, 12, (size, size, 3)).astype(np.int16)
    img = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    buf = io.BytesIO()
    if fmt == "jpeg":
        img.save(buf, format="JPEG", quality=90)
    else:
        img.save(buf, format="PNG", compress_level=1)
    return kind, fmt, buf.getvalue()


def generate_images(
    output: str,
    count: int,
    *,
    size: int = 224,
    seed: int = 0,
    classes: int = 3,
    manifest: bool = True,
    threads: int = 4,
    progress: Callable[[int, int], None] | None = None,
) -> ImageSetSummary:
    """Write ``count`` labelled synthetic images as ``output/<class>/img-NNNNNNN.{jpg,png}``.

    Classes are shapes (``circle``, ``square``, ``triangle``, then ``cross``, ``diamond``,
    ``ring``) of random colour, position and size on a noisy gradient: easy enough that a
    small CNN reaches >= 0.9 accuracy on a few hundred 64x64 images, and about half JPEG, half
    PNG. Images are rendered a few at a time on ``threads`` threads and written as they come
    (never the whole set in memory); the same arguments give the same files.

    Args:
        output: directory (local path, ``s3://``, ``gs://``).
        count: images to write.
        size: side of the square images in pixels.
        seed: random seed.
        classes: number of shape classes, 2 to 6.
        manifest: also write ``output/manifest.csv`` with columns ``image`` (the path
            relative to ``output``) and ``label``.
        threads: images rendered in parallel.
        progress: called with ``(images_done, bytes_done)`` after each group of images.

    Returns:
        An :class:`ImageSetSummary` with the counts per class and format.

    Raises:
        ConfigError: an argument is out of range.
    """
    if count < 1:
        raise ConfigError(f"--count must be at least 1 (got {count})")
    if not 2 <= classes <= len(IMAGE_CLASSES):
        raise ConfigError(f"--classes must be between 2 and {len(IMAGE_CLASSES)} (got {classes})")
    if size < 16:
        raise ConfigError(f"--size must be at least 16 pixels (got {size})")
    summary = ImageSetSummary(count=count, bytes_written=0, classes={}, formats={})
    group = 64

    def render(i: int) -> tuple[str, str, bytes]:
        return render_image(i, size=size, seed=seed, classes=classes)

    with contextlib.ExitStack() as stack:
        listing = None
        if manifest:
            summary.manifest = storage.join(output, "manifest.csv")
            listing = stack.enter_context(storage.open(summary.manifest, "w"))
            listing.write("image,label\n")
        pool = stack.enter_context(ThreadPoolExecutor(max(1, threads)))
        for first in range(0, count, group):
            indices = range(first, min(first + group, count))
            for i, (kind, fmt, data) in zip(indices, pool.map(render, indices), strict=True):
                rel = f"{kind}/img-{i:07d}.{'jpg' if fmt == 'jpeg' else 'png'}"
                storage.write_bytes(storage.join(output, rel), data)
                if listing is not None:
                    listing.write(f"{rel},{kind}\n")
                summary.bytes_written += len(data)
                summary.classes[kind] = summary.classes.get(kind, 0) + 1
                summary.formats[fmt] = summary.formats.get(fmt, 0) + 1
            if progress:
                progress(indices[-1] + 1, summary.bytes_written)
    return summary
