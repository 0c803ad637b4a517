"""Denoiser training through BasicSR (CleanPatchDataset + DenoiserModel), the spectral bound of the
trained net, its use by MCNetArch / PnPADMM, and benchmarks/select_denoiser.py."""
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
import yaml
from basicsr.data import build_dataset
from basicsr.models import build_model
from basicsr.utils import bgr2ycbcr

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from conftest import REPO_ROOT, load_script, sample_photo, train_through_pipeline
from mcnet_basicsr.archs.baselines_arch import PnPADMM
from mcnet_basicsr.archs.dncnn_arch import DnCNN, jacobian_spectral_norm, load_dncnn
from mcnet_basicsr.archs.mcnet_arch import MCNetArch
from mcnet_basicsr.data.clean_patch_dataset import CleanPatchDataset
from mcnet_basicsr.models.denoiser_model import DenoiserModel

PHOTOS = ('astronaut', 'coffee', 'chelsea')
TINY = {'depth': 6, 'num_feat': 16, 'bias': False, 'batch_norm': False, 'spectral_norm': True, 'lipschitz': 0.9}


@pytest.fixture(scope='module')
def ws(tmp_path_factory):
    """Set5-layout data root (HR_mod2, LR_bicubic/X2, a 32x32 sub-image LMDB) from three 64x64 photos."""
    root = tmp_path_factory.mktemp('denoiser')
    hr = root / 'src' / 'Set5' / 'HR'
    hr.mkdir(parents=True)
    for name in PHOTOS:
        cv2.imwrite(str(hr / f'{name}.png'), cv2.cvtColor(sample_photo(name, 64), cv2.COLOR_RGB2BGR))
    load_script('prepare_datasets').main(['--src', str(root / 'src'), '--root', str(root / 'datasets'), '--scales',
                                          '2', '--eval-sets', 'Set5', '--train-sets', 'Set5', '--patch-size', '32',
                                          '--step', '32'])
    return root


def _y(path):
    return bgr2ycbcr(cv2.imread(str(path)).astype(np.float32) / 255.0, y_only=True)


def test_dataset_train_patches_are_y_crops(ws):
    lmdb = ws / 'datasets/Set5/Set5_HR_sub_x2.lmdb'
    ds = build_dataset({'name': 'tiny', 'type': 'CleanPatchDataset', 'phase': 'train', 'dataroot_gt': str(lmdb),
                        'io_backend': {'type': 'lmdb'}, 'gt_size': 24, 'use_hflip': False, 'use_rot': False})
    assert len(ds) == 3 * 4  # 64x64 images, 32x32 sub-images, stride 32
    full = {Path(p).stem: _y(p) for p in (ws / 'datasets/Set5/HR_mod2').glob('*.png')}
    for i in (0, 5, 11):
        item = ds[i]
        gt = item['gt'].numpy()
        assert gt.shape == (1, 24, 24) and gt.dtype == np.float32
        assert 16 / 255 - 1e-6 <= gt.min() and gt.max() <= 235 / 255 + 1e-6  # BT.601 Y range
        # the patch is a 24x24 window of the image's Y (same pixels, up to the uint8 rounding of both)
        img, row, col = item['gt_path'].split('_s')[0], *divmod(int(item['gt_path'].split('_s')[1]) - 1, 2)
        sub = next(v for k, v in full.items() if k == img)[32 * row:32 * row + 32, 32 * col:32 * col + 32]
        errs = [np.abs(sub[t:t + 24, s:s + 24] - gt[0]).max() for t in range(9) for s in range(9)]
        assert min(errs) < 1e-5, min(errs)
    # with augmentation (disk backend, crop = the whole image): a flipped / rotated copy of the image's Y
    ds_aug = build_dataset({'name': 'tiny', 'type': 'CleanPatchDataset', 'phase': 'train', 'gt_size': 64,
                            'dataroot_gt': str(ws / 'datasets/Set5/HR_mod2'), 'io_backend': {'type': 'disk'}})
    y = full[Path(ds_aug.paths[0]).stem]
    variants = [np.rot90(v, k) for v in (y, y[:, ::-1]) for k in range(4)]
    torch.manual_seed(0)
    for _ in range(4):
        gt = ds_aug[0]['gt'][0].numpy()
        assert min(np.abs(gt - v).max() for v in variants) < 1e-6


