"""What the device can hold and do, for :func:`lipnb.local_lipschitz`'s chunking and presolve: the memory one
call may use, whether an error is an allocation failure, whether bfloat16 products run in hardware, and how
large CPU tensors are allocated."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
from collections.abc import Iterator

import torch

__all__ = ["heap_allocations", "is_oom", "memory_budget", "native_bfloat16"]

_M_MMAP_MAX, _GLIBC_MMAP_MAX = -4, 65536
_depth = 0


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """This process's C library when it is glibc with ``mallopt`` (looked up once), else ``None``."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(None)
        return libc if hasattr(libc, "mallopt") else None
    except OSError:
        return None


@contextlib.contextmanager
def heap_allocations(device: torch.device) -> Iterator[None]:
    """Within the block, CPU tensors come from the process heap instead of fresh pages (glibc only).

    glibc serves every request above its threshold (at most 32 MiB) with a fresh ``mmap`` and unmaps it when
    freed, so each new batch-sized temporary of a Jacobian product costs page faults (the kernel zeroes
    every page; a copy into a fresh 38 MB tensor costs several times a copy into a reused one). With
    ``M_MMAP_MAX = 0`` freed blocks are reused instead. On exit the previous setting (``$MALLOC_MMAP_MAX_``
    or glibc's default) comes back; the freed heap stays with the process for the next call, as PyTorch's
    CUDA allocator keeps its blocks (returning it with ``malloc_trim`` made every call fault its pages in
    again, which undid the gain). Elsewhere (CUDA; macOS; Windows; musl) this does nothing.
    """
    global _depth
    libc = _glibc() if device.type == "cpu" else None
    if libc is None or _depth:
        yield
        return
    _depth += 1
    libc.mallopt(_M_MMAP_MAX, 0)
    try:
        yield
    finally:
        _depth -= 1
        setting = os.environ.get("MALLOC_MMAP_MAX_", "")
        libc.mallopt(_M_MMAP_MAX, int(setting) if setting.isdigit() else _GLIBC_MMAP_MAX)


def native_bfloat16(device: torch.device) -> bool:
    """Whether ``device`` multiplies bfloat16 matrices in hardware (else they are emulated, often slower)."""
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device) >= (8, 0)
    if device.type != "cpu":
        return False
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            flags = next((line.split() for line in cpuinfo if line.startswith("flags")), [])
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def is_oom(error: BaseException) -> bool:
    """An allocation failure (CUDA out of memory, or the CPU allocator refusing a request)."""
    if isinstance(error, torch.OutOfMemoryError):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def memory_budget(device: torch.device) -> int:
    """Bytes one call may use: 80% of the free memory of a CUDA device, half the available RAM on CPU."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(0.8 * free)
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // 2
    except OSError:
        pass
    return 4 << 30
