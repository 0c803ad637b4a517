"""The models this project trained and ships (``mcnet_basicsr/weights``), ready to run offline.

Their cards, one per backbone and scale, are ``models.yml`` beside this module (:data:`MODELS`, :func:`model_card`):
the files, the consistency radius, ``mcnet-sr``'s default tolerance and extrapolation, the learned start and the
Set5/Set14 scores of each.

* ``srcnn_x{2,3,4}.pth``: our SRCNN 9-5-5 trained on T91 (the official MATLAB models are
  third-party and are not shipped);
* ``mcnet_srcnn_x{2,3,4}.pth``: the MCNet implicit layer (DnCNN6 + beta) trained on top of the
  official SRCNN, eps = 0;
* ``{rcan,rdn}_compact_x{2,3,4}.pth``: our compact RCAN / RDN (RGB in, RGB out) trained on T91 + BSD200,
  and ``mcnet_{rcan,rdn}_compact_x{2,3,4}.pth``: the layers trained on them with eps_rms at the uint8
  quantisation level (``options/{train,test}_mcnet_{rcan,rdn}_compact_x*.yml``);
* ``mcnet_{imdn,pan}_x{3,4}.pth``: the layers trained on the official IMDN / PAN, whose weights are third-party
  and not shipped (``scripts/fetch_assets.py imdn pan``): pass their path as ``backbone_path``;
* ``mcnet_{imdn,pan}_kernels_x{2,3,4}.pth``: layers on the official IMDN / PAN trained for LR made by blur kernels
  and noise, R, G and B each consistent (``family='kernels'``; ``docs/degradations.md``);
* ``mcnet_imdn_resizers_x4.pth``, ``mcnet_pan_resizers_x{2,3,4}.pth``: layers on them trained for LR made by a mix
  of library resizers (``family='resizers'``). The cards' ``degradations`` say which layer mcnet-sr runs for which
  resizer (for OpenCV's: the layers trained on blur kernels);
* ``ffdnet_rgb.pth``: our colour FFDNet, both the backbones ``ffdnet_hqs`` (FFDNetHQS: half-quadratic splitting told
  the kernel; ``family='kernels'``) and ``ffdnet_pnp`` (FFDNetPnP: plug-and-play projections told the operator;
  ``family='kernels'`` or ``'resizers'``) and the prior of their untrained layer, whose settings are their cards'
  ``untrained_layer`` (FFDNetPnP's layer);
* ``mcnet_ffdnet_hqs_x{2,3,4}.pth``: HQS's layers trained for LR made by blur kernels and noise, which its cards name;
* ``ffdnet_unfolded16_x{2,3,4}.pth``: the unfolded anchor (FFDNetHQS unfolded to 16 iterations and trained end to end,
  told the kernel, the scale and the noise; half precision), the backbone ``ffdnet_unfolded16`` of each scale, around
  which its card's untrained layer runs (``mcnet-sr``'s default for LR made by blur kernels);
* ``ffdnet_unfolded16_mix_x{2,3,4}.pth``: that anchor trained further on blur kernels and resizers, the backbone of
  ``ffdnet_unfolded16``'s layer for resizers (``family='resizers'``: the same untrained layer, its dual in the null
  space of the resizer), which ``mcnet-sr --degradation`` runs for the resizers its cards route.

``weights/README.md`` records the option file, command, iterations and Set5 score of each file.
"""
import os.path as osp
from copy import deepcopy

from ..archs.backbone_presets_arch import backbone_options
from ..archs.mcnet_arch import MCNetArch
from ..ops import QUANTIZATION_EPS_RMS
from ..utils.checkpoint import load_network, load_state_dict
from ..utils.paths import SHIPPED_WEIGHTS_DIR as WEIGHTS_DIR
from ..utils.registration import build_network
from .cards import (BACKBONES, MODELS, SCALES, backbone_file, backbone_name,  # noqa: F401  (also theirs)
                    describe_layer, layer_file, model_card, untrained_layer)

# the radius names a card may give (eps_rms); None is exact consistency
EPS_RMS = {None: None, 'quantization': QUANTIZATION_EPS_RMS}
# the learned start network of every shipped start (MCNetArch's ``start`` options)
START_OPTIONS = {'depth': 8, 'num_feat': 64}
# the MCNetArch options a card's untrained_layer may give
UNTRAINED_LAYER_KEYS = {'channels', 'rho', 'beta', 'denoiser'}


