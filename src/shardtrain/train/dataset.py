"""The training input pipeline: shards in object storage → parsed, batched tensors.

Each *input pipeline* (one per worker under MultiWorkerMirroredStrategy, see
``tf.distribute.InputContext``) reads a disjoint set of the shard files listed in the
dataset's ``metadata.json`` — never a shard that was not committed — with the usual
high-throughput recipe: interleave files in parallel as blocks of records (never one
record per ``tf.data`` element: that bookkeeping alone capped the reader at ~170 k records/s
on 2 cores), shuffle the blocks, cut batches, **then** ``tf.io.parse_example``
(vectorised, ~10x faster than parsing record by record), prefetch, AUTOTUNE everywhere.

TensorFlow 2.21 reads local files and ``gs://`` itself. Anything else (``s3://`` — MinIO, AWS)
goes through :class:`ShardCache`: background threads stream the next shard objects to a local
directory ahead of the reader, bounded in bytes, and each file is deleted as soon as the
reader has consumed it. TensorFlow is never handed an ``s3://`` URI.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from shardtrain import storage
from shardtrain.data import verify
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.data.repair import repair_command
from shardtrain.errors import (
    ConfigError,
    DataError,
    ShardtrainError,
    StorageError,
    StorageFullError,
    StorageUnavailableError,
    one_line,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardFile:
    """One committed shard: its URI and what metadata.json says about it."""

    uri: str
    num_records: int
    bytes: int
    #: CRC-32C of the file's bytes (8 hex digits, from metadata.json); "" skips the check.
    crc32c: str = ""


#: Bytes read at a time when a shard's CRC-32C is verified.
_VERIFY_CHUNK = 8 << 20


def verify_shard(local_path: str, shard: ShardFile) -> None:
    """Check a local copy of ``shard`` against its CRC-32C from metadata.json.

    Raises:
        DataError: the bytes differ (one line naming the shard's URI).
    """
    if not shard.crc32c:
        return
    with open(local_path, "rb", buffering=0) as f:
        crc, size = verify.file_crc32c(f, _VERIFY_CHUNK)
    if f"{crc:08x}" != shard.crc32c.lower() or size != shard.bytes:
        raise DataError(
            f"{shard.uri}: corrupt (CRC-32C {crc:08x} of {size:,} bytes, expected "
            f"{shard.crc32c} of {shard.bytes:,}), re-shard the dataset"
        )


def find_corrupt_shard(shards: Sequence[ShardFile], threads: int = 4) -> DataError | None:
    """The error of the first shard whose bytes do not match metadata.json, or None.

    Reads every shard (remote ones through a temporary download): meant for after TensorFlow
    reported a corrupt record without saying in which file, not for the input path.
    """

    def check(shard: ShardFile) -> DataError | None:
        try:
            if storage.is_local(shard.uri):
                verify_shard(storage.local_path(shard.uri), shard)
            else:
                with tempfile.TemporaryDirectory(prefix="shardtrain-verify-") as tmp:
                    local = os.path.join(tmp, storage.basename(shard.uri))
                    storage.download_file(shard.uri, local)
                    verify_shard(local, shard)
        except DataError as exc:
            return exc
        return None

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="shard-verify") as pool:
        for error in pool.map(check, shards):
            if error is not None:
                return error
    return None


def input_error(
    exc: BaseException,
    data_uri: str,
    metadata: DatasetMetadata,
    splits: Sequence[str],
    caches: Sequence[ShardCache] = (),
) -> ShardtrainError | None:
    """The user-facing error behind an exception out of a ``tf.data`` pipeline, or None.

    TensorFlow reports a corrupt shard as ``DataLossError: corrupted record at N`` without
    the file's name. A shard cache that found a download corrupt says which one; otherwise
    the CRC-32C of every shard of ``splits`` is checked (local and ``gs://`` files are read
    by TensorFlow directly and are not verified on the input path, which stays as fast as
    TensorFlow's reader). A corrupt record in a shard whose checksum matches (written
    corrupt) names the dataset and the splits.

    A shard that vanished after training started (TensorFlow's ``NotFoundError``, a 63-line
    "Graph execution error", or the shard cache's missing object) becomes
    :func:`shardtrain.data.verify.damaged_error`: the missing or cut-short files of
    ``splits`` (a listing, nothing read) and the command that repairs the dataset. Storage
    that stayed unreachable or is full while the cache downloaded keeps its own error (exit 3).
    """
    if isinstance(exc, ShardtrainError):
        return None  # already one line (an interruption, a storage error)
    for cache in caches:
        if isinstance(cache.error, (StorageUnavailableError, StorageFullError)):
            return cache.error
        if isinstance(cache.error, StorageError):  # a shard gone from the store
            return _vanished(cache.error, data_uri, metadata, splits)
        if isinstance(cache.error, DataError):  # a download that failed its CRC-32C
            return _with_repair(cache.error, data_uri, metadata)
        if cache.error is not None:
            return cache.error
    if type(exc).__name__ == "NotFoundError":
        return _vanished(exc, data_uri, metadata, splits)
    if type(exc).__name__ != "DataLossError":
        return None
    shards = [s for split in splits for s in split_shards(data_uri, metadata, split)]
    found = find_corrupt_shard([s for s in shards if s.num_records])
    if found is not None:
        return _with_repair(found, data_uri, metadata)
    reason = str(getattr(exc, "message", exc)).strip().splitlines()
    return _with_repair(
        DataError(
            f"{data_uri}: a corrupt record in split {' or '.join(map(repr, splits))} "
            f"({reason[-1] if reason else 'DataLossError'}) although every shard matches its "
            "CRC-32C; re-shard the dataset"
        ),
        data_uri,
        metadata,
    )


def _with_repair(error: ShardtrainError, data_uri: str, metadata: DatasetMetadata) -> DataError:
    """``error`` (a corrupt shard's line, which names no dataset) with the command that
    repairs the dataset it belongs to."""
    return DataError(f"{error}: `{repair_command(data_uri, metadata.to_dict())}`")


def _vanished(
    exc: BaseException, data_uri: str, metadata: DatasetMetadata, splits: Sequence[str]
) -> DataError:
    """The one line for a shard that could not be opened mid-run: the damaged shards of
    ``splits`` as a listing shows them now, or, if the listing shows none, the reader's own
    words (the last line of TensorFlow's message names the file)."""
    problems, _, _ = verify.check_shards(data_uri, metadata, splits, with_records=True)
    if problems:
        return verify.damaged_error(data_uri, metadata, problems, splits)
    lines = [ln.strip() for ln in str(getattr(exc, "message", exc)).splitlines() if ln.strip()]
    named = [ln for ln in lines if "No such file" in ln or "not found" in ln.lower()]
    reason = one_line(Exception((named or lines or [type(exc).__name__])[-1]))
    return DataError(
        f"{data_uri}: a shard of split {' or '.join(map(repr, splits))} could not be read "
        f"({reason}); repair: {repair_command(data_uri, metadata.to_dict())}"
    )


@contextlib.contextmanager
def reading_split(
    data_uri: str, metadata: DatasetMetadata, split: str, cache_dir: str, *, max_bytes: int
) -> Iterator[ShardCache | None]:
    """The context of one pass over ``split`` (an evaluation): a :class:`ShardCache` in
    ``cache_dir`` when TensorFlow cannot open ``data_uri`` (``s3://``; None otherwise), closed
    on exit; an error out of the ``tf.data`` pipeline inside becomes the user-facing one of
    :func:`input_error` (TensorFlow's error for a corrupt shard does not name the file)."""
    cache = None
    if not storage.tf_can_open(data_uri):
        cache = ShardCache(cache_dir, max_bytes=max_bytes)
    try:
        yield cache
    except Exception as exc:
        error = input_error(exc, data_uri, metadata, [split], [cache] if cache else [])
        if error is None:
            raise
        raise error from exc
    finally:
        if cache is not None:
            cache.close()


def split_shards(data_uri: str, metadata: DatasetMetadata, split: str) -> list[ShardFile]:
    """The committed shards of ``split`` with absolute URIs.

    Raises:
        DataError: the split does not exist or has no records.
    """
    splits = metadata.splits
    if split not in splits:
        raise DataError(f"{data_uri}: no split '{split}' (splits: {', '.join(splits) or 'none'})")
    files = [
        ShardFile(storage.join(data_uri, s.path), s.num_records, s.bytes, s.crc32c)
        for s in splits[split].shards
    ]
    if not any(f.num_records for f in files):
        raise DataError(f"{data_uri}: split '{split}' has no records")
    return files


def files_for_pipeline(
    shards: Sequence[ShardFile], pipeline_id: int, num_pipelines: int, *, where: str = ""
) -> list[ShardFile]:
    """The disjoint share of shards read by one input pipeline (round robin).

    Raises:
        ConfigError: fewer shards than input pipelines — some pipeline would read nothing
            (re-shard with ``--num-shards`` at least the number of workers).
    """
    if num_pipelines < 1 or not 0 <= pipeline_id < num_pipelines:
        raise ConfigError(f"input pipeline {pipeline_id} of {num_pipelines} makes no sense")
    if len(shards) < num_pipelines:
        raise ConfigError(
            f"{where or 'dataset'}: {len(shards)} shard(s) for {num_pipelines} input pipelines; "
            f"every pipeline needs at least one (re-shard with --num-shards >= {num_pipelines})"
        )
    return list(shards[pipeline_id::num_pipelines])


class ShardCache:
    """Streams remote shards to local disk ahead of the reader, in bounded space.

    ``paths(files)`` yields local paths in order; upcoming files are downloaded in the
    background while they fit in ``max_bytes``. ``release(path)`` deletes a file
    the reader has finished, making room for the next download. Files that TensorFlow can read
    natively are yielded as they are, without copying. Files named by :meth:`retain` (a set
    that fits in ``max_bytes``) are kept after reading and reused by later passes: an input
    pipeline whose share of the shards fits downloads each once, not once per epoch.

    Args:
        directory: where to keep files (default: a new temporary directory).
        max_bytes: bound on the bytes downloaded but not yet released.
        threads: parallel downloads.
    """

    def __init__(self, directory: str | None = None, max_bytes: int = 1 << 30, threads: int = 4):
        self._own_dir = directory is None
        self.directory = directory or tempfile.mkdtemp(prefix="shardtrain-cache-")
        os.makedirs(self.directory, exist_ok=True)
        self.max_bytes = max_bytes
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="shard-cache")
        self._cond = threading.Condition()
        self._in_use = 0  # bytes downloading or downloaded, not yet released
        self._sizes: dict[str, int] = {}
        self._counter = 0
        self.downloaded = 0  # files fetched so far (for tests and logs)
        self.peak_bytes = 0
        #: The first shard whose download failed (a missing object, storage unreachable) or
        #: that failed its CRC-32C check (see :func:`input_error`).
        self.error: ShardtrainError | None = None
        self._retain: set[str] = set()  # URIs kept after reading
        self._kept: dict[str, str] = {}  # URI -> local path of a kept download

    def retain(self, files: Sequence[ShardFile]) -> bool:
        """Keep ``files`` once downloaded (for later passes) if together they fit in
        ``max_bytes``; returns whether they do (else they stream as usual)."""
        if sum(f.bytes for f in files) > self.max_bytes:
            return False
        with self._cond:
            self._retain = {f.uri for f in files}
        return True

    def _start(self, shard: ShardFile) -> Future:
        with self._cond:
            kept = self._kept.get(shard.uri)
        if kept is not None or storage.tf_can_open(shard.uri):
            done: Future = Future()
            done.set_result(kept or shard.uri)
            return done
        with self._cond:
            self._in_use += shard.bytes
            self.peak_bytes = max(self.peak_bytes, self._in_use)
        return self._pool.submit(self._fetch, shard)

    def _fetch(self, shard: ShardFile) -> str:
        with self._cond:
            self._counter += 1
            n = self._counter
        if n == 1:
            log.info(
                "%s:// shards are not read by TensorFlow directly: staging them through the "
                "shard cache in %s (at most %d MB ahead)",
                storage.scheme(shard.uri),
                self.directory,
                self.max_bytes >> 20,
            )
        local = os.path.join(self.directory, f"{n:08d}-{storage.basename(shard.uri)}")
        try:
            storage.download_file(shard.uri, local)
        except ShardtrainError as exc:  # TensorFlow's error about it would not say why
            with self._cond:
                self.error = self.error or exc
            raise
        with self._cond:
            self._sizes[local] = shard.bytes
            self.downloaded += 1
        try:
            # The whole file is here anyway: check it before TensorFlow reads it (cheap with
            # the hardware CRC while the file is still in the page cache).
            verify_shard(local, shard)
        except DataError as exc:
            self.release(local)
            with self._cond:
                self.error = self.error or exc
            raise
        with self._cond:
            if shard.uri in self._retain:
                self._kept[shard.uri] = local
        return local

    def paths(self, files: Sequence[ShardFile]) -> Iterator[str]:
        """Local paths of ``files``, in order, prefetched while they fit in ``max_bytes``.

        The file the reader asks for is always fetched, so the generator never blocks on the
        bound (blocking could stall a reader that keeps files open while it asks for the
        next). Disk use is therefore at most ``max_bytes`` plus the files the reader holds:
        interleave's open files and the few paths it fetches ahead.
        """
        pending: collections.deque[Future] = collections.deque()
        upcoming = iter(files)
        nxt = next(upcoming, None)
        while True:
            while nxt is not None and (not pending or not self._over(nxt.bytes, self.max_bytes)):
                pending.append(self._start(nxt))
                nxt = next(upcoming, None)
            if not pending:
                return
            yield pending.popleft().result()

    def _over(self, size: int, limit: int) -> bool:
        with self._cond:
            return self._over_locked(size, limit)

    def _over_locked(self, size: int, limit: int) -> bool:
        # An empty cache always takes the next file, even one larger than the bound.
        return bool(self._in_use) and self._in_use + size > limit

    def release(self, path: str) -> None:
        """The reader is done with ``path``: delete it (if cached) and free its bytes."""
        with self._cond:
            if path in self._kept.values():
                return  # kept for the next pass
            size = self._sizes.pop(path, None)
            if size is None:
                return  # a native path, or released already
            self._in_use -= size
            self._cond.notify_all()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def close(self) -> None:
        """Stop downloading and delete the cache directory if it was created here."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)


#: Records read from one file as one tf.data element: a per-record element through a parallel
#: interleave pays tf.data's bookkeeping per record, which capped the reader; blocks of
#: consecutive records of a file pay it once per block (benchmarks/RESULTS.md has the figures).
BLOCK_RECORDS = 64
#: Bound on the bytes of one such block (big records, e.g. encoded images, make fewer a block).
BLOCK_BYTES = 1 << 20


def block_records(files: Sequence[ShardFile]) -> int:
    """Records per block for ``files``: :data:`BLOCK_RECORDS`, fewer for big records."""
    record_bytes = max(1, sum(f.bytes for f in files) // max(1, sum(f.num_records for f in files)))
    return max(1, min(BLOCK_RECORDS, BLOCK_BYTES // record_bytes))


def record_dataset(
    files: Sequence[ShardFile],
    *,
    compression: str,
    cache: ShardCache | None = None,
    shuffle_files: bool = False,
    seed: int | None = None,
    cycle_length: int = 4,
    block: int = 1,
    repeat: bool = False,
):
    """A ``tf.data.Dataset`` of serialized records from ``files``.

    Args:
        block: each element is a ``[<= block]`` vector of consecutive records of one file
            (1: one scalar record per element).
        shuffle_files: read the files in a seeded random order, a new one every pass.
        repeat: endless (every pass over the files in a new order with ``shuffle_files``);
            else one pass.

    Remote files TensorFlow cannot open are staged through ``cache`` (required then).
    """
    import tensorflow as tf

    files = list(files)
    comp = "GZIP" if compression.upper() == "GZIP" else ""
    cycle = min(cycle_length, len(files))

    def blocked(records):
        return records.batch(block) if block > 1 else records

    if all(storage.tf_can_open(f.uri) for f in files):
        paths = tf.data.Dataset.from_tensor_slices([f.uri for f in files])
        if shuffle_files:
            paths = paths.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
        if repeat:
            paths = paths.repeat()
        return paths.interleave(
            lambda p: blocked(tf.data.TFRecordDataset(p, compression_type=comp)),
            cycle_length=cycle,
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=False,
        )
    if cache is None:
        raise ConfigError("a ShardCache is needed to read shards TensorFlow cannot open")
    if repeat:  # every pass reads the same files: download them once if they fit
        cache.retain(files)

    def ordered(epoch: int) -> list[ShardFile]:
        if not shuffle_files:
            return files
        import random

        order = list(files)
        random.Random(f"{seed}-{epoch}").shuffle(order)
        return order

    def all_paths() -> Iterator[str]:
        epoch = 0
        try:
            while True:
                yield from cache.paths(ordered(epoch))
                epoch += 1
                if not repeat:
                    return
        except ShardtrainError:
            # cache.error holds it (a shard gone or corrupt): a path that does not exist
            # fails the read in TensorFlow's own code (NotFoundError, which input_error turns
            # into cache.error's line) instead of a generator error, which TensorFlow logs
            # with the Python traceback of its py_func (60 lines) before our one line.
            yield os.path.join(cache.directory, "shard-not-read-see-the-error-below")

    paths = tf.data.Dataset.from_generator(all_paths, output_signature=tf.TensorSpec((), tf.string))

    def release(path):
        cache.release(path.numpy().decode())
        return path

    def read_then_release(path):
        records = blocked(tf.data.TFRecordDataset(path, compression_type=comp))
        # One extra element that deletes the file once every record has been read, then is
        # filtered out: the cache learns exactly when the reader is done with a file.
        done = (
            tf.data.Dataset.from_tensors(path)
            # py_function loses the static shape; the records it is concatenated with are
            # scalars, and parse_example needs to know that after batching.
            .map(lambda p: tf.ensure_shape(tf.py_function(release, [p], tf.string), []))
            .filter(lambda _: False)
        )
        return records.concatenate(blocked(done))

    return paths.interleave(
        read_then_release,
        cycle_length=cycle,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=False,
    )


#: Bound on the bytes of serialized records held by one input pipeline's shuffle buffer.
SHUFFLE_BUFFER_BYTES = 128 << 20
#: Records permuted together before batches are cut from them: a batch draws its records
#: from about this many / block random blocks, not from a few runs of consecutive records
#: (shards keep their source's order: an image tree is listed class by class). Bounded in
#: bytes for big records.
GROUP_RECORDS = 4096
GROUP_BYTES = 32 << 20


def _permutation(seed: int, index: Any, rows: Any) -> Any:
    """A random order of ``range(rows)`` for group ``index``: a stateless shuffle seeded by
    ``(seed, group number)``, the same every run (under ``TF_DETERMINISTIC_OPS``)."""
    import tensorflow as tf

    return tf.random.experimental.stateless_shuffle(
        tf.range(rows, dtype=tf.int64), seed=tf.stack([tf.cast(seed, tf.int64), index])
    )


def _permuted(seed: int):
    """``(group number, records) -> records`` in a random order (:func:`_permutation`)."""
    import tensorflow as tf

    def permute(index, records):
        rows = tf.shape(records, out_type=tf.int64)[0]
        return tf.gather(records, _permutation(seed, index, rows))

    return permute


def train_dataset(
    data_uri: str,
    metadata: DatasetMetadata,
    spec: Any,
    *,
    split: str,
    batch_size: int,
    pipeline_id: int = 0,
    num_pipelines: int = 1,
    shuffle_buffer: int = 10_000,
    cycle_length: int = 4,
    seed: int = 0,
    cache: ShardCache | None = None,
    global_batch_size: int | None = None,
    permute_rows: str = "auto",
):
    """The endless, shuffled, batched and parsed training stream of one input pipeline.

    Reads this pipeline's disjoint share of the split's shards (:func:`files_for_pipeline`)
    in a new random order every pass, ``cycle_length`` files at a time in parallel, as
    *blocks* of consecutive records (:func:`block_records`); shuffles the blocks in a buffer
    of about ``shuffle_buffer`` records; cuts the stream into batches (``rebatch``) and
    *then* parses them with ``spec.parse_examples`` (vectorised), in parallel; prefetches.
    Between the block shuffle and the batches, groups of :data:`GROUP_RECORDS` records
    are permuted (a gather, cheap): a batch draws its records from about
    ``GROUP_RECORDS / block`` random blocks, not from runs of consecutive records.

    Args:
        batch_size: the per-replica batch (the global batch divided by the replicas in sync).
        pipeline_id, num_pipelines: from ``tf.distribute.InputContext``.
        cache: stages shards TensorFlow cannot open (s3://); required for such URIs.
        global_batch_size: every replica's batch together (default ``batch_size *
            num_pipelines``): the batch a gradient step averages over, which decides whether
            whole columnar blocks mix well enough (:func:`_columnar_train`).
        permute_rows: columnar records: ``auto`` or ``always`` (:func:`permute_columnar_rows`).

    Returns:
        A ``tf.data.Dataset`` of ``(features, label_index)`` batches, repeating forever.
    """
    import tensorflow as tf

    shards = split_shards(data_uri, metadata, split)
    mine = files_for_pipeline(
        [s for s in shards if s.num_records], pipeline_id, num_pipelines, where=data_uri
    )
    if metadata.record_format == "columnar":
        step_rows = global_batch_size or batch_size * num_pipelines
        permute = permute_columnar_rows(metadata, step_rows, permute_rows, shuffle_buffer)
        if pipeline_id == 0:
            log.info(
                "columnar input: %s",
                "rows of each group of blocks permuted"
                if permute
                else f"a step of {step_rows} rows is cut from whole blocks in hash order, no "
                "rows permuted (--permute-rows always to permute them)",
            )
        return _columnar_train(
            mine,
            metadata,
            spec,
            batch_size,
            shuffle_buffer,
            cycle_length,
            seed + pipeline_id,
            cache,
            permute,
        )
    block = block_records(mine)
    records = record_dataset(
        mine,
        compression=metadata.compression,
        cache=cache,
        shuffle_files=True,
        seed=seed + pipeline_id,
        cycle_length=cycle_length,
        block=block,
        repeat=True,
    )
    # The shuffle buffer holds serialized records: bound it in bytes too, or 10,000 encoded
    # images (~100 KB each) would take a gigabyte per input pipeline.
    record_bytes = max(1, sum(s.bytes for s in mine) // max(1, sum(s.num_records for s in mine)))
    buffer = max(1, min(shuffle_buffer, SHUFFLE_BUFFER_BYTES // record_bytes))
    group = max(batch_size, min(GROUP_RECORDS, GROUP_BYTES // record_bytes))
    batches = (
        records.shuffle(max(1, buffer // block), seed=seed + pipeline_id)
        .rebatch(group)
        .enumerate()
        .map(_permuted(seed + pipeline_id), num_parallel_calls=tf.data.AUTOTUNE)
        .rebatch(batch_size, drop_remainder=True)
        .map(spec.parse_examples, num_parallel_calls=tf.data.AUTOTUNE)
    )
    if getattr(spec, "image", None) is not None:  # decoded in parse_examples; now augment
        # Decoded image batches are big: a fixed, small prefetch instead of AUTOTUNE's.
        return batches.map(spec.augment, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2)
    return batches.prefetch(tf.data.AUTOTUNE)


#: Rows parsed together (columnar records), and permuted when the rows need it, before
#: batches are cut from them: a permuted batch draws its rows from about this many / 256
#: random blocks.
COLUMNAR_GROUP_ROWS = GROUP_RECORDS
#: Blocks a gradient step must span for whole blocks to mix well enough: with rows in hash
#: order (column_blocks.ROW_ORDER) a global batch of at least this many blocks' rows is cut
#: from whole shuffled blocks, and no rows are permuted.
MIN_MIXED_BLOCKS = 4


def _columnar_train(
    files: Sequence[ShardFile],
    metadata: DatasetMetadata,
    spec: Any,
    batch_size: int,
    shuffle_buffer: int,
    cycle_length: int,
    seed: int,
    cache: ShardCache | None,
    permute: bool,
):
    """:func:`train_dataset` for columnar records (blocks of rows, see
    :mod:`shardtrain.data.column_blocks`): shuffle blocks (about ``shuffle_buffer`` rows),
    parse a group of blocks at once, (``permute``: permute the group's rows,) cut batches.

    How rows mix. The sharder writes a block's rows in hash order (``options.row_order``),
    so every block is already a random sample of the rows one input batch (about
    ``--block-mb`` of source) sent to its shard, not a run of consecutive source rows. A
    gradient step of ``global_batch_size`` rows spanning at least
    :data:`MIN_MIXED_BLOCKS` blocks (1024 rows: the default batch) is then cut from whole
    blocks in the shuffled stream, as batches of several random samples, and no rows are
    permuted: that permutation (a gather of every column) was a large share of this input's
    CPU per row (figures in benchmarks/RESULTS.md). Smaller batches, and columnar datasets written
    before hash order, get the rows of each group of blocks permuted first. What the
    unpermuted stream gives up: rows of one block always share a step, every epoch (their
    partner blocks change). ``--permute-rows always`` permutes anyway.
    """
    import tensorflow as tf

    from shardtrain.data.column_blocks import BLOCK_ROWS

    records = record_dataset(
        files,
        compression=metadata.compression,
        cache=cache,
        shuffle_files=True,
        seed=seed,
        cycle_length=cycle_length,
        repeat=True,
    )
    group = max(1, -(-max(batch_size, COLUMNAR_GROUP_ROWS) // BLOCK_ROWS))
    blocks = records.shuffle(max(1, shuffle_buffer // BLOCK_ROWS), seed=seed).batch(group)
    if not permute:
        rows = blocks.map(spec.parse_blocks, num_parallel_calls=tf.data.AUTOTUNE)
        return rows.rebatch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    def parse_and_permute(index, blocks):
        features, labels = spec.parse_blocks(blocks)
        # The same permutations every run; a batch mixes rows of the group's blocks.
        order = _permutation(seed, index, tf.shape(labels, out_type=tf.int64)[0])
        return {k: tf.gather(v, order) for k, v in features.items()}, tf.gather(labels, order)

    return (
        blocks.enumerate()
        .map(parse_and_permute, num_parallel_calls=tf.data.AUTOTUNE)
        .rebatch(batch_size, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def permute_columnar_rows(
    metadata: DatasetMetadata,
    global_batch_size: int,
    mode: str = "auto",
    shuffle_buffer: int = 10_000,
) -> bool:
    """Whether the columnar training input permutes rows (see :func:`_columnar_train`):
    ``mode`` ``always``; or ``auto`` and either a step of ``global_batch_size`` rows spans
    fewer than :data:`MIN_MIXED_BLOCKS` blocks, the ``shuffle_buffer`` (rows) holds fewer
    than that many blocks, or the blocks are not in hash order."""
    from shardtrain.data.column_blocks import BLOCK_ROWS, ROW_ORDER

    if mode not in ("auto", "always"):
        raise ConfigError(f"permute_rows must be auto or always, not {mode!r}")
    if mode == "always":
        return True
    hashed = metadata.options.get("row_order") == ROW_ORDER
    enough = MIN_MIXED_BLOCKS * BLOCK_ROWS
    return not (hashed and global_batch_size >= enough and shuffle_buffer >= enough)


def record_parser(metadata: DatasetMetadata, spec: Any):
    """``parse(serialized, with_key=False)`` for a batch of ``metadata``'s records: rows as
    :meth:`~shardtrain.train.features.FeatureSpec.parse_examples` gives them, whichever the
    record format (a columnar record gives a block of rows)."""
    return spec.parse_blocks if metadata.record_format == "columnar" else spec.parse_examples


def eval_dataset(
    data_uri: str,
    metadata: DatasetMetadata,
    spec: Any,
    *,
    split: str,
    batch_size: int,
    cycle_length: int = 4,
    cache: ShardCache | None = None,
):
    """One pass over every record of ``split``, batched and parsed (for evaluation)."""
    import tensorflow as tf

    shards = [s for s in split_shards(data_uri, metadata, split) if s.num_records]
    if metadata.record_format == "columnar":
        from shardtrain.data.column_blocks import BLOCK_ROWS

        blocks = record_dataset(
            shards, compression=metadata.compression, cache=cache, cycle_length=cycle_length
        )
        rows = blocks.batch(max(1, -(-batch_size // BLOCK_ROWS))).map(
            spec.parse_blocks, num_parallel_calls=tf.data.AUTOTUNE
        )
        return rows.rebatch(batch_size).prefetch(tf.data.AUTOTUNE)
    records = record_dataset(
        shards,
        compression=metadata.compression,
        cache=cache,
        cycle_length=cycle_length,
        block=block_records(shards),
    )
    parsed = records.rebatch(batch_size).map(
        spec.parse_examples, num_parallel_calls=tf.data.AUTOTUNE
    )
    return parsed.prefetch(2 if getattr(spec, "image", None) is not None else tf.data.AUTOTUNE)
