"""The prior R of MCNetArch, built from its ``denoiser`` option
(:class:`~mcnet_basicsr.archs.layer_options.DenoiserOptions`).

Two kinds of prior serve the layer: a DnCNN, ``R(x)`` at one noise level, run on Y or on each channel apart; and a
prior told its level, ``R(x, level)`` (its class sets ``takes_level = True``, e.g.
:class:`~mcnet_basicsr.archs.ffdnet_arch.FFDNet`), whose ``colour`` says whether it denoises R, G and B together. The
layer tells such a prior a learned function of the LR noise, :class:`PriorLevel`.
"""
import math

import torch
from torch import nn

from mcnet_basicsr.utils.checkpoint import load_network
from mcnet_basicsr.utils.registration import ARCH_REGISTRY
from .dncnn_arch import DnCNN, load_dncnn


class PriorLevel(nn.Module):
    """The level a prior is told for LR noise of std ``sigma``: ``sqrt(exp(2 a) + exp(2 c) sigma^2)``, the noise of
    the iterate the prior sees without LR noise (``exp(a)``) and the LR noise as it reaches the iterate (``exp(c)
    sigma``), both learned (``log_base`` a, ``log_gain`` c).

    Args:
        init (float): ``exp(a)`` at the start, > 0 (``c`` starts at 0).
    """

    def __init__(self, init):
        super().__init__()
        self.log_base = nn.Parameter(torch.tensor(math.log(init)))
        self.log_gain = nn.Parameter(torch.zeros(()))

    def forward(self, noise_sigma=None):
        """The level for ``noise_sigma`` (None: none; a float or an (N,) tensor): a 0-d tensor or (N,)."""
        base = (2 * self.log_base).exp()
        if noise_sigma is None:
            return base.sqrt()
        noise_sigma = torch.as_tensor(noise_sigma, dtype=self.log_base.dtype, device=self.log_base.device)
        return (base + (2 * self.log_gain).exp() * noise_sigma**2).sqrt()

    def extra_repr(self):
        return f'init={self.log_base.exp().item():.4g}'


def build_prior(options):
    """``(R, level)`` of a :class:`~mcnet_basicsr.archs.layer_options.DenoiserOptions`: the network with its
    weights, and its :class:`PriorLevel` (None for a DnCNN, which is not told a level)."""
    if options.arch == 'DnCNN':
        if options.level is not None:
            raise ValueError(f'DnCNN denoises at one noise level; denoiser level {options.level!r} is for a prior '
                             'told its level (arch: FFDNet).')
        if options.options.get('batch_norm'):
            # BN in training mode makes F depend on the batch (no fixed point per image), and BN's
            # scale is not bounded, so the contraction argument is lost: PnP baseline only.
            raise ValueError('MCNetArch needs a denoiser without BatchNorm (batch_norm: false); '
                             'BatchNorm DnCNNs are for the PnPADMM baseline.')
        net = DnCNN(**options.options)
        if options.path is not None:
            load_dncnn(net, options.path)
        net.auto_update_spectral_norm = False  # updated once per solve: MCNetArch.fixed_point_problem
        return net, None
    cls = ARCH_REGISTRY.get(options.arch)
    if not getattr(cls, 'takes_level', False):
        raise ValueError(f'denoiser arch {options.arch!r} is neither DnCNN nor a prior told its level (a class with '
                         'takes_level = True and forward(x, level), e.g. FFDNet).')
    if options.level is None:
        raise ValueError(f'The prior {options.arch} is told its level: give denoiser level, its level without LR '
                         'noise (e.g. 0.0196 = 5 / 255).')
    net = cls(**options.options)
    if options.path is not None:
        load_network(net, options.path)
    return net, PriorLevel(options.level)


class PriorMixin:
    """For a layer holding the prior of :func:`build_prior` in ``denoiser`` and ``prior_level``: whether it solves R,
    G and B together, the level it tells the prior, and the refresh of a DnCNN's spectral normalisation."""

    @property
    def joint_channels(self):
        """Whether a colour prior solves R, G and B together (see :class:`~mcnet_basicsr.archs.layer_core.
        ConsistentLayer`)."""
        return getattr(self.denoiser, 'colour', False)

    def level_at(self, noise_sigma=None):
        """The level a prior told its level is given for samples with LR noise of std ``noise_sigma`` (None for a
        DnCNN prior)."""
        return None if self.prior_level is None else self.prior_level(noise_sigma)

    def refresh_prior(self):
        """Refresh a DnCNN's spectral-norm estimate (once per solve, so that the map does not change while it is
        solved); other priors keep no such estimate."""
        if isinstance(self.denoiser, DnCNN):
            self.denoiser.update_spectral_norm()
