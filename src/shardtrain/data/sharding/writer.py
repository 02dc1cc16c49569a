"""Writing shards: rows assigned to splits and shards, encoded, compressed and streamed.

:func:`write_batch` hashes nothing itself: each row comes with the 64-bit hash of its key
(or of the whole row) from the source. The high 53 bits choose the split, the low 32 bits a
shard inside the task's range, so the same row lands in the same place on every run. Rows are
encoded and TFRecord-framed in compiled code, grouped by shard, and written by a
:class:`BackgroundWriter` thread while the next block is parsed; each :class:`ShardWriter`
compresses (gzip level 1 through ISA-L) and checksums (CRC-32C) what it writes.
"""

from __future__ import annotations

import contextlib
import queue as queue_module
import threading
import zlib
from typing import Any

import numpy as np
import pyarrow as pa

from shardtrain import storage
from shardtrain.data import column_blocks, examples
from shardtrain.data.schema import Schema
from shardtrain.data.shard_config import MIB
from shardtrain.kernels import crc32c, example_encode, row_order


def _gzip_compressor(level: int) -> Any:
    """A streaming gzip compressor (``compress``/``flush``) at ``level`` (1-9).

    Level 1, the default, is ISA-L's deflate (the ``isal`` package, Intel's igzip): several
    times faster than zlib's level 1 on Examples for the same ratio (figures in
    benchmarks/RESULTS.md). Its output is ordinary gzip: TensorFlow's ``GZIP`` readers,
    ``gzip`` and ``zlib`` read it. Levels 2-9 trade speed for size with zlib; so does every
    level where ``isal`` is not installed.
    """
    if level == 1:
        try:
            from isal import isal_zlib
        except ImportError:  # a platform without wheels: zlib is always there
            pass
        else:
            return isal_zlib.compressobj(1, isal_zlib.DEFLATED, 31)
    return zlib.compressobj(level, zlib.DEFLATED, 31)


class ShardWriter:
    """Streams framed records into one shard object, gzip-compressing and checksumming.

    Uncompressed local shards written with ``O_DIRECT`` are written *in place*: the
    encoder puts each shard's records of a block at the page phase its file has reached
    (:attr:`phase`), so that whole pages go to the disk straight from the encoder's buffer
    (see ``storage.direct._DirectWriter.write_in_place``).
    """

    def __init__(
        self,
        uri: str,
        path: str,
        gzip_level: int | None,
        stack: contextlib.ExitStack,
        *,
        in_place: bool = True,
    ):
        self.uri = uri
        self.path = path
        self.records = 0
        self.bytes = 0
        self.crc = 0
        # The S3 minimum part size: a task keeps several shards open at once, each with one
        # part in memory. Local shards bypass the page cache (see storage.direct._DirectWriter).
        self._f: Any = stack.enter_context(  # an O_DIRECT writer has write_in_place
            storage.open(uri, "wb", block_size=5 * MIB, direct=True)
        )
        self._z = _gzip_compressor(gzip_level) if gzip_level else None
        # Columnar blocks are framed apart from the per-row encoder: written normally.
        self.in_place = in_place and self._z is None and hasattr(self._f, "write_in_place")
        self.queued = 0  # bytes handed to write() so far, counted where jobs are made

    @property
    def phase(self) -> int:
        """Where in its last page the file will end once every queued write is done."""
        return self.queued % example_encode.PAGE

    def write(self, buffer: np.ndarray, start: int, end: int, records: int) -> None:
        """Write the framed records ``buffer[start:end]`` (on the writer thread)."""
        self.records += records
        if self._z is not None:
            self._emit(self._z.compress(buffer.data[start:end]))
        elif end > start:
            self._count(buffer[start:end])
            if self.in_place:
                self._f.write_in_place(buffer, start, end)
            else:
                self._f.write(buffer.data[start:end])

    def _emit(self, data: bytes | memoryview) -> None:
        if len(data):
            self._f.write(data)
            self._count(np.frombuffer(data, dtype=np.uint8))

    def _count(self, data: np.ndarray) -> None:
        """Add bytes written to the shard's size and checksum."""
        self.bytes += len(data)
        self.crc = crc32c.crc32c(data, self.crc)

    def finish(self) -> None:
        if self._z is not None:
            self._emit(self._z.flush())
            self._z = None

    def manifest(self, split: str, index: int) -> dict[str, Any]:
        return {
            "split": split,
            "index": index,
            "path": self.path,
            "num_records": self.records,
            "bytes": self.bytes,
            "crc32c": f"{self.crc:08x}",
        }


