"""MCNetArch: implicit gradients, measurement consistency, the frozen backbone, solver settings.

CPU only. The backbone is a random SRCNN saved to a temporary checkpoint and loaded through
``backbone: {path}`` (as a trained one would be); the denoiser is a small DnCNN6 (8 channels) so the
float64 checks stay fast. The Anderson-vs-plain comparison uses the authors' DnCNN6 from ../shared
when present.
"""
import copy
import math

import numpy as np
import pytest
import torch
from basicsr.archs import build_network

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from conftest import SHARED, central_difference, sample_photo
from mcnet_basicsr.archs.mcnet_arch import MCNetArch
from mcnet_basicsr.ops import build_operator, eps_from_rms
from mcnet_basicsr.utils.color import rgb_to_ycbcr

DT = torch.float64
SCALE = 2
OPERATOR = {'type': 'bicubic', 'scale': SCALE}
AUTHORS_DNCNN = SHARED / 'weights' / 'sr_mcnet_official' / 'dncnn6_realsn_relu' / 'sigma_0.00625_0.01250.pth'


@pytest.fixture(scope='module')
def backbone_ckpt(tmp_path_factory):
    torch.manual_seed(0)
    srcnn = build_network({'type': 'SRCNN', 'padding_mode': 'zeros'})
    path = tmp_path_factory.mktemp('mcnet_arch') / 'srcnn_random.pth'
    torch.save({'params': srcnn.state_dict()}, path)
    return str(path)


SRCNN = {'type': 'SRCNN', 'padding_mode': 'zeros'}


def make_net(ckpt, seed=0, **kw):
    """A layer on the random SRCNN of ``ckpt`` (Y in, Y out, on the upsampled LR) with an 8-channel DnCNN6; ``kw``
    replaces any constructor option."""
    opt = dict(backbone={'net': SRCNN, 'path': ckpt, 'input': 'upsampled', 'channels': 1}, operator=OPERATOR,
               denoiser={'num_feat': 8})
    opt.update(kw)
    torch.manual_seed(seed)
    return MCNetArch(**opt)


def freeze_spectral_norm(net, monkeypatch):
    """Estimate the denoiser's spectral norms once, then keep (u, v, sigma) fixed, so that every
    call of the net solves with the same fixed-point map (eval mode refines them on each solve)."""
    net.denoiser.update_spectral_norm(max_iter=500, tol=1e-10)
    monkeypatch.setattr(net.denoiser, 'update_spectral_norm', lambda *a, **k: [])


def refresh_sigma(net):
    """sn_sigma = <u, K(W) v> for the current weights, (u, v) fixed: the function of W the graph uses."""
    with torch.no_grad():
        for m in net.denoiser.sn_convs():
            m.sn_sigma.copy_(m.sigma())


def rgb(name, size, dtype=torch.float32):
    return (torch.from_numpy(sample_photo(name, size)).permute(2, 0, 1)[None].to(dtype) / 255.0)


def make_lr(hr):
    """LR as the evaluation data are made: A applied to the HR image, rounded to uint8."""
    op = build_operator(OPERATOR)
    with torch.no_grad():
        return torch.floor(op(hr.double()).clamp(0, 1) * 255 + 0.5).to(hr.dtype) / 255


def luma(x):
    return rgb_to_ycbcr(x)[:, :1] if x.shape[1] == 3 else x