def weight_path(name):
    path = osp.join(WEIGHTS_DIR, name)
    if not osp.isfile(path):
        raise FileNotFoundError(f'Shipped weights {path} are missing; reinstall mcnet_basicsr (package data).')
    return path


def _check_scale(scale):
    if scale not in SCALES:
        raise ValueError(f'Unsupported scale {scale!r}. Shipped models exist for scales {SCALES}.')


def default_eps_rms(backbone):
    """The consistency radius per LR pixel the shipped layers of ``backbone`` were trained with (their cards'
    ``eps_rms``): None (exact, eps = 0) for SRCNN, the uint8 level for the others."""
    return EPS_RMS[MODELS['backbones'][backbone]['eps_rms']]


def build_pretrained_srcnn(scale, device='cpu'):
    """Our SRCNN at ``scale`` as an RGB LR -> RGB HR network (Y by SRCNN, CbCr bicubic)."""
    return build_pretrained_backbone('srcnn', scale, device)


def build_pretrained_backbone(name, scale, device='cpu', family='bicubic'):
    """One of our shipped backbones alone, as an RGB LR -> RGB HR network: 'srcnn', 'rcan_compact', 'rdn_compact', or
    'ffdnet_pnp' (told the operator and the noise per call, ``net(lr, operator, sigma)``), 'ffdnet_hqs' or
    'ffdnet_unfolded16' (told the kernel, the scale and the noise, ``net(lr, kernel, scale, sigma)``); the weights
    that its layers of ``family`` run on (a family's card may name its own, as ffdnet_unfolded16's resizers do)."""
    _check_scale(scale)
    if name in BACKBONES and _official_weights(name):
        raise ValueError(f'{name}: its official weights are third-party and not shipped; build the arch from '
                         f'backbone_options({name!r}, {scale}) and load them (scripts/fetch_assets.py {name}).')
    net = build_network(backbone_options(name, scale))
    path = backbone_file(name, scale, family) if name in BACKBONES else None
    if path is None:
        raise ValueError(f'No {name} backbone ships for x{scale}; shipped backbones: {", ".join(BACKBONES)}.')
    load_network(net, weight_path(path))
    return net.eval().to(device)


def _official_weights(backbone):
    """Whether ``backbone``'s layers run on its authors' third-party weights (their cards' ``backbone: official``)."""
    return any(card['backbone'] == 'official' for card in MODELS['backbones'][backbone].get('models', {}).values())


def layer_file_options(state):
    """MCNetArch's options that a layer checkpoint's entries fix (``state`` its state dict): its beta per noise level
    (``log_beta_slope``) and its hyper-network and width (``hyper.*``)."""
    options = {'beta': {'noise': 'log_beta_slope' in state}}
    if 'hyper.net.0.weight' in state:
        options['hyper'] = {'hidden': int(state['hyper.net.0.weight'].shape[0])}
    return options


def untrained_layer_options(backbone):
    """MCNetArch's options of ``backbone``'s untrained layer (its card's ``untrained_layer``), with the paths of the
    shipped files it names; None where its layers are files."""
    layer = untrained_layer(backbone)
    if layer is None:
        return None
    layer = deepcopy(layer)
    layer['denoiser']['path'] = weight_path(layer['denoiser']['path'])
    return layer


# what each family of layers was trained for (as errors and mcnet-sr's first line name it), and the mcnet-sr option
# that selects the families other than the tables' one
TRAINED_FOR = {'bicubic': 'MATLAB-bicubic LR', 'kernels': 'LR made by blur kernels and noise',
               'resizers': 'LR made by resizers'}
_FAMILY_OPTION = {'kernels': '--kernel', 'resizers': '--degradation'}


