"""DnCNN denoiser: the spectral bound, its gradient, checkpoint layouts and real pretrained weights.

CPU only; the float64 checks use small crops of real photos. The pretrained-weight tests need
../shared (skipped without it).
"""

import pytest
import torch
import torch.nn.functional as F

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from conftest import sample_photo, shared_path
from mcnet_basicsr.archs.dncnn_arch import (DnCNN, _SpectralNormConv2d, convert_dncnn_state_dict,
                                            jacobian_spectral_norm, load_dncnn)
from mcnet_basicsr.utils.precision import num_threads

DT = torch.float64
LIP = 0.9
DEPTH = 6
BOUND = LIP**(1.0 / DEPTH)
SLACK = 1.01


def gray_photo(name, size, dtype=DT):
    """(1, 1, H, W) luminance of a real photo in [0, 1]."""
    rgb = torch.from_numpy(sample_photo(name, size)).to(dtype).permute(2, 0, 1) / 255.0
    y = (65.481 * rgb[0] + 128.553 * rgb[1] + 24.966 * rgb[2] + 16.0) / 255.0
    return y[None, None]


def conv_operator_norm(weight, size, iters=300, seed=0):
    """||x -> conv2d(x, weight, padding=1)|| on a zero-padded H x W image, by power iteration
    on K^T K (adjoint = conv_transpose2d with the same padding). A lower estimate of the norm."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(1, weight.shape[1], *size, generator=g, dtype=weight.dtype)
    v = v / v.norm()
    sigma = 0.0
    for _ in range(iters):
        u = F.conv2d(v, weight, padding=1)
        sigma = float(u.norm())
        v = F.conv_transpose2d(u, weight, padding=1)
        v = v / v.norm()
    return sigma


def scaled_net(seed=0, factor=5.0, num_feat=8):
    """Random DnCNN6 whose raw kernels are far above the per-layer bound (the bound is active)."""
    torch.manual_seed(seed)
    net = DnCNN(num_feat=num_feat, depth=DEPTH, lipschitz=LIP).to(DT)
    with torch.no_grad():
        for m in net.sn_convs():
            m.weight.mul_(factor)
    net.eval()
    net.update_spectral_norm()
    return net


@pytest.fixture(scope='module')
def big_net():
    return scaled_net()


def psnr(a, b):
    return float(10 * torch.log10(1.0 / F.mse_loss(a.clamp(0, 1), b)))


# --------------------------------------------------------------------------------------- the bound
@pytest.mark.parametrize('size', [(17, 23), (40, 40), (64, 48)])
def test_each_zero_padded_conv_is_within_its_bound(big_net, size):
    convs = big_net.sn_convs()
    assert len(convs) == DEPTH
    with torch.no_grad():
        for i, m in enumerate(convs):
            assert m.bound == pytest.approx(BOUND)
            raw = conv_operator_norm(m.weight, size)
            # the raw layer really is over the bound (else the check below would be vacuous) and the
            # estimate sn_sigma describes the same operator (the raw norm on this size is close to it)
            assert raw > 2 * BOUND, (i, raw)
            assert raw <= 1.01 * float(m.sn_sigma) and raw >= 0.9 * float(m.sn_sigma), (i, raw, float(m.sn_sigma))
            eff = conv_operator_norm(m.normalized_weight(), size)
            assert eff <= BOUND * SLACK, f'layer {i} on {size}: {eff:.5f} > {BOUND:.5f} * {SLACK}'
            # and it is not shrunk far below the bound either (the bound is tight, not a crude rescale)
            assert eff >= 0.95 * BOUND, (i, eff)


def test_noise_branch_jacobian_norm_at_real_photos(big_net):
    for name in ('camera', 'coffee', 'chelsea'):
        x = gray_photo(name, 32)
        lip = jacobian_spectral_norm(big_net.noise, x, iters=40)
        assert lip <= LIP * SLACK, (name, lip)
    # the same estimator sees the unbounded kernels: it can detect a violation
    saved = [m.bound for m in big_net.sn_convs()]
    try:
        for m in big_net.sn_convs():
            m.bound = float('inf')
        assert jacobian_spectral_norm(big_net.noise, gray_photo('camera', 32), iters=40) > 5 * LIP
    finally:
        for m, b in zip(big_net.sn_convs(), saved):
            m.bound = b


def test_noise_branch_global_lipschitz_on_random_pairs(big_net):
    g = torch.Generator().manual_seed(3)
    photos = [gray_photo(n, 40) for n in ('camera', 'astronaut', 'coffee', 'rocket')]
    worst = 0.0
    with torch.no_grad():
        pairs = [(photos[i], photos[j]) for i in range(4) for j in range(i + 1, 4)]
        for p in photos:  # nearby pairs (local behaviour) and random images
            pairs.append((p, p + 0.01 * torch.randn(p.shape, generator=g, dtype=DT)))
            pairs.append((torch.rand(p.shape, generator=g, dtype=DT), torch.rand(p.shape, generator=g, dtype=DT)))
        for x, y in pairs:
            ratio = float((big_net.noise(x) - big_net.noise(y)).norm() / (x - y).norm())
            worst = max(worst, ratio)
            assert ratio <= LIP * SLACK, ratio
    assert worst > 0.0


def test_bound_does_not_renormalise_layers_already_inside_it():
    torch.manual_seed(1)
    net = DnCNN(num_feat=8, depth=DEPTH, lipschitz=LIP).to(DT).eval()
    convs = net.sn_convs()
    with torch.no_grad():
        net.update_spectral_norm()
        for m in convs:  # every layer at half the bound...
            m.weight.mul_(0.5 * m.bound / float(m.sn_sigma))
        convs[2].weight.mul_(6.0)  # ...except layer 2, three times over it
        for m in convs:
            m.sn_sigma.zero_()  # re-estimate from scratch
        net.update_spectral_norm()
    for i, m in enumerate(convs):
        for grad_mode in (True, False):
            with torch.set_grad_enabled(grad_mode):
                eff = m.normalized_weight().detach()
            if i == 2:
                assert float(m.sn_sigma) > 2.5 * m.bound
                torch.testing.assert_close(eff, m.weight.detach() * (m.bound / float(m.sn_sigma)), rtol=1e-9, atol=0)
            else:
                assert float(m.sn_sigma) < m.bound
                assert torch.equal(eff, m.weight.detach()), f'layer {i} was rescaled although inside the bound'
    for k, (est, effective) in enumerate(net.layer_bounds()):
        assert effective == (pytest.approx(convs[k].bound) if k == 2 else est), (k, est, effective)
    # all layers inside: the network is exactly the plain conv-ReLU stack of its raw weights
    with torch.no_grad():
        convs[2].weight.mul_(1 / 6.0)
        convs[2].sn_sigma.zero_()
        net.update_spectral_norm()
        x = gray_photo('astronaut', 24)
        h = x
        for k, m in enumerate(convs):
            h = F.conv2d(h, m.weight, padding=1)
            if k < len(convs) - 1:
                h = F.relu(h)
        torch.testing.assert_close(net(x), x - h, rtol=0, atol=1e-13)


# ------------------------------------------------------------------------------------- gradients
def test_gradient_flows_through_the_normalisation():
    net = scaled_net(seed=2)
    net.auto_update_spectral_norm = False  # (u, v, sigma) fixed: loss is a function of the weights only
    x = gray_photo('chelsea', 24)
    r = torch.randn(x.shape, generator=torch.Generator().manual_seed(0), dtype=DT)

    def loss():
        with torch.enable_grad():
            return (net(x) * r).sum()

    net.zero_grad()
    loss().backward()
    for i, m in enumerate(net.sn_convs()):
        assert m.weight.grad is not None and float(m.weight.grad.abs().max()) > 0, i
    layer = net.sn_convs()[2]
    assert float(layer.sn_sigma) > layer.bound  # the normalisation is active on this layer
    idx = (3, 5, 1, 2)
    g = float(layer.weight.grad[idx])

    h = 1e-6
    with torch.no_grad():
        w0 = float(layer.weight[idx])
        layer.weight[idx] = w0 + h
        lp = float(loss())
        layer.weight[idx] = w0 - h
        lm = float(loss())
        layer.weight[idx] = w0
    fd = (lp - lm) / (2 * h)
    assert abs(g - fd) <= 1e-4 * abs(fd), (g, fd)

    # the sigma term matters: treating sigma as a constant gives a measurably different gradient
    layer.sigma = lambda: _SpectralNormConv2d.sigma(layer).detach()
    try:
        net.zero_grad()
        loss().backward()
        g_const = float(layer.weight.grad[idx])
    finally:
        del layer.sigma
    assert abs(g_const - fd) > 1e-2 * abs(fd), (g_const, fd)


def test_no_grad_forward_uses_stored_sigma_and_equals_grad_mode():
    net = scaled_net(seed=4)
    net.auto_update_spectral_norm = False
    x = gray_photo('rocket', 32)
    with torch.enable_grad():
        out_grad = net(x)
    assert out_grad.requires_grad
    convs = net.sn_convs()
    for m in convs:  # no extra conv under no_grad: sigma() must not be called
        m.sigma = lambda: (_ for _ in ()).throw(AssertionError('sigma() called under no_grad'))
    try:
        with torch.no_grad():
            out_nograd = net(x)
            torch.testing.assert_close(out_nograd, out_grad.detach(), rtol=1e-10, atol=1e-12)
            # it really reads the stored estimate: change it and the no-grad output follows
            convs[1].sn_sigma.mul_(2.0)
            assert float((net(x) - out_nograd).abs().max()) > 1e-4
            convs[1].sn_sigma.div_(2.0)
    finally:
        for m in convs:
            del m.sigma
    # a never-estimated layer refuses to run without a graph instead of using sigma = 0
    fresh = DnCNN(num_feat=4, depth=3)
    fresh.auto_update_spectral_norm = False
    with torch.no_grad(), pytest.raises(RuntimeError, match='not estimated'):
        fresh(x.float())


def test_estimated_flag_follows_the_buffer_but_reads_it_only_after_a_change():
    """``is_estimated`` (sigma > 0) must not read the device on every call (a host sync per convolution
    per forward, which also breaks CUDA-graph capture), yet see every in-place change of sn_sigma."""
    net = DnCNN(num_feat=4, depth=3).eval()
    x = gray_photo('camera', 24).float()
    with torch.no_grad():
        net(x)  # first use: exact estimates
    m = net.sn_convs()[1]
    assert m.is_estimated() and m.estimate_is_exact()
    cached = m._sigma_read
    with torch.no_grad():
        net(x)
    assert m._sigma_read is cached  # a forward on unchanged weights read nothing
    with torch.no_grad():
        m.sn_sigma.mul_(2.0)  # a stored norm changed behind the estimate's back is no longer exact
    assert m.is_estimated() and not m.estimate_is_exact()
    with torch.no_grad():
        net(x)  # eval mode re-estimates it
    assert m.estimate_is_exact()
    m.sn_sigma.zero_()
    assert not m.is_estimated() and not m.estimate_is_exact()
    with torch.no_grad():
        net(x)  # re-estimated on use
    assert m.is_estimated() and float(m.sn_sigma) > 0
    m.sn_sigma.copy_(torch.zeros(()))
    net.auto_update_spectral_norm = False
    with torch.no_grad(), pytest.raises(RuntimeError, match='not estimated'):
        net(x)


def test_exact_estimate_runs_its_cpu_eigenproblems_on_one_thread(monkeypatch):
    """Several trainings on one host each threading hundreds of 64 x 64 eigenproblems over every core
    stalled for minutes: the estimate uses one thread and gives the caller's setting back."""
    seen = []
    eigvalsh = torch.linalg.eigvalsh

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return eigvalsh(*args, **kwargs)

    monkeypatch.setattr(torch.linalg, 'eigvalsh', spy)
    with num_threads(2):
        DnCNN(num_feat=8, depth=3).sn_convs()[1].exact_estimate()
        assert seen == [1] and torch.get_num_threads() == 2