# ------------------------------------------------------------------------------------------ gradients
@pytest.mark.parametrize('dual', ['full', 'null_space'])
def test_implicit_gradient_matches_finite_differences_and_unrolled(backbone_ckpt, monkeypatch, dual):
    # beta = 0.1 keeps plain iteration fast enough (~200 steps to 1e-12) to unroll it with autograd
    net = make_net(backbone_ckpt, beta=0.1, dual=dual, settings={'solver': {'forward': {'tol': 1e-14, 'max_iter': 1000},
                                                                 'backward': {'tol': 1e-11, 'max_iter': 1000}}})
    net = net.to(DT).eval()
    freeze_spectral_norm(net, monkeypatch)
    lr = make_lr(luma(rgb('astronaut', 24, DT)))
    r = torch.randn(1, 1, 24, 24, generator=torch.Generator().manual_seed(1), dtype=DT)
    layer = net.denoiser.sn_convs()[2]
    idx = (1, 3, 1, 1)
    assert float(layer.sn_sigma) > layer.bound, 'the normalisation should be active on the checked layer'

    def loss():
        return (net(lr) * r).sum()

    with torch.enable_grad():
        out, info = net.run(lr)
        (out * r).sum().backward()
    g_beta, g_w = float(net.log_beta.grad), float(layer.weight.grad[idx])
    # the info run returns holds the forward solve's stats and, once backward ran, the backward solve's
    assert info['forward'].converged.all() and info['backward'].stats.converged.all()

    fd_beta = central_difference(loss, net.log_beta, (), 1e-4, after_change=lambda: refresh_sigma(net))
    fd_w = central_difference(loss, layer.weight, idx, 1e-5, after_change=lambda: refresh_sigma(net))
    assert abs(g_beta - fd_beta) <= 1e-4 * abs(fd_beta), (g_beta, fd_beta)
    assert abs(g_w - fd_w) <= 1e-4 * abs(fd_w), (g_w, fd_w)

    # autograd through a long unrolled plain iteration of the same map, from the same start
    net.zero_grad()
    with torch.no_grad():
        w, _ = net.run_backbone(lr)
        eps = net.consistency_radius(lr)
        x0 = net.operator.project(w, lr, eps)
    f = net.fixed_point_map(w, lr, eps)
    z = torch.cat([x0, torch.zeros_like(x0)], dim=1)
    with torch.enable_grad():
        for _ in range(400):
            z_prev, z = z, f(z)
        assert float((z - z_prev).detach().norm() / z.detach().norm()) < 1e-11  # the unrolled iteration converged
        (z[:, :1] * r).sum().backward()
    u_beta, u_w = float(net.log_beta.grad), float(layer.weight.grad[idx])
    assert abs(g_beta - u_beta) <= 1e-4 * abs(u_beta), (g_beta, u_beta)
    assert abs(g_w - u_w) <= 1e-4 * abs(u_w), (g_w, u_w)


# -------------------------------------------------------------------------------------- consistency
PHOTOS = ('astronaut', 'coffee', 'chelsea', 'rocket')


@pytest.fixture(scope='module')
def rgb_batch():
    hr = torch.cat([rgb(n, 48) for n in PHOTOS])
    return hr, make_lr(hr)


# float64 too: there the output is the map's own final P_S (float32 adds one more projection in float64)
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_exact_consistency_rgb(backbone_ckpt, rgb_batch, dtype):
    lr = rgb_batch[1].to(dtype)
    net = make_net(backbone_ckpt, eps=0, settings={'solver': {'forward': {'tol': 1e-4, 'max_iter': 30}}})
    net = net.to(dtype).eval()
    with torch.no_grad():
        out = net(lr)
        w, _ = net.run_backbone(lr)
    assert out.shape == (4, 3, 48, 48) and out.dtype == dtype
    op, b = net.operator, luma(lr)
    res = op.residual_norm(luma(out).double(), b.double())
    assert (res <= 1e-5).all(), res
    # not vacuous: the backbone estimate alone is far from consistent
    assert (op.residual_norm(w.double(), b.double()) > 1e-2).all()


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_inexact_consistency_eps_rms(backbone_ckpt, rgb_batch, dtype):
    lr = rgb_batch[1].to(dtype)
    settings = {'solver': {'forward': {'tol': 1e-4, 'max_iter': 30}}}
    net = make_net(backbone_ckpt, eps_rms=0.01, settings=settings).to(dtype).eval()
    b = luma(lr).double()
    eps = eps_from_rms(0.01, b[0].numel())
    with torch.no_grad():
        out, info = net.run(lr)
        w, _ = net.run_backbone(lr)
        out_exact = make_net(backbone_ckpt, eps=0, settings=settings).to(dtype).eval()(lr)
    assert info['eps'] == pytest.approx(eps)
    op = net.operator
    res = op.residual_norm(luma(out).double(), b)
    assert (res <= eps * (1 + 1e-5)).all(), (res, eps)
    # active or satisfied: the backbone estimate lies outside the ball, so the projection is
    # active and the output sits on its boundary (a solution strictly inside would not need it)
    res_w = op.residual_norm(w.double(), b)
    for i in range(len(PHOTOS)):
        if res_w[i] > eps:
            assert res[i] >= eps * (1 - 1e-3), (i, float(res[i]), eps)
    assert (res_w > eps).any()
    # and the radius matters: the result differs from the exactly consistent one
    assert float((out - out_exact).abs().max()) > 1e-3


