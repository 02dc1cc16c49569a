"""Where the compiled kernels are cached, and for which CPU they are compiled.

numba compiles a ``cache=True`` kernel once per argument types and stores the machine code
on disk; every later process loads it instead of compiling it again, which for all the
kernels together would cost seconds of CPU in every process (figures in
benchmarks/RESULTS.md). Two things decide whether a cached kernel is used:

* **Where numba looks.** numba tries, in order, ``NUMBA_CACHE_DIR`` (when set), the
  ``__pycache__`` folder beside the source file (only when it is *writable*) and a per-user
  folder (``~/.cache/numba``). An image installs shardtrain into site-packages as root and
  warms the cache there (``shardtrain warm-up``), but runs as an unprivileged user for whom
  site-packages is read-only: numba would skip the shipped cache and compile everything
  again in every pod. :class:`ShippedCacheLocator` sits between the last two: for
  shardtrain's own kernels, when ``__pycache__`` is read-only, it uses the per-user folder
  and first copies in what the install shipped for that kernel. A kernel the install did not
  ship is compiled and saved there as usual.
* **Which CPU the code is for.** A cached kernel is keyed by the source's hash, its
  argument types and the LLVM target: triple, CPU name and CPU features. By default those
  are the build machine's (e.g. ``skylake-avx512`` and its features), so a cache built on
  one node is ignored on another. ``NUMBA_CPU_NAME=x86-64-v2`` with ``NUMBA_CPU_FEATURES=``
  (empty) compiles for the x86-64-v2 baseline (SSE4.2, POPCNT: every x86-64 server CPU since
  2009) and keys the cache by that alone, so it is valid on any x86-64-v2 node. The image sets
  both; the same values must be set when the cache is built and when it is used.
  :func:`target` reports the target in effect.

:func:`install_locator` is called by ``shardtrain.kernels`` before any kernel module is
imported (numba picks a kernel's cache folder when the kernel is defined).

When editing kernels: numba checks only the file that defines a cached kernel (its time
stamp and size, and the kernel's own bytecode), not the files of the helpers compiled into
it. A kernel of ``csv_parse.py`` inlines helpers of ``csv_fields.py``, ``csv_float.py``
and ``native.py``; after changing one of those, delete the ``*.nbi`` index files in
``src/shardtrain/kernels/__pycache__`` (or touch the calling module), or the old machine
code keeps running. An installed package is not affected: its cache is built from the
installed sources.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from numba.core import caching
from numba.core import config as numba_config
from numba.core.dispatcher import Dispatcher

__all__ = [
    "CompileStats",
    "ShippedCacheLocator",
    "Target",
    "compile_stats",
    "install_locator",
    "target",
]

# numba's settings, read from NUMBA_* at its import (its type stubs omit most of them).
_config: Any = numba_config

#: The root of the installed package: only kernels below it use :class:`ShippedCacheLocator`.
_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def _numba_class(name: str) -> Any:
    """A class of numba's caching module: public since numba 0.62, ``_``-prefixed in 0.61."""
    return getattr(caching, name, None) or getattr(caching, f"_{name}")


_CacheImpl = _numba_class("CacheImpl")
_InTreeCacheLocator = _numba_class("InTreeCacheLocator")
_UserWideCacheLocator = _numba_class("UserWideCacheLocator")


class ShippedCacheLocator(_UserWideCacheLocator):  # type: ignore[misc,valid-type]
    """A shardtrain kernel's cache in a per-user folder, seeded from a read-only install.

    Used only for files of the shardtrain package whose ``__pycache__`` is not writable
    (numba's in-tree locator, tried first, takes the writable case). The folder is numba's
    per-user cache (``$XDG_CACHE_HOME/numba`` or ``~/.cache/numba``), or, when that cannot
    be written either (a read-only root file system with no writable HOME), a folder in the
    temporary directory. Before numba reads the index, the kernel's index and machine-code
    files are copied there from the install's ``__pycache__`` unless they already are: a few
    files per kernel, once per user. The copy is written under a temporary name and
    renamed into place, so processes starting together do not see half a file. An index
    there already (e.g. from an older install in a persistent HOME) is left alone: numba sees
    that the source changed, compiles once and saves over it.
    """

    def __init__(self, py_func: Any, py_file: str):
        super().__init__(py_func, py_file)
        self._shipped = Path(py_file).parent / "__pycache__"
        qualname = getattr(py_func, "__qualname__", py_func.__name__)
        name = f"{Path(py_file).stem}.{qualname}".replace("<", "").replace(">", "")
        # numba's CacheImpl.get_filename_base: "<module>.<qualname>-<line>.py<XY><abiflags>".
        self._base = "%s-%s.py%d%d%s" % (  # noqa: UP031 - numba's own format
            name,
            py_func.__code__.co_firstlineno,
            sys.version_info[0],
            sys.version_info[1],
            getattr(sys, "abiflags", ""),
        )

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> ShippedCacheLocator | None:
        path = Path(py_file).resolve()
        if _PACKAGE_DIR not in path.parents:
            return None
        self = cls(py_func, py_file)
        for folder, shared_parent in (
            (self._cache_path, False),
            (_temporary_cache_dir(py_file), True),
        ):
            self._cache_path = folder
            try:
                # In the shared temporary directory, only a folder of our own that nobody else
                # can write to: numba unpickles the index files it finds.
                if shared_parent and not _own_private_dir(_temporary_root()):
                    continue
                self.ensure_cache_path()
            except OSError:
                continue
            self._seed()
            return self
        return None

    def _seed(self) -> None:
        """Copy this kernel's shipped index and code files in, when they are not there yet."""
        index = f"{self._base}.nbi"
        if os.path.exists(os.path.join(self._cache_path, index)):
            return
        with contextlib.suppress(OSError):  # nothing shipped: numba compiles and saves here
            # Sorted, "<base>.<n>.nbc" come before "<base>.nbi": the index is published last.
            for src in sorted(self._shipped.glob(f"{self._base}.*")):
                if src.suffix not in (".nbi", ".nbc"):
                    continue
                fd, tmp = tempfile.mkstemp(dir=self._cache_path, prefix=".seed-")
                os.close(fd)
                try:
                    shutil.copyfile(src, tmp)
                    os.replace(tmp, os.path.join(self._cache_path, src.name))
                finally:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(tmp)


