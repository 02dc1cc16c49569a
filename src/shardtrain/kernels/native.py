"""Raw memory access and CPU instructions for the compiled (numba) kernels.

The CSV parser (:mod:`shardtrain.kernels.csv_parse`) and the Example encoder
(:mod:`shardtrain.kernels.example_encode`) spend their time in small helpers called once per
field or per byte run: parse a number, copy a key, write a varint, fold eight bytes into a
CRC. Written
the obvious way, with the NumPy arrays as arguments, those helpers are slow in numba for a
reason that is easy to miss: numba reference-counts every array bound to a variable, and an
array argument of a helper -- even one inlined with ``inline="always"`` -- costs an atomic
increment and decrement per call, which its pruning pass cannot remove across the helpers'
loops, and which costs more than the helper's work when it is called per field or per byte.

So the helpers take the integer *address* of the data (``array.ctypes.data``, obtained once
by the kernel that holds the arrays for the whole call) and use the intrinsics below: plain
loads and stores, no reference counting, no negative-index wraparound, no bounds checks.
That makes the caller responsible for every position: kernels validate their inputs before
the loop, and the eight-byte loads and stores used to copy short runs need up to seven bytes
of readable (or writable) slack after the run, which the callers allocate.

All multi-byte accesses are little-endian and may be unaligned (x86 and ARM64 handle both in
hardware).
"""

from __future__ import annotations

import operator
from typing import Any

import llvmlite.binding as llvm
import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from shardtrain.kernels.cache import install_locator

# Before any kernel is defined (numba picks a kernel's cache folder then): every kernel
# module imports this one first.
install_locator()

__all__ = [
    "as_bytes_array",
    "check_indices",
    "check_offsets",
    "check_ranges",
    "check_uint",
    "copy_exact",
    "copy_over",
    "f32_bits",
    "f64_bits",
    "has_hardware_crc32c",
    "kernel_input",
    "load_f64",
    "load_i64",
    "load_u8",
    "load_u32",
    "load_u64",
    "prefetch",
    "sse42_crc32_u8",
    "sse42_crc32_u64",
    "store_u8",
    "store_u32",
    "store_u64",
    "trailing_zeros",
    "u64_as_i64",
]


# --------------------------------------------------------------------------------------------
# Kernel arguments
# --------------------------------------------------------------------------------------------


def kernel_input(array: np.ndarray, dtype: type) -> np.ndarray:
    """A C-contiguous, read-only view of ``array`` as ``dtype`` (copies only when it must).

    numba compiles one specialisation per argument *type*, and dtype, layout and
    writeability are all part of an array's type. Normalising every externally supplied
    array here keeps each kernel at exactly one specialisation: one compile, one cache entry,
    whatever mix of Arrow views (read-only), fresh arrays and slices callers pass.
    """
    out: np.ndarray = np.ascontiguousarray(array, dtype=dtype).view()
    out.flags.writeable = False
    return out


def as_bytes_array(data: np.ndarray | bytes | bytearray | memoryview) -> np.ndarray:
    """The raw bytes of ``data`` as a read-only 1-D uint8 array (zero-copy when possible)."""
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    else:
        data = np.frombuffer(data, dtype=np.uint8)
    return kernel_input(data, np.uint8)


def check_offsets(offsets: np.ndarray, data_size: int, what: str) -> None:
    """Reject offsets a kernel would turn into out-of-bounds memory access.

    Kernels run without bounds checks, so this O(n) vectorised check is the safety net.
    """
    if offsets.ndim != 1 or len(offsets) == 0:
        raise ValueError(f"{what}: offsets must be a non-empty 1-D array")
    if offsets[0] < 0 or offsets[-1] > data_size:
        raise ValueError(
            f"{what}: offsets span [{offsets[0]}, {offsets[-1]}] outside the data "
            f"(size {data_size})"
        )
    if len(offsets) > 1 and bool(np.any(offsets[1:] < offsets[:-1])):
        raise ValueError(f"{what}: offsets must be non-decreasing")


def check_ranges(
    starts: np.ndarray, ends: np.ndarray, size: int, what: str, within: str
) -> tuple[np.ndarray, np.ndarray]:
    """``starts`` and ``ends`` as int64 kernel inputs, if every ``[starts[i], ends[i])`` lies
    in ``[0, size)`` (else ValueError: "every <what> must satisfy ... <= len(<within>)")."""
    starts = kernel_input(starts, np.int64)
    ends = kernel_input(ends, np.int64)
    if starts.ndim != 1 or starts.shape != ends.shape:
        raise ValueError("starts and ends must be 1-D arrays of the same length")
    if len(starts) and (starts.min() < 0 or ends.max() > size or bool(np.any(ends < starts))):
        raise ValueError(f"every {what} must satisfy 0 <= start <= end <= len({within})")
    return starts, ends


