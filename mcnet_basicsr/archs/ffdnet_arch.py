"""FFDNet (Zhang, Zuo, Zhang, "FFDNet: toward a fast and flexible solution for CNN-based image denoising", IEEE TIP
2018): a denoiser told the noise level, here as the prior of PnP solvers and MCNet layers.

Written from the paper: the noisy image is split into its four 2 x 2 polyphase sub-images (pixel unshuffle), a noise
level map is appended as one more channel, a plain CNN (3x3 convolutions with bias, ReLU between) maps them to the
clean sub-images, and pixel shuffle puts them back. The default arguments build the colour model of KAIR's model zoo
(852,108 parameters), whose weights (keys ``model.<i>``) load with ``strict=True``.

:class:`FFDNetHQS` (blur kernels) and :class:`FFDNetPnP` (any operator) run the same network as the prior of non-blind
super-resolution solvers; :class:`FFDNetUnfolded` is FFDNetHQS trained end to end.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

from mcnet_basicsr.ops import QUANTIZATION_EPS_RMS, imresize, noisy_radius
from mcnet_basicsr.utils.registration import ARCH_REGISTRY
from .layer_core import ChannelBalls
from .layer_hyper import zero_start_mlp
from .usrnet_arch import DataStep, data_terms


@ARCH_REGISTRY.register()
class FFDNet(nn.Module):
    """``forward(x, sigma)``: the denoised image of ``x`` (N, C, H, W) in [0, 1] with Gaussian noise of std ``sigma``
    (a float, or one per sample as an (N,) or (N, 1, 1, 1) tensor; [0, 1] units). Odd sides are padded (replicate)
    and cropped back.

    As MCNetArch's prior (``denoiser: {arch: FFDNet, level, path}``): ``takes_level`` tells the layer to give it its
    level, and ``colour`` whether it denoises R, G and B together (``in_ch`` 3).

    Args:
        in_ch (int): Image channels. Default: 3.
        num_feat (int): Features of the hidden layers. Default: 96.
        num_layer (int): Convolutions in all. Default: 12.
    """

    takes_level = True

    def __init__(self, in_ch=3, num_feat=96, num_layer=12):
        super().__init__()
        self.in_ch = in_ch
        layers = [nn.Conv2d(4 * in_ch + 1, num_feat, 3, 1, 1), nn.ReLU(inplace=True)]
        for _ in range(num_layer - 2):
            layers += [nn.Conv2d(num_feat, num_feat, 3, 1, 1), nn.ReLU(inplace=True)]
        layers.append(nn.Conv2d(num_feat, 4 * in_ch, 3, 1, 1))
        self.model = nn.Sequential(*layers)

    @property
    def colour(self):
        """Whether it denoises the three channels of an RGB image together."""
        return self.in_ch == 3

    def forward(self, x, sigma):
        h, w = x.shape[-2:]
        x = F.pad(x, (0, w % 2, 0, h % 2), mode='replicate')
        sub = F.pixel_unshuffle(x, 2)
        sigma = torch.as_tensor(sigma, dtype=x.dtype, device=x.device).reshape(-1, 1, 1, 1)
        level = sigma.expand(sub.shape[0], 1, *sub.shape[-2:])
        return F.pixel_shuffle(self.model(torch.cat([sub, level], dim=1)), 2)[..., :h, :w]


class AnnealedFFDNet(FFDNet):
    """The levels of a plug-and-play solver on FFDNet (IRCNN's and DPIR's schedule): ``n_iter`` levels log-spaced
    from ``level_hi`` down to ``max(scale / 255, sigma)``. Its weights are an FFDNet's: one file serves as such a
    solver and as an MCNet layer's prior."""

    non_blind = True
    takes_level = False  # a solver, not a prior told its level

    def __init__(self, in_ch=3, num_feat=96, num_layer=12, n_iter=24, level_hi=49 / 255):
        super().__init__(in_ch, num_feat, num_layer)
        self.n_iter, self.level_hi = int(n_iter), float(level_hi)

    def levels(self, scale, sigma):
        """The prior's levels ``s_i`` (N, n_iter) for noise ``sigma`` (N,)."""
        lo = torch.clamp(sigma, min=scale / 255.0)
        ratio = torch.linspace(0, 1, self.n_iter, dtype=sigma.dtype, device=sigma.device)
        return torch.exp(math.log(self.level_hi) + (torch.log(lo)[:, None] - math.log(self.level_hi)) * ratio)

    def denoise(self, x, level):
        """The prior: FFDNet at ``level`` (N,)."""
        return FFDNet.forward(self, x, level)

    def extra_repr(self):
        return f'n_iter={self.n_iter}, level_hi={self.level_hi:.4g}'


