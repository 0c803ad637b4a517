"""USRNet (Zhang, Van Gool, Timofte, "Deep unfolding network for image super-resolution", CVPR 2020): a non-blind SR
network told the blur kernel, the scale and the noise level.

Written from the paper: ``n_iter`` unfolded half-quadratic-splitting iterations, each a closed-form data step for
circular blur and upper-left decimation (computed in the Fourier domain) followed by a ResUNet prior told its noise
level, with each iteration's weights (``alpha_i`` of the data step, ``beta_i`` of the prior) given by a small
hyper-network from the noise level and the scale. The default arguments build USRNet-tiny of the authors' model zoo
(590,332 parameters), whose official weights load with ``strict=True``.
"""
import torch
import torch.nn.functional as F
from torch import nn

from mcnet_basicsr.utils.registration import ARCH_REGISTRY


def kernel_spectrum(kernel, hr_h, hr_w):
    """The HR DFT of circular convolution with ``kernel`` (N or 1, 1, kh, kw): the kernel zero-padded to
    ``hr_h`` x ``hr_w``, its centre ``(kh // 2, kw // 2)`` moved to the origin, transformed: (N or 1, 1, hr_h,
    hr_w)."""
    kh, kw = kernel.shape[-2:]
    otf = kernel.new_zeros(kernel.shape[:-2] + (hr_h, hr_w))
    otf[..., :kh, :kw] = kernel
    otf = torch.roll(otf, shifts=(-(kh // 2), -(kw // 2)), dims=(-2, -1))
    return torch.fft.fft2(otf)


def alias_mean(spectrum, scale):
    """Mean over the ``scale`` x ``scale`` aliases of an HR spectrum (..., H, W): the spectrum that decimation by
    ``scale`` (keeping the upper-left pixel of each block) leaves, at LR size (..., H / scale, W / scale)."""
    *lead, h, w = spectrum.shape
    return spectrum.reshape(*lead, scale, h // scale, scale, w // scale).mean(dim=(-4, -2))


def data_terms(lr, kernel, scale):
    """What the data step needs of LR ``lr`` (N, C, h, w) under circular blur by ``kernel`` (N or 1, 1, kh, kw) and
    upper-left decimation by ``scale``: ``(spectrum, aliased_power, kty)``, the kernel's HR spectrum, its aliased power
    spectrum and the spectrum of ``A^T lr``."""
    n, c, h, w = lr.shape
    spectrum = kernel_spectrum(kernel.to(lr), h * scale, w * scale)
    aliased_power = alias_mean(spectrum.abs()**2, scale)
    zero_filled = lr.new_zeros(n, c, h * scale, w * scale)
    zero_filled[..., ::scale, ::scale] = lr
    return spectrum, aliased_power, spectrum.conj() * torch.fft.fft2(zero_filled)


class DataStep(nn.Module):
    """``argmin_x ||y - D_s (k * x)||^2 + alpha ||x - z||^2`` in closed form (Zhao et al., IEEE TIP 2016): the
    Woodbury identity reduces the HR system to a diagonal one on the aliased spectrum."""

    def forward(self, z, spectrum, aliased_power, kty, alpha, scale):
        fr = kty + torch.fft.fft2(alpha * z)
        fbr = alias_mean(spectrum * fr, scale)
        correction = spectrum.conj() * (fbr / (aliased_power + alpha)).repeat(1, 1, scale, scale)
        return torch.fft.ifft2((fr - correction) / alpha).real


class _ResBlock(nn.Module):
    """``x + conv(relu(conv(x)))``, 3x3 convolutions without bias."""

    def __init__(self, channels):
        super().__init__()
        self.res = nn.Sequential(
            nn.Conv2d(channels, channels, 3, 1, 1, bias=False), nn.ReLU(inplace=True),
            nn.Conv2d(channels, channels, 3, 1, 1, bias=False))

    def forward(self, x):
        return x + self.res(x)


class ResUNet(nn.Module):
    """USRNet's prior: a U-Net of residual blocks, strided-convolution down and transposed-convolution up, skip
    connections by addition, no bias. Input sides are padded (replicate) to a multiple of 8 and the output cropped.

    Args:
        in_ch (int): Input channels (image plus a noise-level map). Default: 4.
        out_ch (int): Output channels. Default: 3.
        channels (sequence of int): Features of the four levels. Default: (16, 32, 64, 64), USRNet-tiny's.
        num_block (int): Residual blocks per level. Default: 2.
    """

    def __init__(self, in_ch=4, out_ch=3, channels=(16, 32, 64, 64), num_block=2):
        super().__init__()
        c = list(channels)
        self.m_head = nn.Conv2d(in_ch, c[0], 3, 1, 1, bias=False)
        for i in range(3):
            blocks = [_ResBlock(c[i]) for _ in range(num_block)]
            setattr(self, f'm_down{i + 1}', nn.Sequential(*blocks, nn.Conv2d(c[i], c[i + 1], 2, 2, 0, bias=False)))
        self.m_body = nn.Sequential(*[_ResBlock(c[3]) for _ in range(num_block)])
        for i in range(3, 0, -1):
            blocks = [_ResBlock(c[i - 1]) for _ in range(num_block)]
            setattr(self, f'm_up{i}', nn.Sequential(nn.ConvTranspose2d(c[i], c[i - 1], 2, 2, 0, bias=False), *blocks))
        self.m_tail = nn.Conv2d(c[0], out_ch, 3, 1, 1, bias=False)

    def forward(self, x):
        h, w = x.shape[-2:]
        x = F.pad(x, (0, -w % 8, 0, -h % 8), mode='replicate')
        x1 = self.m_head(x)
        x2 = self.m_down1(x1)
        x3 = self.m_down2(x2)
        x4 = self.m_down3(x3)
        x = self.m_body(x4)
        x = self.m_up3(x + x4)
        x = self.m_up2(x + x3)
        x = self.m_up1(x + x2)
        return self.m_tail(x + x1)[..., :h, :w]


class _HyperNet(nn.Module):
    """Each iteration's ``alpha_i`` and ``beta_i`` (2 n values, positive) from the noise level and the scale.

    The softplus outputs are raised by ``floor`` (1e-6, as in the official model): the data step divides by
    ``alpha_i``, and the official weights give noise-free ``alpha_1`` values near 1e-6 (1.4e-6 at x4), so the floor
    is part of what they were trained with."""

    floor = 1e-6

    def __init__(self, n_iter, hidden):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Conv2d(2, hidden, 1), nn.ReLU(inplace=True), nn.Conv2d(hidden, hidden, 1), nn.ReLU(inplace=True),
            nn.Conv2d(hidden, 2 * n_iter, 1), nn.Softplus())

    def forward(self, x):
        return self.mlp(x) + self.floor


@ARCH_REGISTRY.register()
class USRNet(nn.Module):
    """USRNet: ``forward(lr, kernel, scale, sigma)``, RGB LR in [0, 1] to the HR estimate.

    The measurement it inverts is circular convolution with ``kernel`` followed by keeping the upper-left pixel of
    each ``scale`` x ``scale`` block, plus Gaussian noise of std ``sigma``: the degradation of
    :class:`~mcnet_basicsr.ops.BlurDownsample` with ``offset=0``. ``non_blind`` marks a network called so: as an
    MCNetArch backbone it is told the measurement of each call (:mod:`~mcnet_basicsr.archs.frozen_backbone`).

    Args:
        n_iter (int): Unfolded iterations. Default: 6.
        in_ch (int): Image channels. Default: 3.
        channels (sequence of int): The prior's features per level. Default: (16, 32, 64, 64) (USRNet-tiny).
        num_block (int): The prior's residual blocks per level. Default: 2.
        hidden (int): Width of the hyper-network. Default: 32.
    """

    non_blind = True

    def __init__(self, n_iter=6, in_ch=3, channels=(16, 32, 64, 64), num_block=2, hidden=32):
        super().__init__()
        self.n_iter = n_iter
        self.d = DataStep()
        self.p = ResUNet(in_ch + 1, in_ch, channels, num_block)
        self.h = _HyperNet(n_iter, hidden)

    def forward(self, lr, kernel, scale, sigma):
        """``lr`` (N, C, h, w); ``kernel`` (N or 1, 1, kh, kw) summing to 1; ``scale`` an int; ``sigma`` the noise
        std, a float or an (N,) / (N, 1, 1, 1) tensor, in [0, 1] units."""
        n = lr.shape[0]
        scale = int(scale)
        sigma = torch.as_tensor(sigma, dtype=lr.dtype, device=lr.device).reshape(-1, 1, 1, 1).expand(n, 1, 1, 1)
        spectrum, aliased_power, kty = data_terms(lr, kernel, scale)
        x = F.interpolate(lr, scale_factor=scale, mode='nearest')
        weights = self.h(torch.cat([sigma, torch.full_like(sigma, scale)], dim=1))
        for i in range(self.n_iter):
            x = self.d(x, spectrum, aliased_power, kty, weights[:, i:i + 1], scale)
            level = weights[:, self.n_iter + i:self.n_iter + i + 1].expand(-1, -1, *x.shape[-2:])
            x = self.p(torch.cat([x, level], dim=1))
        return x

    def extra_repr(self):
        return f'n_iter={self.n_iter}, parameters={sum(p.numel() for p in self.parameters())}'