def test_one_channel_input_gives_one_channel_output(backbone_ckpt, rgb_batch):
    _, lr = rgb_batch
    y = luma(lr[:2])
    net = make_net(backbone_ckpt, settings={'solver': {'forward': {'tol': 1e-4, 'max_iter': 30}}}).eval()
    with torch.no_grad():
        out = net(y)
        out_rgb = net(lr[:2])
    assert out.shape == (2, 1, 48, 48)
    assert (net.operator.residual_norm(out.double(), y.double()) <= 1e-5).all()
    # the Y of the RGB result is the same layer output
    torch.testing.assert_close(luma(out_rgb), out, rtol=0, atol=1e-4)


# -------------------------------------------------------------------------------------- frozen backbone
def test_backbone_is_frozen_and_hidden(backbone_ckpt, rgb_batch):
    _, lr = rgb_batch
    net = make_net(backbone_ckpt, settings={'solver': {'forward': {'tol': 1e-3, 'max_iter': 10},
                                                       'backward': {'tol': 1e-2, 'max_iter': 10}}})
    bb = net.backbone
    bb_params = {id(p) for p in bb.parameters()}
    assert bb_params and not bb_params & {id(p) for p in net.parameters()}
    sd = net.state_dict()
    bb_ptrs = {p.data_ptr() for p in bb.parameters()}
    assert not bb_ptrs & {v.data_ptr() for v in sd.values()}
    # what the layer learns, and its record of the backbone and scale it belongs to
    assert all(k in ('log_beta', '_extra_state') or k.startswith('denoiser.') for k in sd), sorted(sd)
    # the checkpoint's weights were really loaded into the backbone
    ref = torch.load(backbone_ckpt)['params']
    assert all(torch.equal(bb.state_dict()[k], v) for k, v in ref.items())

    net.train()
    assert net.training and net.denoiser.training and not bb.training
    before = copy.deepcopy(bb.state_dict())
    den_before = copy.deepcopy(net.denoiser.state_dict())
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    out = net(lr[:2])
    hr = rgb_batch[0][:2]
    loss = ((luma(out) - luma(hr))**2).mean()
    loss.backward()
    assert all(p.grad is None for p in bb.parameters())
    assert net.log_beta.grad is not None and float(net.log_beta.grad.abs()) > 0
    opt.step()
    assert all(torch.equal(v, before[k]) for k, v in bb.state_dict().items())
    assert any(not torch.equal(v, den_before[k]) for k, v in net.denoiser.state_dict().items())

    net.to(torch.float64)
    assert all(p.dtype == torch.float64 for p in bb.parameters())
    assert all(p.dtype == torch.float64 for p in net.parameters())
    net.eval()
    with torch.no_grad():
        out64 = net(lr[:1].double())
    assert out64.dtype == torch.float64 and not bb.training