def test_a_move_keeps_an_exact_estimate_and_a_dtype_change_drops_it(monkeypatch):
    """mcnet-sr estimates the spectral norms on the CPU while CUDA starts, then moves the model: new storage with
    the same values must not be estimated again, while rounded weights (another dtype) must be."""
    net = DnCNN(num_feat=8, depth=3).eval()
    x = gray_photo('camera', 24).float()
    with torch.no_grad():
        net.update_spectral_norm()
        reference = net(x)
    calls = []
    exact = _SpectralNormConv2d.exact_estimate
    monkeypatch.setattr(_SpectralNormConv2d, 'exact_estimate', lambda self: calls.append(self) or exact(self))
    ptrs = [m.weight.data_ptr() for m in net.sn_convs()]
    net._apply(lambda t: t.clone())  # what .to(another device) does to a module: same values, new storage
    assert [m.weight.data_ptr() for m in net.sn_convs()] != ptrs
    assert all(m.estimate_is_exact() for m in net.sn_convs())
    with torch.no_grad():
        torch.testing.assert_close(net(x), reference, rtol=0, atol=0)
    assert calls == []
    net.double()
    assert not any(m.estimate_is_exact() for m in net.sn_convs())
    with torch.no_grad():
        net(x.double())
    assert len(calls) == len(net.sn_convs())
    if torch.cuda.is_available():  # the move mcnet-sr makes: estimated on the CPU, then run on the GPU
        net.float()
        with torch.no_grad():
            reference = net(x)  # estimates the float32 weights again (the cast rounded them)
        calls.clear()
        net.cuda()
        assert all(m.estimate_is_exact() for m in net.sn_convs())
        with torch.no_grad():
            torch.testing.assert_close(net(x.cuda()).cpu(), reference, rtol=1e-5, atol=1e-6)
        assert calls == []


