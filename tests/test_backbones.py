"""SRCNN / RDN backbones, their weight conversions and the BT.601 colour helpers.

The Set5 tests need ../shared (reference weights and images) and are skipped without it.
"""
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from basicsr.archs import build_network
from basicsr.metrics import calculate_psnr
from basicsr.utils.color_util import rgb2ycbcr, rgb2ycbcr_pt
from basicsr.utils.img_util import tensor2img
from basicsr.utils.matlab_functions import imresize as imresize_basicsr

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from mcnet_basicsr.archs.rdn_arch import RDN, convert_rdn_state_dict
from mcnet_basicsr.archs.srcnn_arch import SRCNN
from mcnet_basicsr.ops import imresize
from mcnet_basicsr.utils import rgb_to_ycbcr, ycbcr_to_rgb

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / 'shared'
needs_shared = pytest.mark.skipif(
    not (SHARED / 'weights').is_dir() or not (SHARED / 'datasets' / 'Set5' / 'HR').is_dir(),
    reason=f'reference weights/images not found under {SHARED} (../shared next to the repository)')


@pytest.fixture
def device():
    return torch.device('cpu')


@pytest.fixture(scope='module')
def convert_weights():
    from mcnet_basicsr.zoo import convert
    return convert


# ----------------------------------------------------------------------------------------------- colour
def test_ycbcr_round_trip_and_y_matches_basicsr():
    g = torch.Generator().manual_seed(0)
    rgb = torch.rand(2, 3, 17, 13, generator=g)
    ycbcr = rgb_to_ycbcr(rgb)
    torch.testing.assert_close(ycbcr_to_rgb(ycbcr), rgb, atol=1e-6, rtol=0)
    torch.testing.assert_close(ycbcr[:, :1], rgb2ycbcr_pt(rgb, y_only=True), atol=1e-6, rtol=0)
    torch.testing.assert_close(rgb_to_ycbcr(rgb, y_only=True), ycbcr[:, :1], atol=0, rtol=0)
    # the other direction, and against basicsr's numpy (MATLAB) convention at known colours
    ycbcr64 = torch.rand(2, 3, 5, 7, generator=g, dtype=torch.float64)
    torch.testing.assert_close(rgb_to_ycbcr(ycbcr_to_rgb(ycbcr64)), ycbcr64, atol=1e-12, rtol=0)
    white_black = torch.tensor([1.0, 0.0]).view(1, 1, 1, 2).expand(1, 3, 1, 2)
    expected = torch.tensor([[235, 16], [128, 128], [128, 128]], dtype=torch.float32).view(1, 3, 1, 2) / 255
    torch.testing.assert_close(rgb_to_ycbcr(white_black), expected, atol=1e-6, rtol=0)
    np_ycbcr = rgb2ycbcr(rgb[0].permute(1, 2, 0).numpy())
    np.testing.assert_allclose(ycbcr[0].permute(1, 2, 0).numpy(), np_ycbcr, atol=1e-6)


# ----------------------------------------------------------------------------------------------- SRCNN
def test_srcnn_builds_from_registry():
    net = build_network({'type': 'SRCNN', 'padding_mode': 'zeros'})
    assert isinstance(net, SRCNN)
    assert sum(p.numel() for p in net.parameters()) == (81 * 64 + 64) + (64 * 25 * 32 + 32) + (32 * 25 + 1)
    net = build_network({'type': 'SRCNN', 'kernel_size': [9, 1, 5], 'num_feat': [64, 32]})
    assert net.conv2.weight.shape == (32, 64, 1, 1)
    with pytest.raises(ValueError, match='padding_mode'):
        SRCNN(padding_mode='same')
    with pytest.raises(ValueError, match='odd'):
        SRCNN(kernel_size=(9, 4, 5))


