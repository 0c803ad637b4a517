"""FFDNetUnfolded (mcnet_basicsr/archs/ffdnet_arch.py), FFDNetHQS trained end to end with a learned schedule, and
ProtocolSRModel training a non-blind network told each batch's kernels and noise (options/train_ffdnet_unfolded_x*.yml).
"""
import math

import numpy as np
import pytest
import torch
import yaml
from basicsr.models import build_model

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from conftest import REPO_ROOT, central_difference, sample_photo, tiny_recipe, train_through_pipeline
from mcnet_basicsr.archs.ffdnet_arch import FFDNet, FFDNetHQS, FFDNetUnfolded
from mcnet_basicsr.data.degraded_pair_dataset import DegradedPairDataset
from mcnet_basicsr.data.kernel_family import gaussian_kernel
from mcnet_basicsr.ops import build_operator

SHIPPED = REPO_ROOT / 'mcnet_basicsr' / 'weights' / 'ffdnet_rgb.pth'
SMALL = dict(num_feat=8, num_layer=3, n_iter=4)


def _problem(n=2, size=12, scale=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    kernels = torch.stack([torch.from_numpy(gaussian_kernel(7, 0.8 + 0.5 * i, 0.6 + 0.3 * i, theta=0.4 * i))
                           for i in range(n)]).float()[:, None]
    return torch.rand(n, 3, size, size, generator=g), kernels, scale, torch.linspace(0, 7.65 / 255, n)


def test_untrained_unfolded_network_is_ffdnet_hqs_with_the_shipped_ffdnet():
    """An FFDNet file loads into it (only the hyper-network's keys missing) and, untrained, it computes what FFDNetHQS
    with the same iterations computes, to the last bit."""
    state = torch.load(SHIPPED, map_location='cpu')['params']
    unfolded, hqs = FFDNetUnfolded().eval(), FFDNetHQS(n_iter=8).eval()
    missing, unexpected = unfolded.load_state_dict(state, strict=False)
    assert not unexpected and missing and all(k.startswith('hyper.') for k in missing)
    hqs.load_state_dict(state)
    hr = torch.from_numpy(sample_photo('astronaut', 48)).permute(2, 0, 1)[None].float() / 255
    lr, kernel = hr[..., ::2, ::2], torch.from_numpy(gaussian_kernel(9, 1.2)).float()[None, None]
    with torch.no_grad():
        for sigma in (0.0, 5 / 255):
            assert torch.equal(unfolded(lr, kernel, 2, sigma), hqs(lr, kernel, 2, sigma))


def test_the_schedule_is_ffdnet_hqs_times_the_hyper_networks_factors():
    torch.manual_seed(0)
    net, hqs = FFDNetUnfolded(**SMALL, hidden=4), FFDNetHQS(**SMALL)
    bias = torch.linspace(-0.5, 0.5, 2 * net.n_iter)
    with torch.no_grad():
        net.hyper[-1].bias.copy_(bias)
    sigma = torch.tensor([0.0, 2.55 / 255, 7.65 / 255])
    alphas, levels = net.schedule(3, sigma)
    base_alphas, base_levels = hqs.schedule(3, sigma)
    torch.testing.assert_close(alphas, base_alphas * bias[:net.n_iter].exp())
    torch.testing.assert_close(levels, base_levels * bias[net.n_iter:].exp())
    with torch.no_grad():  # the factors depend on the noise level and the scale once the last weights move
        net.hyper[-1].weight.normal_()
    assert not torch.allclose(net.schedule(3, sigma)[0][0], net.schedule(3, sigma)[0][1] * base_alphas[0]
                              / base_alphas[1])
    assert not torch.allclose(net.schedule(3, sigma)[1], net.schedule(2, sigma)[1] * base_levels
                              / hqs.schedule(2, sigma)[1])


@pytest.mark.parametrize('name', ['hyper.4.bias', 'hyper.0.weight', 'model.2.weight'])
def test_gradients_reach_the_schedule_and_the_prior(name):
    """Autograd's gradient of a loss on the output against central differences (float64), for a weight of the
    hyper-network's last and first layers and of the FFDNet."""
    torch.manual_seed(0)
    net = FFDNetUnfolded(**SMALL, hidden=4).double()
    with torch.no_grad():
        net.hyper[-1].weight.normal_(std=0.3)  # off zero: the first layer's gradient flows through the last
    lr, kernels, scale, sigma = _problem()
    lr, kernels, sigma = lr.double(), kernels.double(), sigma.double()
    target = torch.rand(2, 3, 36, 36, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    def loss():
        return float((net(lr, kernels, scale, sigma) - target).square().sum())

    param = dict(net.named_parameters())[name]
    net.zero_grad()
    (net(lr, kernels, scale, sigma) - target).square().sum().backward()
    numeric = central_difference(loss, param, (0, ) * param.dim(), 1e-4)
    grad = float(param.grad[(0, ) * param.dim()])
    assert abs(grad) > 1e-6 and grad == pytest.approx(numeric, rel=1e-4)


def _recipe_model(scale=3, recipe='train_ffdnet_unfolded', pretrain=None, n_iter=3):
    """``options/<recipe>_x<scale>.yml``'s model at a small size (``n_iter`` iterations) on the CPU, its network loaded
    from ``pretrain`` as the recipe's path settings say (none: not loaded)."""
    with open(REPO_ROOT / 'options' / f'{recipe}_x{scale}.yml') as f:
        opt = yaml.safe_load(f)
    opt['network_g'].update(num_feat=8, num_layer=3, n_iter=n_iter, hidden=4)
    opt.update(num_gpu=0, is_train=True, dist=False, rank=0, world_size=1, root_path=str(REPO_ROOT))
    opt['path'].update(pretrain_network_g=pretrain, experiments_root='', models='', training_states='', log='')
    return build_model(opt), opt


def test_protocol_model_trains_a_non_blind_network_on_each_samples_kernel_and_noise(tmp_path):
    """The recipe's model with its own dataset: every training and validation call gets the kernels and noise stds
    the batch's samples were made with, and the output is the network's on exactly those."""
    import cv2
    model, opt = _recipe_model()
    for name in ('astronaut', 'coffee'):
        cv2.imwrite(str(tmp_path / f'{name}.png'), sample_photo(name, 60)[:, :, ::-1])
    data_opt = dict(opt['datasets']['train'], dataroot_gt=str(tmp_path), io_backend={'type': 'disk'}, gt_size=48,
                    phase='train', scale=3)
    dataset = DegradedPairDataset(data_opt)
    batch = torch.utils.data.default_collate([dataset[0], dataset[1]])
    assert not torch.equal(batch['kernel'][0], batch['kernel'][1])
    calls = []
    model.net_g.register_forward_hook(lambda module, args, out: calls.append(args))
    model.feed_data(batch)
    before = {k: v.clone() for k, v in model.net_g.state_dict().items()}
    model.optimize_parameters(1)
    lr, kernel, scale, sigma = calls[-1]
    assert torch.equal(lr, batch['lq']) and scale == 3
    torch.testing.assert_close(kernel[:, 0], batch['kernel'])
    torch.testing.assert_close(torch.as_tensor(sigma).float(), batch['noise_sigma'])
    assert set(model.log_dict) == {'l_pix'}
    moved = {k for k, v in model.net_g.state_dict().items() if not torch.equal(v, before[k])}
    assert 'hyper.4.bias' in moved and 'model.0.weight' in moved  # the schedule and the FFDNet both learn
    with torch.no_grad():
        expected = model.net_g_ema(batch['lq'][:1], batch['kernel'][:1, None], 3, batch['noise_sigma'][:1])
    model.feed_data({k: v[:1] if torch.is_tensor(v) else v[:1] for k, v in batch.items()})
    model.test()  # validation: the EMA copy, told the sample's measurement; its fidelity under that operator
    torch.testing.assert_close(model.output, expected)
    assert model.measurement_operator(model.net_g_ema) is model.measurement['operator']
    assert math.isfinite(model.last_measurement['fidelity'])


def test_a_non_blind_network_without_a_told_kernel_is_told_matlab_bicubic():
    """A batch that does not say how its LR was made: the model's fallback is MATLAB bicubic, and the network is told
    the circular blur equal to it away from the borders."""
    model, _ = _recipe_model()
    lq = torch.rand(1, 3, 8, 8, generator=torch.Generator().manual_seed(3))
    model.feed_data({'lq': lq, 'gt': torch.rand(1, 3, 24, 24)})
    model.test()
    kernel = build_operator({'type': 'bicubic', 'scale': 3}).circular_blur().kernel
    with torch.no_grad():
        expected = model.net_g_ema(lq, torch.tensor(kernel, dtype=torch.float32)[None, None], 3, 0.0)
    torch.testing.assert_close(model.output, expected)


@pytest.mark.slow
def test_the_unfolded_recipe_trains_through_the_pipeline(tmp_path):
    """options/train_ffdnet_unfolded_x2.yml through train_pipeline on tiny photos (disk, not its LMDB): it starts from
    the shipped FFDNet (strict_load_g false: the hyper-network starts at zero), validates under the protocol and
    saves a checkpoint in which the schedule and the FFDNet have both moved."""
    opt = tiny_recipe('train_ffdnet_unfolded_x2', tmp_path)
    opt['network_g']['n_iter'] = 2
    opt['datasets']['train']['io_backend'] = {'type': 'disk'}
    opt['path']['pretrain_network_g'] = str(SHIPPED)
    exp, log = train_through_pipeline(opt, tmp_path)
    assert 'psnr_y_uint8' in log and 'fidelity_float' in log
    state = torch.load(exp / 'models' / 'net_g_2.pth', map_location='cpu')['params']
    assert float(state['hyper.4.bias'].abs().max()) > 1e-5
    prior = FFDNet()
    prior.load_state_dict(torch.load(SHIPPED, map_location='cpu')['params'])
    moved = [float((state[k] - v).abs().max()) for k, v in prior.state_dict().items()]
    assert 0 < max(moved) < 1e-2  # fine-tuned from the shipped FFDNet
    assert np.isfinite([float(v.abs().max()) for v in state.values()]).all()


def test_hqs_study_loads_an_unfolded_checkpoint_with_its_ema_weights_and_iterations(tmp_path):
    import hqs_study  # the lab's (benchmarks/ is on the tests' sys.path)
    torch.manual_seed(0)
    trained, ema = FFDNetUnfolded(n_iter=3, hidden=4), FFDNetUnfolded(n_iter=3, hidden=4)
    with torch.no_grad():
        ema.hyper[-1].bias.fill_(0.25)
    torch.save({'params': trained.state_dict(), 'params_ema': ema.state_dict()}, tmp_path / 'net_g_9.pth')
    net = hqs_study.load_unfolded(tmp_path / 'net_g_9.pth')
    assert net.n_iter == 3 and not net.training
    assert all(torch.equal(net.state_dict()[k], v) for k, v in ema.state_dict().items())


@pytest.mark.parametrize('scale', [2, 3, 4])
def test_the_stage_two_rows_run_the_shipped_anchor(scale):
    """options/test_ffdnet_unfolded16_x*.yml and test_mcnet_ffdnet_unfolded16_x*.yml (Table K's rows of stage 2)
    read the shipped anchor of their scale, as the network and as the layer's frozen anchor, at 16 iterations."""
    from mcnet_basicsr.evaluation.kernel_table import build_row
    shipped = torch.load(REPO_ROOT / 'mcnet_basicsr' / 'weights' / f'ffdnet_unfolded16_x{scale}.pth',
                         weights_only=True)['params']
    net, consistent = build_row('ffdnet_unfolded16', scale, torch.device('cpu'), 1e-4, 60)
    assert isinstance(net, FFDNetUnfolded) and net.n_iter == 16 and not consistent
    layer, consistent = build_row('mcnet_ffdnet_unfolded16', scale, torch.device('cpu'), 1e-4, 60)
    assert consistent and isinstance(layer.frozen.net, FFDNetUnfolded) and layer.frozen.net.n_iter == 16
    for anchor in (net, layer.frozen.net):
        assert all(torch.equal(anchor.state_dict()[k], v.float()) for k, v in shipped.items())


def test_the_stage_one_rows_load_the_recipes_ema_weights(tmp_path, monkeypatch):
    """options/test_ffdnet_unfolded_x3.yml and test_mcnet_ffdnet_unfolded_x3.yml (Table K's rows of stage 1) read
    their recipe's last checkpoint, its EMA weights, as the network and as the layer's frozen anchor, at the recipe's
    iterations."""
    from mcnet_basicsr.evaluation.kernel_table import build_row
    torch.manual_seed(0)
    trained, ema = FFDNetUnfolded(n_iter=8), FFDNetUnfolded(n_iter=8)
    with torch.no_grad():
        ema.hyper[-1].bias.fill_(0.25)
    models = tmp_path / 'experiments' / 'train_FFDNet_unfolded_x3' / 'models'
    models.mkdir(parents=True)
    torch.save({'params': trained.state_dict(), 'params_ema': ema.state_dict()}, models / 'net_g_latest.pth')
    (tmp_path / 'options').symlink_to(REPO_ROOT / 'options')
    monkeypatch.chdir(tmp_path)
    net, consistent = build_row('ffdnet_unfolded', 3, torch.device('cpu'), 1e-4, 60)
    assert isinstance(net, FFDNetUnfolded) and net.n_iter == 8 and not consistent
    layer, consistent = build_row('mcnet_ffdnet_unfolded', 3, torch.device('cpu'), 1e-4, 60)
    assert consistent and isinstance(layer.frozen.net, FFDNetUnfolded)
    for anchor in (net, layer.frozen.net):
        assert all(torch.equal(anchor.state_dict()[k], v) for k, v in ema.state_dict().items())


@pytest.mark.parametrize('scale, start', [(2, 3), (3, 3), (4, 3)])
def test_stage_two_starts_from_stage_one_at_dpirs_schedule(tmp_path, scale, start):
    """options/train_ffdnet_unfolded16_x{2,3,4}.yml load x3's stage 1 EMA weights: the FFDNet and the
    hyper-network's hidden layers carry over, its wider output layer starts at zero, so the schedule is FFDNetHQS's
    (DPIR's) at the new number of iterations."""
    stage1 = FFDNetUnfolded(num_feat=8, num_layer=3, n_iter=3, hidden=4)
    with torch.no_grad():
        for param in stage1.parameters():
            param.normal_(0, 0.1)
    path = tmp_path / 'net_g_latest.pth'
    torch.save({'params': FFDNetUnfolded(num_feat=8, num_layer=3, n_iter=3, hidden=4).state_dict(),
                'params_ema': stage1.state_dict()}, path)
    with open(REPO_ROOT / 'options' / f'train_ffdnet_unfolded16_x{scale}.yml') as f:
        recipe = yaml.safe_load(f)
    assert recipe['path']['pretrain_network_g'] == f'experiments/train_FFDNet_unfolded_x{start}/models/net_g_latest.pth'
    assert recipe['network_g']['n_iter'] == 16 and recipe['scale'] == scale
    net = _recipe_model(scale, 'train_ffdnet_unfolded16', str(path), n_iter=6)[0].net_g
    state, loaded = stage1.state_dict(), net.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in state.items() if not k.startswith('hyper.4.'))
    assert not loaded['hyper.4.weight'].any() and not loaded['hyper.4.bias'].any()
    sigma = torch.tensor([0.0, 0.03])
    for learned, dpir in zip(net.schedule(scale, sigma), FFDNetHQS.schedule(net, scale, sigma)):
        assert learned.shape == (2, 6) and torch.equal(learned, dpir)


@pytest.mark.slow
def test_the_mixed_recipe_trains_on_kernels_and_resizers_from_the_shipped_anchor(tmp_path):
    """options/train_ffdnet_unfolded16_mix_x4.yml through train_pipeline on tiny photos: it starts from the shipped
    x4 anchor (half precision, strict), trains on LR made by kernels and resizers and validates on both sets."""
    opt = tiny_recipe('train_ffdnet_unfolded16_mix_x4', tmp_path)
    opt['datasets']['train']['io_backend'] = {'type': 'disk'}
    opt['datasets']['val_2']['dataroot_gt'] = opt['datasets']['val']['dataroot_gt']
    exp, log = train_through_pipeline(opt, tmp_path)
    assert 'Validation Set5: psnr_y_uint8' in log and 'Validation Set5_resizers: psnr_y_uint8' in log
    state = torch.load(exp / 'models' / 'net_g_2.pth', map_location='cpu')['params']
    shipped = torch.load(REPO_ROOT / 'mcnet_basicsr' / 'weights' / 'ffdnet_unfolded16_x4.pth', map_location='cpu')
    moved = [float((state[k] - v.float()).abs().max()) for k, v in shipped['params'].items()]
    assert 0 < max(moved) < 1e-2  # two Adam steps from the shipped anchor