@pytest.mark.parametrize('allow', [False, True])
def test_every_entry_point_runs_under_the_arch_tf32_setting(backbone_ckpt, rgb_batch, set_tf32_flags, allow):
    """forward, and the pieces mcnet-sr and the tolerance sweep compose themselves (backbone_estimate, solve), set
    the TF32 flags to the settings' allow_tf32 for their own work and restore the process's afterwards. PyTorch's
    default enables TF32 for cuDNN convolutions, which keeps the solve from reaching a tight tolerance on a GPU."""
    from mcnet_basicsr.cli.inference import super_resolve
    from tolerance_sweep import sweep_image
    _, lr = rgb_batch
    net = make_net(backbone_ckpt, settings={'allow_tf32': allow, 'solver': {'forward': {'tol': 1e-3, 'max_iter': 5}}})
    net = net.eval()
    process = not allow
    set_tf32_flags(process)
    seen = []
    for name, module in (('backbone', net.backbone), ('denoiser', net.denoiser)):
        module.register_forward_pre_hook(lambda m, a, name=name: seen.append(
            (name, torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)))
    with torch.no_grad():
        net(lr[:1])
        super_resolve(net, lr[:1].double())
        hr_bgr = np.zeros((lr.shape[-2] * net.scale, lr.shape[-1] * net.scale, 3), np.uint8)
        sweep_image(net, lr[:1], hr_bgr, (1e-2,))
    assert {n for n, *_ in seen} == {'backbone', 'denoiser'}
    assert all(c == allow and m == allow for _, c, m in seen), seen
    assert torch.backends.cudnn.allow_tf32 == process and torch.backends.cuda.matmul.allow_tf32 == process


# -------------------------------------------------------------------------------------------- solvers
def test_anderson_needs_fewer_iterations_than_plain(backbone_ckpt, monkeypatch):
    denoiser = {'num_feat': 64, 'path': str(AUTHORS_DNCNN)} if AUTHORS_DNCNN.is_file() else {'num_feat': 8}
    net = make_net(backbone_ckpt, beta=0.01, denoiser=denoiser).eval()
    freeze_spectral_norm(net, monkeypatch)
    lr = make_lr(luma(rgb('camera', 32)))
    iters, outs = {}, {}
    for solver in ('anderson', 'fixed_point'):
        with torch.no_grad():
            outs[solver], info = net.run(lr, settings={'solver': {'forward': {'solver': solver, 'tol': 1e-4,
                                                                              'max_iter': 400}}})
        stats = info['forward']
        assert bool(stats.converged.all()), (solver, stats.residual)
        iters[solver] = int(stats.iterations[0])
    assert iters['anderson'] < iters['fixed_point'], iters
    # same fixed point
    assert float((outs['anderson'] - outs['fixed_point']).abs().max()) < 1e-2


def test_solver_settings_change_iterations_not_weights(backbone_ckpt, rgb_batch, monkeypatch):
    _, lr = rgb_batch
    net = make_net(backbone_ckpt).eval()
    freeze_spectral_norm(net, monkeypatch)
    lr = lr[:1]
    sd = {k: v.clone() for k, v in net.state_dict().items()}
    default = net.layer_settings

    with net.settings(solver={'forward': {'tol': 1e-2, 'max_iter': 3}}) as s:
        assert net.layer_settings is s
        assert s.forward_solver.tol == 1e-2 and s.forward_solver.max_iter == 3
        assert s.backward_solver == s.forward_solver  # backward defaults to forward
        assert all(torch.equal(v, sd[k]) for k, v in net.state_dict().items())
        with torch.no_grad():
            loose, info = net.run(lr)
            loose_again = net(lr)
    assert net.layer_settings is default  # restored on exit
    it_loose = int(info['forward'].iterations[0])
    assert torch.equal(loose, loose_again)  # deterministic for fixed settings

    with net.settings(solver={'forward': {'tol': 1e-7, 'max_iter': 300}, 'backward': {'tol': 1e-3, 'max_iter': 7}}):
        assert net.layer_settings.backward_solver.max_iter == 7 and net.layer_settings.forward_solver.max_iter == 300
        assert all(torch.equal(v, sd[k]) for k, v in net.state_dict().items())
        with torch.no_grad():
            tight, info = net.run(lr)
    it_tight = int(info['forward'].iterations[0])
    assert it_loose <= 3 < it_tight
    assert float((tight - loose).abs().max()) > 1e-4


