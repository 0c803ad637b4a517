"""MCNetArch told the measurement of a batch: consistency on every channel, an operator per call (one per sample),
and a ball widened for noise. CPU, float64, a random RGB backbone and a small denoiser."""
import math

import numpy as np
import pytest
import torch

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from conftest import sample_photo
from mcnet_basicsr.archs.mcnet_arch import MCNetArch
from mcnet_basicsr.ops import StackedOperator, build_operator, noisy_radius, repeat_samples
from mcnet_basicsr.utils.color import luma

DT = torch.float64
SCALE = 2
BICUBIC = {'type': 'bicubic', 'scale': SCALE}
GAUSS = {'type': 'gaussian', 'scale': SCALE, 'sigma': 1.2}
BACKBONE = {'type': 'RCAN', 'num_in_ch': 3, 'num_out_ch': 3, 'num_feat': 8, 'num_group': 1, 'num_block': 1,
            'squeeze_factor': 4, 'upscale': SCALE, 'img_range': 1.0, 'rgb_mean': [0.5, 0.5, 0.5]}
SETTINGS = {'solver': {'forward': {'tol': 1e-9, 'max_iter': 300}}}


def make_net(**kw):
    torch.manual_seed(0)
    opt = dict(backbone=BACKBONE, operator=BICUBIC, denoiser={'num_feat': 8}, beta=0.3, settings=SETTINGS)
    opt.update(kw)
    return MCNetArch(**opt).to(DT).eval()


def photo(name, size):
    return torch.from_numpy(sample_photo(name, size)).permute(2, 0, 1)[None].to(DT) / 255.0


@pytest.fixture(scope='module')
def lrs():
    """Two RGB LR images measured by the Gaussian operator."""
    op = build_operator(GAUSS)
    hr = torch.cat([photo('astronaut', 32), photo('coffee', 32)])
    return op(hr)


def test_rgb_channels_are_each_consistent_and_solved_independently(lrs):
    net = make_net(channels='rgb', operator=GAUSS)
    with torch.no_grad():
        out = net(lrs)
        assert out.shape == (2, 3, 32, 32)
        op = build_operator(GAUSS)
        per_channel = (op(out) - lrs).flatten(2).norm(dim=2)  # (N, C)
        assert float(per_channel.max()) < 1e-10
        # the same as one solve per channel of the backbone's RGB estimate
        w = net._image(*net.backbone_estimate(lrs))
        for n in range(2):
            for c in range(3):
                x, _ = net.solve(w[n:n + 1, c:c + 1], lrs[n:n + 1, c:c + 1])
                assert torch.allclose(x, out[n:n + 1, c:c + 1], atol=1e-7), (n, c)
        # Y consistency alone leaves the chroma inconsistent
        y_out = make_net(operator=GAUSS)(lrs)
        assert float((op(luma(y_out)) - luma(lrs)).norm()) < 1e-10
        assert float((op(y_out) - lrs).flatten(2).norm(dim=2).max()) > 1e-3


def test_operator_per_call_replaces_the_layers_and_checks_the_scale(lrs):
    told = make_net(channels='rgb')  # built with MATLAB bicubic
    ref = make_net(channels='rgb', operator=GAUSS)
    with torch.no_grad():
        assert torch.allclose(told(lrs, operator=GAUSS), ref(lrs), atol=1e-7)
        assert torch.allclose(told(lrs, operator=build_operator(GAUSS)), ref(lrs), atol=1e-7)
        wrong = build_operator({'type': 'gaussian', 'scale': 3})
        with pytest.raises(ValueError, match='x2'):
            told(lrs, operator=wrong)