def test_dataset_val_whole_images_and_errors(ws):
    folder = ws / 'datasets/Set5/HR_mod2'
    ds = CleanPatchDataset({'name': 'v', 'phase': 'val', 'dataroot_gt': str(folder), 'io_backend': {'type': 'disk'}})
    item = ds[0]
    assert item['lq_path'] == item['gt_path'] and item['gt'].shape == (1, 64, 64)
    np.testing.assert_allclose(item['gt'][0].numpy(), _y(item['gt_path']), atol=1e-6)
    rgb = CleanPatchDataset({'name': 'v', 'phase': 'val', 'dataroot_gt': str(folder), 'color': 'rgb'})[0]['gt']
    bgr = cv2.imread(item['gt_path']).astype(np.float32) / 255
    np.testing.assert_allclose(rgb.numpy(), bgr[..., ::-1].transpose(2, 0, 1), atol=1e-6)
    with pytest.raises(ValueError, match="'gray'.*y, rgb"):
        CleanPatchDataset({'phase': 'val', 'dataroot_gt': str(folder), 'color': 'gray'})
    with pytest.raises(ValueError, match='gt_size'):
        CleanPatchDataset({'phase': 'train', 'dataroot_gt': str(folder)})
    with pytest.raises(ValueError, match='smaller than gt_size'):
        CleanPatchDataset({'phase': 'train', 'dataroot_gt': str(folder), 'gt_size': 65})[0]
    with pytest.raises(FileNotFoundError, match='does not exist'):
        CleanPatchDataset({'phase': 'val', 'dataroot_gt': str(folder / 'nope')})


