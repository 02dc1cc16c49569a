"""Is a committed dataset still what ``metadata.json`` says? Every shard present, of its
recorded size, with its recorded CRC-32C; and the command that rebuilds it when not.

``metadata.json`` records each shard's ``bytes`` and ``crc32c`` (the CRC-32C of the file's
bytes as written, after any gzip: :mod:`shardtrain.data.sharding.writer`). Two depths of
check read them:

* :func:`check_shards` with ``read=False``: presence and size only, from one listing per
  split folder (no object is read, one listing call per page of objects on S3/GCS). What
  ``train`` runs before step 1 (:func:`require_shards`): a deleted or cut-short shard is one
  line before any TensorFlow work, not a traceback once the reader reaches it.
* :func:`verify_dataset` (``shardtrain inspect --verify``): presence and size, then every
  shard streamed through the compiled CRC-32C (:mod:`shardtrain.kernels.crc32c`) in
  :data:`CHUNK` pieces, a few shards at a time: memory stays bounded whatever the shards'
  size, on local disk, ``s3://`` and ``gs://`` alike (read through :mod:`shardtrain.storage`).

A damaged dataset is repaired by sharding it again over itself: every finding names the
command (:func:`shardtrain.data.repair.repair_command`).

Why ``inspect --verify`` and not ``validate``: ``validate`` compares two datasets' recorded
statistics and reads ``metadata.json`` only (milliseconds, any dataset size); whether the
bytes behind it are intact is another question, with another cost (every byte read), asked
on its own. ``train`` asks the cheap half of it every time.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from shardtrain import storage
from shardtrain.data.metadata import METADATA_NAME, DatasetMetadata
from shardtrain.data.repair import repair_command
from shardtrain.errors import (
    DataError,
    NotCommittedError,
    ShardtrainError,
    StorageFullError,
    StorageUnavailableError,
)

#: Bytes read (and checksummed) at a time: what one shard being verified holds in memory.
CHUNK = 8 << 20
#: Shards verified at once (the CRC kernel releases the GIL; remote reads overlap).
THREADS = 4
#: Bad shards a one-line error names before "and N more".
_NAMED = 3


@dataclass(frozen=True)
class ShardProblem:
    """One shard that is not what ``metadata.json`` records.

    Attributes:
        uri: the shard's URI.
        kind: ``missing``, ``size`` or ``crc``.
        what: what is wrong, e.g. ``size 120 != recorded 189``.
    """

    uri: str
    kind: str
    what: str

    def line(self) -> str:
        return f"{self.uri}: {self.what}"


@dataclass(frozen=True)
class Verification:
    """What :func:`verify_dataset` found.

    Attributes:
        uri: the dataset.
        shards: shards checked; ``bytes_read``: bytes checksummed; ``seconds``: time taken.
        problems: the shards that differ from ``metadata.json``, in split and shard order.
        metadata_error: why ``metadata.json`` could not be read (then no shard was checked).
        repair: the command that rebuilds the dataset (:func:`repair_command`).
        splits: the dataset's splits.
    """

    uri: str
    shards: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    problems: tuple[ShardProblem, ...] = ()
    metadata_error: str | None = None
    repair: str = ""
    splits: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems and self.metadata_error is None

    def lines(self) -> list[str]:
        """One line per damaged file: its URI and what is wrong."""
        if self.metadata_error is not None:
            return [self.metadata_error]
        return [p.line() for p in self.problems]

    def summary(self) -> str:
        """One line: what was verified, or what is damaged and the command that repairs it."""
        if self.metadata_error is not None:
            return (
                f"{self.uri}: {METADATA_NAME} cannot be read, so no shard was checked; "
                f"repair: {self.repair}"
            )
        if self.problems:
            kinds = Counter(p.kind for p in self.problems)
            counts = ", ".join(
                f"{kinds[k]} {name}" for k, name in _KIND_NAMES.items() if kinds.get(k)
            )
            return (
                f"{self.uri}: {len(self.problems)} of {self.shards} shard(s) damaged "
                f"({counts}); repair: {self.repair}"
            )
        rate = self.bytes_read / 1e6 / self.seconds if self.seconds else 0.0
        return (
            f"{self.uri}: all {self.shards} shard(s) of {', '.join(self.splits)} present, of "
            f"their recorded sizes and CRC-32C ({self.bytes_read / 1e6:,.1f} MB read in "
            f"{self.seconds:.1f}s, {rate:,.0f} MB/s)"
        )


_KIND_NAMES = {"missing": "missing", "size": "of the wrong size", "crc": "failing CRC-32C"}


def file_crc32c(stream: Any, chunk: int = CHUNK) -> tuple[int, int]:
    """``(CRC-32C, size)`` of the bytes of an open binary ``stream``, read ``chunk`` bytes at a
    time (bounded memory); the CRC as the sharder computes it (``metadata.json``'s
    ``crc32c`` is ``f"{crc:08x}"``)."""
    import numpy as np

    from shardtrain.kernels.crc32c import crc32c

    crc, size = 0, 0
    buffer = np.empty(chunk, dtype=np.uint8)
    while n := stream.readinto(buffer):  # into one buffer: no allocation per chunk
        crc = crc32c(buffer[:n], crc)
        size += n
    return crc, size


def _read_crc(uri: str) -> tuple[int, int]:
    """CRC-32C and size of the object at ``uri``, streamed."""
    if storage.is_local(uri):
        with open(storage.local_path(uri), "rb", buffering=0) as f:
            return file_crc32c(f)
    with storage.open(uri, "rb", block_size=CHUNK) as f:
        return file_crc32c(f)


def _shards(
    uri: str, meta: DatasetMetadata, splits: Sequence[str] | None, with_records: bool
) -> list[tuple[str, Any]]:
    """``(shard URI, ShardInfo)`` of ``splits`` (all by default), in split and shard order."""
    names = list(meta.splits) if splits is None else list(dict.fromkeys(splits))
    return [
        (storage.join(uri, s.path), s)
        for name in names
        for s in meta.split(name, uri).shards
        if s.num_records or not with_records
    ]


def _key(uri: str) -> str:
    """``uri`` in one form whichever way a listing spells it (local paths made absolute)."""
    return os.path.abspath(storage.local_path(uri)) if storage.is_local(uri) else uri


def _listed_sizes(shard_uris: Iterable[str]) -> dict[str, int]:
    """Size of every object in the folders of ``shard_uris`` (by :func:`_key`): one listing
    per folder."""
    sizes: dict[str, int] = {}
    for folder in dict.fromkeys(u.rsplit("/", 1)[0] for u in shard_uris):
        for info in storage.walk_infos(folder):
            sizes[_key(info.uri)] = info.size
    return sizes


def check_shards(
    uri: str,
    meta: DatasetMetadata,
    splits: Sequence[str] | None = None,
    *,
    read: bool = False,
    with_records: bool = False,
    threads: int = THREADS,
) -> tuple[list[ShardProblem], int, int]:
    """The shards of ``splits`` (all by default) that differ from ``metadata.json``.

    Args:
        read: also stream every present shard of the right size through the CRC-32C (else
            presence and size only, from listings: nothing is read).
        with_records: only the shards holding records (what a reader opens; the empty shards
            of a small split are never read).

    Returns:
        ``(problems, shards checked, bytes read)``.
    """
    shards = _shards(uri, meta, splits, with_records)
    sizes = _listed_sizes(u for u, _ in shards)
    problems: dict[str, ShardProblem] = {}
    to_read = []
    for shard_uri, info in shards:
        size = sizes.get(_key(shard_uri))
        if size is None:
            problems[shard_uri] = ShardProblem(shard_uri, "missing", "missing")
        elif size != info.bytes:
            what = f"size {size:,} != recorded {info.bytes:,} bytes"
            problems[shard_uri] = ShardProblem(shard_uri, "size", what)
        elif read:
            to_read.append((shard_uri, info))

    def crc_problem(item: tuple[str, Any]) -> tuple[ShardProblem | None, int]:
        shard_uri, info = item
        try:
            crc, size = _read_crc(shard_uri)
        except (StorageUnavailableError, StorageFullError):
            raise
        except (ShardtrainError, FileNotFoundError):  # deleted since the listing
            return ShardProblem(shard_uri, "missing", "missing"), 0
        if size != info.bytes:
            what = f"size {size:,} != recorded {info.bytes:,} bytes"
            return ShardProblem(shard_uri, "size", what), size
        if f"{crc:08x}" != str(info.crc32c).lower():
            what = f"CRC-32C mismatch ({crc:08x} != recorded {info.crc32c} of {size:,} bytes)"
            return ShardProblem(shard_uri, "crc", what), size
        return None, size

    nbytes = 0
    if to_read:
        with ThreadPoolExecutor(max(1, min(threads, len(to_read))), "shard-verify") as pool:
            for problem, size in pool.map(crc_problem, to_read):
                nbytes += size
                if problem is not None:
                    problems[problem.uri] = problem
    ordered = [problems[u] for u, _ in shards if u in problems]
    return ordered, len(shards), nbytes


def verify_dataset(uri: str, *, threads: int = THREADS) -> Verification:
    """Check every shard of the dataset at ``uri`` against ``metadata.json``: present, of its
    recorded size, of its recorded CRC-32C (every byte read, streamed).

    A ``metadata.json`` that cannot be read is itself the finding (its error line, and the
    repair command from ``_plan.json``). A missing one is not: the dataset was never finished
    (:class:`~shardtrain.errors.NotCommittedError`, raised: the same ``shard`` command
    resumes it), and neither is storage that is unreachable or full (raised, exit 3).
    """
    started = time.monotonic()
    try:
        meta = DatasetMetadata.load(uri)
    except (StorageUnavailableError, StorageFullError, NotCommittedError):
        raise  # not a damaged dataset: storage away, or a dataset never finished
    except ShardtrainError as exc:
        return Verification(uri, metadata_error=str(exc), repair=repair_command(uri))
    problems, shards, nbytes = check_shards(uri, meta, read=True, threads=threads)
    return Verification(
        uri,
        shards=shards,
        bytes_read=nbytes,
        seconds=time.monotonic() - started,
        problems=tuple(problems),
        repair=repair_command(uri, meta.to_dict()) if problems else "",
        splits=tuple(meta.splits),
    )


def require_shards(uri: str, meta: DatasetMetadata, splits: Sequence[str]) -> None:
    """Refuse a dataset whose shards of ``splits`` that hold records are not all present with
    their recorded sizes (listings only: nothing is read).

    Raises:
        DataError: one line naming the missing or cut-short files and the repair command.
    """
    problems, _, _ = check_shards(uri, meta, splits, with_records=True)
    if problems:
        raise damaged_error(uri, meta, problems, splits)


def damaged_error(
    uri: str, meta: DatasetMetadata, problems: Sequence[ShardProblem], splits: Sequence[str]
) -> DataError:
    """The one-line error of shards of ``splits`` found damaged: the first few named with
    what is wrong, and the command that repairs the dataset."""
    shown = "; ".join(
        f"{p.uri.removeprefix(uri.rstrip('/') + '/')} {p.what}" for p in problems[:_NAMED]
    )
    more = f"; and {len(problems) - _NAMED} more" if len(problems) > _NAMED else ""
    which = ", ".join(f"'{s}'" for s in dict.fromkeys(splits))
    return DataError(
        f"{uri}: {len(problems)} shard(s) damaged ({shown}{more}; splits {which} checked); "
        f"repair: {repair_command(uri, meta.to_dict())}"
    )
