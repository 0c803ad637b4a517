"""Backbone presets (mcnet_basicsr/archs/backbone_presets_arch.py): each preset is exactly the arch of the
checkpoints that go with it (strict loads of the shipped backbones and layers), and MCNetArch, TVTV and plain
option files build it by name."""
from pathlib import Path

import pytest
import torch
from basicsr.archs import build_network

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from mcnet_basicsr.archs.backbone_presets_arch import BACKBONE_PRESETS, backbone_options, resolve_backbone
from mcnet_basicsr.archs.baselines_arch import TVTV
from mcnet_basicsr.archs.mcnet_arch import MCNetArch
from mcnet_basicsr.zoo import pretrained
from mcnet_basicsr.zoo.cards import model_card

WEIGHTS = Path(__file__).resolve().parents[1] / 'mcnet_basicsr' / 'weights'
# shipped layers per preset and scale (IMDN / PAN: the official backbones' weights are third-party)
LAYERS = sorted(p.stem for p in WEIGHTS.glob('mcnet_*_x*.pth') if not p.stem.endswith('_start'))  # *_start: a start


def _params(path):
    return torch.load(path, map_location='cpu', weights_only=True)['params']


@pytest.mark.parametrize('scale', [2, 3, 4])
@pytest.mark.parametrize('name', ['srcnn', 'rcan_compact', 'rdn_compact'])
def test_preset_is_the_layout_of_the_shipped_backbone(name, scale):
    state = _params(WEIGHTS / f'{name}_x{scale}.pth')
    net = build_network(backbone_options(name, scale))
    assert {k: tuple(v.shape) for k, v in net.state_dict().items()} == {k: tuple(v.shape) for k, v in state.items()}
    net.load_state_dict(state, strict=True)
    # a plain option file's spelling builds the same arch
    plain = build_network({'type': 'BackbonePreset', 'preset': name, 'scale': scale})
    assert type(plain) is type(net)
    plain.load_state_dict(state, strict=True)


@pytest.mark.parametrize('layer', LAYERS)
def test_shipped_layers_load_strictly_on_their_preset(layer):
    """A layer records the backbone type and scale it was trained on; loading checks that record."""
    name, scale = layer[len('mcnet_'):].rsplit('_x', 1)
    # mcnet_<backbone>_{kernels,resizers}_x<s>: trained on blur kernels / on resizers
    name, scale = name.removesuffix('_kernels').removesuffix('_resizers'), int(scale)
    backbone_path = WEIGHTS / f'{name}_x{scale}.pth'
    state = _params(WEIGHTS / f'{layer}.pth')
    if pretrained.untrained_layer_options(name) is not None:  # the layer's settings are its card's data
        family = next(f for f in ('kernels', 'resizers')
                      if (model_card(name, scale, f) or {}).get('layer') == f'{layer}.pth')
        net = pretrained.build_pretrained_mcnet(scale, backbone=name, family=family)
    else:
        net = MCNetArch(backbone={'net': name, 'path': str(backbone_path) if backbone_path.is_file() else None},
                        operator={'type': 'bicubic', 'scale': scale},
                        **pretrained.layer_file_options(state))  # beta per noise level, a hyper-network
    assert (net.backbone_input, net.backbone_channels) == (BACKBONE_PRESETS[name]['input'],
                                                           BACKBONE_PRESETS[name]['channels'])
    result = net.load_state_dict(state, strict=True)
    assert not result.missing_keys and not result.unexpected_keys


def test_a_preset_takes_the_operators_scale_and_feed():
    lr = torch.rand(1, 3, 6, 5)
    for cls, extra in ((MCNetArch, {'settings': {'solver': {'forward': {'max_iter': 2}}}}), (TVTV, {'iterations': 2})):
        net = cls(backbone='srcnn', operator={'type': 'bicubic', 'scale': 3}, **extra).eval()
        assert net.backbone.scale is None and (net.backbone_input, net.backbone_channels) == ('upsampled', 1)
        net = cls(backbone='pan', operator={'type': 'bicubic', 'scale': 3}, **extra).eval()
        assert net.backbone.upscale == 3 and (net.backbone_input, net.backbone_channels) == ('lr', 3)
        with torch.no_grad():
            assert net(lr).shape == (1, 3, 18, 15)


