"""A prior told its noise level in MCNetArch (mcnet_basicsr/archs/layer_prior.py): the colour map's implicit gradient
against an unrolled solve, each channel's own ball, the level function, non-blind backbones told the measurement of
the call, and the gray DnCNN layer against its stored output."""
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from conftest import REPO_ROOT, SHARED, load_script, shared_path
from mcnet_basicsr.archs.frozen_backbone import FrozenBackbone, is_non_blind, non_blind_forward
from mcnet_basicsr.archs.layer_core import ChannelBalls
from mcnet_basicsr.archs.layer_options import DenoiserOptions
from mcnet_basicsr.archs.layer_prior import PriorLevel
from mcnet_basicsr.archs.mcnet_arch import MCNetArch
from mcnet_basicsr.archs.usrnet_arch import USRNet
from mcnet_basicsr.ops import build_operator

DT = torch.float64
DATA = Path(__file__).resolve().parent / 'data'
TINY_FFDNET = {'arch': 'FFDNet', 'num_feat': 16, 'num_layer': 3, 'level': 0.02}


def kernel(shape=(5, 3), seed=0):
    k = np.random.default_rng(seed).random(shape) + 0.2
    return k / k.sum()


def blur(scale=2, kernels=None):
    return build_operator({'type': 'blur', 'scale': scale, 'kernel': kernel() if kernels is None else kernels})


def near_identity(ffdnet, spread=0.05):
    """Make a 3-convolution FFDNet the identity plus small random weights (its level channel among their inputs):
    a prior whose map has a fixed point that plain iteration reaches (the biases keep the hidden features positive)."""
    with torch.no_grad():
        first, middle, last = ffdnet.model[0], ffdnet.model[2], ffdnet.model[4]
        n = last.out_channels
        for conv in (first, middle, last):
            conv.weight.mul_(spread)
            conv.bias.zero_()
            conv.weight[range(n), range(n), 1, 1] += 1
        first.bias[:n] = 1
        last.bias[:] = -1


def colour_layer(**kw):
    """A layer with a tiny FFDNet near the identity (:func:`near_identity`) and a random SRCNN backbone (seed 0)."""
    torch.manual_seed(0)
    options = dict(backbone='srcnn', operator={'type': 'blur', 'scale': 2, 'kernel': kernel().tolist()},
                   channels='rgb', eps_rms=0.002, rho=1.0, beta={'init': 0.5, 'noise': True}, denoiser=TINY_FFDNET)
    options.update(kw)
    net = MCNetArch(**options)
    near_identity(net.denoiser)
    return net


def sample_matrix(op, i, h, w):
    """The matrix of sample ``i`` of an operator with one kernel per sample."""
    n = op.kernel.shape[0]
    cols = []
    for j in range(h * w):
        e = torch.zeros(n, 1, h, w, dtype=DT)
        e[i, 0].view(-1)[j] = 1
        cols.append(op(e)[i, 0].reshape(-1))
    return torch.stack(cols, dim=1)


# ------------------------------------------------------------------------------------------------ level and options
def test_level_function_values():
    """level(sigma) = sqrt(exp(2 a) + exp(2 c) sigma^2): exp(a) = sp at the start, c = 0, then a learned gain."""
    level = PriorLevel(5 / 255).double()
    sp = level.log_base.exp().item()
    assert sp == pytest.approx(5 / 255, rel=1e-7)  # the initial level, rounded to float32
    assert level().item() == pytest.approx(sp, rel=1e-12)
    sigma = torch.tensor([0.0, 2.55 / 255, 7.65 / 255], dtype=DT)
    torch.testing.assert_close(level(sigma), (sp**2 + sigma**2).sqrt(), rtol=1e-12, atol=0)
    with torch.no_grad():
        level.log_base.fill_(math.log(0.01))
        level.log_gain.fill_(math.log(3.0))
    torch.testing.assert_close(level(sigma), (0.01**2 + 9 * sigma**2).sqrt(), rtol=1e-12, atol=0)
    assert level(0.1).item() == pytest.approx(math.sqrt(0.01**2 + 0.09), rel=1e-12)
    # the layer tells its prior this level for the noise of each sample, and a DnCNN layer none
    net = colour_layer()
    torch.testing.assert_close(net.level_at(torch.tensor([0.0, 0.03])),
                               torch.tensor([0.02, math.sqrt(0.02**2 + 0.03**2)]), rtol=1e-6, atol=0)
    assert MCNetArch('srcnn', {'type': 'bicubic', 'scale': 2}).level_at(0.1) is None