def test_stacked_operator_gives_each_sample_its_own_measurement(lrs):
    ops = [build_operator(GAUSS), build_operator({'type': 'box', 'scale': SCALE})]
    hr = torch.cat([photo('astronaut', 32), photo('coffee', 32)])
    b = torch.cat([ops[0](hr[:1]), ops[1](hr[1:])])
    stacked = StackedOperator(ops)
    assert torch.equal(stacked(hr), b)
    net = make_net(channels='rgb')
    with torch.no_grad():
        out = net(b, operator=stacked)
        for i, op in enumerate(ops):
            assert float((op(out[i:i + 1]) - b[i:i + 1]).flatten(2).norm(dim=2).max()) < 1e-10
            alone = net(b[i:i + 1], operator=op)
            assert torch.allclose(out[i:i + 1], alone, atol=1e-7)
    # repeating samples for per-channel solves keeps each sample's operator for each of its channels
    rep = repeat_samples(stacked, 3)
    assert [type(op).__name__ for op in rep.operators] == ['GaussianDownsample'] * 3 + ['BoxDownsample'] * 3
    assert repeat_samples(ops[0], 3) is ops[0]
    with pytest.raises(ValueError, match='same scale'):
        StackedOperator([ops[0], build_operator({'type': 'box', 'scale': 3})])


def test_noise_sigma_widens_the_ball_to_the_noise_norm(lrs):
    gen = torch.Generator().manual_seed(3)
    sigma = 0.02
    noisy = lrs + sigma * torch.randn(lrs.shape, generator=gen, dtype=DT)
    op = build_operator(GAUSS)
    m = lrs[0, 0].numel()
    net = make_net(channels='rgb', operator=GAUSS, settings={'solver': {'forward': {'tol': 1e-8, 'max_iter': 300}}})
    with torch.no_grad():
        out = net(noisy, noise_sigma=sigma)
        res = (op(out) - noisy).flatten(2).norm(dim=2)
        assert float(res.max()) <= sigma * math.sqrt(m) * (1 + 1e-9)
        # the backbone's estimate is outside the ball on some channel, so the solution is on its boundary there
        assert float(res.max()) >= sigma * math.sqrt(m) * (1 - 1e-6)
        exact = net(noisy)
        assert float((op(exact) - noisy).flatten(2).norm(dim=2).max()) < 1e-10
        # per-sample sigma: a noise-free sample keeps exact consistency
        per_sample = net(noisy, noise_sigma=torch.tensor([sigma, 0.0], dtype=DT))
        res = (op(per_sample) - noisy).flatten(2).norm(dim=2)
        assert float(res[0].max()) <= sigma * math.sqrt(m) * (1 + 1e-9) and float(res[1].max()) < 1e-10
    # on Y the noise of Y counts: sigma times the norm of the Y row of BT.601
    y_net = make_net(operator=GAUSS, settings={'solver': {'forward': {'tol': 1e-8, 'max_iter': 300}}})
    with torch.no_grad():
        y_res = (op(luma(y_net(noisy, noise_sigma=sigma))) - luma(noisy)).flatten(1).norm(dim=1)
    y_sigma = sigma * math.sqrt(65.481**2 + 128.553**2 + 24.966**2) / 255
    assert float(y_res.max()) <= y_sigma * math.sqrt(m) * (1 + 1e-9)
    assert float(y_res.min()) >= y_sigma * math.sqrt(m) * (1 - 1e-6)


def test_noisy_radius_adds_variances_and_rejects_bad_sigma():
    assert noisy_radius(0.3, None, 100) == 0.3
    assert noisy_radius(0.3, 0.04, 100) == pytest.approx(0.5)
    t = noisy_radius(torch.tensor([0.3, 0.0]), torch.tensor([0.04, 0.1]), 100)
    assert torch.allclose(t, torch.tensor([0.5, 1.0], dtype=torch.float64))
    for bad in (-0.1, float('nan')):
        with pytest.raises(ValueError, match='noise_sigma'):
            noisy_radius(0.0, bad, 10)
    with pytest.raises(ValueError, match='channels'):
        make_net(channels='ycbcr')


