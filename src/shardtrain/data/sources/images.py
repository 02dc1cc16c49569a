"""Image datasets: a directory tree or manifests of images → one Example per image.

The sharder (:mod:`shardtrain.data.sharding`) plans, splits, writes, resumes and finalizes image
datasets exactly as it does CSV; :class:`ImageSource` is the image
:class:`~shardtrain.data.sources.base.Source`. It supplies what the plan needs (sources,
schema, size estimates) and reads a task's piece of input into the same
:class:`~shardtrain.data.sources.base.Batch` es the CSV reader yields (:func:`read_piece`).

Two layouts:

* **A directory tree** ``ROOT/<class>/*.{jpg,jpeg,png}`` (local, ``s3://``, ``gs://``): the
  first folder below ``ROOT`` is the label, stored as the string feature ``label``. Files with
  other extensions and hidden files (``.DS_Store``, ``._x.jpg``) are ignored; an image directly
  in ``ROOT`` has no class and is rejected. The tree is listed once per process; its pieces
  are byte ranges of the listing (the files back to back, in path order), so tasks get about
  equal bytes and a file belongs to the piece holding its first byte.
* **A manifest**: a CSV file with a column of image paths or URIs (``--image-column``) and a
  label column (typed like a CSV label: int, float, bool or string). Relative paths are
  resolved against the manifest's directory; ``s3://``, ``gs://`` and absolute paths are used
  as they are. Other columns are ignored. Manifests are cut into byte ranges like CSV files.

Every image becomes one ``tf.train.Example``::

    image         bytes  the encoded file as it is (re-encoded only with ``resize``)
    image/height  int64  pixels, as shown (a JPEG's EXIF orientation applied)
    image/width   int64  pixels, as shown
    image/format  bytes  b"jpeg" or b"png" (from the content, not the file name)
    path          bytes  the path relative to ROOT, or the manifest's value: the split key
    label         the class folder name (bytes), or the manifest's label column

Every image is decoded once while sharding (with Pillow, on a pool of threads that also
overlap the reads from object storage), so the trainer never meets a file it cannot decode:
a missing file, unreadable or truncated data, or a format other than JPEG/PNG is rejected
(``missing_image``, ``corrupt_image``, ``unsupported_format``, ``no_class``), with its source
URI, its path and, for manifests, its line, exactly like a malformed CSV row, and counts
against ``max_bad_fraction``. A manifest's own malformed lines are rejected with the CSV
reasons (``wrong_field_count``, ``bad_value``, ``missing_label``).
"""

from __future__ import annotations

import bisect
import csv
import hashlib
import io
import math
import os
import re
import struct
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from shardtrain import storage
from shardtrain.data.schema import (
    FALSE_VALUES,
    INT_PATTERN,
    SAMPLE_BYTES,
    TRUE_VALUES,
    Column,
    Schema,
    infer_schema,
    parse_header,
)
from shardtrain.data.sources.base import (
    MAX_REJECT_TEXT,
    Batch,
    Piece,
    PlanInputs,
    Reject,
    Source,
    SourceFile,
    SourceLayout,
    open_source,
)
from shardtrain.data.sources.csv import listing as csv_listing
from shardtrain.errors import ConfigError, DataError, StorageError, StorageUnavailableError
from shardtrain.kernels import xxh64

#: Feature names of every image Example (the label comes on top).
IMAGE = "image"
HEIGHT = "image/height"
WIDTH = "image/width"
FORMAT = "image/format"
PATH = "path"
RESERVED = (IMAGE, HEIGHT, WIDTH, FORMAT, PATH)

#: The label feature of a directory tree (the class folder name).
TREE_LABEL = "label"

#: File name endings (any case) taken from a directory tree.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")

#: Threads per task that fetch and decode images (decoding releases the GIL).
FETCH_THREADS = 8

#: Rows of a manifest fetched as one batch (their sizes are unknown until read).
MANIFEST_BATCH_ROWS = 128

#: Most files of a tree in one batch (small files: the byte bound alone would allow more).
TREE_BATCH_FILES = 512

#: Assumed encoded size of an image when a manifest's sample names none that can be read.
_DEFAULT_IMAGE_BYTES = 100_000

_PIL_FORMATS = {"JPEG": "jpeg", "PNG": "png"}