@pytest.mark.parametrize('kwargs, needle', [
    ({'backbone': {'net': SRCNN, 'input': 'foo'}}, 'foo'),
    ({'backbone': {'net': SRCNN, 'channels': 2}}, 'channels must be 1 or 3, got 2'),
    ({'backbone': {'net': SRCNN, 'pth': 'x.pth'}}, 'pth'),
    ({'backbone': {'path': 'x.pth'}}, 'net'),
    ({'eps': 0.1, 'eps_rms': 0.01}, '0.01'),
    ({'eps': -0.5}, '-0.5'),
    ({'eps_rms': -0.25}, '-0.25'),
    ({'rho': 0}, 'rho'),
    ({'beta': 0.0}, 'beta init'),
    ({'beta': {'init': 0.0}}, 'beta init'),
    ({'beta': {'init': 0.1, 'lern': False}}, 'lern'),
    ({'beta': 'high'}, 'high'),
    ({'denoiser': 'dncnn.pth'}, 'dncnn.pth'),
    ({'settings': {'solver': {'forward': {'tl': 1e-3}}}}, 'tl'),
    ({'settings': {'solver': {'fwd': {'tol': 1e-3}}}}, 'fwd'),
    ({'settings': {'solver': {'forward': {'solver': 'newton'}}}}, 'newton'),
    ({'settings': {'tiles': 8}}, 'tiles'),
    ({'dual': 'nullspace'}, "dual must be one of ('full', 'null_space'), got 'nullspace'"),
])
def test_bad_options_raise_value_error(backbone_ckpt, kwargs, needle):
    with pytest.raises(ValueError) as ei:
        make_net(backbone_ckpt, **kwargs)
    msg = str(ei.value)
    assert needle in msg, msg
    if 'rho' in kwargs or kwargs.get('beta') in (0.0, {'init': 0.0}):
        assert 'got 0' in msg, msg


def test_per_sample_solver_stats(backbone_ckpt, monkeypatch):
    net = make_net(backbone_ckpt, settings={'solver': {'forward': {'tol': 1e-6, 'max_iter': 200}}}).to(DT).eval()
    freeze_spectral_norm(net, monkeypatch)
    lr = make_lr(torch.cat([rgb('camera', 32, DT), rgb('coffee', 32, DT)]))
    with torch.no_grad():
        out, info = net.run(lr)
    assert not hasattr(net, 'last_stats')  # what a solve did is returned, not kept on the module
    stats = info['forward']
    assert stats.iterations.shape == (2, ) and stats.iterations.dtype == torch.long
    assert bool(stats.converged.all()) and (stats.residual <= 1e-6).all()
    assert info['backward'].stats is None  # no graph, no backward solve
    # per-sample: each image stops at its own iteration and gets the result it gets alone
    for i in range(2):
        with torch.no_grad():
            single, single_info = net.run(lr[i:i + 1])
        assert int(single_info['forward'].iterations[0]) == int(stats.iterations[i])
        torch.testing.assert_close(single, out[i:i + 1], rtol=0, atol=1e-9)
    assert stats.iterations[0] != stats.iterations[1], stats.iterations