@pytest.mark.parametrize('kind', ['PnPADMM', 'TVTV'])
def test_baselines_take_the_measurement_of_a_call_on_every_channel(lrs, kind):
    from mcnet_basicsr.archs.baselines_arch import TVTV, PnPADMM
    torch.manual_seed(0)
    if kind == 'PnPADMM':
        net = PnPADMM(BICUBIC, denoiser={'depth': 4, 'num_feat': 8, 'batch_norm': False}, iterations=5, channels='rgb')
    else:
        net = TVTV(BACKBONE, BICUBIC, iterations=5, channels='rgb')
    net = net.to(DT).eval()
    op = build_operator(GAUSS)
    with torch.no_grad():
        out = net(lrs, operator=op)
        assert float((op(out) - lrs).flatten(2).norm(dim=2).max()) < 1e-9
        sigma = 0.02
        noisy = net(lrs, operator=op, noise_sigma=sigma)
        res = (op(noisy) - lrs).flatten(2).norm(dim=2)
        assert float(res.max()) <= sigma * math.sqrt(lrs[0, 0].numel()) * (1 + 1e-9)
        assert not torch.allclose(noisy, out)


def test_a_saved_layer_records_its_operator_and_serves_another(caplog):
    import logging
    net = make_net()
    state = net.state_dict()
    assert bytes(state['_extra_state'].tolist()).decode().strip() == 'RCAN x2 bicubic'
    other = make_net(operator=GAUSS)
    logger = logging.getLogger('basicsr')
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger='basicsr'):
            other.load_state_dict(state)
    finally:
        logger.removeHandler(caplog.handler)
    assert "trained for LR made by 'bicubic'" in caplog.text and 'GaussianDownsample' in caplog.text
    # a record without the operator (layers saved before it was recorded) is a bicubic layer; the scale is checked
    old = dict(state, _extra_state=torch.tensor(list(b'RCAN x2'.ljust(32)), dtype=torch.uint8))
    make_net().load_state_dict(old)
    x3 = dict(state, _extra_state=torch.tensor(list(b'RCAN x3 bicubic'.ljust(32)), dtype=torch.uint8))
    with pytest.raises(ValueError, match='trained on RCAN x3'):
        make_net().load_state_dict(x3)


def test_per_sample_blur_kernels_on_every_channel():
    """A batch of two images blurred by two kernels: each image's channels consistent with its own kernel."""
    rng = np.random.default_rng(0)
    kernels = rng.random((2, 5, 5))
    kernels /= kernels.sum(axis=(1, 2), keepdims=True)
    hr = torch.cat([photo('astronaut', 32), photo('coffee', 32)])
    op = build_operator({'type': 'blur', 'scale': SCALE, 'kernel': kernels})
    b = op(hr)
    for i in range(2):
        alone = build_operator({'type': 'blur', 'scale': SCALE, 'kernel': kernels[i]})
        assert torch.allclose(b[i:i + 1], alone(hr[i:i + 1]), atol=1e-12)
    rep = repeat_samples(op, 3)
    assert rep.kernel.shape == (6, 5, 5) and np.array_equal(rep.kernel[3], kernels[1])
    net = make_net(channels='rgb')
    with torch.no_grad():
        out = net(b, operator=op)
    assert float((op(out) - b).flatten(2).norm(dim=2).max()) < 1e-10


def test_the_backbone_sees_the_lr_clipped_to_its_training_range(lrs):
    """Noisy float LR leaves [0, 1]; the backbone is fed the clipped image, the measurement stays the LR as given."""
    net = make_net(channels='rgb', operator=GAUSS)
    noisy = lrs + 0.2 * torch.randn(lrs.shape, generator=torch.Generator().manual_seed(0), dtype=DT)
    assert float(noisy.min()) < 0 and float(noisy.max()) > 1
    with torch.no_grad():
        w, cbcr = net.run_backbone(noisy)
        w_clip, cbcr_clip = net.run_backbone(noisy.clamp(0, 1))
        assert torch.equal(w, w_clip) and torch.equal(cbcr, cbcr_clip)
        out = net(noisy, noise_sigma=0.2)
    op = build_operator(GAUSS)
    res = (op(out) - noisy).flatten(2).norm(dim=2)
    assert float(res.max()) <= 0.2 * math.sqrt(lrs[0, 0].numel()) * (1 + 1e-9)
