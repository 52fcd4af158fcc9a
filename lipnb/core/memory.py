"""What the device can hold and do, for :func:`lipnb.local_lipschitz`'s chunking and presolve: the memory one
call may use, whether an error is an allocation failure, and whether bfloat16 products run in hardware. Nothing
here changes a setting of the process."""

from __future__ import annotations

import torch

__all__ = ["is_oom", "memory_budget", "native_bfloat16"]

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
