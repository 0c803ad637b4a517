"""The project's colour FFDNet and the solver built on it: DenoiserModel tells a network told its level each image's
noise (options/train_ffdnet_rgb.yml), FFDNetHQS (mcnet_basicsr/archs/ffdnet_arch.py) on a photo with the shipped
weights, FFDNetPnP (the same prior with exact projections: any operator), and the mcnet_ffdnet_hqs rows of the
kernel table (shipped weights alone: consistent outputs)."""
import math

import numpy as np
import pytest
import torch
import yaml
from basicsr.models import build_model

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from conftest import (REPO_ROOT, assert_layer_fine_tunes_the_shipped_prior, sample_photo, tiny_recipe,
                      train_through_pipeline)
from mcnet_basicsr.archs.ffdnet_arch import FFDNet, FFDNetHQS, FFDNetPnP
from mcnet_basicsr.archs.frozen_backbone import non_blind_forward
from mcnet_basicsr.data.degradations import psnr_rgb_uint8, usrnet_lr
from mcnet_basicsr.data.kernel_family import gaussian_kernel
from mcnet_basicsr.ops import QUANTIZATION_EPS_RMS, build_degradation, build_operator, imresize, noisy_radius

SHIPPED = REPO_ROOT / 'mcnet_basicsr' / 'weights' / 'ffdnet_rgb.pth'


def _recipe_model(is_train=True, **train):
    """options/train_ffdnet_rgb.yml's model with a small FFDNet, on the CPU (``train``: options changed)."""
    with open(REPO_ROOT / 'options' / 'train_ffdnet_rgb.yml') as f:
        opt = yaml.safe_load(f)
    opt['network_g'].update(num_feat=8, num_layer=3)
    opt['train'].update(train)
    opt.update(num_gpu=0, is_train=is_train, dist=False, rank=0, world_size=1, root_path=str(REPO_ROOT))
    opt['path'] = {'pretrain_network_g': None, 'experiments_root': '', 'models': '', 'training_states': '', 'log': ''}
    return build_model(opt)


def _record_levels(net):
    calls = []
    net.register_forward_hook(lambda module, args, out: calls.append(args[1]))
    return calls


def test_denoiser_model_tells_ffdnet_the_noise_of_each_image():
    model = _recipe_model()
    assert isinstance(model.net_g, FFDNet)
    train_calls, ema_calls = _record_levels(model.net_g), _record_levels(model.net_g_ema)
    torch.manual_seed(0)
    gt = torch.rand(4, 3, 32, 32)
    model.feed_data({'gt': gt})
    model.optimize_parameters(1)
    sigma = model.sigma
    assert sigma.shape == (4, ) and bool((sigma >= 0).all() and (sigma <= 0.2).all())
    assert torch.equal(train_calls[-1], sigma)  # each image's own level reaches the network
    noise_std = (model.lq - gt).flatten(1).std(dim=1)
    assert torch.allclose(noise_std, sigma, rtol=0.1, atol=2e-3)
    model.feed_data({'gt': gt[:1], 'gt_path': ['a/baby.png']})
    model.test()  # the EMA copy is told the level too
    assert torch.equal(ema_calls[-1], model.sigma)
    tester = _recipe_model(is_train=False)  # testing: the fixed level of val.noise_sigma
    test_calls = _record_levels(tester.net_g)
    tester.feed_data({'gt': gt[:1], 'gt_path': ['a/baby.png']})
    tester.test()
    assert test_calls[-1] == 0.1 and abs(float((tester.lq - gt[:1]).std()) - 0.1) < 0.01


def test_log_scale_noise_draws_as_many_images_per_octave():
    lo, hi = 0.002, 0.2
    model = _recipe_model(noise_range=[lo, hi], noise_scale='log')
    torch.manual_seed(0)
    model.feed_data({'gt': torch.zeros(4096, 1, 2, 2)})
    logs = torch.log(model.sigma) - math.log(lo)
    assert float(model.sigma.min()) >= lo and float(model.sigma.max()) <= hi
    counts = torch.histc(logs, bins=4, min=0, max=math.log(hi / lo))  # four equal spans of log sigma
    assert float(counts.min()) > 0.9 * 1024 and float(counts.max()) < 1.1 * 1024, counts
    with pytest.raises(ValueError, match='lo > 0'):
        _recipe_model(noise_range=[0.0, hi], noise_scale='log')


