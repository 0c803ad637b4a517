"""MCNet + USRNet-tiny trained for LR made by blur kernels and noise: options/train_mcnet_usrnet_tiny_x{2,3,4}.yml
start from the untrained row of Table K (options/test_mcnet_usrnet_tiny_x*.yml) with the shipped colour FFDNet as the
prior, and the Table K row of what they train (options/test_mcnet_usrnet_tiny_kernels_x*.yml) runs it, each channel
consistent with the measurement."""
import math

import pytest
import torch

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from conftest import (REPO_ROOT, SHARED, assert_layer_fine_tunes_the_shipped_prior, load_script, sample_photo,
                      shared_path, tiny_recipe, train_through_pipeline)
from mcnet_basicsr.data.degradations import psnr_rgb_uint8
from mcnet_basicsr.data.kernel_family import gaussian_kernel
from mcnet_basicsr.evaluation.evaluate import read_option
from mcnet_basicsr.ops import QUANTIZATION_EPS_RMS, build_operator, noisy_radius

OPTIONS = REPO_ROOT / 'options'
SHIPPED_PRIOR = 'mcnet_basicsr/weights/ffdnet_rgb.pth'


def _option(name):
    return read_option(OPTIONS / f'{name}.yml')


@pytest.mark.parametrize('scale', [2, 3, 4])
def test_the_recipe_trains_the_untrained_row_with_the_shipped_prior(scale):
    """The recipe's layer is the untrained row's (backbone, operator, channels, radius, rho, beta 3 growing with the
    noise, level 5 / 255) with the shipped FFDNet in place of KAIR's, beta learned and the hyper-network added; its
    Table K row (options/test_mcnet_usrnet_tiny_kernels_x*.yml) builds what the recipe trains, from the run's EMA
    weights, solved as Table K solves."""
    recipe = _option(f'train_mcnet_usrnet_tiny_x{scale}')
    untrained = _option(f'test_mcnet_usrnet_tiny_x{scale}')['network_g']
    net = recipe['network_g']
    for key in ('type', 'backbone', 'operator', 'channels', 'eps_rms', 'rho'):
        assert net[key] == untrained[key], key
    assert net['beta'] == dict(untrained['beta'], learn=True)
    assert net['denoiser'] == dict(untrained['denoiser'], path=SHIPPED_PRIOR)
    assert net['hyper'] == {'hidden': 16}
    row = _option(f'test_mcnet_usrnet_tiny_kernels_x{scale}')
    for key in ('type', 'backbone', 'operator', 'channels', 'eps_rms', 'rho', 'denoiser', 'hyper'):
        assert row['network_g'][key] == net[key], key
    assert row['network_g']['beta'] == {'init': 3.0, 'noise': True}  # the file's beta, slope and level replace these
    assert row['network_g']['settings']['solver']['forward'] == {'tol': 1e-4, 'max_iter': 60}
    assert row['path']['pretrain_network_g'] == f'experiments/{recipe["name"]}/models/net_g_latest.pth'
    assert row['path']['param_key_g'] == 'params_ema'


@pytest.mark.slow
def test_the_recipe_trains_the_layer_its_table_k_row_runs(tmp_path, monkeypatch):
    """options/train_mcnet_usrnet_tiny_x3.yml through train_pipeline on two tiny photos: the frozen USRNet-tiny is
    not in the checkpoint; beta's noise slope starts at the untrained row's and learns with the level and the
    hyper-network at lr_beta; the prior is fine-tuned from the shipped FFDNet at its small rate. The Table K row then
    runs that checkpoint on a photo blurred by a family kernel with noise 7.65 / 255: each of R, G and B lies in its
    noisy ball, every solve converges, and the output stays near USRNet-tiny's (2 iterations leave it untrained)."""
    from mcnet_basicsr.data.degradations import usrnet_lr
    from mcnet_basicsr.evaluation.kernel_table import build_row, protocol_forward
    shared_path('weights', 'usrnet_tiny')
    assert load_script('fetch_assets').main(['usrnet_tiny', '--from', str(SHARED), '--root', str(tmp_path)]) == 0
    opt = tiny_recipe('train_mcnet_usrnet_tiny_x3', tmp_path)
    opt['network_g']['backbone']['path'] = str(tmp_path / 'experiments' / 'pretrained_models' / 'usrnet_tiny.pth')
    opt['datasets']['train']['gt_size'] = 30  # a multiple of the scale
    exp, log = train_through_pipeline(opt, tmp_path)
    assert 'lr:(1.000e-05,1.000e-02,)' in log and 'l_jac: ' in log and 'beta_slope: ' in log
    state = torch.load(exp / 'models' / 'net_g_2.pth', map_location='cpu')['params']
    assert 1e-4 < abs(float(state['log_beta_slope']) - 0.30099) < 0.05  # from the untrained row's slope
    assert 1e-4 < abs(float(state['log_beta']) - math.log(3.0)) < 0.05
    assert_layer_fine_tunes_the_shipped_prior(state)  # no backbone; the hyper-network and the prior learned

    for folder in ('options', 'mcnet_basicsr'):
        (tmp_path / folder).symlink_to(REPO_ROOT / folder)
    monkeypatch.chdir(tmp_path)
    hr = sample_photo('astronaut', 192)
    kernel = gaussian_kernel(25, 2.2, 1.4, theta=0.7)
    sigma = 7.65 / 255
    lr = usrnet_lr(hr, kernel, 3, noise_sigma=sigma, seed=0)
    op = build_operator({'type': 'blur', 'scale': 3, 'kernel': kernel})
    outputs = {}
    for row in ('usrnet_tiny', 'mcnet_usrnet_tiny_kernels'):
        net, consistent = build_row(row, 3, torch.device('cpu'), 1e-4, 60)
        assert net is not None, row  # the row finds the run's net_g_latest.pth
        outputs[row] = protocol_forward(net, consistent, lr[None], op, sigma, torch.device('cpu'))
    sr, residuals, info = outputs['mcnet_usrnet_tiny_kernels']
    m = lr.shape[0] * lr.shape[1]
    assert float(residuals.max()) <= noisy_radius(QUANTIZATION_EPS_RMS * math.sqrt(m), sigma, m) * (1 + 1e-6)
    assert bool(info['forward'].converged.all())
    alone = psnr_rgb_uint8(outputs['usrnet_tiny'][0][0], hr, 9)
    assert abs(psnr_rgb_uint8(sr[0], hr, 9) - alone) < 0.3, alone