def test_a_dict_is_used_as_given():
    opts = {'type': 'RCAN', 'num_in_ch': 3, 'num_out_ch': 3, 'num_feat': 8, 'num_group': 1, 'num_block': 1,
            'squeeze_factor': 4, 'upscale': 2}
    assert resolve_backbone(opts, 2) == (opts, 'lr', 3)
    assert resolve_backbone({'type': 'SRCNN'}, 2, 'upsampled', 1) == ({'type': 'SRCNN'}, 'upsampled', 1)


def test_bad_presets_are_refused():
    with pytest.raises(ValueError, match="Unknown backbone preset 'rcan'. Supported ones are: srcnn, rcan_compact"):
        backbone_options('rcan', 2)
    with pytest.raises(ValueError, match="'srcnn' preset is fed with backbone.input = 'upsampled', got 'lr'; "
                                         "remove backbone.input"):
        MCNetArch(backbone={'net': 'srcnn', 'input': 'lr'}, operator={'type': 'bicubic', 'scale': 2})
    with pytest.raises(ValueError, match="'srcnn' preset is fed with backbone.channels = 1, got 3"):
        TVTV(backbone={'net': 'srcnn', 'channels': 3}, operator={'type': 'bicubic', 'scale': 2})
    with pytest.raises(ValueError, match='backbone.channels = 3, got 1'):
        resolve_backbone('imdn', 2, backbone_channels=1)
    with pytest.raises(ValueError, match='preset name or a network_g-style dict'):
        resolve_backbone(['imdn'], 2)


@pytest.mark.parametrize('preset, arch', [('ffdnet_pnp', 'FFDNetPnP'), ('ffdnet_hqs', 'FFDNetHQS')])
def test_a_preset_told_the_operator_takes_no_scale(preset, arch):
    """``ffdnet_pnp`` (FFDNetPnP) and ``ffdnet_hqs`` (FFDNetHQS) take no scale option (the operator or kernel and scale
    they are told carry it): the same arch at every scale, the shipped colour FFDNet's layout; in MCNetArch they are
    fed the RGB LR."""
    from mcnet_basicsr.archs import ffdnet_arch
    assert BACKBONE_PRESETS[preset]['scale_option'] is None
    assert all(backbone_options(preset, s) == {'type': arch} for s in (2, 3, 4))
    assert backbone_options('pan', 3)['upscale'] == 3 and backbone_options('srcnn', 3)['scale'] == 3
    net = build_network({'type': 'BackbonePreset', 'preset': preset, 'scale': 4})
    assert type(net) is getattr(ffdnet_arch, arch)
    net.load_state_dict(_params(WEIGHTS / 'ffdnet_rgb.pth'), strict=True)
    assert resolve_backbone(preset, 3) == ({'type': arch}, 'lr', 3)


@pytest.mark.parametrize('scale', [2, 3, 4])
def test_the_unfolded_anchor_preset_is_the_layout_of_its_shipped_file(scale):
    """``ffdnet_unfolded16`` is FFDNetUnfolded at 16 iterations, told the kernel and scale (no scale option); its
    file of each scale (half precision, to halve its size) loads strictly and runs in float32 with the file's values;
    untrained it would be FFDNetHQS, so the file must have moved the hyper-network off its zero start."""
    from mcnet_basicsr.archs.ffdnet_arch import FFDNetUnfolded
    assert backbone_options('ffdnet_unfolded16', scale) == {'type': 'FFDNetUnfolded', 'n_iter': 16}
    state = _params(WEIGHTS / f'ffdnet_unfolded16_x{scale}.pth')
    assert {v.dtype for v in state.values() if v.is_floating_point()} == {torch.float16}
    net = pretrained.build_pretrained_backbone('ffdnet_unfolded16', scale)
    assert type(net) is FFDNetUnfolded and net.n_iter == 16
    mine = net.state_dict()
    assert set(mine) == set(state)
    assert all(mine[k].dtype == torch.float32 and torch.equal(mine[k], state[k].float()) for k in state)
    assert bool((net.hyper[-1].weight != 0).any())