def test_srcnn_padding_modes(device):
    """Replicate padding keeps a flat image flat up to the border (the MATLAB models rely on it); zeros does not."""
    torch.manual_seed(0)
    flat = torch.full((1, 1, 24, 24), 0.6, device=device)
    nets = {mode: SRCNN(padding_mode=mode).to(device) for mode in ('replicate', 'zeros')}
    nets['zeros'].load_state_dict(nets['replicate'].state_dict())
    with torch.no_grad():
        out_rep, out_zero = nets['replicate'](flat), nets['zeros'](flat)
    assert out_rep.shape == flat.shape
    assert (out_rep - out_rep[0, 0, 12, 12]).abs().max() < 1e-5
    # same weights, same interior, different border
    torch.testing.assert_close(out_zero[..., 8:-8, 8:-8], out_rep[..., 8:-8, 8:-8], atol=1e-5, rtol=0)
    assert (out_zero[..., 0, :] - out_rep[..., 0, :]).abs().max() > 1e-3


def test_srcnn_rgb_mode_equals_y_pipeline(device):
    """scale=s: Y of the RGB output is SRCNN(bicubic Y); its CbCr is bicubic CbCr."""
    torch.manual_seed(0)
    net_y = SRCNN().to(device)
    net_rgb = build_network({'type': 'SRCNN', 'scale': 3}).to(device)
    net_rgb.load_state_dict(net_y.state_dict())
    lr = torch.rand(2, 3, 10, 7, device=device)
    with torch.no_grad():
        out = net_rgb(lr)
        up = imresize(rgb_to_ycbcr(lr), 3)
        y = net_y(up[:, :1])
    assert out.shape == (2, 3, 30, 21)
    out_ycbcr = rgb_to_ycbcr(out)
    torch.testing.assert_close(out_ycbcr[:, :1], y, atol=1e-5, rtol=0)
    torch.testing.assert_close(out_ycbcr[:, 1:], up[:, 1:], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match=r'\(N, 3, h, w\)'):
        net_rgb(lr[:, :1])


# ----------------------------------------------------------------------------------------------- RDN
def official_rdn_shapes(num_in_ch, num_feat, num_block, num_layer, growth, upscale):
    """Parameter shapes of EDSR-PyTorch's rdn.py (written from its layer list, not from our class)."""
    shapes = {
        'SFENet1.weight': (num_feat, num_in_ch, 3, 3),
        'SFENet1.bias': (num_feat, ),
        'SFENet2.weight': (num_feat, num_feat, 3, 3),
        'SFENet2.bias': (num_feat, ),
    }
    for i in range(num_block):
        for j in range(num_layer):
            shapes[f'RDBs.{i}.convs.{j}.conv.0.weight'] = (growth, num_feat + j * growth, 3, 3)
            shapes[f'RDBs.{i}.convs.{j}.conv.0.bias'] = (growth, )
        shapes[f'RDBs.{i}.LFF.weight'] = (num_feat, num_feat + num_layer * growth, 1, 1)
        shapes[f'RDBs.{i}.LFF.bias'] = (num_feat, )
    shapes.update({
        'GFF.0.weight': (num_feat, num_block * num_feat, 1, 1),
        'GFF.0.bias': (num_feat, ),
        'GFF.1.weight': (num_feat, num_feat, 3, 3),
        'GFF.1.bias': (num_feat, ),
    })
    stages = [2, 2] if upscale == 4 else [upscale]
    for k, r in enumerate(stages):
        shapes[f'UPNet.{2 * k}.weight'] = (growth * r * r, num_feat if k == 0 else growth, 3, 3)
        shapes[f'UPNet.{2 * k}.bias'] = (growth * r * r, )
    shapes[f'UPNet.{2 * len(stages)}.weight'] = (num_in_ch, growth, 3, 3)
    shapes[f'UPNet.{2 * len(stages)}.bias'] = (num_in_ch, )
    return shapes


def official_to_yjn870_name(key, upscale):
    """Key renaming, spelled out per key family (independent of convert_rdn_state_dict's regexes)."""
    parts = key.split('.')
    if parts[0] in ('SFENet1', 'SFENet2'):
        return 'sfe' + parts[0][-1] + '.' + parts[1]
    if parts[0] == 'RDBs' and parts[2] == 'convs':
        return f'rdbs.{parts[1]}.layers.{parts[3]}.conv.{parts[6]}'
    if parts[0] == 'RDBs' and parts[2] == 'LFF':
        return f'rdbs.{parts[1]}.lff.{parts[3]}'
    if parts[0] == 'GFF':
        return f'gff.{parts[1]}.{parts[2]}'
    last = 4 if upscale == 4 else 2
    return f'output.{parts[2]}' if int(parts[1]) == last else f'upscale.{parts[1]}.{parts[2]}'


