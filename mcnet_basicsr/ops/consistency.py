"""Choosing the radius ``eps`` of the consistency set ``{x : ||A x - b||_2 <= eps}``.

The norm in :meth:`~mcnet_basicsr.ops.separable.SeparableDownsample.project` is taken per sample
over all LR values (C x h x w), so a fixed ``eps`` would mean something different on a 40x40
training patch and on a 2K test image. Options therefore give a per-value RMS level and convert it
with :func:`eps_from_rms`.
"""
import math

import torch

__all__ = ['QUANTIZATION_EPS_RMS', 'eps_from_rms', 'noisy_radius']

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


def noisy_radius(eps, noise_sigma, lr_numel):
    """The radius for measurements that also carry Gaussian noise of standard deviation ``noise_sigma`` per value.

    ``sqrt(eps^2 + noise_sigma^2 lr_numel)``: the noise of ``lr_numel`` values has norm ``noise_sigma sqrt(lr_numel)``
    about (its squared norm has mean ``noise_sigma^2 lr_numel``), and an error already allowed for (``eps``, e.g.
    uint8 rounding) is independent of it, so the squares add.

    Args:
        eps (float | Tensor): The radius without the noise (a float or a per-sample (N,) tensor).
        noise_sigma (float | Tensor | None): Noise standard deviation per LR value (same units as the image, e.g.
            2.55 / 255 for images in [0, 1]): a float or a per-sample (N,) tensor. None: no noise, ``eps`` itself.
        lr_numel (int): LR values per sample, ``b[0].numel()``.

    Returns:
        float | Tensor: ``eps`` when ``noise_sigma`` is None, else the radius (a tensor when either is one).
    """
    if noise_sigma is None:
        return eps
    if torch.is_tensor(noise_sigma):
        if noise_sigma.dim() > 1 or not bool(torch.isfinite(noise_sigma).all() and (noise_sigma >= 0).all()):
            raise ValueError(f'noise_sigma must be finite and >= 0, a float or a per-sample (N,) tensor; '
                             f'got {noise_sigma}')
        noise_sq = noise_sigma.double().square()
    else:
        if not (math.isfinite(noise_sigma) and noise_sigma >= 0):
            raise ValueError(f'noise_sigma must be finite and >= 0, got {noise_sigma!r}')
        noise_sq = float(noise_sigma)**2
    eps_sq = eps.double().square() if torch.is_tensor(eps) else float(eps)**2
    total = eps_sq + noise_sq * int(lr_numel)
    return total.sqrt() if torch.is_tensor(total) else math.sqrt(total)
