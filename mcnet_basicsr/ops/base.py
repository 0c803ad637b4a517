"""What every downsampling operator of this package shares: the scale, LR sizes, input checks and the radius.

:class:`DownsampleOperator` holds no matrices; a subclass implements ``forward``, ``adjoint`` and ``project``
(:class:`~mcnet_basicsr.ops.separable.SeparableDownsample`, :class:`~mcnet_basicsr.ops.blur.BlurDownsample`).
"""
import math

import torch

__all__ = ['DownsampleOperator']


class DownsampleOperator:
    """Base class of the measurement operators ``A`` (NCHW, per channel) with an integer scale.

    Instances are plain objects (not ``nn.Module``): they hold no parameters and work on the dtype/device they are
    given. A subclass implements :meth:`forward` (``A x``), :meth:`adjoint` (``A^T y``) and :meth:`project` (the
    exact projection onto ``{z : ||A z - b||_2 <= eps}``), plus ``clear_cache``.

    Args:
        scale (int): downsampling factor; HR sizes must be divisible by it.
    """

    def __init__(self, scale):
        if isinstance(scale, bool) or int(scale) != scale or int(scale) < 1:
            raise ValueError(f'scale must be a positive integer, got {scale!r}')
        self.scale = int(scale)

    # ------------------------------------------------------------------ sizes
    def lr_size(self, h, w):
        """LR (measurement) size of an ``h x w`` image; ValueError unless both are divisible by the scale."""
        h, w = int(h), int(w)
        if h % self.scale or w % self.scale:
            raise ValueError(f'image size {h}x{w} is not divisible by scale {self.scale} '
                             '(callers mod-crop to a multiple of the scale)')
        return h // self.scale, w // self.scale

    # ------------------------------------------------------------------ checks
    def _check_hr(self, x, name='x'):
        """Check an NCHW float HR tensor; returns its LR size."""
        if not torch.is_tensor(x) or x.dim() != 4:
            raise ValueError(f'{name} must be an NCHW tensor, got '
                             f'{tuple(x.shape) if torch.is_tensor(x) else type(x).__name__}')
        if not x.is_floating_point():
            raise TypeError(f'{name} must be floating point, got {x.dtype}')
        return self.lr_size(x.shape[-2], x.shape[-1])

    def _check_lr(self, y, name='y'):
        if not torch.is_tensor(y) or y.dim() != 4:
            raise ValueError(f'{name} must be an NCHW tensor, got '
                             f'{tuple(y.shape) if torch.is_tensor(y) else type(y).__name__}')
        if not y.is_floating_point():
            raise TypeError(f'{name} must be floating point, got {y.dtype}')

    def _check_pair(self, x, b):
        """Check ``x`` (HR) and ``b`` (its measurements) of a projection; returns ``b`` in ``x``'s dtype."""
        h, w = self._check_hr(x)
        self._check_lr(b, name='b')
        if tuple(b.shape) != (x.shape[0], x.shape[1], h, w):
            raise ValueError(f'b has shape {tuple(b.shape)}, expected {(x.shape[0], x.shape[1], h, w)} '
                             f'for x of shape {tuple(x.shape)} at scale {self.scale}')
        return b.to(dtype=x.dtype)

    def _hr_size(self, y, hr_size):
        """The HR size of an adjoint: ``scale *`` the LR size of ``y``, or ``hr_size=(H, W)`` checked against it."""
        if hr_size is None:
            return y.shape[-2] * self.scale, y.shape[-1] * self.scale
        hr_h, hr_w = int(hr_size[0]), int(hr_size[1])
        if self.lr_size(hr_h, hr_w) != tuple(y.shape[-2:]):
            raise ValueError(f'hr_size {hr_h}x{hr_w} does not match LR size '
                             f'{y.shape[-2]}x{y.shape[-1]} at scale {self.scale}')
        return hr_h, hr_w

    def _eps_tensor(self, eps, n, device):
        """The radius as an (N,) float64 tensor on ``device`` (a tensor ``eps`` keeps its autograd graph)."""
        if torch.is_tensor(eps):
            eps_t = eps.to(device=device, dtype=torch.float64)
            if eps_t.dim() == 0:
                eps_t = eps_t.expand(n)
            elif eps_t.shape != (n,):
                raise ValueError(f'eps must be a scalar or a per-sample tensor of shape ({n},), '
                                 f'got {tuple(eps.shape)}')
            if not bool((torch.isfinite(eps_t.detach()) & (eps_t.detach() >= 0)).all()):
                raise ValueError(f'eps must be finite and >= 0, got {eps}')
        else:
            eps = float(eps)
            if not (math.isfinite(eps) and eps >= 0):
                raise ValueError(f'eps must be finite and >= 0, got {eps}')
            eps_t = torch.full((n,), eps, dtype=torch.float64, device=device)
        return eps_t

    # ------------------------------------------------------------------ A and A^T
    def forward(self, x):
        raise NotImplementedError

    def adjoint(self, y, hr_size=None):
        raise NotImplementedError

    def project(self, x, b, eps=0.0):
        raise NotImplementedError

    def clear_cache(self):
        """Drop all cached matrices / spectra (e.g. to free GPU memory)."""

    def __call__(self, x):
        return self.forward(x)

    def residual_norm(self, x, b):
        """Per-sample ``||A x - b||_2`` over the LR values (C, h, w): shape (N,)."""
        return (self.forward(x) - b).flatten(1).norm(dim=1)

    def __repr__(self):
        return f'{type(self).__name__}(scale={self.scale})'
