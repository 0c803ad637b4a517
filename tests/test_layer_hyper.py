"""The layer's hyper-network (mcnet_basicsr/archs/layer_hyper.py): its spectrum features against the blur operator's
own eigenvalues, a layer that starts as the one without it, its gradient against an unrolled solve, and loading."""
import math

import numpy as np
import pytest
import torch

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from mcnet_basicsr.archs.layer_core import ChannelBalls
from mcnet_basicsr.archs.layer_hyper import BAND_EDGES, GRID, LayerHyper, aliased_spectrum_bands
from mcnet_basicsr.ops import build_operator
from test_colour_prior import DT, blur, colour_layer, implicit_and_unrolled_gradients, kernel


def bands_of_power(power, grid):
    """The band means of the half spectrum ``power`` (rfft2 layout) of a ``grid`` x ``grid`` LR image, in numpy."""
    fy = np.fft.fftfreq(grid)[:, None]
    fx = np.fft.rfftfreq(grid)[None, :]
    radius = np.sqrt(fy**2 + fx**2)
    return np.stack([power[:, (radius >= lo) & (radius < hi)].mean(axis=1)
                     for lo, hi in zip(BAND_EDGES[:-1], BAND_EDGES[1:])], axis=1)


@pytest.mark.parametrize('scale', [2, 3, 4])
def test_bands_are_the_blur_operators_eigenvalues(scale):
    """For circular blur and decimation ``A A^T`` is diagonal in the LR Fourier basis: the bands are the means of
    the operator's own ``aliased_power`` (computed from the kernel's autocorrelation, not by applying A)."""
    kernels = np.stack([kernel((7, 5), seed=s) for s in range(3)])
    op = build_operator({'type': 'blur', 'scale': scale, 'kernel': kernels})
    got = aliased_spectrum_bands(op, 3, 2, DT, 'cpu')
    want = np.log(np.maximum(bands_of_power(op.aliased_power(GRID * scale, GRID * scale), GRID), 1e-6))
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-9)
    # decimation alone: A A^T = I, every band log 1
    plain = build_operator({'type': 'blur', 'scale': scale, 'kernel': [[1.0]]})
    np.testing.assert_allclose(aliased_spectrum_bands(plain, 1, 1, DT, 'cpu').numpy(), 0.0, atol=1e-12)


def test_bands_tell_kernels_and_resizers_apart():
    """Wider blur passes less of the high bands; a resizer's operator gives its features the same way, and the
    channel-balls operator of a colour solve the features of its operator."""
    sharp = aliased_spectrum_bands(blur(2, kernel((3, 3), seed=1)), 1, 1, DT, 'cpu')
    x = np.arange(-7, 8)
    gauss = np.exp(-(x[:, None]**2 + x[None, :]**2) / (2 * 2.5**2))
    wide = aliased_spectrum_bands(blur(2, gauss / gauss.sum()), 1, 1, DT, 'cpu')
    assert float(wide[0, -1]) < float(sharp[0, -1]) - 2
    bicubic = aliased_spectrum_bands(build_operator({'type': 'bicubic', 'scale': 4}), 1, 1, DT, 'cpu')
    assert torch.isfinite(bicubic).all() and float(bicubic[0, 0]) == pytest.approx(-2 * math.log(4), abs=0.3)
    op = blur(2, np.stack([kernel(seed=3), kernel(seed=4)]))
    torch.testing.assert_close(aliased_spectrum_bands(ChannelBalls(op, 3), 2, 3, DT, 'cpu'),
                               aliased_spectrum_bands(op, 2, 1, DT, 'cpu'))


def problem(seed=11):
    g = torch.Generator().manual_seed(seed)
    op = blur(2, np.stack([kernel(seed=9), kernel(seed=10)]))
    b = torch.rand(2, 3, 5, 6, generator=g, dtype=DT)
    w = torch.rand(2, 3, 10, 12, generator=g, dtype=DT)
    return ChannelBalls(op, 3), b, w, torch.tensor([0.01, 0.03], dtype=DT)


def test_a_layer_starts_as_the_one_without_it():
    settings = {'solver': {'forward': {'tol': 1e-12, 'max_iter': 400}}}
    plain = colour_layer(settings=settings).to(DT)
    hyper = colour_layer(settings=settings, hyper={'hidden': 8}).to(DT)
    balls, b, w, sigma = problem()
    with torch.no_grad():
        x_plain, _ = plain.solve(w, b, operator=balls, noise_sigma=sigma)
        x_hyper, _ = hyper.solve(w, b, operator=balls, noise_sigma=sigma)
        torch.testing.assert_close(x_hyper, x_plain, rtol=0, atol=1e-12)
        # once it has learned something, each sample gets its own beta and level from its kernel and noise
        hyper.hyper.net[-1].bias.copy_(torch.tensor([0.5, -0.2], dtype=DT))
        beta, level = hyper.solve_weights(w, balls, sigma)
        torch.testing.assert_close(beta.view(-1), plain.beta_at(sigma).view(-1) * math.exp(0.5))
        torch.testing.assert_close(level, plain.level_at(sigma) * math.exp(-0.2))
        hyper.hyper.net[-1].weight.normal_(0, 0.1, generator=torch.Generator().manual_seed(0))
        beta, _ = hyper.solve_weights(w, balls, torch.tensor([0.02, 0.02], dtype=DT))
        assert abs(float(beta[0] - beta[1])) > 1e-6  # two kernels, the same noise: two betas


def test_hyper_gradient_matches_unrolled():
    """float64: the implicit gradient with respect to the hyper-network's weights is autograd's through a long
    unrolled plain iteration of the same map."""
    settings = {'solver': {'forward': {'tol': 1e-13, 'max_iter': 600}, 'backward': {'tol': 1e-12, 'max_iter': 600}}}
    net = colour_layer(beta={'init': 0.2, 'noise': True}, settings=settings, hyper={'hidden': 8}).to(DT)
    with torch.no_grad():
        net.hyper.net[-1].weight.normal_(0, 0.05, generator=torch.Generator().manual_seed(1))
    balls, b, w, sigma = problem()
    r = torch.randn(w.shape, generator=torch.Generator().manual_seed(5), dtype=DT)
    params = [net.hyper.net[0].weight, net.hyper.net[-1].weight, net.hyper.net[-1].bias]
    implicit, unrolled = implicit_and_unrolled_gradients(net, w, b, balls, sigma, r, params)
    for name, a, u in zip(('first weight', 'last weight', 'last bias'), implicit, unrolled):
        assert float(u.norm()) > 1e-8, name
        torch.testing.assert_close(a, u, rtol=1e-6, atol=1e-9 * float(u.abs().max()), msg=name)


def test_loading_and_options(tmp_path):
    from mcnet_basicsr.utils.checkpoint import load_network
    plain = colour_layer()
    torch.save({'params': plain.state_dict()}, tmp_path / 'plain.pth')
    hyper = colour_layer(hyper={'hidden': 8})
    load_network(hyper, str(tmp_path / 'plain.pth'))  # no hyper.* entries: loads strictly, the network at zero
    assert float(hyper.hyper.net[-1].weight.detach().abs().max()) == 0.0
    state = hyper.state_dict()
    del state['hyper.net.0.weight']
    with pytest.raises(RuntimeError, match='hyper.net.0.weight'):
        hyper.load_state_dict(state)
    with pytest.raises(ValueError, match='hyper must be a dict of {hidden} or None'):
        colour_layer(hyper={'width': 8})
    with pytest.raises(ValueError, match='hyper hidden must be a positive integer'):
        LayerHyper(hidden=0)