def tiny_option(ws, name, total_iter, sigma=(0.05, 0.15)):
    """options/train_dncnn6_sigma_0.06250_0.12500.yml, shrunk to a CPU-sized run on the tiny data."""
    with open(REPO_ROOT / 'options/train_dncnn6_sigma_0.06250_0.12500.yml') as f:
        opt = yaml.safe_load(f)
    opt.update(name=name, num_gpu=0)
    opt['datasets']['train'].update(dataroot_gt=str(ws / 'datasets/Set5/Set5_HR_sub_x2.lmdb'), gt_size=32,
                                    batch_size_per_gpu=8, num_worker_per_gpu=0, dataset_enlarge_ratio=20)
    opt['datasets']['val']['dataroot_gt'] = str(ws / 'datasets/Set5/HR_mod2')
    opt['network_g'].update(num_feat=16)
    opt['train'].update(total_iter=total_iter, noise_range=list(sigma))
    opt['train']['optim_g']['lr'] = 1e-3  # a 40-step run has to move: not the recipe's rate
    opt['train']['scheduler']['milestones'] = [total_iter]
    opt['val'].update(val_freq=total_iter // 2, noise_sigma=0.1)
    opt['logger'].update(print_freq=5, save_checkpoint_freq=total_iter // 2)
    return opt


def test_fixed_validation_noise(ws):
    opt = tiny_option(ws, 'x', 10)
    opt.update(is_train=False, dist=False, rank=0, world_size=1)
    opt['path'] = {'pretrain_network_g': None}
    model = build_model(opt)
    gt = torch.rand(1, 1, 16, 16)
    lqs = []
    for path in ('a/baby.png', 'b/baby.png', 'a/bird.png'):
        model.feed_data({'gt': gt, 'gt_path': [path]})
        lqs.append(model.lq.clone())
    assert torch.equal(lqs[0], lqs[1]) and not torch.equal(lqs[0], lqs[2])  # seeded by the file name
    assert abs(float((lqs[0] - gt).std()) - 0.1) < 0.02
    opt['val'].pop('noise_sigma')
    with pytest.raises(ValueError, match='noise_sigma'):
        build_model(opt).feed_data({'gt': gt, 'gt_path': ['a.png']})


@pytest.fixture(scope='module')
def trained(ws):
    """40 iterations of DenoiserModel through train_pipeline (subprocess, as mcnet_basicsr/train.py)."""
    exp, log = train_through_pipeline(tiny_option(ws, 'tiny_dncnn', 40), ws, timeout=600)
    return exp, log


@pytest.mark.slow
def test_training_logs_and_improves(trained):
    exp, log = trained
    assert 'training noise sigma ~ U[0.05, 0.15]' in log
    assert (exp / 'models/net_g_20.pth').is_file() and (exp / 'models/net_g_40.pth').is_file()
    psnr = [float(x.split()[0]) for x in log.split('# psnr: ')[1:]]
    noisy = [float(x.split(' PSNR ')[1].split()[0]) for x in log.split('noisy input (sigma 0.1)')[1:]]
    assert len(psnr) == 3 and len(noisy) == 3  # iterations 20, 40 and BasicSR's final validation
    assert len(set(noisy)) == 1, 'validation noise must be the same at every validation'
    assert psnr[-1] > noisy[-1] + 0.5, (psnr, noisy)  # 40 steps of a 16-channel net already remove noise
    losses = [float(x.split()[0]) for x in log.split('l_pix: ')[1:]]  # one batch each (sigma random)
    assert len(losses) == 8 and np.mean(losses[-3:]) < 0.85 * np.mean(losses[:3]), losses


@pytest.mark.slow
def test_trained_net_respects_the_spectral_bound(trained):
    exp, _ = trained
    raw = torch.load(exp / 'models/net_g_latest.pth', map_location='cpu')['params']
    net = load_dncnn(DnCNN(**TINY), exp / 'models/net_g_latest.pth').eval()
    bound = 0.9**(1 / 6)
    for conv in net.sn_convs():  # the stored weights are within the bound (converged projection at save)...
        sigma = float(conv.power_iteration())
        assert sigma <= bound * 1.01, sigma
    for sigma, effective in net.layer_bounds():  # ...and the loaded net normalises onto it exactly
        assert effective <= bound * (1 + 1e-6)
    assert any(s > 0.9 * bound for s, _ in net.layer_bounds()), 'bound never active: test too weak'
    x = torch.rand(1, 1, 24, 24)
    lip = jacobian_spectral_norm(net.noise, x, iters=40)
    assert lip <= 0.9 * 1.01, lip
    assert set(raw) == set(net.state_dict())


@pytest.mark.slow
def test_checkpoint_loads_into_mcnet_and_pnp(trained):
    exp, _ = trained
    ckpt = str(exp / 'models/net_g_latest.pth')
    ref = load_dncnn(DnCNN(**TINY), ckpt).state_dict()
    mcnet = MCNetArch(backbone={'net': {'type': 'SRCNN'}, 'channels': 1, 'input': 'upsampled'},
                      operator={'type': 'bicubic', 'scale': 2}, denoiser=dict(TINY, path=ckpt))
    pnp = PnPADMM(operator={'type': 'bicubic', 'scale': 2}, denoiser=dict(TINY, path=ckpt), iterations=3)
    for net in (mcnet.denoiser, pnp.denoiser):
        for k, v in ref.items():
            assert torch.equal(net.state_dict()[k], v), k
    out = pnp(torch.rand(1, 1, 12, 12))
    assert out.shape == (1, 1, 24, 24) and torch.isfinite(out).all()


@pytest.mark.slow
def test_select_denoiser(trained, ws, tmp_path, capsys):
    exp, _ = trained
    import select_denoiser as select
    cands = [str(exp / 'models/net_g_40.pth'), str(exp / 'models/net_g_20.pth')]
    out = tmp_path / 'sel.json'
    args = ['--limit', '1', '--data-root', str(ws / 'datasets'), '--iterations', '3', '--device', 'cpu',
            '--denoiser', json.dumps(TINY), '--out', str(out)]
    select.main([str(exp / 'models/net_g_[24]0.pth'), *args])  # a glob
    res = json.loads(out.read_text())
    assert sorted(r['checkpoint'] for r in res['candidates']) == sorted(cands)
    assert all(r['dataset'] == 'Set5' and r['images'] == 1 and r['method'] == 'pnp' for r in res['candidates'])
    best = max(res['candidates'], key=lambda r: r['psnr'])
    assert res['best'] == best['checkpoint'] and res['best_psnr'] == best['psnr']
    assert len({r['psnr'] for r in res['candidates']}) == 2, 'different denoisers should give different PSNRs'
    assert 'best:' in capsys.readouterr().out

    # MCNet's untrained layer (random SRCNN backbone) as the selection method
    torch.manual_seed(0)
    from basicsr.archs import build_network
    torch.save({'params': build_network({'type': 'SRCNN', 'padding_mode': 'replicate'}).state_dict()},
               tmp_path / 'srcnn.pth')
    select.main([*cands, *args, '--method', 'mcnet', '--set', f'network_g.backbone.path={tmp_path / "srcnn.pth"}'])
    res = json.loads(out.read_text())
    assert [r['method'] for r in res['candidates']] == ['mcnet', 'mcnet'] and res['best'] in cands

    with pytest.raises(SystemExit):
        select.main([cands[0], str(tmp_path / 'missing.pth'), *args])
    assert 'missing.pth' in capsys.readouterr().err


def test_projection_rescales_the_following_batchnorm_so_eval_keeps_its_function():
    """RealSN-DnCNN: projecting a convolution into its bound shrinks its output; the BatchNorm after it
    must see its running statistics shrink alike, or the eval-mode network is another function (an H100
    DnCNN17 run validated as the identity that way). Here training drift is emulated by scaling a
    convolution by 3 and its BN statistics to match (the train-mode function barely changes); the
    projection must undo both, giving back the eval-mode output."""
    import types
    torch.manual_seed(0)
    net = DnCNN(num_feat=8, depth=4, batch_norm=True, spectral_norm=True)
    gray = torch.from_numpy(sample_photo('camera', 48)).float().mean(-1)[None, None] / 255.0
    y = gray + 0.05 * torch.randn(gray.shape)
    host = types.SimpleNamespace(get_bare_model=lambda n: n, net_g=net)
    net.train()
    with torch.no_grad():
        for _ in range(30):  # running statistics of the current weights
            net(y)
    DenoiserModel.project_spectral_norm(host, net, converge=True)
    net.eval()
    with torch.no_grad():
        ref = net(y)
    conv, bn = net.sn_convs_with_bn()[1]
    assert bn is not None and net.sn_convs_with_bn()[0][1] is None and net.sn_convs_with_bn()[-1][1] is None
    with torch.no_grad():
        conv.weight.mul_(3.0)
        bn.running_mean.mul_(3.0)
        bn.running_var.mul_(9.0)
        drifted = net(y)  # eval normalises the conv back by its exact norm, the statistics stay 3x
    assert float((drifted - ref).abs().max()) > 1e-3
    DenoiserModel.project_spectral_norm(host, net, converge=True)
    with torch.no_grad():
        projected = net(y)
    torch.testing.assert_close(projected, ref, rtol=0, atol=1e-5)