def synthetic_state_dict(shapes, seed):
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(s, generator=g) * (0.5 / np.sqrt(np.prod(s[1:])) if len(s) > 1 else 0.01)
            for k, s in shapes.items()}


def official_rdn_reference(sd, x, num_block, num_layer, upscale):
    """Forward pass of EDSR-PyTorch's RDN (inputs in [0, 255]) written directly on its state dict."""

    def conv(t, name):
        w = sd[f'{name}.weight']
        return F.conv2d(t, w, sd[f'{name}.bias'], padding=w.shape[-1] // 2)

    f1 = conv(x, 'SFENet1')
    t = conv(f1, 'SFENet2')
    outs = []
    for i in range(num_block):
        dense = t
        for j in range(num_layer):
            dense = torch.cat([dense, F.relu(conv(dense, f'RDBs.{i}.convs.{j}.conv.0'))], 1)
        t = conv(dense, f'RDBs.{i}.LFF') + t
        outs.append(t)
    t = conv(conv(torch.cat(outs, 1), 'GFF.0'), 'GFF.1') + f1
    for k, r in enumerate([2, 2] if upscale == 4 else [upscale]):
        t = F.pixel_shuffle(conv(t, f'UPNet.{2 * k}'), r)
    return conv(t, f'UPNet.{4 if upscale == 4 else 2}')


def standard_rdn_param_count(upscale):
    """Closed form for D=16, C=8, G=G0=64, RGB (paper: about 22M)."""
    block = sum((64 + 64 * j) * 64 * 9 + 64 for j in range(8)) + (64 + 8 * 64) * 64 + 64
    up = {2: 64 * 256 * 9 + 256, 3: 64 * 576 * 9 + 576, 4: 2 * (64 * 256 * 9 + 256)}[upscale]
    return (3 * 64 * 9 + 64) + (64 * 64 * 9 + 64) + 16 * block + (16 * 64 * 64 + 64) + (64 * 64 * 9 + 64) + up + (
        64 * 3 * 9 + 3)


@pytest.mark.parametrize('upscale', [2, 3, 4])
def test_rdn_standard_config(upscale, device):
    net = build_network({'type': 'RDN', 'num_in_ch': 3, 'num_out_ch': 3, 'upscale': upscale}).to(device)
    assert isinstance(net, RDN)
    n_params = sum(p.numel() for p in net.parameters())
    assert n_params == standard_rdn_param_count(upscale)
    if upscale == 2:
        assert abs(n_params - 22.1e6) < 0.05e6  # the paper's ~22.1M
    # official layout of the paper's configuration, converted, loads strictly (names and shapes)
    official = synthetic_state_dict(official_rdn_shapes(3, 64, 16, 8, 64, upscale), seed=upscale)
    net.load_state_dict(convert_rdn_state_dict(official), strict=True)
    with torch.no_grad():
        out = net(torch.rand(1, 3, 6, 5, device=device))
    assert out.shape == (1, 3, 6 * upscale, 5 * upscale)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize('upscale', [2, 3, 4])
def test_rdn_official_and_yjn870_layouts_agree(upscale, device):
    cfg = dict(num_feat=8, num_block=3, num_layer=2, growth=8, upscale=upscale)
    official = synthetic_state_dict(official_rdn_shapes(3, **cfg), seed=10 + upscale)
    yjn870 = {official_to_yjn870_name(k, upscale): v.clone() for k, v in official.items()}

    net_official = RDN(**cfg, img_range=255., rgb_mean=None).to(device)
    net_official.load_state_dict(convert_rdn_state_dict(official), strict=True)
    net_yjn870 = RDN(**cfg, img_range=255.).to(device)
    net_yjn870.load_state_dict(yjn870, strict=True)
    assert set(net_official.state_dict()) == set(yjn870)  # yjn870 keys exactly, no extra buffers

    x = torch.rand(2, 3, 7, 6, device=device)
    with torch.no_grad():
        out_official = net_official(x)
        out_yjn870 = net_yjn870(x)
        reference = official_rdn_reference(official, x * 255., 3, 2, upscale) / 255.
    assert reference.abs().max() > 1e-2  # not a trivially small output
    torch.testing.assert_close(out_official, reference, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_yjn870, out_official, atol=0, rtol=0)

    # a DataParallel prefix is accepted; a foreign key is refused
    prefixed = {'module.' + k: v for k, v in official.items()}
    assert set(convert_rdn_state_dict(prefixed)) == set(yjn870)
    with pytest.raises(KeyError, match='SFENet3'):
        convert_rdn_state_dict({**official, 'SFENet3.weight': torch.zeros(1)})


def test_rdn_mean_and_range(device):
    """rgb_mean / img_range wrap the same body: out = body((x - mean) * r) / r + mean."""
    cfg = dict(num_feat=8, num_block=2, num_layer=2, growth=8, upscale=2)
    mean = (0.4, 0.45, 0.5)
    net_plain = RDN(**cfg, img_range=1.).to(device)
    net_mean = RDN(**cfg, img_range=255., rgb_mean=mean).to(device)
    net_mean.load_state_dict(net_plain.state_dict(), strict=True)
    x = torch.rand(1, 3, 5, 5, device=device)
    m = torch.tensor(mean, device=device).view(1, 3, 1, 1)
    with torch.no_grad():
        expected = net_plain((x - m) * 255.) / 255. + m
        torch.testing.assert_close(net_mean(x), expected, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match='upscale'):
        RDN(upscale=8)


def test_convert_script_rdn(tmp_path, convert_weights):
    cfg = dict(num_feat=8, num_block=2, num_layer=3, growth=8, upscale=3)
    official = synthetic_state_dict(official_rdn_shapes(3, **cfg), seed=3)
    src = tmp_path / 'rdn_official.pt'
    torch.save(official, src)
    out_dir = tmp_path / 'out'
    (target, ) = convert_weights.convert_weights('rdn', [str(src)], str(out_dir))
    params = torch.load(target)['params']
    net = RDN(**cfg)
    net.load_state_dict(params, strict=True)
    torch.testing.assert_close(params['output.weight'], official['UPNet.2.weight'], atol=0, rtol=0)
    with pytest.raises(convert_weights.ConversionError, match='--force'):
        convert_weights.convert_weights('rdn', [str(src)], str(out_dir))
    convert_weights.convert_weights('rdn', [str(src)], str(out_dir), force=True)
    with pytest.raises(convert_weights.ConversionError, match='not found'):
        convert_weights.convert_weights('rdn', [str(tmp_path / 'missing.pt')], str(out_dir))
    with pytest.raises(convert_weights.ConversionError, match='Unknown --type'):
        convert_weights.convert_weights('edsr', [str(src)], str(out_dir))
    with pytest.raises(convert_weights.ConversionError, match='not an SRCNN state dict'):
        convert_weights.convert_weights('srcnn_pth', src, tmp_path / 'x')


# ----------------------------------------------------------------------------------------------- RCAN (official layout)
RCAN_DIV2K_MEAN = (0.4488, 0.4371, 0.4040)


def official_rcan_shapes(n_feats, n_resgroups, n_resblocks, reduction, scale):
    """Parameter shapes of yulunzhang/RCAN's rcan.py (EDSR-PyTorch), written from its layer list."""
    shapes = {'sub_mean.weight': (3, 3, 1, 1), 'sub_mean.bias': (3, ), 'add_mean.weight': (3, 3, 1, 1),
              'add_mean.bias': (3, ), 'head.0.weight': (n_feats, 3, 3, 3), 'head.0.bias': (n_feats, )}
    for g in range(n_resgroups):
        for b in range(n_resblocks):
            pre = f'body.{g}.body.{b}.body'
            for i in (0, 2):
                shapes.update({f'{pre}.{i}.weight': (n_feats, n_feats, 3, 3), f'{pre}.{i}.bias': (n_feats, )})
            shapes.update({f'{pre}.3.conv_du.0.weight': (n_feats // reduction, n_feats, 1, 1),
                           f'{pre}.3.conv_du.0.bias': (n_feats // reduction, ),
                           f'{pre}.3.conv_du.2.weight': (n_feats, n_feats // reduction, 1, 1),
                           f'{pre}.3.conv_du.2.bias': (n_feats, )})
        shapes.update({f'body.{g}.body.{n_resblocks}.weight': (n_feats, n_feats, 3, 3),
                       f'body.{g}.body.{n_resblocks}.bias': (n_feats, )})
    shapes.update({f'body.{n_resgroups}.weight': (n_feats, n_feats, 3, 3), f'body.{n_resgroups}.bias': (n_feats, )})
    ups = [0, 2] if scale == 4 else [0]
    for i in ups:
        shapes.update({f'tail.0.{i}.weight': ((4 if scale == 4 else scale**2) * n_feats, n_feats, 3, 3),
                       f'tail.0.{i}.bias': ((4 if scale == 4 else scale**2) * n_feats, )})
    shapes.update({'tail.1.weight': (3, n_feats, 3, 3), 'tail.1.bias': (3, )})
    return shapes


def official_rcan_state_dict(cfg, seed):
    sd = synthetic_state_dict(official_rcan_shapes(**cfg), seed)
    eye = torch.eye(3).view(3, 3, 1, 1)  # MeanShift: fixed 1x1 convs (rgb_range 255, std 1)
    mean = torch.tensor(RCAN_DIV2K_MEAN) * 255
    sd.update({'sub_mean.weight': eye, 'sub_mean.bias': -mean, 'add_mean.weight': eye, 'add_mean.bias': mean})
    return sd


def official_rcan_reference(sd, x, n_resgroups, n_resblocks, scale):
    """Forward pass of the official RCAN (inputs in [0, 255]) written directly on its state dict."""
    def conv(t, key, pad=1):
        return F.conv2d(t, sd[f'{key}.weight'], sd[f'{key}.bias'], padding=pad)

    x = conv(x, 'sub_mean', 0)
    x = head = conv(x, 'head.0')
    for g in range(n_resgroups):
        res = x
        for b in range(n_resblocks):
            pre = f'body.{g}.body.{b}.body'
            r = conv(F.relu(conv(res, f'{pre}.0')), f'{pre}.2')
            y = r.mean(dim=(2, 3), keepdim=True)
            y = torch.sigmoid(conv(F.relu(conv(y, f'{pre}.3.conv_du.0', 0)), f'{pre}.3.conv_du.2', 0))
            res = res + r * y
        x = x + conv(res, f'body.{g}.body.{n_resblocks}')
    x = conv(x, f'body.{n_resgroups}') + head
    for i in ([0, 2] if scale == 4 else [0]):
        x = F.pixel_shuffle(conv(x, f'tail.0.{i}'), 2 if scale == 4 else scale)
    return conv(conv(x, 'tail.1'), 'add_mean', 0)


@pytest.mark.parametrize('scale', [2, 3, 4])
def test_convert_official_rcan_matches_its_forward(scale, convert_weights):
    """basicsr's RCAN with converted official weights computes what the official RCAN computes."""
    from basicsr.archs.rcan_arch import RCAN
    cfg = dict(n_feats=8, n_resgroups=2, n_resblocks=2, reduction=4, scale=scale)
    official = official_rcan_state_dict(cfg, seed=20 + scale)
    state, options = convert_weights.convert_rcan_state_dict({f'module.{k}': v for k, v in official.items()})
    assert options == dict(num_in_ch=3, num_out_ch=3, num_feat=8, num_group=2, num_block=2, squeeze_factor=4,
                           upscale=scale, res_scale=1, img_range=255., rgb_mean=RCAN_DIV2K_MEAN)
    net = RCAN(**options).eval()
    net.load_state_dict(state, strict=True)
    x = torch.rand(1, 3, 6, 7, generator=torch.Generator().manual_seed(scale))
    with torch.no_grad():
        ours = net(x)
        reference = official_rcan_reference(official, x * 255., 2, 2, scale) / 255.
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=1e-4)
    bad = dict(official, **{'sub_mean.bias': official['sub_mean.bias'] + 10})
    with pytest.raises(convert_weights.ConversionError, match='mean'):
        convert_weights.convert_rcan_state_dict(bad)
    with pytest.raises(convert_weights.ConversionError, match='unexpected key'):
        convert_weights.convert_rcan_state_dict(dict(official, **{'body.0.extra.weight': torch.zeros(1)}))


def test_convert_script_rcan(tmp_path, convert_weights):
    src = tmp_path / 'RCAN_BIX2.pt'
    torch.save(official_rcan_state_dict(dict(n_feats=8, n_resgroups=2, n_resblocks=3, reduction=4, scale=2), 1), src)
    (target, ) = convert_weights.convert_weights('rcan', [str(src)], str(tmp_path / 'out'), name='RCAN_BIX2')
    assert target.name == 'RCAN_BIX2.pth' and 'conv_after_body.weight' in torch.load(target)['params']
    with pytest.raises(convert_weights.ConversionError, match='not an official RCAN'):
        bad = tmp_path / 'rdn.pt'
        torch.save({'SFENet1.weight': torch.zeros(1)}, bad)
        convert_weights.convert_weights('rcan', [str(bad)], str(tmp_path / 'out2'))


# ----------------------------------------------------------------------------------------------- Set5 (../shared)
def set5_images(scale):
    """(name, mod-cropped HR RGB uint8) for every Set5 image."""
    images = []
    for path in sorted((SHARED / 'datasets' / 'Set5' / 'HR').glob('*.png')):
        img = cv2.imread(str(path), cv2.IMREAD_COLOR)[..., ::-1]
        h, w = img.shape[:2]
        images.append((path.stem, np.ascontiguousarray(img[:h - h % scale, :w - w % scale])))
    return images


def y_psnr(sr_y, hr_y, scale):
    """BasicSR's Y-PSNR on (H, W) images in [0, 255]; ``sr_y`` is rounded to uint8 first."""
    sr_y = np.round(np.clip(sr_y, 0, 255)).astype(np.uint8)
    return calculate_psnr(sr_y[..., None], hr_y[..., None], crop_border=scale, input_order='HWC', test_y_channel=True)


# Set5 Y-PSNR of the official SRCNN 9-5-5 (ImageNet).
# BasicSR protocol: LR = MATLAB bicubic of RGB, rounded to uint8; SRCNN on the bicubic-upsampled Y; output Y
# rounded to uint8; ground truth = float Y of the HR image. Reference: DESIGN.md (36.66 / 32.75 / 30.49).
REF_BASICSR = {2: 36.66, 3: 32.75, 4: 30.49}
# MATLAB demo protocol (the SRCNN release's demo_SR.m): uint8 Y of HR, LR = MATLAB bicubic of that Y in float
# (not rounded). Reference: shared weights MANIFEST (SRCNN 36.66 / 32.75 / 30.48; datasets MANIFEST bicubic).
REF_MATLAB = {2: 36.66, 3: 32.75, 4: 30.48}
REF_MATLAB_BICUBIC = {2: 33.66, 3: 30.39, 4: 28.42}
# Through the RGB path (SRCNN(scale=s) as network_g of BasicSR's SRModel: RGB output rounded to uint8, Y
# computed by the metric). Regression values measured with this implementation (also by
# `mcnet_basicsr/test.py -opt options/test_srcnn_x{s}.yml`), not an independent reference.
REG_RGB_PATH = {2: 36.6878, 3: 32.7647, 4: 30.4991}


@pytest.fixture(scope='module')
def official_srcnn_checkpoints(tmp_path_factory, convert_weights):
    if not (SHARED / 'weights').is_dir():
        pytest.skip(f'reference weights not found under {SHARED}')
    out_dir = tmp_path_factory.mktemp('pretrained_models')
    mats = [SHARED / 'weights' / 'srcnn_official_mat' / f'srcnn_955_imagenet_x{s}.mat' for s in (2, 3, 4)]
    paths = convert_weights.convert_weights('srcnn_mat', mats, out_dir)
    return {s: path for s, path in zip((2, 3, 4), paths)}


@pytest.mark.slow
@needs_shared
@pytest.mark.parametrize('scale', [2, 3, 4])
@torch.no_grad()
def test_official_srcnn_set5(scale, official_srcnn_checkpoints):
    assert Path(official_srcnn_checkpoints[scale]).name == f'srcnn_955_imagenet_x{scale}.pth'  # what the YAMLs load
    opt = {'type': 'SRCNN', 'padding_mode': 'replicate'}
    net = build_network(opt).eval()
    net_rgb = build_network({**opt, 'scale': scale}).eval()
    params = torch.load(official_srcnn_checkpoints[scale])['params']
    net.load_state_dict(params, strict=True)
    net_rgb.load_state_dict(params, strict=True)

    psnr = {'basicsr': [], 'matlab': [], 'matlab_bicubic': [], 'rgb_path': []}
    for _, hr in set5_images(scale):
        hr_float = hr.astype(np.float32) / 255.
        lr = np.clip(np.round(imresize_basicsr(hr_float, 1 / scale) * 255.), 0, 255).astype(np.uint8)
        lr_float = lr.astype(np.float32) / 255.
        # BasicSR protocol
        lr_y = torch.from_numpy(rgb2ycbcr(lr_float, y_only=True))[None, None]
        sr_y = net(imresize(lr_y, scale))[0, 0].numpy() * 255.
        psnr['basicsr'].append(y_psnr(sr_y, rgb2ycbcr(hr_float, y_only=True) * 255., scale))
        # MATLAB demo protocol
        hr_y_u8 = rgb2ycbcr(hr, y_only=True)  # uint8 in, uint8 (rounded) out, as MATLAB's rgb2ycbcr
        bicubic = imresize(imresize(torch.from_numpy(hr_y_u8 / 255.).float()[None, None], 1 / scale), scale)
        psnr['matlab'].append(y_psnr(net(bicubic)[0, 0].numpy() * 255., hr_y_u8, scale))
        psnr['matlab_bicubic'].append(y_psnr(bicubic[0, 0].numpy() * 255., hr_y_u8, scale))
        # RGB path, measured like BasicSR's SRModel.nondist_validation (BGR uint8 images, test_y_channel)
        sr_rgb = net_rgb(torch.from_numpy(lr_float.transpose(2, 0, 1).copy())[None])
        sr_bgr = tensor2img(sr_rgb)  # clamped, rounded, BGR uint8
        psnr['rgb_path'].append(calculate_psnr(sr_bgr, hr[..., ::-1], scale, input_order='HWC', test_y_channel=True))
    mean = {k: float(np.mean(v)) for k, v in psnr.items()}
    print(f'Set5 x{scale}:', {k: round(v, 4) for k, v in mean.items()})

    assert abs(mean['basicsr'] - REF_BASICSR[scale]) <= 0.01, mean
    assert abs(mean['matlab'] - REF_MATLAB[scale]) <= 0.01, mean
    assert abs(mean['matlab_bicubic'] - REF_MATLAB_BICUBIC[scale]) <= 0.01, mean
    assert abs(mean['rgb_path'] - REG_RGB_PATH[scale]) <= 0.005, mean


# Regression values (this implementation, BasicSR protocol): the MCNet authors' zero-padded SRCNN models.
# Their logs report 35.17 (TORCH) / 35.92 (PIL) at x2 under their own protocol.
REG_MCNET_SRCNN_X2 = {'TORCH': 34.541, 'PIL': 36.687}


@needs_shared
@pytest.mark.parametrize('kind', ['TORCH', 'PIL'])
@torch.no_grad()
def test_mcnet_authors_srcnn_x2(kind, tmp_path, convert_weights):
    src = SHARED / 'weights' / 'sr_mcnet_official' / 'srcnn_t91' / kind / 'srcnn_x2.pth'
    (target, ) = convert_weights.convert_weights('srcnn_pth', [str(src)], str(tmp_path))
    assert Path(target).name == f'srcnn_x2_{kind.lower()}.pth'
    net = build_network({'type': 'SRCNN', 'padding_mode': 'zeros'}).eval()
    net.load_state_dict(torch.load(target)['params'], strict=True)
    psnr = []
    for _, hr in set5_images(2):
        hr_float = hr.astype(np.float32) / 255.
        lr = np.clip(np.round(imresize_basicsr(hr_float, 1 / 2) * 255.), 0, 255).astype(np.float32) / 255.
        sr_y = net(imresize(torch.from_numpy(rgb2ycbcr(lr, y_only=True))[None, None], 2))[0, 0].numpy() * 255.
        psnr.append(y_psnr(sr_y, rgb2ycbcr(hr_float, y_only=True) * 255., 2))
    assert abs(np.mean(psnr) - REG_MCNET_SRCNN_X2[kind]) <= 0.005, np.mean(psnr)
