"""MCNetArch's ``extrapolation`` setting: at inference the output comes from ``z + t (F(z) - z)``, ``t`` a fraction of
``(beta + rho) / beta``, for the iterate ``z`` a solve stops at. It must bring a loosely stopped solve nearer the
fixed point, keep the output exactly consistent, and leave training (grad enabled) as it is.

CPU only; the shipped weights; scikit-image's photos (no download).
"""
import pytest
import torch

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from conftest import sample_photo
from mcnet_basicsr.archs.mcnet_arch import MCNetArch
from mcnet_basicsr.deq import solve
from mcnet_basicsr.ops import build_operator
from mcnet_basicsr.utils.color import luma
from mcnet_basicsr.zoo.pretrained import build_pretrained_mcnet


def _pair(scale, size):
    """(HR, LR) of a centre crop of astronaut: LR = MATLAB bicubic of the HR, rounded to uint8."""
    hr = torch.from_numpy(sample_photo('astronaut', size)).permute(2, 0, 1)[None].double() / 255.0
    lr = (build_operator({'type': 'bicubic', 'scale': scale})(hr).clamp(0, 1) * 255.0).round().float() / 255.0
    return hr.float(), lr


@pytest.mark.parametrize('bad', (-0.1, True, 'half', None))
def test_bad_extrapolation_is_refused(bad):
    with pytest.raises(ValueError, match='extrapolation'):
        MCNetArch(backbone='srcnn', operator={'type': 'bicubic', 'scale': 2}, settings={'extrapolation': bad})


def test_extrapolated_output_is_the_map_at_the_extrapolated_iterate_and_consistent():
    scale = 2
    _, lr = _pair(scale, 48)
    net = build_pretrained_mcnet(scale, solver={'tol': 1e-3, 'max_iter': 30}, start=False)
    with torch.no_grad():
        with net.settings(extrapolation=0.25):
            out, info = net.run(lr)
        assert net.layer_settings.extrapolation == 0.0
        stats = info['forward']
        # the same solve by hand: the iterate it stops at, then F once more at z + t (F(z) - z)
        w, cbcr = net.backbone_estimate(lr)
        b = luma(lr.double())
        f, z0, eps = net.fixed_point_problem(w, b.float())
        z, _ = solve(f, z0, net.layer_settings.forward_solver)
        t = 0.25 * (float(net.beta) + net.rho) / float(net.beta)
        expected = net.consistent_output(f(z + t * (f(z) - z))[:, :1], b, eps)
        plain = net.consistent_output(f(z)[:, :1], b, eps)
    assert t > 10  # the shipped SRCNN layers' beta is small: a long step
    assert torch.allclose(luma(out), luma(net._image(expected, cbcr)), atol=1e-5)
    assert (expected - plain).abs().max() > 1e-4  # it changed the output
    residual = net.operator(expected.double()) - b
    assert float(residual.norm()) < 1e-5  # still exactly consistent: F ends with the projection
    assert int(stats.iterations[0]) >= 1


def test_training_ignores_extrapolation():
    """With grad enabled the layer returns F(z*) with its implicit backward, extrapolation or not."""
    _, lr = _pair(2, 32)
    net = build_pretrained_mcnet(2, solver={'tol': 1e-3, 'max_iter': 20}, start=False)
    outs = []
    for frac in (0.0, 0.5):
        with net.settings(extrapolation=frac):
            assert net.layer_settings.extrapolation == frac
            out = net(lr)
        out.mean().backward()
        outs.append(out.detach())
        assert net.log_beta.grad is not None
        net.zero_grad()
    assert torch.equal(outs[0], outs[1])


@pytest.mark.slow
@pytest.mark.parametrize('scale, frac, bound', ((4, 0.5, 0.8), (2, 0.25, 0.92)))
def test_extrapolation_brings_a_loose_solve_nearer_the_fixed_point(scale, frac, bound):
    """astronaut, HR 96 x 96, mcnet-sr's model: stopped at 3e-5, the extrapolated output is nearer (in Y) the
    solve's output at 1e-7 than the plain one, by the bound's factor (measured 0.73x at x4, 0.85x at x2; on a 192 px
    crop 0.61x and 0.62x)."""
    _, lr = _pair(scale, 96)
    net = build_pretrained_mcnet(scale, solver={'tol': 1e-7, 'max_iter': 400})
    with torch.no_grad():
        ref = luma(net(lr))
        with net.settings(solver={'forward': {'preset': 'fast', 'tol': 3e-5}}):
            plain = luma(net(lr))
            with net.settings(extrapolation=frac):
                extrapolated = luma(net(lr))
    d_plain, d_ext = (float((x - ref).norm() / ref.norm()) for x in (plain, extrapolated))
    assert d_ext <= bound * d_plain, (d_ext, d_plain)