def test_projection_into_the_bound_keeps_an_exact_estimate_exact(monkeypatch):
    """Scaling a layer into its bound scales sigma with it and keeps the singular vectors: the estimate
    stays exact, so projecting with exact estimates (a DenoiserModel validation or save) and then running
    the eval-mode network estimates each layer once, not twice."""
    net = DnCNN(num_feat=8, depth=3).eval()
    x = gray_photo('camera', 24).float()
    convs = net.sn_convs()
    with torch.no_grad():
        for m in convs:
            m.weight.mul_(3.0)  # every layer above its bound
    calls = []
    exact = _SpectralNormConv2d.exact_estimate
    monkeypatch.setattr(_SpectralNormConv2d, 'exact_estimate', lambda self: calls.append(self) or exact(self))
    for m in convs:
        m.exact_estimate()
        factor = m.project_into_bound()
        assert float(factor) < 1 and m.estimate_is_exact()
        torch.testing.assert_close(m.sn_sigma, torch.tensor(m.bound), rtol=1e-6, atol=0)
    with torch.no_grad():
        net(x)
    assert len(calls) == len(convs)  # the forward did not estimate again
    fresh = [float(exact(m)) for m in convs]  # and a fresh exact estimate agrees
    assert fresh == pytest.approx([m.bound for m in convs], rel=1e-6)


