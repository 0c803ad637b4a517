"""The models this project trained and ships (``mcnet_basicsr/weights``), ready to run offline.

* ``srcnn_x{2,3,4}.pth``: our SRCNN 9-5-5 trained on T91 (the official MATLAB models are
  third-party and are not shipped);
* ``mcnet_srcnn_x{2,3,4}.pth``: the MCNet implicit layer (DnCNN6 + beta) trained on top of the
  official SRCNN, eps = 0;
* ``{rcan,rdn}_compact_x{2,3,4}.pth``: our compact RCAN / RDN (RGB in, RGB out) trained on T91 + BSD200,
  and ``mcnet_{rcan,rdn}_compact_x{2,3,4}.pth``: the layers trained on them with eps_rms at the uint8
  quantisation level (``options/{train,test}_mcnet_{rcan,rdn}_compact_x*.yml``);
* ``mcnet_{imdn,pan}_x{3,4}.pth``: the layers trained on the official IMDN / PAN, whose weights are third-party
  and not shipped (``scripts/fetch_assets.py imdn pan``): pass their path as ``backbone_path``.

``weights/README.md`` records the option file, command, iterations and Set5 score of each file.
"""
import os.path as osp

from ..archs.backbone_presets_arch import BACKBONE_PRESETS, backbone_options
from ..archs.mcnet_arch import MCNetArch
from ..ops import QUANTIZATION_EPS_RMS
from ..utils.checkpoint import load_network
from ..utils.paths import SHIPPED_WEIGHTS_DIR as WEIGHTS_DIR
from ..utils.registration import build_network

SCALES = (2, 3, 4)
# every backbone preset (mcnet_basicsr/archs/backbone_presets_arch.py) has layers here
BACKBONES = tuple(BACKBONE_PRESETS)
# backbones whose weights are third-party (a path must be given) and the scales their layers ship for
OFFICIAL_BACKBONES = {'imdn': (3, 4), 'pan': (3, 4)}
# Learned starts (MCNetArch's ``start``) fitted to the model built here, a shipped layer on the shipped backbone: the
# same fixed point in fewer iterations. The SRCNN layers were trained on the official SRCNN, whose starts
# (mcnet_srcnn_x<s>_start.pth, options/test_mcnet_start_srcnn_x*.yml) do not fit our SRCNN's outputs as well.
START_OPTIONS = {'depth': 8, 'num_feat': 64}
STARTS = {('srcnn', s): f'mcnet_srcnn_x{s}_mcnet_sr_start.pth' for s in SCALES}


def weight_path(name):
    path = osp.join(WEIGHTS_DIR, name)
    if not osp.isfile(path):
        raise FileNotFoundError(f'Shipped weights {path} are missing; reinstall mcnet_basicsr (package data).')
    return path


def _check_scale(scale):
    if scale not in SCALES:
        raise ValueError(f'Unsupported scale {scale!r}. Shipped models exist for scales {SCALES}.')


def default_eps_rms(backbone):
    """The consistency radius a shipped layer was trained with: 0 (exact) for SRCNN, the uint8 level else."""
    return None if backbone == 'srcnn' else QUANTIZATION_EPS_RMS


def build_pretrained_srcnn(scale, device='cpu'):
    """Our SRCNN at ``scale`` as an RGB LR -> RGB HR network (Y by SRCNN, CbCr bicubic)."""
    _check_scale(scale)
    net = build_network(backbone_options('srcnn', scale))
    load_network(net, weight_path(f'srcnn_x{scale}.pth'))
    return net.eval().to(device)


def build_pretrained_backbone(name, scale, device='cpu'):
    """One of our shipped backbones alone, as an RGB LR -> RGB HR network: 'srcnn', 'rcan_compact', 'rdn_compact'."""
    if name == 'srcnn':
        return build_pretrained_srcnn(scale, device)
    _check_scale(scale)
    if name in OFFICIAL_BACKBONES:
        raise ValueError(f'{name}: its official weights are third-party and not shipped; build the arch from '
                         f'backbone_options({name!r}, {scale}) and load them (scripts/fetch_assets.py {name}).')
    net = build_network(backbone_options(name, scale))
    load_network(net, weight_path(f'{name}_x{scale}.pth'))
    return net.eval().to(device)


def check_available(backbone, scale, backbone_path=None):
    """Raise ValueError (saying why) unless a layer ships for ``backbone`` at ``scale`` and its weights are known."""
    _check_scale(scale)
    if backbone not in BACKBONES:
        raise ValueError(f'Unknown backbone {backbone!r}; shipped ones: {", ".join(BACKBONES)}.')
    if backbone in OFFICIAL_BACKBONES:
        if scale not in OFFICIAL_BACKBONES[backbone]:
            raise ValueError(f'No MCNet layer ships for {backbone} at x{scale} (none that was trained gains over it: '
                             'docs/strong_backbones.md); layers exist for x3 and x4.')
        if backbone_path is None:
            raise ValueError(f'The official {backbone} weights are not shipped: give their path (the authors\' file '
                             f'or scripts/fetch_assets.py {backbone} output).')


def build_pretrained_mcnet(scale, device='cpu', backbone_path=None, eps=None, eps_rms=None, solver=None,
                           backbone='srcnn', start=True):
    """MCNet (shipped layer) on a shipped backbone at ``scale``.

    Args:
        scale (int): 2, 3 or 4.
        backbone_path (str | None): Backbone checkpoint of the same architecture; default the shipped one.
        eps, eps_rms (float | None): Consistency radius (default 0: exact). The compact backbones' layers were
            trained with ``eps_rms = default_eps_rms(backbone)``; pass it to use them as trained.
        solver (dict | None): Forward solver settings over the 'fast' preset (``mcnet_basicsr.deq.PRESETS``).
        backbone (str): 'srcnn' (our SRCNN on the upsampled Y), 'rcan_compact' or 'rdn_compact' (RGB), or
            'imdn' / 'pan' (the official weights, given as ``backbone_path``; layers for x3 and x4).
        start (bool): Begin each solve at the shipped learned start where one ships for this model (``STARTS``;
            not with another ``backbone_path``, to whose outputs it was not fitted). The fixed point is the same.
    """
    check_available(backbone, scale, backbone_path)
    start_file = STARTS.get((backbone, scale)) if start and backbone_path is None else None

    net = MCNetArch(
        backbone=backbone,
        backbone_path=backbone_path or weight_path(f'{backbone}_x{scale}.pth'),
        operator={'type': 'bicubic', 'scale': scale},
        eps=eps,
        eps_rms=eps_rms,
        solver={'forward': dict({'preset': 'fast'}, **(solver or {}))},
        start=START_OPTIONS if start_file else None,
        start_path=weight_path(start_file) if start_file else None)
    load_network(net, weight_path(f'mcnet_{backbone}_x{scale}.pth'))  # a layer file: the start keeps its weights
    return net.eval().to(device)
