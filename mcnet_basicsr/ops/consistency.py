"""Choosing the radius ``eps`` of the consistency set ``{x : ||A x - b||_2 <= eps}``.

The norm in :meth:`~mcnet_basicsr.ops.separable.SeparableDownsample.project` is taken per sample
over all LR values (C x h x w), so a fixed ``eps`` would mean something different on a 40x40
training patch and on a 2K test image. Options therefore give a per-value RMS level and convert it
with :func:`eps_from_rms`.
"""
import math

__all__ = ['QUANTIZATION_EPS_RMS', 'eps_from_rms']

#: RMS of uint8 rounding error for [0, 1] images: uniform on [-1/510, 1/510], std (1/255)/sqrt(12)
#: ~ 1.13e-3. LR inputs saved as 8-bit images are only consistent with the true HR image up to
#: this level, which makes it the natural default when a positive eps is wanted.
QUANTIZATION_EPS_RMS = 1.0 / 255.0 / math.sqrt(12.0)


def eps_from_rms(eps_rms, lr_numel):
    """``eps = eps_rms * sqrt(lr_numel)``, the radius whose per-value RMS residual is ``eps_rms``.

    Args:
        eps_rms (float | Tensor): RMS residual per LR value (e.g. :data:`QUANTIZATION_EPS_RMS`).
        lr_numel (int): number of LR values per sample, ``C * h * w`` (``b[0].numel()``).
    """
    lr_numel = int(lr_numel)
    if lr_numel < 1:
        raise ValueError(f'lr_numel must be >= 1, got {lr_numel}')
    return eps_rms * math.sqrt(lr_numel)
