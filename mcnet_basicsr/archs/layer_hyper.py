"""The layer's hyper-network: beta and the prior's level as functions of the measurement of each sample.

Without it the layer's beta and level depend on the LR noise alone (``beta exp(g 255 sigma)``, ``sqrt(exp(2 a) +
exp(2 c) sigma^2)``). :class:`LayerHyper` multiplies both by ``exp`` of a small network of what each sample's solve
knows of its measurement (USRNet derives its per-iteration weights from the noise level and the scale in the same
spirit): the noise level, the scale and the operator's aliased power spectrum. Its last layer starts at zero, so a
layer with a hyper-network starts as the same layer without one.

The spectrum comes from the operator itself, ``A A^T`` applied to an impulse on a small LR grid
(:func:`aliased_spectrum_bands`): the eigenvalues of ``A A^T`` for a blur and decimation (circular), and the same
response near the centre for a resizer, so any operator the layer serves (blur kernels, resizers, a stack of
them) gives its features without knowing its type.
"""
import math

import torch
from torch import nn

#: edges of the radial frequency bands (cycles per LR pixel) the spectrum is averaged over; the last reaches the corner
BAND_EDGES = (0.0, 0.125, 0.25, 0.375, 0.5, 0.75)
#: side of the LR grid of the impulse (its HR grid is ``scale`` times larger)
GRID = 32


def aliased_spectrum_bands(operator, n, c, dtype, device, grid=GRID):
    """``log`` of the mean of ``|FFT(A A^T delta)|`` in each band of :data:`BAND_EDGES`, ``delta`` an impulse at the
    centre of a ``grid`` x ``grid`` LR image: (n, len(BAND_EDGES) - 1), averaged over the ``c`` channels of each of
    the ``n`` samples the operator measures (``operator`` as a solve calls it: ``operator(x)``, ``operator.adjoint``
    on NCHW tensors). For a blur by a kernel summing to 1 and decimation by s the DC band is near ``-2 log s``; bands
    the operator does not pass reach ``log 1e-6``."""
    delta = torch.zeros(n, c, grid, grid, dtype=dtype, device=device)
    delta[..., grid // 2, grid // 2] = 1.0
    scale = operator.scale
    response = operator(operator.adjoint(delta, (grid * scale, grid * scale)))
    power = torch.fft.rfft2(response).abs().mean(dim=1)  # (n, grid, grid // 2 + 1)
    fy = torch.fft.fftfreq(grid, dtype=dtype, device=device)[:, None]
    fx = torch.fft.rfftfreq(grid, dtype=dtype, device=device)[None, :]
    radius = (fy**2 + fx**2).sqrt()
    bands = [(radius >= lo) & (radius < hi) for lo, hi in zip(BAND_EDGES[:-1], BAND_EDGES[1:])]
    return torch.stack([power[:, band].mean(dim=1) for band in bands], dim=1).clamp_min(1e-6).log()


def zero_start_mlp(features, hidden, outputs):
    """An MLP of ``features`` inputs, two hidden layers of ``hidden`` units (SiLU) and ``outputs`` outputs, its output
    layer zero at the start: the log-corrections of a hyper-network that begins as no correction."""
    if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1:
        raise ValueError(f'hyper hidden must be a positive integer, got {hidden!r}.')
    net = nn.Sequential(nn.Linear(features, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                        nn.Linear(hidden, outputs))
    nn.init.zeros_(net[-1].weight)
    nn.init.zeros_(net[-1].bias)
    return net


class LayerHyper(nn.Module):
    """``(log beta, log level)`` corrections per sample from its measurement: an MLP of ``255 sigma / 10``,
    ``log scale`` and the operator's :func:`aliased_spectrum_bands` (divided by 4), ``hidden`` units in two layers,
    the output layer zero at the start.

    Args:
        hidden (int): Units per hidden layer, > 0. Default: 16.
    """

    def __init__(self, hidden=16):
        super().__init__()
        self.net = zero_start_mlp(2 + len(BAND_EDGES) - 1, hidden, 2)

    def features(self, operator, noise_sigma, n, c):
        """The (n, F) input of the network for ``n`` samples of ``c`` channels measured by ``operator`` with LR
        noise ``noise_sigma`` (None, a float or an (n,) tensor)."""
        weight = self.net[0].weight
        with torch.no_grad():
            bands = aliased_spectrum_bands(operator, n, c, weight.dtype, weight.device) / 4
        sigma = torch.zeros(n, dtype=weight.dtype, device=weight.device)
        if noise_sigma is not None:
            sigma = sigma + torch.as_tensor(noise_sigma, dtype=weight.dtype, device=weight.device)
        scale = torch.full((n, 1), math.log(operator.scale), dtype=weight.dtype, device=weight.device)
        return torch.cat([25.5 * sigma[:, None], scale, bands], dim=1)

    def forward(self, operator, noise_sigma, n, c):
        """``(d_beta (n, 1, 1, 1), d_level (n,))``: the factors ``exp(.)`` of beta and of the level."""
        out = self.net(self.features(operator, noise_sigma, n, c)).exp()
        return out[:, 0].view(-1, 1, 1, 1), out[:, 1]

    def extra_repr(self):
        return f'bands={len(BAND_EDGES) - 1}, grid={GRID}'


class SolveWeightsMixin:
    """For a layer with ``log_beta``, ``log_beta_slope`` (None: beta independent of noise), a prior's ``level_at``
    and ``hyper`` (a :class:`LayerHyper` or None): the beta and level each solve uses."""

    @property
    def beta(self):
        """beta without noise."""
        return self.log_beta.exp()

    def beta_at(self, noise_sigma=None):
        """beta for samples with noise of std ``noise_sigma`` (None, a float, or an (N,) tensor: then (N, 1, 1, 1))."""
        if self.log_beta_slope is None or noise_sigma is None:
            return self.beta
        if torch.is_tensor(noise_sigma):
            noise_sigma = noise_sigma.to(self.log_beta)
            if noise_sigma.dim():
                noise_sigma = noise_sigma.view(-1, 1, 1, 1)
        return (self.log_beta + self.log_beta_slope * (255.0 * noise_sigma)).exp()

    def solve_weights(self, w, operator, noise_sigma=None):
        """``(beta, level)`` of the solve of the estimate ``w`` measured by ``operator`` with LR noise ``noise_sigma``:
        :meth:`beta_at` and :meth:`level_at`, each times the hyper-network's factor per sample where there is one."""
        beta, level = self.beta_at(noise_sigma), self.level_at(noise_sigma)
        if self.hyper is None:
            return beta, level
        d_beta, d_level = self.hyper(operator, noise_sigma, *w.shape[:2])
        return beta * d_beta, None if level is None else level * d_level
