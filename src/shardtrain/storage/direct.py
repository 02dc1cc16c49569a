"""Local writes around the page cache: ``O_DIRECT`` where the file system honours it.

``storage.open(path, "wb", direct=True)`` is for large local outputs that other processes
read later (the shards): they need not pass through the page cache, where copying them costs
CPU and evicts pages worth keeping. :func:`open_local_for_writing` decides per file: a
:class:`_DirectWriter` when ``SHARDTRAIN_DIRECT_IO`` is not ``0``, the platform has
``O_DIRECT`` and the directory lies on a local block-device file system (ext4, xfs, ...);
an ordinary buffered file otherwise, or when the open refuses ``O_DIRECT`` after all. Either
way the bytes written are the same.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import functools
import io
import mmap
import os
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

#: Set to ``0`` to make every local write go through the page cache.
DIRECT_IO_ENV = "SHARDTRAIN_DIRECT_IO"


def direct_io_enabled() -> bool:
    """Whether ``open(..., direct=True)`` may use ``O_DIRECT`` (``SHARDTRAIN_DIRECT_IO``)."""
    return os.environ.get(DIRECT_IO_ENV, "1").strip() != "0" and hasattr(os, "O_DIRECT")


class _DirectWriter(io.RawIOBase):
    """A local file written with ``O_DIRECT``: from an aligned buffer straight to the device.

    A buffered ``write`` copies every byte into the page cache, and that copy (plus
    allocating and accounting the pages) costs CPU of the order of encoding the data (see
    ``benchmarks/RESULTS.md``), for output that nobody reads back soon and that, at hundreds
    of GB, could never stay cached anyway. ``O_DIRECT`` hands the device our own
    buffer instead. Its rules: the memory address, the length and the file offset of every
    write must be multiples of the device's block size. So writes are staged in a
    page-aligned buffer (an anonymous ``mmap``) and leave in whole ``buffer_size`` chunks;
    on close, whole blocks of the remainder go the same way and the last partial block is
    written after switching ``O_DIRECT`` off for the descriptor.

    Whatever happens (a full disk, an interrupt), ``close`` and ``discard`` close the
    descriptor; no view of the buffer outlives a call, so the buffer can always be freed.
    """

    ALIGN = 4096  # a multiple of every common logical block size (512, 4096)
    #: Smaller pieces given to :meth:`write_in_place` are copied and staged instead: a
    #: direct write per piece would make a task with hundreds of open shards issue
    #: hundreds of small synchronous writes per block, where staging sends 1 MiB at a time.
    IN_PLACE_MIN = 128 * 1024

    def __init__(self, fd: int, buffer_size: int = 1024 * 1024):
        super().__init__()
        self._fd = fd
        self._size = buffer_size
        try:
            self._buf = mmap.mmap(-1, buffer_size)  # page-aligned, zero-filled
        except BaseException:
            os.close(fd)
            raise
        self._view = memoryview(self._buf)
        self._used = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        with memoryview(data) as raw, raw.cast("B") as source:
            n = len(source)
            pos = 0
            while pos < n:
                take = min(n - pos, self._size - self._used)
                self._view[self._used : self._used + take] = source[pos : pos + take]
                self._used += take
                pos += take
                if self._used == self._size:
                    self._write_range(0, self._size)
                    self._used = 0
        return n

    def write_in_place(self, buffer: np.ndarray, start: int, end: int) -> int:
        """Write ``buffer[start:end]``, sending its whole pages from ``buffer`` itself.

        ``write`` copies everything into the staging buffer first, a measurable share of
        sharding's CPU (see ``benchmarks/RESULTS.md``). Here only the edges are copied: the
        bytes of the file's last, partial page still staged (``tail``: the file size so far
        modulo :attr:`ALIGN`) go into ``buffer[start - tail:start]``, which the caller left
        free for them, and from there whole pages are written straight out of ``buffer``;
        the last partial page is staged for the next write. That needs ``buffer`` (1-D uint8,
        writable) to have ``buffer[start - tail]`` at an aligned address, which
        ``example_encode.encode_example_groups`` arranges when given the tail as the phase, and
        at least :attr:`IN_PLACE_MIN` bytes. Anything else is written with ``write``:
        still correct, only slower.
        """
        import numpy as np  # here: a pipeline step that only lists or reads JSON never loads it

        if not 0 <= start <= end <= len(buffer):
            raise ValueError(f"[{start}, {end}) is not a range of a {len(buffer)}-byte buffer")
        tail = self._used % self.ALIGN
        room = start - tail
        if (
            room < 0
            or end - start < self.IN_PLACE_MIN
            or buffer.dtype != np.uint8
            or buffer.ndim != 1
            or not buffer.flags.writeable
            or not buffer.flags.c_contiguous
            or (buffer.ctypes.data + room) % self.ALIGN
        ):
            return self.write(buffer.data[start:end])
        if self._used > tail:  # whole pages staged by `write`: out first
            self._write_range(0, self._used - tail)
            self._view[:tail] = self._view[self._used - tail : self._used]
        buffer[room:start] = np.frombuffer(self._view, dtype=np.uint8, count=tail)
        whole = (end - room) // self.ALIGN * self.ALIGN
        self._used = 0  # the staged tail now lives in `buffer`
        with buffer.data as view:
            self._write_all(view[room : room + whole])
            rest = view[room + whole : end]
            self._view[: len(rest)] = rest
            self._used = len(rest)
        return end - start

    def _write_range(self, start: int, end: int) -> None:
        """Write ``buffer[start:end]``, all of it."""
        with self._view[start:end] as chunk:
            self._write_all(chunk)

    def _write_all(self, data: memoryview) -> None:
        """Write all of ``data`` (aligned in address and length while O_DIRECT is on)."""
        done = 0
        while done < len(data):
            with data[done:] as chunk:
                try:
                    done += os.write(self._fd, chunk)
                except OSError as exc:
                    # Some file systems accept O_DIRECT at open and refuse it at write:
                    # carry on through the page cache.
                    if exc.errno != errno.EINVAL or not self._buffered_from_now_on():
                        raise

    def _buffered_from_now_on(self) -> bool:
        """Switch O_DIRECT off; False if it was off already (the EINVAL has another cause)."""
        import fcntl  # POSIX only, like O_DIRECT itself

        flags = fcntl.fcntl(self._fd, fcntl.F_GETFL)
        if not flags & os.O_DIRECT:
            return False
        fcntl.fcntl(self._fd, fcntl.F_SETFL, flags & ~os.O_DIRECT)
        return True

    def close(self) -> None:
        """Write what is staged, then release everything (also when the write fails)."""
        if self.closed:
            return
        try:
            whole = self._used - self._used % self.ALIGN
            if whole:
                self._write_range(0, whole)
            if self._used > whole:
                self._buffered_from_now_on()  # the last, partial block
                self._write_range(whole, self._used)
        finally:
            self.discard()

    def discard(self) -> None:
        """Release the descriptor and the buffer without writing what is staged."""
        if self.closed:
            return
        try:
            os.close(self._fd)
        finally:
            self._view.release()
            with contextlib.suppress(BufferError):  # a caller's view: freed with it
                self._buf.close()
            super().close()


#: File systems on a local block device, where O_DIRECT does what it should. Elsewhere
#: (NFS, CIFS, FUSE, overlay, tmpfs) it is refused, ignored, or makes every write a round
#: trip, so local writes there go through the page cache.
_DIRECT_IO_FILE_SYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs"})


@functools.cache
def _mounts() -> tuple[tuple[str, str], ...]:
    """``(mount point, file system type)`` of every mount, longest mount point first."""
    try:
        with builtins.open("/proc/self/mounts", encoding="utf-8") as f:
            entries = [line.split()[1:3] for line in f if len(line.split()) >= 3]
    except OSError:
        return ()
    points = [(point.replace("\\040", " "), kind) for point, kind in entries]
    return tuple(sorted(points, key=lambda e: len(e[0]), reverse=True))


def _on_block_device(path: str) -> bool:
    """Whether ``path`` lies on a file system from :data:`_DIRECT_IO_FILE_SYSTEMS`."""
    path = os.path.realpath(path)
    for point, kind in _mounts():
        if path == point or path.startswith(point.rstrip("/") + "/"):
            return kind in _DIRECT_IO_FILE_SYSTEMS
    return False


def open_local_for_writing(tmp: str, direct: bool) -> IO[bytes]:
    """``tmp`` created for writing: a :class:`_DirectWriter` when ``direct`` is asked for and
    this file system takes ``O_DIRECT``, an ordinary buffered file otherwise."""
    if direct and direct_io_enabled() and _on_block_device(os.path.dirname(tmp) or "."):
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o666)
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # EINVAL: no O_DIRECT here after all
                raise
        else:
            return _DirectWriter(fd)  # type: ignore[return-value]
    return builtins.open(tmp, "wb")