@ARCH_REGISTRY.register()
class FFDNetHQS(AnnealedFFDNet):
    """Non-blind super-resolution by half-quadratic splitting with FFDNet as the prior (the plug-and-play scheme of
    IRCNN and DPIR: Zhang et al., CVPR 2017 and TPAMI 2021): ``forward(lr, kernel, scale, sigma)``, as USRNet is
    called, for circular blur by ``kernel`` and upper-left decimation by ``scale`` with Gaussian noise of std
    ``sigma``.

    From MATLAB-bicubic upsampling, ``n_iter`` times: USRNet's closed-form data step
    ``argmin_x ||y - D_s(k * x)||^2 + alpha_i ||x - z||^2`` with ``alpha_i = lam max(sigma, q)^2 / s_i^2`` (``q`` the
    uint8 quantisation std), then ``z = FFDNet(x, s_i)`` at the levels of :class:`AnnealedFFDNet`. The defaults are
    DPIR's published settings for super-resolution (24 iterations, 49 / 255, lam 0.23), not tuned here.

    Args:
        in_ch, num_feat, num_layer: FFDNet's.
        n_iter (int): HQS iterations. Default: 24.
        level_hi (float): The first prior level, [0, 1] units. Default: 49 / 255.
        lam (float): The data step's weight. Default: 0.23.
    """

    def __init__(self, in_ch=3, num_feat=96, num_layer=12, n_iter=24, level_hi=49 / 255, lam=0.23):
        super().__init__(in_ch, num_feat, num_layer, n_iter, level_hi)
        self.lam = float(lam)
        self.data_step = DataStep()

    def forward(self, lr, kernel, scale, sigma):
        """``lr`` (N, C, h, w); ``kernel`` (N or 1, 1, kh, kw) summing to 1; ``scale`` an int; ``sigma`` the noise
        std, a float or an (N,) tensor, [0, 1] units."""
        n, scale = lr.shape[0], int(scale)
        sigma = torch.as_tensor(sigma, dtype=lr.dtype, device=lr.device).reshape(-1).expand(n)
        spectrum, aliased_power, kty = data_terms(lr, kernel, scale)
        alphas, levels = self.schedule(scale, sigma)
        x = imresize(lr, scale)
        for i in range(self.n_iter):
            x = self.data_step(x, spectrum, aliased_power, kty, alphas[:, i].view(-1, 1, 1, 1), scale)
            x = self.denoise(x, levels[:, i])
        return x

    def schedule(self, scale, sigma):
        """``(alphas, levels)``, each (N, n_iter): the data step's weights and the prior's levels for noise ``sigma``
        (N,)."""
        levels = self.levels(scale, sigma)
        return self.lam * torch.clamp(sigma, min=QUANTIZATION_EPS_RMS)[:, None]**2 / levels**2, levels

    def extra_repr(self):
        return f'{super().extra_repr()}, lam={self.lam:g}'


