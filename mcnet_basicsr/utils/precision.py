"""Scoped numerical settings: what a block changes in torch's process-wide flags is restored after it."""
import contextlib

import torch


@contextlib.contextmanager
def tf32(enabled):
    """TF32 for cuDNN convolutions and CUDA matmuls on (True) or off (False) inside the block only."""
    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = bool(enabled)
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@contextlib.contextmanager
def cudnn_autotune(enabled):
    """cuDNN autotuning (``torch.backends.cudnn.benchmark``) on or off inside the block only."""
    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = bool(enabled)
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = saved


@contextlib.contextmanager
def num_threads(n):
    """``torch.set_num_threads(n)`` inside the block only (n None: unchanged)."""
    saved = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(saved)