def test_info_gives_the_solves_map_and_fixed_point_for_a_jacobian_penalty(backbone_ckpt, monkeypatch):
    """``info['map']`` is the solve's F and ``info['fixed_point']`` where it ended (F(z) = z to the tolerance); the
    contraction penalty on them reaches the denoiser's weights, not the implicit output's graph."""
    from mcnet_basicsr.losses.contraction_loss import ContractionLoss
    net = make_net(backbone_ckpt, settings={'solver': {'forward': {'tol': 1e-8, 'max_iter': 300}}}).to(DT)
    freeze_spectral_norm(net, monkeypatch)
    lr = make_lr(rgb('camera', 32, DT))
    out, info = net.run(lr)
    f, z = info['map'], info['fixed_point']
    assert not z.requires_grad and z.shape[1] == 2 * luma(out).shape[1]  # (x, lam)
    with torch.no_grad():
        assert float((f(z) - z).norm() / f(z).norm()) < 1e-7
    loss, rate = ContractionLoss(target=0.01, steps=20)(f, z)
    assert 0.01 < float(rate) < 1  # a converged solve of a contracting map
    loss.backward()
    grads = [p.grad for p in net.denoiser.parameters() if p.requires_grad]
    assert grads and all(g is not None for g in grads) and max(float(g.abs().max()) for g in grads) > 0
    assert info['backward'].calls == 0  # the penalty's gradient does not run the implicit backward


def test_tile_setting_runs_the_same_forward_on_tiles(backbone_ckpt, monkeypatch):
    """The ``tile`` setting: backbone and denoiser on overlapping LR tiles. The backbone estimate is exact (the
    overlap covers its receptive field), the solve on the whole image stays consistent and within solver tolerance of
    the untiled one; a bad value is refused and a small enough image is not tiled at all."""
    net = make_net(backbone_ckpt, settings={'solver': {'forward': {'tol': 1e-6, 'max_iter': 200}}}).eval()
    freeze_spectral_norm(net, monkeypatch)
    lq = rgb('astronaut', 30)
    with torch.no_grad():
        whole = net(lq)
        w_whole, _ = net.backbone_estimate(lq)
        w_tiled, _ = net.backbone_estimate(lq, settings={'tile': 8})
        with net.settings(tile=8):
            tiled = net(lq)
        tiled_per_call, _ = net.run(lq, settings={'tile': 8})
        with net.settings(tile=64):  # larger than the image: the untiled code path
            same = net(lq)
    assert net.layer_settings.tile is None
    assert torch.allclose(w_tiled, w_whole, atol=1e-6)
    assert torch.equal(tiled_per_call, tiled)
    assert (tiled - whole).abs().max() < 1e-3 and not torch.equal(tiled, whole)  # the tiles ran
    assert torch.equal(same, whole)
    y, b = rgb_to_ycbcr(tiled.double())[:, :1], rgb_to_ycbcr(lq.double())[:, :1]
    assert float(net.operator.residual_norm(y, b).max()) <= 1e-5
    with pytest.raises(ValueError, match='tile'):
        make_net(backbone_ckpt, settings={'tile': 0})