def test_ffdnet_hqs_levels_run_from_level_hi_down_to_the_scale_or_the_noise():
    hqs = FFDNetHQS(num_feat=8, num_layer=3, n_iter=5)
    levels = hqs.levels(3, torch.tensor([0.0, 7.65 / 255]))
    assert torch.allclose(levels[:, 0], torch.full((2, ), 49 / 255))
    assert torch.allclose(levels[:, -1], torch.tensor([3 / 255, 7.65 / 255]))
    ratios = levels[:, 1:] / levels[:, :-1]  # log-spaced
    assert torch.allclose(ratios, ratios[:, :1].expand_as(ratios), rtol=1e-5)


def test_hqs_study_builds_ffdnet_hqs_with_its_settings_and_a_raised_last_level():
    """benchmarks/hqs_study.py's solvers: at gain 1 FFDNetHQS itself with the given data weight and iterations and the
    given FFDNet weights; a floor gain g ends the levels at g max(s, noise) / 255, still log-spaced from level_hi."""
    import hqs_study  # the lab's (benchmarks/ is on the tests' sys.path)
    state = FFDNet(num_feat=96, num_layer=12).state_dict()
    plain = hqs_study.build_hqs(state, 0.1, 5, 1.0)
    assert type(plain) is FFDNetHQS and plain.lam == 0.1 and plain.n_iter == 5
    assert all(torch.equal(plain.state_dict()[k], v) for k, v in state.items())
    sigma = torch.tensor([0.0, 7.65 / 255])
    floored = hqs_study.build_hqs(state, 0.23, 5, 2.0).levels(3, sigma)
    torch.testing.assert_close(floored[:, 0], torch.full((2, ), 49 / 255))
    torch.testing.assert_close(floored[:, -1], 2 * plain.levels(3, sigma)[:, -1])
    ratios = floored[:, 1:] / floored[:, :-1]
    torch.testing.assert_close(ratios, ratios[:, :1].expand_as(ratios))


@pytest.fixture(scope='module')
def photo_problem():
    """A photo (96 x 96 HR) under a Gaussian kernel at x2 by the kernel table's protocol: ``(hr, lr, kernel)``."""
    hr = sample_photo('astronaut', 96)
    kernel = gaussian_kernel(15, 1.6, 1.0, theta=0.5)
    return hr, usrnet_lr(hr, kernel, 2), kernel


def _uint8(x):
    return (x.clamp(0, 1) * 255).round().byte()[0].permute(1, 2, 0).numpy()


def test_ffdnet_hqs_with_the_shipped_prior_restores_a_blurred_photo(photo_problem):
    hr, lr, kernel = photo_problem
    hqs = FFDNetHQS().eval()
    hqs.load_state_dict(torch.load(SHIPPED, map_location='cpu')['params'])  # FFDNet's keys, strict
    lr_t = torch.from_numpy(np.ascontiguousarray(lr)).permute(2, 0, 1)[None].float()
    with torch.no_grad():
        x = hqs(lr_t, torch.from_numpy(kernel).float()[None, None], 2, 0.0)
    bicubic = psnr_rgb_uint8(_uint8(imresize(lr_t, 2)), hr, 4)
    psnr = psnr_rgb_uint8(_uint8(x), hr, 4)
    assert psnr > bicubic + 2.0, (psnr, bicubic)
    op = build_operator({'type': 'blur', 'scale': 2, 'kernel': kernel})

    def misfit(y):
        return float((op(y.double()) - lr_t.double()).square().mean().sqrt())

    assert misfit(x) < 0.3 * misfit(imresize(lr_t, 2)), (misfit(x), misfit(imresize(lr_t, 2)))  # blur inverted