def check_available(backbone, scale, backbone_path=None, family='bicubic'):
    """Raise ValueError (saying why) unless a layer of ``family`` ships for ``backbone`` at ``scale`` and its weights
    are known."""
    _check_scale(scale)
    if backbone not in BACKBONES:
        raise ValueError(f'Unknown backbone {backbone!r}; shipped ones: {", ".join(BACKBONES)}.')
    entry = MODELS['backbones'][backbone]
    if family == 'bicubic' and untrained_layer(backbone) is not None:
        raise ValueError(f"{backbone}'s layer is not trained for one kind of LR: it serves any operator, given per "
                         "call (MATLAB bicubic included); build it with family 'kernels' or 'resizers'.")
    if family != 'bicubic' and model_card(backbone, scale, family) is None:
        shipped = ', '.join(f'{b} x{s}' for b, e in MODELS['backbones'].items() for s in e.get(family, {}))
        raise ValueError(f'No MCNet layer trained for {TRAINED_FOR[family]} ships for {backbone} at x{scale}; '
                         f'layers exist for {shipped} (docs/degradations.md).')
    if family == 'bicubic' and model_card(backbone, scale) is None:
        shipped = ' and '.join(f'x{s}' for s in entry['models'])
        others = ''.join(f', and for {TRAINED_FOR[f]} ({flag}) for {", ".join(f"x{s}" for s in entry[f])}'
                         for f, flag in _FAMILY_OPTION.items() if entry.get(f))
        raise ValueError(f'No MCNet layer ships for {backbone} at x{scale} (none that was trained gains over it: '
                         f'docs/strong_backbones.md); layers exist for {shipped}{others}.')
    if _official_weights(backbone) and backbone_path is None:
        raise ValueError(f'The official {backbone} weights are not shipped: give their path (the authors\' file '
                         f'or scripts/fetch_assets.py {backbone} output).')


def build_pretrained_mcnet(scale, device='cpu', backbone_path=None, eps=None, eps_rms=None, solver=None,
                           backbone='srcnn', start=True, channels=None, family='bicubic', layer=True,
                           file_options=None):
    """MCNet (shipped layer) on a shipped backbone at ``scale``.

    Args:
        scale (int): 2, 3 or 4.
        backbone_path (str | None): Backbone checkpoint of the same architecture; default the shipped one.
        eps, eps_rms (float | None): Consistency radius (default 0: exact). The compact backbones' layers were
            trained with ``eps_rms = default_eps_rms(backbone)``; pass it to use them as trained.
        solver (dict | None): Forward solver settings over the 'fast' preset (``mcnet_basicsr.deq.PRESETS``).
        backbone (str): 'srcnn' (our SRCNN on the upsampled Y), 'rcan_compact' or 'rdn_compact' (RGB),
            'imdn' / 'pan' (the official weights, given as ``backbone_path``; layers for x3 and x4), or 'ffdnet_pnp' /
            'ffdnet_hqs' (FFDNetPnP / FFDNetHQS and their untrained layer with the same colour FFDNet as prior, beta 3,
            or the trained file a card names: ``family`` 'kernels' or, for PnP, 'resizers'; the operator given per
            call), or 'ffdnet_unfolded16' (the unfolded anchor of the scale and that untrained layer, its beta growing
            with the noise; ``family`` 'kernels', or 'resizers': around the anchor its card names, the dual in the
            null space).
        start (bool): Begin each solve at the shipped learned start where one ships for this model (its card's
            ``start``; not with another ``backbone_path``, to whose outputs it was not fitted). The fixed point is the
            same.
        channels (str | None): 'y' (the layers as trained) or 'rgb' (each of R, G, B consistent; MCNetArch's option).
            Default: None, the untrained layer's (its card's; 'rgb' for ffdnet_pnp and ffdnet_hqs), else 'y'.
        family (str): 'bicubic' (the layers of the tables); 'kernels': the backbone's layer trained for LR made by
            blur kernels and noise instead (the cards' ``kernels``; trained with ``channels='rgb'``): give it the
            operator and the noise level per call (``run(lr, operator, noise_sigma)``), as its beta depends on the
            noise; 'resizers': its layer trained for LR made by a mix of resizers (the cards' ``resizers``; Y
            consistent in training): give it the resizer as the operator.
        layer (bool): load the shipped layer; False builds the model for a layer the caller loads, with the options
            its file fixes (``file_options``, :func:`layer_file_options`). A card of a backbone with an untrained layer
            builds it from its card's settings, and loads the card's ``layer`` file over them where it names one.
    """
    check_available(backbone, scale, backbone_path, family)
    card = model_card(backbone, scale, family)
    start_file = card.get('start') if start and backbone_path is None else None
    layer_options = untrained_layer_options(backbone) or {}  # a layer without a file: MCNetArch's options as data
    unknown = sorted(set(layer_options) - UNTRAINED_LAYER_KEYS)
    if unknown:
        raise ValueError(f'{backbone}: unknown untrained_layer option(s) {unknown} in its model card; allowed are '
                         f'{sorted(UNTRAINED_LAYER_KEYS)}.')
    layer_channels = layer_options.pop('channels', 'y')
    shipped = layer_file(backbone, scale, family) if layer else None
    layer_path = weight_path(shipped) if shipped else None
    file_options = layer_file_options(load_state_dict(layer_path)) if layer_path else dict(file_options or {})
    beta = dict(layer_options.pop('beta', {}), **file_options.pop('beta', {}))
    if untrained_layer(backbone) is not None and 'dual' in card:  # this family's map (docs/MCNetArch.md)
        layer_options['dual'] = card['dual']
    net = MCNetArch(
        backbone={'net': backbone, 'path': backbone_path or weight_path(backbone_file(backbone, scale, family))},
        operator={'type': 'bicubic', 'scale': scale},
        channels=channels or layer_channels,
        eps=eps,
        eps_rms=eps_rms,
        beta=beta,
        start=dict(START_OPTIONS, path=weight_path(start_file)) if start_file else None,
        settings={'solver': {'forward': dict({'preset': 'fast'}, **(solver or {}))}},
        **layer_options, **file_options)  # an untrained layer's rho and denoiser; a file's hyper-network
    if layer_path:
        load_network(net, layer_path)  # a layer file: the start keeps its weights
    return net.eval().to(device)