# ------------------------------------------------------------------------------------- noise-dependent beta
def test_noise_beta_is_beta_times_exp_slope_per_sample(backbone_ckpt, monkeypatch, tmp_path):
    settings = {'solver': {'forward': {'tol': 1e-12, 'max_iter': 600}}}
    plain = make_net(backbone_ckpt, beta=0.2, eps_rms=0.002, settings=settings).to(DT).eval()
    noisy = make_net(backbone_ckpt, beta={'init': 0.2, 'noise': True}, eps_rms=0.002, settings=settings).to(DT).eval()
    # a layer saved without a slope loads strictly into a noise-dependent one: slope 0, the same outputs
    torch.save({'params': plain.state_dict()}, tmp_path / 'plain.pth')
    from mcnet_basicsr.utils.checkpoint import load_network
    load_network(noisy, str(tmp_path / 'plain.pth'))
    assert float(noisy.log_beta_slope.detach()) == 0.0
    for net in (plain, noisy):
        freeze_spectral_norm(net, monkeypatch)
    lr = make_lr(luma(torch.cat([rgb('camera', 24, DT), rgb('coffee', 24, DT)])))
    sigma = torch.tensor([0.0, 4.0 / 255], dtype=DT)
    with torch.no_grad():
        flat = noisy(lr, noise_sigma=sigma)
        torch.testing.assert_close(flat, plain(lr, noise_sigma=sigma), rtol=0, atol=1e-10)
        noisy.log_beta_slope.fill_(-0.3)
        out = noisy(lr, noise_sigma=sigma)
        for i in range(2):  # each sample is solved with its own beta: the plain layer given that beta agrees
            plain.log_beta.fill_(math.log(0.2) - 0.3 * 255 * float(sigma[i]))
            torch.testing.assert_close(out[i:i + 1], plain(lr[i:i + 1], noise_sigma=sigma[i:i + 1]), rtol=0,
                                       atol=1e-9)
    torch.testing.assert_close(out[0], flat[0], rtol=0, atol=1e-10)  # noise 0: beta unchanged
    assert float((out[1] - flat[1]).abs().max()) > 1e-4  # noise 4/255: beta * exp(-0.3 * 4), another output


def test_noise_beta_slope_option_sets_a_fixed_schedule(backbone_ckpt, tmp_path):
    net = make_net(backbone_ckpt, beta={'init': 3.0, 'learn': False, 'noise': True, 'slope': math.log(10 / 3) / 2.55},
                   eps_rms=0.002)
    assert not net.log_beta_slope.requires_grad
    for sigma255, beta in ((0.0, 3.0), (2.55, 10.0), (7.65, 1000 / 9)):
        assert float(net.beta_at(sigma255 / 255)) == pytest.approx(beta, rel=1e-5)
    # a checkpoint saved without a slope keeps the option's schedule
    plain = make_net(backbone_ckpt, beta=3.0, eps_rms=0.002)
    torch.save({'params': plain.state_dict()}, tmp_path / 'plain.pth')
    from mcnet_basicsr.utils.checkpoint import load_network
    load_network(net, str(tmp_path / 'plain.pth'))
    assert float(net.beta_at(2.55 / 255)) == pytest.approx(10.0, rel=1e-5)


def test_noise_beta_slope_gradient_matches_finite_differences(backbone_ckpt, monkeypatch):
    net = make_net(backbone_ckpt, beta={'init': 0.1, 'noise': True}, eps_rms=0.002,
                   settings={'solver': {'forward': {'tol': 1e-14, 'max_iter': 1000},
                                        'backward': {'tol': 1e-11, 'max_iter': 1000}}})
    net = net.to(DT).eval()
    freeze_spectral_norm(net, monkeypatch)
    with torch.no_grad():
        net.log_beta_slope.fill_(-0.1)
    lr = make_lr(luma(torch.cat([rgb('astronaut', 24, DT), rgb('chelsea', 24, DT)])))
    sigma = torch.tensor([1.0 / 255, 6.0 / 255], dtype=DT)
    r = torch.randn(2, 1, 24, 24, generator=torch.Generator().manual_seed(2), dtype=DT)

    def loss():
        return (net(lr, noise_sigma=sigma) * r).sum()

    with torch.enable_grad():
        loss().backward()
    g = float(net.log_beta_slope.grad)
    fd = central_difference(loss, net.log_beta_slope, (), 1e-4)
    assert g != 0.0 and abs(g - fd) <= 1e-4 * abs(fd), (g, fd)


@pytest.mark.parametrize('key', ['noise', 'learn'])
def test_beta_noise_and_learn_must_be_bools(backbone_ckpt, key):
    with pytest.raises(ValueError, match=f"beta {key} must be true or false, got 'yes'"):
        make_net(backbone_ckpt, beta={key: 'yes'})