@dataclass
class ImageReject(Reject):
    """A rejected image: the row's reject plus the image's URI and path.

    ``line`` is the manifest line (None for a directory tree).
    """

    source: str = ""
    path: str = ""
    nbytes: int = 0  # input bytes the row stood for (progress), not written

    @property
    def extra(self) -> dict[str, Any]:
        """Fields the sharder writes to ``rejects.jsonl`` besides line, reason, detail, text."""
        return {"source": self.source, "path": self.path}

    @property
    def where(self) -> str:
        return f"line {self.line}" if self.line is not None else self.path


def image_schema(label: str, label_type: str) -> Schema:
    """The schema of an image dataset: the image, its size, format and path, and the label."""
    return Schema(
        columns=(
            Column(IMAGE, "image"),
            Column(HEIGHT, "int"),
            Column(WIDTH, "int"),
            Column(FORMAT, "string"),
            Column(PATH, "string"),
            Column(label, label_type),  # type: ignore[arg-type]
        ),
        label=label,
        key=PATH,
    )


# --------------------------------------------------------------------------------------------
# Planning
# --------------------------------------------------------------------------------------------


class ImageSource(Source):
    """Images in a directory tree ``ROOT/<class>/*.{jpg,jpeg,png}``, or named by manifests.

    Args:
        patterns: the tree's ROOT (one), or manifest CSV files and globs.
        label: the label feature (a tree's class folder) or a manifest's label column.
        image_column: the manifests' column of image paths or URIs; None: a directory tree.
        resize: ``(width, height)`` every image is re-encoded to; None keeps the files as they
            are.
    """

    data_kind = "image"

    def __init__(
        self,
        patterns: tuple[str, ...] | list[str],
        *,
        label: str,
        image_column: str | None = None,
        resize: tuple[int, int] | None = None,
    ):
        self.patterns = list(patterns)
        self.label = label
        self.image_column = image_column
        self.resize = resize

    def plan_inputs(self) -> PlanInputs:
        """List a directory tree or read a manifest's header and sample; see the module
        docstring.

        Raises:
            DataError: no image in the tree; the manifest is empty or lacks a column.
            ConfigError: the label clashes with an image feature, or several roots are given.
        """
        if self.label in RESERVED:
            raise ConfigError(
                f"--label '{self.label}' is a feature the image sharder writes itself "
                f"({', '.join(RESERVED)}); rename the label column"
            )
        resize = list(self.resize) if self.resize else None
        if self.image_column is None:
            return _plan_tree(self, resize)
        return _plan_manifest(self, resize)

    def read_piece(self, piece: Piece, layout: SourceLayout, block_bytes: int) -> Iterator[Batch]:
        return read_piece(piece, layout, block_bytes=block_bytes)


def _normalise_root(root: str) -> str:
    if storage.is_local(root):
        path = os.path.abspath(storage.local_path(root))
        if not os.path.isdir(path):
            raise DataError(f"{root}: not a directory (expected ROOT/<class>/*.jpg)")
        return path
    return root.rstrip("/")


@dataclass(frozen=True)
class _Listing:
    """The images of a tree in path order, laid back to back in a virtual byte space."""

    root: str
    paths: tuple[str, ...]  # relative to root, '/'-separated
    offsets: tuple[int, ...]  # first virtual byte of each file
    sizes: tuple[int, ...]  # virtual sizes: max(size, 1) so every file owns a byte
    total: int
    version: str


def _list_tree(root: str) -> _Listing:
    prefix = root.rstrip("/") + "/"
    paths, sizes, digest = [], [], hashlib.sha256()
    for obj in storage.walk_infos(root):
        if not obj.uri.startswith(prefix):
            continue
        rel = obj.uri[len(prefix) :]
        name = rel.rsplit("/", 1)[-1]
        if name.startswith(".") or not name.lower().endswith(IMAGE_EXTENSIONS):
            continue
        paths.append(rel)
        sizes.append(max(obj.size, 1))
        digest.update(f"{rel}\0{obj.size}\0{obj.version}\n".encode())
    offsets = np.concatenate(([0], np.cumsum(sizes[:-1], dtype=np.int64))) if sizes else ()
    return _Listing(
        root=root,
        paths=tuple(paths),
        offsets=tuple(int(o) for o in offsets),
        sizes=tuple(sizes),
        total=int(sum(sizes)),
        version=digest.hexdigest()[:32],
    )


_listings: dict[str, _Listing] = {}
_listings_lock = threading.Lock()


