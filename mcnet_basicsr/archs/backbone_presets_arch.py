"""The backbones this project ships layers for, by name: one home for their architecture options.

========================  ================================================================  =====================
preset                    architecture                                                      fed to the layer
========================  ================================================================  =====================
``srcnn``                 SRCNN 9-5-5, replicate padding (the official MATLAB release; the  upsampled LR Y, Y out
                          defaults of :class:`SRCNN`)
``rcan_compact``          our compact RCAN: 4 groups x 6 blocks, 32 features, squeeze 8     RGB LR, RGB out
``rdn_compact``           our compact RDN: 6 blocks x 4 layers, 32 features, growth 24      RGB LR, RGB out
``imdn``                  the official IMDN (the defaults of :class:`IMDN`)                 RGB LR, RGB out
``pan``                   the official PAN (the defaults of :class:`PAN`)                  RGB LR, RGB out
``ffdnet_pnp``            plug-and-play projections with the colour FFDNet (the defaults    RGB LR, RGB out; told
                          of :class:`FFDNetPnP`); no scale option: the operator carries it  the operator
``ffdnet_hqs``            half-quadratic splitting with the colour FFDNet (the defaults of  RGB LR, RGB out; told
                          :class:`FFDNetHQS`); no scale option: told the kernel and scale   the kernel
``ffdnet_unfolded16``     FFDNetHQS unfolded to 16 iterations and trained end to end        RGB LR, RGB out; told
                          (:class:`FFDNetUnfolded`); weights per scale, told the kernel     the kernel
========================  ================================================================  =====================

Where to use them:

* ``MCNetArch`` / ``TVTV``: ``backbone: rcan_compact`` (the scale is the operator's; ``backbone.input`` and
  ``backbone.channels`` default to the preset's);
* a plain option file (the backbone alone, BasicSR's ``SRModel``)::

      network_g:
        type: BackbonePreset
        preset: rcan_compact
        scale: 2

* Python: ``build_network(backbone_options('imdn', 4))``.

Any other backbone is given as a full ``network_g``-style dict, e.g. ``{type: RCAN, num_feat: 64, ...}``.
"""
from copy import deepcopy

from mcnet_basicsr.utils.registration import ARCH_REGISTRY, build_network

# per preset: the arch options less the scale, the arch's option that takes the scale (None: it takes none, the
# operator it is told carries it), and how MCNet's layer feeds it ('lr' RGB or 'upsampled' Y)
BACKBONE_PRESETS = {
    'srcnn': {'arch': {'type': 'SRCNN'}, 'scale_option': 'scale', 'input': 'upsampled', 'channels': 1},
    'rcan_compact': {'arch': {'type': 'RCAN', 'num_in_ch': 3, 'num_out_ch': 3, 'num_feat': 32, 'num_group': 4,
                              'num_block': 6, 'squeeze_factor': 8}, 'scale_option': 'upscale', 'input': 'lr',
                     'channels': 3},
    'rdn_compact': {'arch': {'type': 'RDN', 'num_feat': 32, 'growth': 24, 'num_block': 6, 'num_layer': 4},
                    'scale_option': 'upscale', 'input': 'lr', 'channels': 3},
    'imdn': {'arch': {'type': 'IMDN'}, 'scale_option': 'upscale', 'input': 'lr', 'channels': 3},
    'pan': {'arch': {'type': 'PAN'}, 'scale_option': 'upscale', 'input': 'lr', 'channels': 3},
    'ffdnet_pnp': {'arch': {'type': 'FFDNetPnP'}, 'scale_option': None, 'input': 'lr', 'channels': 3},
    'ffdnet_hqs': {'arch': {'type': 'FFDNetHQS'}, 'scale_option': None, 'input': 'lr', 'channels': 3},
    'ffdnet_unfolded16': {'arch': {'type': 'FFDNetUnfolded', 'n_iter': 16}, 'scale_option': None, 'input': 'lr',
                          'channels': 3},
}


def _preset(name):
    if name not in BACKBONE_PRESETS:
        raise ValueError(f'Unknown backbone preset {name!r}. Supported ones are: {", ".join(BACKBONE_PRESETS)}; '
                         'give any other backbone as a network_g-style dict ({type: ..., ...}).')
    return BACKBONE_PRESETS[name]


def backbone_options(name, scale):
    """``network_g`` options of preset ``name`` alone at ``scale``: RGB LR in, RGB HR out (a preset without a scale
    option, told the operator, is the same at every scale)."""
    preset = _preset(name)
    # SRCNN works on the upsampled Y; given a scale it runs the whole classic RGB pipeline itself
    key = preset['scale_option']
    return dict(deepcopy(preset['arch']), **({} if key is None else {key: scale}))


def backbone_type(name):
    """The registered arch type of preset ``name``, e.g. 'RCAN'."""
    return _preset(name)['arch']['type']


def resolve_backbone(backbone, scale, backbone_input=None, backbone_channels=None):
    """(arch options, input, channels) of MCNet's / TV-TV's ``backbone`` option: its ``net``, ``input`` and
    ``channels``.

    ``backbone``: a preset name, built at ``scale`` and fed as the preset says, or a ``network_g``-style dict,
    fed as given ('lr' and 3 when not given). An input or channel count that contradicts a preset is an error.
    """
    if isinstance(backbone, dict):
        return (backbone, 'lr' if backbone_input is None else backbone_input,
                3 if backbone_channels is None else backbone_channels)
    if not isinstance(backbone, str):
        raise ValueError(f'backbone must be a preset name or a network_g-style dict, got {backbone!r}.')
    preset = _preset(backbone)
    for option, given, wanted in (('backbone.input', backbone_input, preset['input']),
                                  ('backbone.channels', backbone_channels, preset['channels'])):
        if given is not None and given != wanted:
            raise ValueError(f'The {backbone!r} preset is fed with {option} = {wanted!r}, got {given!r}; '
                             f'remove {option} or give network options as backbone.net.')
    arch = backbone_options(backbone, scale) if preset['input'] == 'lr' else deepcopy(preset['arch'])
    return arch, preset['input'], preset['channels']


@ARCH_REGISTRY.register()
def BackbonePreset(preset, scale):  # noqa: N802  (an arch type, named as BasicSR's archs are)
    """A preset backbone alone, for plain option files: ``{type: BackbonePreset, preset: rcan_compact, scale: 2}``.

    Builds the preset's own arch (an ``RCAN``, ``IMDN``, ...), so checkpoints keep that arch's layout.

    Args:
        preset (str): One of ``BACKBONE_PRESETS``.
        scale (int): Upsampling factor.
    """
    return build_network(backbone_options(preset, scale))