def _scramble(row_hash: np.ndarray) -> np.ndarray:
    """A pseudo-random uint64 per row from its hash and its index (SplitMix64's finaliser):
    a sort key independent of the hash bits that chose the split and the shard."""
    z = row_hash + np.arange(len(row_hash), dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def write_batch(
    table: pa.Table,
    row_hash: np.ndarray,
    schema: Schema,
    fractions: np.ndarray,
    base: np.ndarray,
    counts: np.ndarray,
    writers: list[ShardWriter],
    record_format: str = column_blocks.EXAMPLE,
) -> list[tuple[ShardWriter, np.ndarray, int, int, int]]:
    """Encode a batch into TFRecord frames grouped by shard; returns the writes to do:
    ``(writer, buffer, start, end, rows)``.

    ``record_format`` ``columnar`` writes blocks of rows per record
    (:mod:`shardtrain.data.column_blocks`) instead of one Example per row.
    """
    # High 53 bits → split (uniform in [0, 1)); low 32 bits → shard inside the task's range.
    unit = (row_hash >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
    split = np.minimum(np.searchsorted(fractions, unit, side="right"), len(fractions) - 1)
    low = row_hash & np.uint64(0xFFFFFFFF)
    local = ((low * counts[split]) >> np.uint64(32)).astype(np.int64)
    slot = base[split] + local
    per_slot = np.bincount(slot, minlength=len(writers))
    bounds = np.concatenate(([0], np.cumsum(per_slot)))
    if record_format == column_blocks.COLUMNAR:
        # Blocks of rows are what the training input mixes (it permutes no rows when a batch
        # spans enough blocks): within each shard, this batch's rows go in a pseudo-random
        # order (a mix of each row's hash and its place in the batch: rows of one repeated
        # key are spread too), so a block is a random sample of them, not a run of
        # consecutive source rows. Deterministic: a re-run writes the same bytes.
        order = row_order.shard_order(slot, _scramble(row_hash), len(writers))
        slots = np.flatnonzero(per_slot).tolist()
        framed, spans = column_blocks.encode_blocks(
            table, schema, [(int(bounds[s]), int(bounds[s + 1])) for s in slots], order=order
        )
        jobs = []
        for s, (start, end, rows) in zip(slots, spans, strict=True):
            writers[s].queued += end - start
            jobs.append((writers[s], framed, start, end, rows))
        return jobs
    # Stable, so rows keep their input order within a shard. NumPy radix-sorts 16-bit keys,
    # far faster than its merge sort of int64 keys.
    keys = slot.astype(np.uint16) if len(writers) <= 1 << 16 else slot
    order = np.argsort(keys, kind="stable")
    columns, arrays = examples.encoder_input(table, schema)
    if all(w.in_place for w in writers):
        phases = np.array([w.phase for w in writers], dtype=np.int64)
        framed, starts, ends = example_encode.encode_example_groups(
            columns, arrays, table.num_rows, order=order, bounds=bounds, phases=phases
        )
    else:
        framed, offsets = example_encode.encode_examples(
            columns, arrays, table.num_rows, order=order, framed=True
        )
        starts, ends = offsets[bounds[:-1]], offsets[bounds[1:]]
    jobs = []
    for s in np.flatnonzero(per_slot).tolist():
        start, end = int(starts[s]), int(ends[s])
        writers[s].queued += end - start
        jobs.append((writers[s], framed, start, end, int(per_slot[s])))
    return jobs


class BackgroundWriter:
    """Compresses and writes shard data on a thread while the next block is parsed.

    Writing is mostly kernel time (page cache copies, network sends) and zlib releases the
    GIL, so it overlaps with parsing and encoding. At most ``depth`` blocks wait in the queue,
    which bounds memory (each holds the encoded Examples of one block, about four times the
    block's CSV); a deeper queue is no faster. An error on the thread is raised on the next
    submit or on close.
    """

    def __init__(self, depth: int = 1):
        self._queue: queue_module.Queue = queue_module.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="shard-writer", daemon=True)
        self._thread.start()
        self._closed = False

    def _run(self) -> None:
        while (jobs := self._queue.get()) is not None:
            if self._error is not None:
                continue  # drain without writing after a failure
            try:
                for writer, buffer, start, end, records in jobs:
                    writer.write(buffer, start, end, records)
            except BaseException as exc:  # handed to the producing thread
                self._error = exc

    def submit(self, jobs: list) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(jobs)

    def close(self) -> None:
        """Wait for every queued write; raise the writer thread's error, if any."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join()
        if self._error is not None:
            raise self._error

    def __enter__(self) -> BackgroundWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join()