def _tree_listing(root: str, version: str | None = None) -> _Listing:
    """The listing of ``root``, listed once per process; checked against the plan's version."""
    with _listings_lock:
        cached = _listings.get(root)
    if cached is not None and (version is None or cached.version == version):
        return cached
    listing = _list_tree(root)
    if version is not None and listing.version != version:
        raise DataError(
            f"{root}: the directory tree changed since this run was planned (files added, "
            "removed or modified); re-run the command with --overwrite to shard it afresh"
        )
    with _listings_lock:
        _listings.clear()  # one tree per run: keep memory to the current one
        _listings[root] = listing
    return listing


def _plan_tree(source: ImageSource, resize: list[int] | None) -> PlanInputs:
    if len(source.patterns) != 1:
        raise ConfigError(
            f"--images takes one ROOT directory (ROOT/<class>/*.jpg), got {len(source.patterns)}"
        )
    root = _normalise_root(source.patterns[0])
    listing = _list_tree(root)
    if not listing.paths:
        raise DataError(f"{root}: no .jpg, .jpeg or .png file below this directory")
    with _listings_lock:
        _listings.clear()
        _listings[root] = listing
    return PlanInputs(
        sources=[SourceFile(uri=root, size=listing.total, version=listing.version)],
        schema=image_schema(source.label, "string"),
        input_bytes=listing.total,
        output_ratio=1.0,  # encoded images do not compress further
        estimated_rows=len(listing.paths),
        options={"data_kind": "image", "image": {"layout": "tree", "resize": resize}},
    )


def _plan_manifest(source: ImageSource, resize: list[int] | None) -> PlanInputs:
    column = source.image_column
    assert column is not None
    if column == source.label:
        raise ConfigError(f"--image-column and --label are both '{column}'")
    sources = csv_listing.list_sources(source.patterns)
    first = sources[0]
    sample = csv_listing.read_sample(first, SAMPLE_BYTES)
    names = parse_header(sample.split(b"\n", 1)[0].rstrip(b"\r"), first.uri)
    if column not in names:
        raise DataError(
            f"{first.uri}: image column '{column}' not found (columns: {', '.join(names[:12])})"
        )
    manifest = infer_schema(sample, first.uri, label=source.label, key=column)
    label_type = manifest.column(source.label).type
    # Sizes: the manifest's rows times the mean size of the first images it names.
    body = sample.split(b"\n", 1)[1] if b"\n" in sample else b""
    rows_in_sample = max(body.count(b"\n"), 1)
    manifest_bytes = sum(s.size * (4 if s.gzip else 1) for s in sources)
    estimated_rows = max(1, int(manifest_bytes * rows_in_sample / max(len(sample), 1)))
    mean_bytes = _sample_image_bytes(first.uri, body, names.index(column))
    return PlanInputs(
        sources=sources,
        schema=image_schema(source.label, label_type),
        input_bytes=int(estimated_rows * mean_bytes),
        output_ratio=1.0,
        estimated_rows=estimated_rows,
        options={
            "data_kind": "image",
            "image": {
                "layout": "manifest",
                "image_column": column,
                "resize": resize,
                "manifest_columns": manifest.to_dict()["columns"],
                "null_values": list(manifest.null_values),
            },
        },
    )


def _sample_image_bytes(manifest_uri: str, body: bytes, index: int, limit: int = 16) -> float:
    uris = []
    for fields in csv.reader(io.StringIO(body.decode("utf-8", "replace"))):
        if len(fields) > index and fields[index].strip():
            uris.append(resolve(manifest_uri, fields[index].strip()))
        if len(uris) >= limit:
            break

    def size(uri: str) -> int | None:
        try:
            return storage.info(uri).size
        except StorageError:
            return None

    with ThreadPoolExecutor(FETCH_THREADS) as pool:
        sizes = [s for s in pool.map(size, uris) if s]
    return sum(sizes) / len(sizes) if sizes else _DEFAULT_IMAGE_BYTES


def resolve(manifest_uri: str, value: str) -> str:
    """The URI of a manifest's image path: absolute URIs and paths as they are, others
    relative to the manifest's directory."""
    if "://" in value or value.startswith("/"):
        return value
    base = manifest_uri.rsplit("/", 1)[0] if "/" in manifest_uri else "."
    return storage.join(base, value)


# --------------------------------------------------------------------------------------------
# Reading one piece
# --------------------------------------------------------------------------------------------


