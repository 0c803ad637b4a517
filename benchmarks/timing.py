"""Timing and memory measurements on one device (CUDA-synchronised where it matters), and FLOP counts."""
import platform
import statistics
import time

import torch


def sync(device):
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def reset_peak(device):
    """Start a peak-memory measurement; returns the memory already allocated (MB), None off CUDA."""
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device) / 2**20
    return None


def peak_mb(device):
    """Peak allocated memory (MB) since :func:`reset_peak`; None off CUDA."""
    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == 'cuda' else None


def median_ms(fn, device, repeats, warmup=1):
    """Median wall-clock time (ms) of ``fn()`` over ``repeats`` synchronised calls, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def call_ms(fn, device):
    """Wall-clock time (ms) of one synchronised call ``fn()`` (a first call, say)."""
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return (time.perf_counter() - t0) * 1e3


def device_name(device):
    return torch.cuda.get_device_name(device) if device.type == 'cuda' else f'cpu ({platform.machine()})'


def conv_flops_per_pixel(module):
    """FLOPs (2 x MACs) of one forward per output pixel, from the module's convolutions."""
    total = 0
    for mod in module.modules():
        if isinstance(mod, torch.nn.Conv2d):
            kh, kw = mod.kernel_size
            sh, sw = mod.stride
            total += 2 * kh * kw * mod.in_channels * mod.out_channels // mod.groups // (sh * sw)
    return total