def check_indices(indices: np.ndarray, n: int, what: str) -> np.ndarray:
    """``indices`` as an int64 kernel input, if it is a 1-D integer array of positions in
    ``[0, n)`` (else ValueError naming ``what``)."""
    indices = np.asarray(indices)
    if indices.ndim != 1 or (len(indices) and indices.dtype.kind not in "iu"):
        raise ValueError(f"{what} must be a 1-D integer array")
    if len(indices) and (indices.min() < 0 or indices.max() >= n):
        raise ValueError(f"{what} has indices outside [0, {n})")
    return kernel_input(indices, np.int64)


def check_uint(value: int, bits: int, what: str) -> int:
    """``value`` as an int, if it is an unsigned ``bits``-bit integer (else ValueError)."""
    value = operator.index(value)
    if not 0 <= value < 1 << bits:
        raise ValueError(f"{what} must be in [0, 2**{bits}), got {value}")
    return value


# --------------------------------------------------------------------------------------------
# Raw loads and stores
# --------------------------------------------------------------------------------------------


def _address_and_index(context, builder, signature, args, element):
    base = context.cast(builder, args[0], signature.args[0], types.intp)
    index = context.cast(builder, args[1], signature.args[1], types.intp)
    return builder.gep(builder.inttoptr(base, element.as_pointer()), [index])


def _byte_pointer(context, builder, signature, args, width):
    """An ``i<width>*`` to the byte at ``address + index`` (any alignment)."""
    ptr = _address_and_index(context, builder, signature, args[:2], ir.IntType(8))
    return builder.bitcast(ptr, ir.IntType(width).as_pointer())


def _integers(*args) -> bool:
    return all(isinstance(a, types.Integer) for a in args)


def _load(name: str, doc: str, result: Any, *, width: int = 0, element: Any = None) -> Any:
    """The intrinsic ``name(address, index) -> result``: item ``index`` of the array of
    ``element`` at ``address``, or (no ``element``) the ``width`` bits at byte
    ``address + index``, any alignment, zero-extended to 64 bits."""

    def typer(typingctx, address, index):
        if not _integers(address, index):
            return None

        def codegen(context, builder, signature, args):
            if element is not None:
                return builder.load(_address_and_index(context, builder, signature, args, element))
            value = builder.load(_byte_pointer(context, builder, signature, args, width), align=1)
            return builder.zext(value, ir.IntType(64)) if width < 64 else value

        return result(address, index), codegen

    typer.__name__ = typer.__qualname__ = name
    typer.__doc__ = doc
    return intrinsic(typer)


def _store(name: str, doc: str, width: int, *, value_type: Any = None) -> Any:
    """The intrinsic ``name(address, index, value)``: store the low ``width`` bits of an
    integer ``value`` at byte ``address + index`` (any alignment); with ``value_type``, the
    value is converted to that type first (a 64-bit store of any number)."""

    def typer(typingctx, address, index, value):
        if not _integers(address, index, *(() if value_type else (value,))):
            return None

        def codegen(context, builder, signature, args):
            stored = args[2] if value_type else builder.trunc(args[2], ir.IntType(width))
            builder.store(stored, _byte_pointer(context, builder, signature, args, width), align=1)
            return context.get_dummy_value()

        return types.void(address, index, value_type or value), codegen

    typer.__name__ = typer.__qualname__ = name
    typer.__doc__ = doc
    return intrinsic(typer)


load_u8 = _load("load_u8", "The byte at ``address + index``, as int64.", types.int64, width=8)
load_i64 = _load(
    "load_i64",
    "Element ``index`` of the int64 array at ``address``.",
    types.int64,
    element=ir.IntType(64),
)
load_f64 = _load(
    "load_f64",
    "Element ``index`` of the float64 array at ``address``.",
    types.float64,
    element=ir.DoubleType(),
)
load_u32 = _load(
    "load_u32",
    "The 4 bytes at ``address + index`` (any alignment) as a little-endian uint32, as uint64.",
    types.uint64,
    width=32,
)
load_u64 = _load(
    "load_u64",
    "The 8 bytes at ``address + index`` (any alignment) as a little-endian uint64.",
    types.uint64,
    width=64,
)
store_u8 = _store("store_u8", "Store the low byte of an integer at ``address + index``.", 8)
store_u32 = _store(
    "store_u32",
    "Store the low 4 bytes of an integer at ``address + index`` (any alignment).",
    32,
)
store_u64 = _store(
    "store_u64",
    "Store a uint64 as 8 bytes at ``address + index`` (any alignment).",
    64,
    value_type=types.uint64,
)