@pytest.mark.parametrize('degradation', ['blur', 'pil-bicubic'])
def test_ffdnet_pnp_restores_a_photo_inside_the_ball_of_any_operator(photo_problem, degradation):
    hr, _, kernel = photo_problem
    op = (build_operator({'type': 'blur', 'scale': 2, 'kernel': kernel}) if degradation == 'blur' else
          build_degradation(degradation, 2))
    hr_t = torch.from_numpy(hr).permute(2, 0, 1)[None].double() / 255
    sigma = 2.55 / 255
    noisy = op(hr_t) + sigma * torch.randn(op(hr_t).shape, generator=torch.Generator().manual_seed(0),
                                           dtype=torch.float64)
    lr_t = ((noisy.clamp(0, 1) * 255).round() / 255).float()
    pnp = FFDNetPnP().eval()
    pnp.load_state_dict(torch.load(SHIPPED, map_location='cpu')['params'])  # FFDNet's keys, strict
    with torch.no_grad():
        x = non_blind_forward(pnp, lr_t, op, sigma)  # told the operator itself
    m = lr_t.shape[-1] * lr_t.shape[-2]
    radius = noisy_radius(QUANTIZATION_EPS_RMS * math.sqrt(m), sigma, m)
    residuals = (op(x.double()) - lr_t.double()).flatten(2).norm(dim=2)  # one ball per channel
    assert float(residuals.max()) <= radius * (1 + 1e-6)
    bicubic = psnr_rgb_uint8(_uint8(imresize(lr_t, 2)), hr, 4)
    psnr = psnr_rgb_uint8(_uint8(x), hr, 4)
    assert psnr > bicubic + 1.0, (psnr, bicubic)


def test_the_shipped_kernel_layer_is_consistent_and_never_below_its_backbone(photo_problem, monkeypatch):
    from mcnet_basicsr.evaluation.kernel_table import build_row, protocol_forward
    hr, lr, kernel = photo_problem
    monkeypatch.chdir(REPO_ROOT)
    op = build_operator({'type': 'blur', 'scale': 2, 'kernel': kernel})
    outputs = {}
    for row in ('ffdnet_hqs', 'mcnet_ffdnet_hqs'):
        net, consistent = build_row(row, 2, torch.device('cpu'), 1e-4, 60)
        outputs[row] = protocol_forward(net, consistent, lr[None], op, 0.0, torch.device('cpu'))
    sr, residuals, info = outputs['mcnet_ffdnet_hqs']
    eps = QUANTIZATION_EPS_RMS * math.sqrt(lr.shape[0] * lr.shape[1])
    assert float(residuals.max()) <= eps * (1 + 1e-6)  # each of R, G and B within its ball, converged or not
    assert info['forward'].iterations.shape == (1, )  # R, G and B solved together
    alone = psnr_rgb_uint8(outputs['ffdnet_hqs'][0][0], hr, 4)
    assert psnr_rgb_uint8(sr[0], hr, 4) >= alone - 0.02, alone


@pytest.mark.slow
def test_the_kernel_layer_recipe_trains_the_prior_beta_and_level(tmp_path):
    """options/train_mcnet_ffdnet_hqs_x2.yml through train_pipeline on two tiny photos: the prior learns at its rate,
    beta, the level and the hyper-network at lr_beta, the contraction penalty is in the loss and the log, and the
    checkpoint holds them (the backbone, frozen, is not in it)."""
    exp, log = train_through_pipeline(tiny_recipe('train_mcnet_ffdnet_hqs_x2', tmp_path), tmp_path)
    assert 'lr:(1.000e-05,1.000e-02,)' in log  # the prior, then the layer's scalars
    assert 'l_jac: ' in log and 'rate: ' in log  # the contraction penalty, and the rate it measured
    state = torch.load(exp / 'models' / 'net_g_2.pth', map_location='cpu')['params']
    assert {'log_beta', 'log_beta_slope', 'prior_level.log_base', 'prior_level.log_gain'} <= set(state)
    assert abs(float(state['prior_level.log_base']) - math.log(5 / 255)) > 1e-3  # learned at lr_beta
    assert_layer_fine_tunes_the_shipped_prior(state)  # no backbone; the hyper-network and the prior learned
