"""Batched, differentiable torch port of MATLAB ``imresize`` (bicubic) for any scale factor.

Uses the same float64 matrix builder as the ``bicubic`` operator, so ``imresize(x, 1 / s)`` equals
``build_operator({'type': 'bicubic', 'scale': s})(x)`` on sizes divisible by ``s``. It matches
``basicsr.utils.matlab_functions.imresize`` in both directions (output size ``ceil(scale * size)``,
antialiasing only when downscaling) up to basicsr's float32 rounding.
"""
import functools
import math

import torch

from .matrices import matlab_bicubic_matrix

__all__ = ['imresize']


@functools.lru_cache(maxsize=128)
def _cast_matrix(in_length, out_length, scale, antialiasing, dtype, device):
    matrix = matlab_bicubic_matrix(in_length, out_length, scale, antialiasing)
    return torch.tensor(matrix, dtype=dtype, device=device)


def imresize(x, scale, antialiasing=True):
    """MATLAB ``imresize(x, scale, 'bicubic')`` on the last two dims of a float tensor.

    Args:
        x (Tensor): (..., H, W) float tensor, typically NCHW in [0, 1] (no clamping or rounding).
        scale (float): same factor for both axes, e.g. ``1 / 4`` or ``2``. Output size is
            ``ceil(H * scale) x ceil(W * scale)``, exactly as MATLAB/basicsr compute it.
        antialiasing (bool): widen the kernel when downscaling (MATLAB's default).

    Returns:
        Tensor: (..., ceil(H * scale), ceil(W * scale)), same dtype/device, differentiable.
    """
    if not torch.is_tensor(x) or x.dim() < 2:
        raise ValueError('imresize expects a tensor with at least 2 dims (..., H, W)')
    if not x.is_floating_point():
        raise TypeError(f'imresize expects a floating point tensor, got {x.dtype}')
    scale = float(scale)
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f'scale must be a positive finite number, got {scale}')
    in_h, in_w = x.shape[-2], x.shape[-1]
    out_h, out_w = math.ceil(in_h * scale), math.ceil(in_w * scale)
    mh = _cast_matrix(in_h, out_h, scale, bool(antialiasing), x.dtype, x.device)
    mw = _cast_matrix(in_w, out_w, scale, bool(antialiasing), x.dtype, x.device)
    return torch.matmul(torch.matmul(mh, x), mw.transpose(0, 1))