def model_zoo_table():
    """The model cards as a Markdown table (str): backbone, scale, the backbone weights of the scores, Set5 and
    Set14 Y-PSNR / SSIM; one row per shipped model. The README's model-zoo table is this text."""
    rows = ['| model (`mcnet-sr --backbone`) | scale | backbone weights of the scores | Set5 PSNR / SSIM '
            '| Set14 PSNR / SSIM |', '|---|---|---|---|---|']
    for key, entry in MODELS['backbones'].items():
        for scale, card in entry.get('models', {}).items():
            scores = [f'{psnr:.2f} / {ssim:.4f}' for psnr, ssim in (card['set5'], card['set14'])]
            rows.append(f"| MCNet + {entry['name']} (`{key}`) | x{scale} | {entry['scored_on']} | "
                        f'{scores[0]} | {scores[1]} |')
    return '\n'.join(rows) + '\n'


def kernel_layers_table():
    """The cards of the layers trained on blur kernels (the cards' ``kernels``) as a Markdown table (str): backbone,
    scale, file, and the mean RGB PSNR on USRNet's 12 kernels (CBSD68, noise-free; docs/degradations_kernels.md,
    Table K)."""
    rows = ['| model (`mcnet-sr --backbone ... --kernel`) | scale | layer | CBSD68, 12 kernels, PSNR (RGB) |',
            '|---|---|---|---|']
    for key, entry in MODELS['backbones'].items():
        for scale, card in entry.get('kernels', {}).items():
            layer = describe_layer(key, scale, 'kernels', quote=lambda name: f'`{name}`')
            score = '-' if card['cbsd68'] is None else f"{card['cbsd68']:.2f}"  # - : not measured yet
            rows.append(f"| MCNet + {entry['name']} (`{key}`) | x{scale} | {layer} | {score} |")
    return '\n'.join(rows) + '\n'


def resizer_layers_table():
    """The layers mcnet-sr runs for LR made by resizers (the cards with ``degradations``: those trained on resizers
    and on blur kernels) as a Markdown table (str): backbone, scale, file, what it was trained for, the resizers
    mcnet-sr runs it for and its Y-PSNR on CBSD68 LR made by each (docs/degradations_resizers.md, Table R)."""
    rows = ['| model (`mcnet-sr --backbone ... --degradation`) | scale | layer | trained for | CBSD68 PSNR (Y) per '
            'resizer |', '|---|---|---|---|---|']
    for key, entry in MODELS['backbones'].items():
        for scale in sorted({s for f in ('kernels', 'resizers') for s in entry.get(MODELS['families'][f], {})}):
            for family in ('resizers', 'kernels'):
                card = model_card(key, scale, family) or {}
                if card.get('degradations'):
                    scores = ', '.join(f'`{name}` {psnr:.2f}' for name, psnr in card['degradations'].items())
                    layer = describe_layer(key, scale, family, quote=lambda name: f'`{name}`')
                    rows.append(f"| MCNet + {entry['name']} (`{key}`) | x{scale} | {layer} | "
                                f'{TRAINED_FOR[family]} | {scores} |')
    return '\n'.join(rows) + '\n'