def _temporary_root() -> str:
    """The per-user folder in the temporary directory (see :func:`_temporary_cache_dir`)."""
    return os.path.join(tempfile.gettempdir(), f"shardtrain-numba-{os.getuid()}")


def _temporary_cache_dir(py_file: str) -> str:
    """The last resort: a per-user folder in the temporary directory.

    Used only when :func:`_own_private_dir` accepts its root: numba unpickles the ``.nbi``
    index files it finds there, so a folder another local user made (the name is predictable)
    could run their code in our process.
    """
    subpath = _UserWideCacheLocator.get_suitable_cache_subpath(py_file)
    return os.path.join(_temporary_root(), subpath)


def _own_private_dir(path: str) -> bool:
    """Create ``path`` (mode 0700) if missing; True if it is a real directory of this user
    that nobody else can write to (not a symbolic link, no group or other write bit)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    return (
        stat.S_ISDIR(st.st_mode)
        and st.st_uid == os.getuid()
        and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def install_locator() -> None:
    """Make numba look for shardtrain's kernels in the shipped cache (idempotent).

    :class:`ShippedCacheLocator` goes right after numba's in-tree locator, before its
    per-user one; ``NUMBA_CACHE_DIR``, when set, still comes first.
    """
    classes = _CacheImpl._locator_classes
    if ShippedCacheLocator not in classes:
        classes.insert(classes.index(_InTreeCacheLocator) + 1, ShippedCacheLocator)


@dataclass(frozen=True)
class Target:
    """The CPU the kernels are compiled for, as numba keys its cache by it."""

    cpu_name: str
    """``NUMBA_CPU_NAME``, or the host's CPU (``skylake-avx512``, ...) when unset."""
    cpu_features: str
    """``NUMBA_CPU_FEATURES``, or the host's feature list when unset."""
    portable: bool
    """True when neither depends on the host (``NUMBA_CPU_NAME`` and ``NUMBA_CPU_FEATURES``
    both set): a cache built here is valid on any CPU of that name."""


def target() -> Target:
    """The compilation target in effect (read from numba's configuration)."""
    import llvmlite.binding as llvm
    from numba.core.codegen import get_host_cpu_features

    name, features = _config.CPU_NAME, _config.CPU_FEATURES
    return Target(
        cpu_name=name if name is not None else llvm.get_host_cpu_name(),
        cpu_features=features if features is not None else get_host_cpu_features(),
        portable=name is not None and features is not None,
    )


@dataclass(frozen=True)
class CompileStats:
    """What this process's shardtrain kernels did: loaded from the cache or compiled."""

    loaded: dict[str, int]
    """Kernel name → signatures loaded from the cache."""
    compiled: dict[str, int]
    """Kernel name → signatures compiled here (a cache miss: numba saves them after)."""
    cache_dirs: tuple[str, ...]
    """The folders the kernels' caches are in."""


def compile_stats() -> CompileStats:
    """Count cache hits and misses over every shardtrain kernel imported so far.

    numba counts them per dispatcher (``Dispatcher.stats``); a kernel inlined into another
    (``inline="always"``) is never compiled on its own and counts nothing.
    """
    loaded: collections.Counter[str] = collections.Counter()
    compiled: collections.Counter[str] = collections.Counter()
    dirs: set[str] = set()
    for modname, module in list(sys.modules.items()):
        if not modname.startswith("shardtrain.") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if not isinstance(value, Dispatcher) or value.__module__ != modname:
                continue
            stats = value.stats
            name = f"{modname}.{attr}"
            if stats.cache_hits:
                loaded[name] += sum(stats.cache_hits.values())
            if stats.cache_misses:
                compiled[name] += sum(stats.cache_misses.values())
            if stats.cache_hits or stats.cache_misses:
                dirs.add(str(stats.cache_path))
    return CompileStats(dict(loaded), dict(compiled), tuple(sorted(dirs)))