@intrinsic
def prefetch(typingctx, address, index):
    """Ask the CPU to bring the cache line of ``address + index`` in (for reading), without
    waiting for it: a kernel that will look up a random place of a large table a few
    iterations later hides the memory latency behind the work in between. Any address is
    allowed (a prefetch never faults)."""
    if not _integers(address, index):
        return None
    sig = types.void(address, index)

    def codegen(context, builder, signature, args):
        ptr = _address_and_index(context, builder, signature, args, ir.IntType(8))
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        # read, high temporal locality, data cache
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def trailing_zeros(typingctx, x):
    """The number of trailing zero bits of a uint64 (64 for zero)."""
    sig = types.int64(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 0))

    return sig, codegen


@intrinsic
def f64_bits(typingctx, x):
    """The IEEE bits of a float64 as an int64 (a register move)."""
    sig = types.int64(types.float64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return sig, codegen


@intrinsic
def u64_as_i64(typingctx, x):
    """The bits of a uint64 as an int64 (no conversion: 2**64 - 1 is -1)."""
    sig = types.int64(types.uint64)

    def codegen(context, builder, signature, args):
        return args[0]

    return sig, codegen


@intrinsic
def f32_bits(typingctx, x):
    """The IEEE bits of a float32, zero-extended to int64."""
    sig = types.int64(types.float32)

    def codegen(context, builder, signature, args):
        return builder.zext(builder.bitcast(args[0], ir.IntType(32)), ir.IntType(64))

    return sig, codegen


# --------------------------------------------------------------------------------------------
# Byte copies (inlined into the kernels)
# --------------------------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True, inline="always")
def copy_over(dst, d, src, s, n):
    """Copy ``n`` bytes from address ``src + s`` to ``dst + d``, eight at a time.

    The last word may read up to 7 bytes past the source run and write up to 7 bytes past
    the destination run: callers give both buffers that much slack, and write forward, so
    whatever lands past the run is overwritten by what comes next.
    """
    k = 0
    while k < n:
        store_u64(dst, d + k, load_u64(src, s + k))
        k += 8


@numba.njit(cache=True, nogil=True, inline="always")
def copy_exact(dst, d, src, s, n):
    """Copy exactly ``n`` bytes (no slack needed): words, then the tail byte by byte."""
    k = 0
    while k + 8 <= n:
        store_u64(dst, d + k, load_u64(src, s + k))
        k += 8
    while k < n:
        store_u8(dst, d + k, load_u8(src, s + k))
        k += 1


# --------------------------------------------------------------------------------------------
# CRC-32C instructions (x86 SSE4.2)
# --------------------------------------------------------------------------------------------


#: The x86-64 micro-architecture levels (``NUMBA_CPU_NAME``) that include SSE4.2.
_SSE42_LEVELS = ("x86-64-v2", "x86-64-v3", "x86-64-v4")


def has_hardware_crc32c() -> bool:
    """True when kernels are compiled for a CPU with the SSE4.2 ``crc32`` instruction.

    The compile target decides, not the host: a portable cache (``NUMBA_CPU_NAME`` and
    ``NUMBA_CPU_FEATURES`` set, see :mod:`shardtrain.kernels.cache`) must run on every CPU of
    that target. ``x86-64-v2`` and later include SSE4.2 (every x86-64 server CPU since 2009);
    ``generic`` does not, and gets the table-driven CRC.
    """
    config: Any = numba.config  # NUMBA_CPU_NAME, NUMBA_CPU_FEATURES (not in numba's stubs)
    name, features = config.CPU_NAME, config.CPU_FEATURES
    if features is None:  # the host's features (numba's default)
        try:
            features = llvm.get_host_cpu_features().flatten()
        except RuntimeError:  # not x86 (e.g. aarch64): no such feature list entry
            features = ""
    flags = features.split(",")
    if "+sse4.2" in flags or "-sse4.2" in flags:
        return "+sse4.2" in flags
    return name is not None and name.lower() in _SSE42_LEVELS


@intrinsic
def sse42_crc32_u64(typingctx, crc, value):
    """The x86 ``crc32 r64, r/m64`` instruction: fold 8 bytes into a CRC-32C state.

    Latency 3 cycles, throughput 1 per cycle: one dependent chain runs at ~8 bytes per 3
    cycles, and independent chains (two CRCs of the same bytes, say) run side by side.
    """
    sig = types.uint64(types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(64), [ir.IntType(64), ir.IntType(64)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse42.crc32.64.64")
        return builder.call(fn, [builder.zext(args[0], ir.IntType(64)), args[1]])

    return sig, codegen


@intrinsic
def sse42_crc32_u8(typingctx, crc, value):
    """The x86 ``crc32 r32, r/m8`` instruction: fold one byte into a CRC-32C state."""
    sig = types.uint32(types.uint32, types.uint8)

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32), ir.IntType(8)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse42.crc32.32.8")
        return builder.call(fn, args)

    return sig, codegen