@dataclass
class _Item:
    """One image to fetch: where it is, its key and label, and where it came from."""

    line: int | None
    path: str
    uri: str
    label: Any
    nbytes: int  # input bytes it stands for (progress): virtual file size or manifest line


def read_piece(piece: Piece, layout: SourceLayout, *, block_bytes: int) -> Iterator[Batch]:
    """Stream one piece as batches of encoded images with their rejects.

    Args:
        piece: a byte range of the tree listing or of a manifest.
        layout: the run's schema, sources and image options.
        block_bytes: about how many image bytes one batch holds (trees).
    """
    options = layout.options["image"]
    resize = tuple(options["resize"]) if options.get("resize") else None
    with ThreadPoolExecutor(FETCH_THREADS, thread_name_prefix="image-fetch") as pool:
        if options["layout"] == "tree":
            version = next(s.version for s in layout.sources if s.uri == piece.uri)
            groups = _tree_groups(piece, version, block_bytes)
        else:
            groups = _manifest_groups(piece, layout, options)
        for items, rejects, extra in groups:
            results = list(pool.map(lambda it: _load(it, resize), items))
            yield _batch(layout.schema, items, results, rejects, extra)


def _tree_groups(
    piece: Piece, version: str, block_bytes: int
) -> Iterator[tuple[list[_Item], list[Reject], dict[str, int]]]:
    listing = _tree_listing(piece.uri, version)
    first = bisect.bisect_left(listing.offsets, piece.start)
    end = bisect.bisect_left(listing.offsets, piece.end)
    items: list[_Item] = []
    rejects: list[Reject] = []
    nbytes = 0
    for i in range(first, end):
        rel = listing.paths[i]
        uri = storage.join(listing.root, rel)
        size = listing.sizes[i]
        if "/" not in rel:
            detail = "image directly in ROOT, not in a class folder"
            rejects.append(_reject(None, "no_class", detail, uri, rel, size))
        else:
            items.append(_Item(None, rel, uri, rel.split("/", 1)[0], size))
        nbytes += size
        if nbytes >= block_bytes or len(items) + len(rejects) >= TREE_BATCH_FILES:
            yield items, rejects, {"lines": 0}
            items, rejects, nbytes = [], [], 0
    if items or rejects:
        yield items, rejects, {"lines": 0}


def _reject(
    line: int | None,
    reason: str,
    detail: str,
    uri: str,
    path: str,
    nbytes: int = 0,
    text: str | None = None,
) -> ImageReject:
    return ImageReject(
        line=line,
        reason=reason,
        detail=detail,
        text=path if text is None else text,
        source=uri,
        path=path,
        nbytes=nbytes,
    )


def _manifest_lines(piece: Piece) -> Iterator[tuple[bytes, int]]:
    """The raw lines (with their end) a piece of a manifest owns, after the header.

    The same rule as CSV pieces: a line belongs to the piece holding its first byte.
    """
    with open_source(piece.uri, gzip=piece.gzip) as f:
        if piece.start == 0:
            pos = len(f.readline())
        else:
            f.seek(piece.start - 1)  # on a line end: our first line starts at `start`
            pos = piece.start - 1 + len(f.readline())
        end = math.inf if piece.gzip else piece.end
        while pos < end:
            raw = f.readline()
            if not raw:
                return
            pos += len(raw)
            yield raw, len(raw)


def _manifest_groups(
    piece: Piece, layout: SourceLayout, options: dict[str, Any]
) -> Iterator[tuple[list[_Item], list[Reject], dict[str, int]]]:
    columns = [c["name"] for c in options["manifest_columns"]]
    index = columns.index(options["image_column"])
    label = layout.schema.label
    label_index = columns.index(label)
    label_type = layout.schema.column(label).type
    nulls = set(options["null_values"])
    line = 1 if piece.start == 0 else 0  # the header is line 1 of its file
    items: list[_Item] = []
    rejects: list[Reject] = []
    extra = {"lines": 0, "blank_lines": 0}
    for raw, nbytes in _manifest_lines(piece):
        line += 1
        extra["lines"] += 1
        text = raw.rstrip(b"\r\n")
        if not text.strip():
            extra["blank_lines"] += 1
            continue
        shown = text.decode("utf-8", "replace")[:MAX_REJECT_TEXT]
        try:
            fields = next(csv.reader([text.decode("utf-8")]))
        except (UnicodeDecodeError, csv.Error) as exc:
            rejects.append(
                _reject(line, "bad_value", f"unreadable line ({exc})", piece.uri, "", nbytes, shown)
            )
            continue
        problem = None
        if len(fields) != len(columns):
            problem = ("wrong_field_count", f"{len(fields)} fields, expected {len(columns)}")
        elif fields[label_index] in nulls:
            problem = ("missing_label", f"label '{label}' is empty")
        else:
            value = _convert(fields[label_index], label_type)
            if value is None:
                problem = ("bad_value", f"label '{label}': not a {label_type}")
        path = fields[index].strip() if len(fields) == len(columns) else ""
        if problem is None and not path:
            problem = ("missing_image", f"column '{options['image_column']}' is empty")
        if problem is not None:
            rejects.append(_reject(line, *problem, piece.uri, path, nbytes, shown))
        else:
            items.append(_Item(line, path, resolve(piece.uri, path), value, nbytes))
        if len(items) + len(rejects) >= MANIFEST_BATCH_ROWS:
            yield items, rejects, extra
            items, rejects, extra = [], [], {"lines": 0, "blank_lines": 0}
    if items or rejects or extra["lines"]:
        yield items, rejects, extra