# --------------------------------------------------------------------------------- checkpoint layouts
def _random_like(sd, seed):
    g = torch.Generator().manual_seed(seed)
    return {k: (torch.randn(v.shape, generator=g) if v.is_floating_point() else v.clone()) for k, v in sd.items()}


def _load_strict_except_sn(net, sd):
    missing, unexpected = net.load_state_dict(sd, strict=False)
    assert not unexpected, unexpected
    assert all('.sn_' in k for k in missing), missing


def _authors_dict(prefix, depth=6, feat=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    sd = {}
    chans = [1] + [feat] * (depth - 1) + [1]
    for layer in range(depth):
        i = 2 * layer  # conv, ReLU, conv, ReLU, ..., conv
        shape = (chans[layer + 1], chans[layer], 3, 3)
        sd[f'{prefix}dncnn.{i}.weight_orig'] = torch.randn(shape, generator=g)
        sd[f'{prefix}dncnn.{i}.weight'] = torch.randn(shape, generator=g) * 0.1
        sd[f'{prefix}dncnn.{i}.weight_u'] = torch.randn(1, chans[layer + 1], 40, 40, generator=g)
    return sd


@pytest.mark.parametrize('prefix', ['', 'f.dncnn.'])
def test_convert_authors_dncnn6_layouts(prefix):
    sd = _authors_dict(prefix)
    if prefix:
        sd['f.alpha'] = torch.tensor(0.3)
    out = convert_dncnn_state_dict(sd)
    assert sorted(out) == sorted(f'dncnn.{2 * k}.weight' for k in range(6))
    net = DnCNN(depth=6)
    _load_strict_except_sn(net, out)
    for k in range(6):  # the authors' `weight` (already normalised kernel), not weight_orig
        assert torch.equal(net.dncnn[2 * k].weight.detach(), sd[f'{prefix}dncnn.{2 * k}.weight'])
    # BasicSR-style wrapping of the same dict
    assert convert_dncnn_state_dict({'params': sd}).keys() == out.keys()


def test_convert_ryu_dncnn17_with_batchnorm():
    ref = DnCNN(depth=17, batch_norm=True, spectral_norm=False)
    plain = _random_like(ref.state_dict(), seed=5)
    assert any('running_var' in k for k in plain) and any('num_batches_tracked' in k for k in plain)
    ryu = {f'module.{k}': v for k, v in plain.items()}
    out = convert_dncnn_state_dict(ryu)
    net = DnCNN(depth=17, batch_norm=True, spectral_norm=False)
    net.load_state_dict(out, strict=True)
    for k, v in net.state_dict().items():
        assert torch.equal(v, plain[k]), k


def test_mismatched_depth_raises_clear_keyerror(tmp_path):
    path = tmp_path / 'dncnn6.pth'
    torch.save(_authors_dict('', feat=8), path)
    load_dncnn(DnCNN(num_feat=8, depth=6), path)  # the right depth loads
    for depth in (5, 8):
        with pytest.raises(KeyError, match=rf'depth={depth}') as ei:
            load_dncnn(DnCNN(num_feat=8, depth=depth), path)
        msg = str(ei.value)
        assert 'dncnn.' in msg and ('missing' in msg and 'unexpected' in msg)
    with pytest.raises(KeyError, match='dncnn'):
        convert_dncnn_state_dict({'conv1.weight': torch.zeros(1)})


# ---------------------------------------------------------------------------------- real weights
def test_authors_dncnn6_denoises_real_photo():
    path = shared_path('weights', 'sr_mcnet_official', 'dncnn6_realsn_relu', 'sigma_0.00625_0.01250.pth')
    net = load_dncnn(DnCNN(depth=6, num_feat=64, lipschitz=0.9), path).eval()
    x = gray_photo('camera', 96, torch.float32)
    g = torch.Generator().manual_seed(0)
    noisy = x + 0.01 * torch.randn(x.shape, generator=g)
    with torch.no_grad():
        den = net(noisy)
    p_noisy, p_den = psnr(noisy, x), psnr(den, x)
    assert p_den > p_noisy, (p_noisy, p_den)
    # their kernels were normalised by their own power iteration (40x40): our operator-norm estimate
    # agrees with that to a few per cent, so the bound changes them only slightly
    for s, eff in net.layer_bounds():
        assert eff >= 0.98 * BOUND and s <= 1.05 * BOUND, (s, eff)


def test_ryu_dncnn17_denoises_sigma15():
    path = shared_path('weights', 'dncnn_provable_pnp', 'DnCNN_noise15.pth')
    net = load_dncnn(DnCNN(depth=17, batch_norm=True, spectral_norm=False), path).eval()
    x = gray_photo('camera', 96, torch.float32)
    g = torch.Generator().manual_seed(1)
    noisy = x + (15 / 255) * torch.randn(x.shape, generator=g)
    with torch.no_grad():
        den = net(noisy)
    p_noisy, p_den = psnr(noisy, x), psnr(den, x)
    assert p_den > p_noisy + 3.0, (p_noisy, p_den)


# ------------------------------------------------------------ Ryu et al.'s RealSN-DnCNN (SN + BN)
def _noisy_patches(photos, n, size, sigma, g):
    out = []
    for _ in range(n):
        p = photos[int(torch.randint(len(photos), (1, ), generator=g))]
        i, j = (int(torch.randint(p.shape[-1] - size, (1, ), generator=g)) for _ in range(2))
        out.append(p[0, :, i:i + size, j:j + size])
    clean = torch.stack(out)
    return clean, clean + sigma * torch.randn(clean.shape, generator=g)


@pytest.mark.slow
def test_realsn_dncnn17_with_batchnorm_bounds_its_convolutions_and_learns():
    """SN + BN (the paper's PnP denoiser kind): every conv within its bound, no network guarantee
    claimed, and 17 such layers learn to denoise within a hundred CPU steps (the 17-layer net
    without BN stays the identity; with the last conv starting on its bound BN learns too slowly)."""
    torch.manual_seed(0)
    net = DnCNN(num_feat=16, depth=17, batch_norm=True, spectral_norm=True, lipschitz=1.0)
    assert not net.lipschitz_bounded and DnCNN().lipschitz_bounded
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in net.dncnn) == 15
    photos = [gray_photo(n, 96, torch.float32) for n in ('astronaut', 'coffee', 'chelsea', 'camera')]
    val_clean = gray_photo('rocket', 64, torch.float32)
    g = torch.Generator().manual_seed(0)
    val_noisy = val_clean + 0.06 * torch.randn(val_clean.shape, generator=g)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    for _ in range(120):  # measured: +2.9 dB; from a last conv on its bound: -0.03 dB
        clean, noisy = _noisy_patches(photos, 8, 32, 0.06, g)
        loss = F.mse_loss(net.train()(noisy), clean)
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.eval()
    with torch.no_grad():
        gain = psnr(net(val_noisy), val_clean) - psnr(val_noisy, val_clean)
        for m in net.sn_convs():
            # eval mode re-estimates exactly: power iteration tracked in training was up to 8% low here
            assert m.estimate_is_exact()
            est = conv_operator_norm(m.normalized_weight().double(), (24, 24))
            assert est <= m.bound * SLACK, (est, m.bound)
    assert gain > 2.0, f'RealSN-DnCNN17 gained only {gain:.2f} dB in 120 steps'