def test_denoiser_options():
    """arch and level come out of the network's options; the level needs a prior told it, and a colour prior RGB."""
    opt = DenoiserOptions.from_options('denoiser', {'arch': 'FFDNet', 'level': 0.02, 'num_feat': 8, 'path': 'f.pth'})
    assert opt == DenoiserOptions({'num_feat': 8}, 'f.pth', 'FFDNet', 0.02)
    assert DenoiserOptions.from_options('denoiser', {'depth': 6}) == DenoiserOptions({'depth': 6})
    with pytest.raises(ValueError, match='level must be a number > 0'):
        DenoiserOptions.from_options('denoiser', {'arch': 'FFDNet', 'level': 0})
    with pytest.raises(ValueError, match='DnCNN denoises at one noise level'):
        colour_layer(denoiser={'level': 0.02})
    with pytest.raises(ValueError, match='give denoiser level'):
        colour_layer(denoiser={'arch': 'FFDNet'})
    with pytest.raises(ValueError, match='needs channels: rgb'):
        colour_layer(channels='y')
    with pytest.raises(ValueError, match='neither DnCNN nor a prior told its level'):
        colour_layer(denoiser={'arch': 'SRCNN', 'level': 0.02})


def test_colour_layer_checkpoint_loads_strictly(tmp_path):
    """The prior's weights and its level function are the layer's state: a saved layer loads strictly into a new one
    and gives the same output."""
    net = colour_layer()
    with torch.no_grad():
        net.prior_level.log_gain.fill_(0.3)
        net.denoiser.model[0].weight.mul_(1.5)
    keys = set(net.state_dict())
    assert {'prior_level.log_base', 'prior_level.log_gain', 'denoiser.model.0.weight'} <= keys
    torch.save({'params': net.state_dict()}, tmp_path / 'layer.pth')
    other = colour_layer()  # the same backbone (not in the state)
    lr = torch.rand(1, 3, 6, 8, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert not torch.equal(other(lr, noise_sigma=0.02), net(lr, noise_sigma=0.02))
        other.load_state_dict(torch.load(tmp_path / 'layer.pth')['params'], strict=True)
        torch.testing.assert_close(other(lr, noise_sigma=0.02), net(lr, noise_sigma=0.02), rtol=0, atol=0)


# ----------------------------------------------------------------------------------------------- the colour map
def test_channel_balls_projection_is_the_dense_projection_of_each_channel():
    """ChannelBalls(A, 3).project with eps = 0, one kernel per sample: per sample and channel the dense pseudo-inverse
    projection x - A^T (A A^T)^-1 (A x - b), so the folding pairs each channel with its sample's kernel."""
    h, w = 8, 6
    op = blur(2, np.stack([kernel(seed=1), kernel(seed=2)]))
    g = torch.Generator().manual_seed(4)
    x = torch.rand(2, 3, h, w, generator=g, dtype=DT)
    b = torch.rand(2, 3, h // 2, w // 2, generator=g, dtype=DT)
    got = ChannelBalls(op, 3).project(x, b, 0.0)
    for i in range(2):
        a = sample_matrix(op, i, h, w)
        for c in range(3):
            xc, bc = x[i, c].reshape(-1), b[i, c].reshape(-1)
            want = xc - a.T @ torch.linalg.solve(a @ a.T, a @ xc - bc)
            torch.testing.assert_close(got[i, c].reshape(-1), want, rtol=0, atol=1e-10)
    torch.testing.assert_close(ChannelBalls(op, 3)(got), b, rtol=0, atol=1e-10)


def test_colour_output_is_in_each_channels_ball():
    """float64, noisy measurements of per-sample kernels: each channel of the output is in its own ball,
    ||A x_c - b_c|| <= sqrt(eps^2 + sigma^2 m) (to 1e-8), and on the ball's boundary where the start was outside."""
    net = colour_layer(settings={'solver': {'forward': {'tol': 1e-8, 'max_iter': 200}}}).to(DT).eval()
    op = blur(2, np.stack([kernel(seed=5), kernel(seed=6)]))
    g = torch.Generator().manual_seed(7)
    lr = torch.rand(2, 3, 6, 7, generator=g, dtype=DT)
    sigma = torch.tensor([0.0, 0.01], dtype=DT)
    with torch.no_grad():
        out, info = net.run(lr, operator=op, noise_sigma=sigma)
        w, cbcr = net.backbone_estimate(lr, operator=op)
    m = 6 * 7
    eps = torch.sqrt((0.002**2 * m) + sigma.repeat_interleave(3)**2 * m)
    torch.testing.assert_close(info['eps'], eps, rtol=1e-12, atol=0)
    res = (op.repeat_samples(3)(out.reshape(6, 1, 12, 14)) - lr.reshape(6, 1, 6, 7)).flatten(1).norm(dim=1)
    assert (res <= eps + 1e-8).all(), (res, eps)
    start = net._image(w, cbcr)
    start_res = (op.repeat_samples(3)(start.reshape(6, 1, 12, 14)) - lr.reshape(6, 1, 6, 7)).flatten(1).norm(dim=1)
    outside = start_res > eps
    assert outside.any()
    torch.testing.assert_close(res[outside], eps[outside], rtol=0, atol=1e-8)
    assert bool(info['forward'].converged.all())
    assert info['forward'].iterations.shape == (2,)  # one problem per sample: R, G, B together


def test_colour_map_denoises_channels_jointly():
    """The prior sees the RGB image (N, 3, H, W) with the level of each sample, not one channel per problem."""
    net = colour_layer().to(DT)
    seen = []
    net.denoiser.register_forward_hook(lambda mod, args, out: seen.append((args[0].shape, args[1].clone())))
    lr = torch.rand(2, 3, 6, 7, generator=torch.Generator().manual_seed(8), dtype=DT)
    with torch.no_grad():
        net(lr, operator=blur(), noise_sigma=torch.tensor([0.0, 0.03], dtype=DT))
    assert seen and all(shape == (2, 3, 12, 14) for shape, _ in seen)
    torch.testing.assert_close(seen[0][1], torch.tensor([0.02, math.sqrt(0.02**2 + 0.03**2)], dtype=DT),
                               rtol=1e-6, atol=0)


def implicit_and_unrolled_gradients(net, w, b, operator, sigma, r, params):
    """The gradients of ``<solve(w, b), r>`` with respect to ``params``: the implicit one of ``net.solve`` (whose
    forward and backward solves must converge) and autograd's through 500 steps of plain iteration of the same map
    from the same start (which must converge to 1e-12)."""
    with torch.enable_grad():
        x, info = net.solve(w, b, operator=operator, noise_sigma=sigma)
        implicit = torch.autograd.grad((x * r).sum(), params)
    assert bool(info['forward'].converged.all()) and bool(info['backward'].stats.converged.all())
    f, z, _ = net.fixed_point_problem(w, b, operator=operator, noise_sigma=sigma)
    with torch.enable_grad():
        for _ in range(500):
            z_prev, z = z, f(z)
        assert float((z - z_prev).detach().norm() / z.detach().norm()) < 1e-12  # the unrolled iteration converged
        unrolled = torch.autograd.grad((z[:, :w.shape[1]] * r).sum(), params)
    return implicit, unrolled


def test_colour_map_implicit_gradient_matches_unrolled():
    """float64, tiny FFDNet near the identity (random perturbation): the implicit gradient of the
    solve with respect to beta, its noise slope, both level parameters, a weight of the prior and the estimate w is
    autograd's through a long unrolled plain iteration of the same map from the same start."""
    settings = {'solver': {'forward': {'tol': 1e-13, 'max_iter': 600}, 'backward': {'tol': 1e-12, 'max_iter': 600}}}
    net = colour_layer(beta={'init': 0.2, 'noise': True}, settings=settings).to(DT)
    with torch.no_grad():
        net.log_beta_slope.fill_(0.1)
        net.prior_level.log_gain.fill_(0.2)
    op = blur(2, np.stack([kernel(seed=9), kernel(seed=10)]))
    balls = ChannelBalls(op, 3)
    g = torch.Generator().manual_seed(11)
    b = torch.rand(2, 3, 5, 6, generator=g, dtype=DT)
    w = torch.rand(2, 3, 10, 12, generator=g, dtype=DT).requires_grad_()
    r = torch.randn(2, 3, 10, 12, generator=g, dtype=DT)
    sigma = torch.tensor([0.01, 0.03], dtype=DT)
    weight = net.denoiser.model[2].weight
    params = [net.log_beta, net.log_beta_slope, net.prior_level.log_base, net.prior_level.log_gain, weight, w]

    implicit, unrolled = implicit_and_unrolled_gradients(net, w, b, balls, sigma, r, params)
    for name, a, u in zip(('log_beta', 'log_beta_slope', 'log_base', 'log_gain', 'weight', 'w'), implicit, unrolled):
        assert float(u.norm()) > 1e-6, name  # not vacuous
        torch.testing.assert_close(a, u, rtol=1e-6, atol=1e-9 * float(u.abs().max()), msg=name)


# ------------------------------------------------------------------------------------------- non-blind backbones
class SpyNonBlind(torch.nn.Module):
    """A non-blind network that records what it is told and upsamples by nearest neighbours."""

    non_blind = True

    def __init__(self):
        super().__init__()
        self.calls = []
        self.anchor = torch.nn.Parameter(torch.zeros(()))

    def forward(self, lr, kernel, scale, sigma):
        self.calls.append((lr.clone(), kernel.clone(), scale, sigma))
        return torch.nn.functional.interpolate(lr, scale_factor=scale, mode='nearest')


def spy_layer(operator):
    net = MCNetArch('srcnn', operator, channels='rgb', denoiser={'depth': 3, 'num_feat': 8},
                    settings={'solver': {'forward': {'tol': 1e-3, 'max_iter': 5}}})
    net.frozen = FrozenBackbone(SpyNonBlind(), 2, 'lr', 3)
    return net


def test_non_blind_nets_are_recognised_in_one_place():
    """USRNet and any class with non_blind = True are non-blind, for the layer and for the kernel table's rows."""
    from mcnet_basicsr.evaluation.kernel_table import protocol_forward
    assert is_non_blind(USRNet()) and is_non_blind(SpyNonBlind())
    assert not is_non_blind(torch.nn.Conv2d(1, 1, 1))
    spy = SpyNonBlind()
    lr = np.random.default_rng(15).random((1, 6, 7, 3)).astype(np.float32)
    protocol_forward(spy, False, lr, blur(), 0.01, 'cpu')
    got_lr, got_kernel, got_scale, got_sigma = spy.calls[-1]
    torch.testing.assert_close(got_lr, torch.from_numpy(lr).permute(0, 3, 1, 2), rtol=0, atol=0)
    torch.testing.assert_close(got_kernel, torch.from_numpy(kernel()).float()[None, None], rtol=0, atol=0)
    assert got_scale == 2 and got_sigma == 0.01


def test_non_blind_backbone_is_told_the_measurement_of_the_call():
    """The call's operator (one kernel per sample), its scale and sigma reach the backbone; without an operator the
    layer's own; the estimate is the network's output."""
    net = spy_layer({'type': 'blur', 'scale': 2, 'kernel': kernel().tolist()})
    spy = net.backbone
    lr = torch.rand(2, 3, 6, 7, generator=torch.Generator().manual_seed(12))
    kernels = np.stack([kernel(seed=13), kernel(seed=14)])
    sigma = torch.tensor([0.0, 0.02])
    with torch.no_grad():
        net.run(lr, operator={'type': 'blur', 'scale': 2, 'kernel': kernels}, noise_sigma=sigma)
    got_lr, got_kernel, got_scale, got_sigma = spy.calls[-1]
    torch.testing.assert_close(got_lr, lr, rtol=0, atol=0)
    torch.testing.assert_close(got_kernel, torch.from_numpy(kernels).float()[:, None], rtol=0, atol=0)
    assert got_scale == 2 and got_sigma is sigma
    with torch.no_grad():
        net(lr)
        w, cbcr = net.backbone_estimate(lr)
    _, got_kernel, _, got_sigma = spy.calls[-1]
    torch.testing.assert_close(got_kernel, torch.from_numpy(kernel()).float()[None, None], rtol=0, atol=0)
    assert got_sigma == 0.0
    torch.testing.assert_close(net._image(w, cbcr), torch.nn.functional.interpolate(lr, scale_factor=2), rtol=1e-6,
                               atol=1e-6)


def test_non_blind_backbone_is_told_a_resizers_circular_kernel():
    """A layer whose operator is a resizer (MATLAB bicubic) tells a kernel-taking backbone the circular blur equal to
    it away from the borders; an operator without one gets one clear error."""
    net = spy_layer({'type': 'bicubic', 'scale': 2})
    with torch.no_grad():
        net(torch.rand(1, 3, 6, 7))
    _, got_kernel, got_scale, _ = net.backbone.calls[-1]
    expected = build_operator({'type': 'bicubic', 'scale': 2}).circular_blur().kernel
    torch.testing.assert_close(got_kernel, torch.tensor(expected, dtype=torch.float32)[None, None], rtol=0, atol=0)
    assert got_scale == 2

    class NoKernel:
        scale = 2

    with pytest.raises(ValueError, match='is non-blind') as err:
        non_blind_forward(SpyNonBlind(), torch.rand(1, 3, 6, 7), NoKernel())
    assert '\n' not in str(err.value)


# ------------------------------------------------------------------------------------------- the gray DnCNN layer
def gray_layer(channels):
    """The layer of tests/data/gray_dncnn_layer.npz: random SRCNN and DnCNN3 (seed 0), blur x2, beta with noise."""
    torch.manual_seed(0)
    k = np.outer([1, 2, 3, 2, 1], [1, 3, 1]).astype(np.float64)
    k /= k.sum()
    return MCNetArch(backbone='srcnn', operator={'type': 'blur', 'scale': 2, 'kernel': k.tolist()}, channels=channels,
                     eps_rms=0.002, beta={'init': 0.5, 'noise': True}, denoiser={'depth': 3, 'num_feat': 8},
                     settings={'solver': {'forward': {'tol': 1e-6, 'max_iter': 80}}})


@pytest.mark.parametrize('channels', ['rgb', 'y'])
def test_gray_dncnn_layer_gives_its_stored_output(channels):
    """A gray DnCNN layer (each of R, G, B apart, or Y) gives the output stored for it (CPU, float32)."""
    stored = np.load(DATA / 'gray_dncnn_layer.npz')
    lr = torch.from_numpy(stored['lr'])
    torch.manual_seed(1)
    assert torch.equal(lr, torch.rand(2, 3, 8, 10))
    with torch.no_grad():
        out = gray_layer(channels).eval()(lr, noise_sigma=torch.tensor([0.0, 0.02]))
    np.testing.assert_allclose(out.numpy(), stored[channels], rtol=0, atol=1e-6)


# ------------------------------------------------------------------------------------- the kernel table's row
@pytest.mark.slow
def test_kernel_table_row_agrees_with_the_lab_layer(tmp_path, monkeypatch):
    """``scripts/kernel_table.py --rows mcnet_usrnet_tiny`` (options/test_mcnet_usrnet_tiny_x4.yml: the pretrained
    colour FFDNet, beta 3, level 5 / 255, rho 1) on the first CBSD68 image under kernel 1 at x4 gives the PSNR of the
    lab's FFDNetLayer (benchmarks/prior_study.py) on the same inputs (its estimate w: USRNet-tiny on the
    measurement b, as the layer's backbone sees it) to 1e-3 dB, at the lab's solver setting."""
    shared_path('weights', 'kair_denoisers')
    shared_path('datasets')
    assets = ['CBSD68', 'usrnet_kernels', 'usrnet_tiny', 'ffdnet_color']
    assert load_script('fetch_assets').main(assets + ['--from', str(SHARED), '--root', str(tmp_path)]) == 0
    (tmp_path / 'options').symlink_to(REPO_ROOT / 'options')
    monkeypatch.chdir(tmp_path)
    load_script('kernel_table').main(['--rows', 'mcnet_usrnet_tiny', '--images', '1', '--families', 'x4', '--kernels',
                                      '1', '--device', 'cpu', '--data', 'datasets', '--tol', '1e-4', '--max-iter',
                                      '60', '--out', 'table.json'])
    cell = json.loads((tmp_path / 'table.json').read_text())['cells']['mcnet_usrnet_tiny|x4|k1']
    assert cell['images'] == 1 and cell['fidelity_max'] > 0

    import prior_study
    from mcnet_basicsr.data.degradations import psnr_rgb_uint8, usrnet_measurement
    from mcnet_basicsr.evaluation.kernel_table import images_by_shape, protocol_lrs
    from mcnet_basicsr.ops.kernels import load_kernel
    usrnet, ffdnet = prior_study.load_networks('experiments/pretrained_models')
    layer = prior_study.FFDNetLayer(ffdnet, 3.0, 5 / 255.0)
    kernel = load_kernel('datasets/kernels/kernels_12.mat', 0)
    op = build_operator({'type': 'blur', 'scale': 4, 'kernel': kernel})
    groups = images_by_shape('datasets/CBSD68/HR', 4, 1)
    lrs = protocol_lrs(groups, kernel, 4, 0.0)
    lab = {}
    with torch.no_grad():
        for items in groups.values():
            for name, hr in items:
                b = torch.from_numpy(usrnet_measurement(lrs[name][None])[0]).permute(0, 3, 1, 2)
                w = usrnet(b.clamp(0, 1), torch.tensor(kernel, dtype=torch.float32)[None, None], 4, 0.0)
                x, _ = layer.solve(w, b, op, prior_study.measurement_radius(b, 0.0), 0.0)
                sr = (x.clamp(0, 1) * 255).round().byte()[0].permute(1, 2, 0).numpy()
                lab[name] = psnr_rgb_uint8(sr, hr, 16)
    assert set(lab) == set(cell['per_image'])
    for name, psnr in lab.items():
        assert abs(cell['per_image'][name] - psnr) <= 1e-3, (name, cell['per_image'][name], psnr)


def test_lab_layer_noise_functions():
    """The prior study's layer (benchmarks/prior_study.py) starts beta at ``beta exp(slope 255 sigma)`` and its level
    at ``sqrt(sp^2 + gain^2 sigma^2)``, gain 0 keeping sp at any noise; its centred crop is the image's middle."""
    import prior_study
    sigma = torch.tensor([0.0, 2.55 / 255, 7.65 / 255])
    for slope, gain in ((0.0, 1.0), (0.30099, 0.5), (0.30099, 0.0)):
        layer = prior_study.FFDNetLayer(None, 3.0, 5 / 255, slope, gain)
        with torch.no_grad():
            beta, level = layer.parameters_of(sigma, 3, 'cpu')
        torch.testing.assert_close(beta.view(-1), 3 * torch.exp(slope * 255 * sigma), rtol=1e-5, atol=0)
        torch.testing.assert_close(level, ((5 / 255)**2 + gain**2 * sigma**2).sqrt(), rtol=1e-5, atol=0)
    img = np.arange(5 * 7 * 3).reshape(5, 7, 3)
    np.testing.assert_array_equal(prior_study.centre_crop(img, 3), img[1:4, 2:5])
    assert prior_study.centre_crop(img, 0) is img and prior_study.centre_crop(img, 6) is img


def test_lab_self_ensemble_is_equivariant_and_keeps_an_equivariant_prior():
    """The prior study's self-ensemble (``--self-ensemble``) commutes with every flip and rotation of its input, and
    leaves a prior that already does (a pointwise map) as it is."""
    import prior_study
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(4, 3, 3, padding=1)  # not equivariant: a random kernel and the level as a channel

    def prior(x, level):
        return conv(torch.cat([x, level.view(-1, 1, 1, 1).expand(-1, 1, *x.shape[2:])], dim=1))

    ens = prior_study.SelfEnsemble(prior)
    x, level = torch.rand(2, 3, 6, 6), torch.tensor([0.02, 0.03])
    with torch.no_grad():
        out = ens(x, level)
        assert not torch.allclose(prior(x, level), out, atol=1e-3)
        torch.testing.assert_close(ens(torch.rot90(x, 1, (2, 3)), level), torch.rot90(out, 1, (2, 3)))
        torch.testing.assert_close(ens(x.flip(3), level), out.flip(3))
        pointwise = prior_study.SelfEnsemble(lambda y, s: y * 2 + s.view(-1, 1, 1, 1))
        torch.testing.assert_close(pointwise(x, level), x * 2 + level.view(-1, 1, 1, 1))
