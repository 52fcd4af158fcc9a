"""lipnb.core.memory: what the device holds and does, read without changing any setting of the process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from conftest import CUDA

from lipnb.core.memory import is_oom, memory_budget, native_bfloat16


def test_is_oom_knows_both_allocators_and_nothing_else() -> None:
    assert is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_oom(RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: "
                               "you tried to allocate 1099511627776 bytes"))
    assert not is_oom(RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"))
    assert not is_oom(ValueError("out of memory"))  # only a RuntimeError is an allocator's


def test_a_real_cpu_allocation_failure_is_recognised() -> None:
    try:
        torch.empty(1 << 62, dtype=torch.uint8)
    except RuntimeError as error:
        assert is_oom(error)
    else:  # pragma: no cover - no machine holds 4 EiB
        pytest.fail("allocating 4 EiB succeeded")


@pytest.mark.skipif(not Path("/proc/meminfo").exists(), reason="needs /proc/meminfo")
def test_cpu_budget_is_half_the_available_memory() -> None:
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    available = int(fields["MemAvailable"].split()[0]) * 1024
    budget = memory_budget(torch.device("cpu"))
    assert abs(budget - available // 2) <= 0.05 * available  # other processes move MemAvailable meanwhile
    assert 0 < budget < os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@pytest.mark.parametrize("device", [CUDA])
def test_cuda_budget_is_most_of_the_free_memory(device: str) -> None:
    free, total = torch.cuda.mem_get_info(torch.device(device))
    assert 0.7 * free <= memory_budget(torch.device(device)) <= 0.8 * total


def test_native_bfloat16_on_cpu_follows_the_cpu_flags() -> None:
    flags = set()
    if Path("/proc/cpuinfo").exists():
        line = next((s for s in Path("/proc/cpuinfo").read_text().splitlines() if s.startswith("flags")), "")
        flags = set(line.split())
    assert native_bfloat16(torch.device("cpu")) == bool({"avx512_bf16", "amx_bf16"} & flags)
    assert native_bfloat16(torch.device("meta")) is False  # no hardware at all


@pytest.mark.parametrize("device", [CUDA])
def test_native_bfloat16_on_cuda_from_compute_capability_8(device: str) -> None:
    major, _ = torch.cuda.get_device_capability(torch.device(device))
    assert native_bfloat16(torch.device(device)) == (major >= 8)