def _convert(value: str, column_type: str) -> Any:
    """A manifest label as its column's type (None when it does not parse)."""
    if column_type == "int":
        return int(value) if re.match(INT_PATTERN, value) else None
    if column_type == "float":
        try:
            return float(value)
        except ValueError:
            return None
    if column_type == "bool":
        return True if value in TRUE_VALUES else False if value in FALSE_VALUES else None
    return value


@dataclass
class _Image:
    data: bytes
    height: int
    width: int
    format: str


def _load(item: _Item, resize: tuple[int, int] | None) -> _Image | tuple[str, str]:
    """Fetch and fully decode one image; returns it or ``(reason, detail)``."""
    try:
        data = storage.read_bytes(item.uri)
    except StorageUnavailableError:
        raise  # the store is down: fail the run, do not reject every image
    except StorageError as exc:
        if "no such file" in str(exc):
            return "missing_image", "no such file or object"
        return "corrupt_image", f"cannot read ({str(exc).removeprefix(item.uri + ': ')})"
    return decode(data, resize)


def decode(data: bytes, resize: tuple[int, int] | None = None) -> _Image | tuple[str, str]:
    """Check that ``data`` is a whole JPEG or PNG (decoding every pixel); resize if asked.

    Width and height are the image's as shown: a JPEG's EXIF orientation 5-8 (a portrait
    photo stored sideways) swaps them, as the trainer turns the pixels
    (:mod:`shardtrain.train.orientation`). A resized image is turned first: the re-encoded
    file carries no EXIF.

    Returns:
        The image (re-encoded in its format when resized) or ``(reason, detail)``.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            fmt = _PIL_FORMATS.get(img.format or "")
            if fmt is None:
                return "unsupported_format", f"{img.format} image; only JPEG and PNG are kept"
            if fmt == "png":
                img.verify()  # chunk CRCs and the end marker, which decoding alone skips
        with Image.open(io.BytesIO(data)) as img:
            img.load()  # every pixel: truncated or corrupt data fails here
            width, height = img.size
            orientation = exif_orientation(data) if fmt == "jpeg" else 1
            if resize is None:
                if orientation >= 5:  # turned a quarter: shown on its side
                    width, height = height, width
                return _Image(data, height, width, fmt)
            turn = _TURNS.get(orientation)  # as Pillow's ImageOps.exif_transpose turns it
            shown = img.transpose(getattr(Image.Transpose, turn)) if turn else img
            out = shown.resize(resize, Image.Resampling.BILINEAR)
    except UnidentifiedImageError:
        return "corrupt_image", "not a recognisable image"
    except (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError) as exc:
        return "corrupt_image", f"cannot decode ({exc})"
    buf = io.BytesIO()
    if fmt == "jpeg":
        if out.mode not in ("RGB", "L"):
            out = out.convert("RGB")
        out.save(buf, format="JPEG", quality=95)
    else:
        out.save(buf, format="PNG")
    return _Image(buf.getvalue(), resize[1], resize[0], fmt)


#: What :func:`exif_orientation` reads: the APP1 header, the bytes searched, the tag, the IFD0
#: entries looked at (``shardtrain.train.orientation`` reads the same, by these, in TensorFlow).
EXIF_HEADER = b"Exif\x00\x00"
EXIF_SEARCH_BYTES = 64 * 1024
ORIENTATION_TAG = 0x0112
MAX_IFD_ENTRIES = 64
#: How each orientation is turned to be shown (``PIL.Image.Transpose`` members).
_TURNS = {
    2: "FLIP_LEFT_RIGHT",
    3: "ROTATE_180",
    4: "FLIP_TOP_BOTTOM",
    5: "TRANSPOSE",
    6: "ROTATE_270",
    7: "TRANSVERSE",
    8: "ROTATE_90",
}


def exif_orientation(data: bytes) -> int:
    """The EXIF orientation (1-8) of JPEG bytes, read as the trainer reads it in TensorFlow
    (:func:`shardtrain.train.orientation.exif_orientation`, tested equal): the APP1 ``Exif``
    segment in the first 64 KiB, IFD0 in either byte order; 1 (as stored) for anything else."""
    head = data[:EXIF_SEARCH_BYTES]
    at = head.find(EXIF_HEADER)
    if head[:2] != b"\xff\xd8" or at < 4 or head[at - 4 : at - 2] != b"\xff\xe1":
        return 1
    tiff = at + 6
    order = {b"II": "<", b"MM": ">"}.get(head[tiff : tiff + 2])
    padded = head + bytes(12 * MAX_IFD_ENTRIES + 8)  # zeros past the end, as in TensorFlow
    if order is None or struct.unpack_from(order + "H", padded, tiff + 2)[0] != 42:
        return 1
    ifd = tiff + struct.unpack_from(order + "I", padded, tiff + 4)[0]
    if ifd >= len(head):
        return 1
    count = min(struct.unpack_from(order + "H", padded, ifd)[0], MAX_IFD_ENTRIES)
    found = [
        value
        for i in range(count)
        for tag, value in [struct.unpack_from(order + "H6xH", padded, ifd + 2 + 12 * i)]
        if tag == ORIENTATION_TAG
    ]
    value = max(found, default=1)
    return value if 1 <= value <= 8 else 1


def _batch(
    schema: Schema,
    items: list[_Item],
    results: list[_Image | tuple[str, str]],
    rejects: list[Reject],
    extra: dict[str, int],
) -> Batch:
    images = []
    kept: list[_Item] = []
    rejects = list(rejects)
    for item, result in zip(items, results, strict=True):
        if isinstance(result, _Image):
            images.append(result)
            kept.append(item)
        else:
            rejects.append(_reject(item.line, *result, item.uri, item.path))
    if any(r.line is not None for r in rejects):
        rejects.sort(key=lambda r: r.line or 0)
    label_column = schema.column(schema.label)
    paths = [it.path for it in kept]
    encoded = [p.encode() for p in paths]
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    ends = np.cumsum(lengths)
    row_hash = xxh64.hash_slices(
        np.frombuffer(b"".join(encoded), dtype=np.uint8), ends - lengths, ends
    )
    table = pa.table(
        {
            IMAGE: pa.array([im.data for im in images], pa.binary()),
            HEIGHT: pa.array([im.height for im in images], pa.int64()),
            WIDTH: pa.array([im.width for im in images], pa.int64()),
            FORMAT: pa.array([im.format for im in images], pa.string()),
            PATH: pa.array(paths, pa.string()),
            schema.label: pa.array([it.label for it in kept], label_column.arrow_type),
        }
    )
    # Rejects found while fetching stand for no bytes: their item already counts them.
    nbytes = sum(it.nbytes for it in items) + sum(getattr(r, "nbytes", 0) for r in rejects)
    return Batch(
        table=table.select(schema.names),
        row_hash=row_hash,
        rejects=rejects,
        rows_read=len(kept) + len(rejects),
        blank_lines=extra.get("blank_lines", 0),
        lines=extra["lines"],
        bytes_read=nbytes,
    )


def parse_resize(text: str | None) -> tuple[int, int] | None:
    """Parse ``--resize WIDTHxHEIGHT`` (e.g. ``224x224``); None stays None.

    Raises:
        ConfigError: not two positive integers joined by ``x``.
    """
    if text is None:
        return None
    width, sep, height = text.lower().partition("x")
    if not (sep and width.strip().isdigit() and height.strip().isdigit()):
        raise ConfigError(f"--resize: '{text}' is not WIDTHxHEIGHT (e.g. 224x224)")
    size = (int(width), int(height))
    if min(size) < 1:
        raise ConfigError(f"--resize: '{text}' must have a width and height of at least 1")
    return size