@ARCH_REGISTRY.register()
class FFDNetUnfolded(FFDNetHQS):
    """:class:`FFDNetHQS` unfolded and trained end to end, as USRNet is (Zhang, Van Gool, Timofte, CVPR 2020):
    ``forward(lr, kernel, scale, sigma)``, the same iterations, with each iteration's data weight ``alpha_i`` and
    prior level ``s_i`` learned as functions of the noise level and the scale.

    The schedule is FFDNetHQS's times ``exp`` of a small hyper-network of ``255 sigma / 10`` and ``log scale``
    (USRNet's hyper-network takes the same two), whose output layer starts at zero: untrained, it is FFDNetHQS with
    the same ``n_iter``, ``level_hi`` and ``lam``, and its FFDNet's weights load from an FFDNet file
    (``strict_load_g: false``; the hyper-network then starts at zero). Training (``ProtocolSRModel``, told each
    batch's kernel and noise) fits the schedule and fine-tunes the FFDNet.

    Args:
        in_ch, num_feat, num_layer: FFDNet's.
        n_iter (int): Unfolded iterations. Default: 8.
        level_hi (float): The first prior level before the hyper-network's factor, [0, 1] units. Default: 49 / 255.
        lam (float): The data weight's factor before the hyper-network's. Default: 0.23.
        hidden (int): Units per hidden layer of the hyper-network. Default: 32.
    """

    def __init__(self, in_ch=3, num_feat=96, num_layer=12, n_iter=8, level_hi=49 / 255, lam=0.23, hidden=32):
        super().__init__(in_ch, num_feat, num_layer, n_iter, level_hi, lam)
        self.hyper = zero_start_mlp(2, hidden, 2 * self.n_iter)

    def schedule(self, scale, sigma):
        alphas, levels = super().schedule(scale, sigma)
        features = torch.stack([25.5 * sigma, torch.full_like(sigma, math.log(scale))], dim=1)
        factors = self.hyper(features.to(self.hyper[0].weight)).to(sigma).exp()
        return alphas * factors[:, :self.n_iter], levels * factors[:, self.n_iter:]


@ARCH_REGISTRY.register()
class FFDNetPnP(AnnealedFFDNet):
    """Non-blind super-resolution for any measurement operator: plug-and-play projections with FFDNet as the prior,
    ``forward(lr, operator, sigma)``. From MATLAB-bicubic upsampling, ``n_iter`` times ``x = P(FFDNet(x, s_i))`` at
    the levels of :class:`AnnealedFFDNet`, where ``P`` is the exact projection of each channel onto the LR's ball
    ``||A x_c - lr_c|| <= eps`` (``A`` the operator: a blur kernel with decimation, or a library's resizer), its
    radius that of uint8 rounding and of the noise (:func:`~mcnet_basicsr.ops.noisy_radius`). Its output is
    consistent with the LR to that radius.

    Args:
        in_ch, num_feat, num_layer: FFDNet's.
        n_iter (int): Iterations. Default: 24.
        level_hi (float): The first prior level, [0, 1] units. Default: 49 / 255.
    """

    takes_operator = True

    def forward(self, lr, operator, sigma):
        """``lr`` (N, C, h, w) in [0, 1]; ``operator`` what made it (a :class:`~mcnet_basicsr.ops.DownsampleOperator`,
        the same for every sample, or one per sample); ``sigma`` the noise std, a float or an (N,) tensor, [0, 1]
        units."""
        n, c, h, w = lr.shape
        sigma = torch.as_tensor(sigma, dtype=lr.dtype, device=lr.device).reshape(-1).expand(n)
        balls, b = ChannelBalls(operator, c), lr.double()
        eps = noisy_radius(QUANTIZATION_EPS_RMS * math.sqrt(h * w), sigma.double().repeat_interleave(c), h * w)

        def project(x):
            return balls.project(x.double(), b, eps).to(lr.dtype)

        levels = self.levels(operator.scale, sigma)
        x = project(imresize(lr, operator.scale))
        for i in range(self.n_iter):
            x = project(self.denoise(x, levels[:, i]))
        return x