def test_mcnet_refuses_a_batchnorm_denoiser():
    from mcnet_basicsr.archs.mcnet_arch import MCNetArch
    with pytest.raises(ValueError, match='without BatchNorm'):
        MCNetArch(operator={'type': 'bicubic', 'scale': 2}, backbone={'type': 'Bicubic', 'scale': 2},
                  denoiser={'depth': 17, 'batch_norm': True, 'spectral_norm': True})


@pytest.mark.parametrize('cin, cout, k, grid', [(3, 5, 3, 8), (5, 3, 3, 8), (1, 6, 3, 7), (6, 1, 3, 8), (4, 4, 5, 9)])
def test_exact_estimate_equals_the_svd_of_the_circular_convolution_matrix(cin, cout, k, grid):
    """The DFT estimate is the top singular value of the whole operator (built column by column on
    a small grid), and (u, v) realise it: <u, K v> = sigma, ||v|| = ||u|| = 1. Layers with more inputs
    than outputs take the Gram matrix of the adjoint; odd grids have no Nyquist column."""
    torch.manual_seed(3)
    conv = _SpectralNormConv2d(cin, cout, k, False, bound=1.0, sn_grid=grid).double()
    with torch.no_grad():
        conv.weight.normal_()
        sigma = float(conv.exact_estimate())
        basis = torch.eye(cin * grid * grid, dtype=DT).reshape(-1, cin, grid, grid)
        matrix = conv._apply_op(basis, conv.weight).reshape(cin * grid * grid, -1).T
        top = float(torch.linalg.svdvals(matrix)[0])
        assert sigma == pytest.approx(top, rel=1e-12)
        assert float(conv.sigma()) == pytest.approx(top, rel=1e-10)
        assert float(conv.sn_v.norm()) == pytest.approx(1.0) and float(conv.sn_u.norm()) == pytest.approx(1.0)
        assert conv.estimate_is_exact()
        conv.weight.mul_(2.0)  # an in-place change of the weights invalidates it
        assert not conv.estimate_is_exact()
