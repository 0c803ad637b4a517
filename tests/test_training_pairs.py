"""Training pairs that satisfy the measurement model, the per-sample PSNR loss, the loss crop of MCNetModel and
the EMA copy that its validation runs."""
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
import torch
from basicsr.data import build_dataset
from basicsr.losses import build_loss

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from conftest import sample_photo
from mcnet_basicsr.models.mcnet_model import MCNetModel
from mcnet_basicsr.ops import build_operator
from mcnet_basicsr.utils import rgb_to_ycbcr
from mcnet_basicsr.utils.images import bicubic_lr


@pytest.fixture
def photo_folder(tmp_path):
    for name, size in (('astronaut', 200), ('coffee', (150, 230)), ('chelsea', 40)):
        cv2.imwrite(str(tmp_path / f'{name}.png'), sample_photo(name, size)[:, :, ::-1])
    return tmp_path


@pytest.mark.parametrize('scale', [2, 3, 4])
def test_train_pairs_satisfy_the_layers_measurement_model(photo_folder, scale):
    """b = clip(round(A x)) with A the layer's own operator on the crop itself: within half a uint8 level
    wherever A x lies in [0, 1] (bicubic overshoots beyond it are clipped, as in every BasicSR dataset)."""
    ds = build_dataset(dict(name='pairs', type='BicubicPairDataset', dataroot_gt=str(photo_folder),
                            io_backend={'type': 'disk'}, phase='train', gt_size=24 * scale, scale=scale))
    op = build_operator({'type': 'bicubic', 'scale': scale})
    for i in range(len(ds)):
        item = ds[i]
        assert item['gt'].shape == (3, 24 * scale, 24 * scale) and item['lq'].shape == (3, 24, 24)
        ax = op(item['gt'][None].double())
        residual = (ax.clamp(0, 1) - item['lq'][None].double()).abs()
        # round half up to uint8, plus float32 storage of both images: at most half a level per pixel
        assert residual.max() <= 0.5 / 255 + 1e-6
        inside = (ax >= 0) & (ax <= 1)
        assert inside.float().mean() > 0.5 and (ax - item['lq'][None].double()).abs()[inside].max() <= 0.5 / 255 + 1e-6
        assert 'chelsea' not in item['gt_path']  # 40 px is smaller than the crop: redrawn


def test_pairs_cut_from_a_whole_lr_image_do_not(photo_folder):
    """Why the dataset exists: an LR crop of the whole LR image breaks b = round(A x) near the crop's edges."""
    hr = cv2.imread(str(photo_folder / 'astronaut.png'))
    lr = bicubic_lr(hr, 2)
    crop_hr, crop_lr = hr[40:104, 40:104], lr[20:52, 20:52]
    op = build_operator({'type': 'bicubic', 'scale': 2})
    to_t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).permute(2, 0, 1)[None].double() / 255  # noqa: E731
    residual = (op(to_t(crop_hr)).clamp(0, 1) - to_t(crop_lr)).abs()
    assert residual[..., 2:-2, 2:-2].max() <= 0.5 / 255 + 1e-9  # the interior (beyond the kernel's reach) agrees
    assert residual.max() > 2 / 255  # the edges do not


def test_val_pairs_are_the_prepared_lr(photo_folder):
    ds = build_dataset(dict(name='pairs', type='BicubicPairDataset', dataroot_gt=str(photo_folder),
                            io_backend={'type': 'disk'}, phase='val', scale=3))
    item = next(ds[i] for i in range(len(ds)) if 'coffee' in ds[i]['gt_path'])
    hr = cv2.imread(item['gt_path'])[:150, :228]
    expected = bicubic_lr(hr, 3)[:, :, ::-1].astype(np.float32) / 255
    np.testing.assert_array_equal(item['lq'].permute(1, 2, 0).numpy(), expected)


def test_bad_settings_are_refused(photo_folder):
    base = dict(name='pairs', type='BicubicPairDataset', dataroot_gt=str(photo_folder), io_backend={'type': 'disk'},
                phase='train', scale=3)
    with pytest.raises(ValueError, match='not a multiple of the scale'):
        build_dataset(dict(base, gt_size=64))
    with pytest.raises(ValueError, match='RGB'):
        build_dataset(dict(base, gt_size=63, color='y'))
    ds = build_dataset(dict(base, gt_size=600))
    with pytest.raises(ValueError, match='no image of at least 600x600'):
        ds[0]


def test_psnr_loss_is_the_negative_mean_psnr_per_sample():
    g = torch.Generator().manual_seed(0)
    target = torch.rand(3, 1, 16, 16, generator=g)
    noise = torch.tensor([0.01, 0.05, 0.2]).view(3, 1, 1, 1) * torch.randn(3, 1, 16, 16, generator=g)
    pred = target + noise
    loss = build_loss({'type': 'PSNRLoss', 'loss_weight': 1.0})
    psnr = [10 * np.log10(1 / float(((p - t)**2).mean())) for p, t in zip(pred, target)]
    assert float(loss(pred, target)) == pytest.approx(-np.mean(psnr), rel=1e-6)
    # unlike an MSE, it weighs each sample's *relative* error: halving the error of the best sample
    # gains as much as halving that of the worst one
    better_best, better_worst = pred.clone(), pred.clone()
    better_best[0] = target[0] + noise[0] / 2
    better_worst[2] = target[2] + noise[2] / 2
    assert float(loss(better_best, target)) == pytest.approx(float(loss(better_worst, target)), rel=1e-6)
    with pytest.raises(ValueError, match='differ in shape'):
        loss(pred, target[:2])


def test_loss_crop_border_leaves_the_patch_edges_out():
    img = torch.zeros(1, 3, 12, 12)
    img[..., :2, :] = 1  # only the top band differs
    view = lambda c, x: MCNetModel._loss_view(SimpleNamespace(loss_crop_border=c, loss_channel='y'), x)  # noqa: E731
    assert view(2, img).shape == (1, 1, 8, 8)
    torch.testing.assert_close(view(2, img), view(2, torch.zeros_like(img)))
    torch.testing.assert_close(view(0, img), rgb_to_ycbcr(img)[:, :1])
    with pytest.raises(ValueError, match='leaves nothing'):
        view(6, img)


def test_validation_runs_the_ema_network_that_its_checkpoint_holds():
    """After an EMA step the EMA copy computes what the same weights loaded fresh compute: BasicSR averages through
    ``param.data``, and a spectral-norm estimate of the weights before the step must not survive it."""
    from mcnet_basicsr.archs.dncnn_arch import DnCNN
    from mcnet_basicsr.models.protocol_sr_model import ProtocolSRModel

    torch.manual_seed(0)
    net_g, net_g_ema = DnCNN(num_feat=8, depth=3), DnCNN(num_feat=8, depth=3)
    with torch.no_grad():
        for p in net_g.parameters():
            p.mul_(4.0)  # far outside the bound: the normalisation matters
    x = torch.rand(1, 1, 16, 16)
    net_g_ema.eval()(x)  # estimated on the weights before the step
    model = ProtocolSRModel.__new__(ProtocolSRModel)  # the EMA step alone, without a training set-up
    model.net_g, model.net_g_ema, model.opt = net_g, net_g_ema, {'dist': False}
    model.model_ema(decay=0.5)
    fresh = DnCNN(num_feat=8, depth=3).eval()
    fresh.load_state_dict(net_g_ema.state_dict())
    with torch.no_grad():
        out, ref = net_g_ema(x), fresh(x)
    assert torch.allclose(out, ref, atol=1e-6), float((out - ref).abs().max())
