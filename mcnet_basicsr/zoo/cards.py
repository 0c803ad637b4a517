"""The shipped models' cards (``models.yml`` beside this module), with PyYAML alone: what ``mcnet-sr``'s options and
:mod:`.pretrained` read their defaults, files and families from."""
from ..package_data import read_model_cards

MODELS = read_model_cards()  # the model cards (see models.yml for the keys)
SCALES = tuple(sorted(MODELS['default']['bicubic']))
BACKBONES = tuple(MODELS['backbones'])
BICUBIC = 'matlab-bicubic'  # the resizer of the bicubic family: the LR of the tables


def lr_family(degradation=None, kernel=None):
    """The family of LR made by ``degradation`` (a resizer name; None: MATLAB bicubic) or a blur ``kernel``: 'kernels',
    'resizers' or 'bicubic' (the keys of the cards' ``default`` and ``families``)."""
    if kernel is not None:
        return 'kernels'
    return 'bicubic' if degradation in (None, BICUBIC) else 'resizers'


def default_backbone(scale, degradation=None, kernel=None):
    """The model ``mcnet-sr`` runs without ``--backbone`` for LR made by ``degradation`` or ``kernel`` (as
    :func:`lr_family` reads them) at ``scale``: the cards' ``default`` of that family, a backbone or a list of them
    in order of preference: the first whose card routes ``degradation`` (:func:`routed_family`), else the last."""
    choice = MODELS['default'][lr_family(degradation, kernel)][scale]
    if isinstance(choice, str):
        return choice
    return next((b for b in choice if routed_family(b, scale, degradation)), choice[-1])


def untrained_layer(backbone):
    """The MCNetArch options of ``backbone``'s layer that is not trained (its card's ``untrained_layer``: a dict, file
    names as the card gives them), or None where its layers are files."""
    return MODELS['backbones'][backbone].get('untrained_layer')


def model_card(backbone, scale, family='bicubic'):
    """The card of the shipped model ``backbone`` x``scale`` (a dict, see models.yml), or None if none ships;
    ``family`` 'kernels' / 'resizers': of its layer trained for LR made by blur kernels and noise / by resizers
    (the cards' sections ``kernels`` / ``resizers``)."""
    return MODELS['backbones'].get(backbone, {}).get(MODELS['families'][family], {}).get(scale)


def backbone_file(backbone, scale, family='bicubic'):
    """The shipped backbone checkpoint (a file name) that the layers of ``family`` run on at ``scale``: the
    backbone's own where one serves every scale, else the one that family's card names, else the one its
    MATLAB-bicubic card names (the layers of every family at that scale run on it), else its kernel card's
    ('official': the authors' weights, not shipped; None where none ships)."""
    names = [(model_card(backbone, scale, f) or {}).get('backbone') for f in (family, 'bicubic', 'kernels')]
    return MODELS['backbones'][backbone].get('backbone') or next((n for n in names if n), None)


def layer_file(backbone, scale, family='bicubic'):
    """The shipped layer file of the card ``backbone`` x``scale`` of ``family`` (its ``layer``), or None: no card,
    or a backbone's untrained layer serves it."""
    return (model_card(backbone, scale, family) or {}).get('layer')


def describe_layer(backbone, scale, family='bicubic', quote=str):
    """What the layer of ``family`` that ships for ``backbone`` x``scale`` is, in words: its file, or for an untrained
    layer its prior and beta, e.g. 'FFDNet prior ffdnet_rgb.pth, beta 3 (untrained)', then its card's dual and
    backbone file where they are the family's own (file names through ``quote``)."""
    layer = untrained_layer(backbone)
    if layer is None or layer_file(backbone, scale, family):
        return quote(layer_file(backbone, scale, family))
    denoiser, beta, card = layer['denoiser'], layer['beta'], model_card(backbone, scale, family) or {}
    growth = ' growing with the noise' if beta.get('noise') else ''
    text = f"{denoiser['arch']} prior {quote(denoiser['path'])}, beta {beta['init']:g}{growth} (untrained)"
    if card.get('dual', 'full') != 'full':
        text += f", {card['dual'].replace('_', '-')} dual"
    own = backbone_file(backbone, scale, family)
    if own != backbone_file(backbone, scale):
        text += f', around {quote(own)}'
    return text


def backbone_name(backbone):
    """How ``mcnet-sr`` calls a shipped backbone ('compact RCAN', ...)."""
    return MODELS['backbones'][backbone]['name']


def layer_family(backbone, scale, degradation=None, kernel=None):
    """The family of the layer mcnet-sr runs for LR made by ``degradation`` (a resizer name) or a blur ``kernel``:
    'kernels' with a kernel where such a layer ships; for a resizer, the family whose card lists it in
    ``degradations`` (the resizers on which that layer is the best shipped one: docs/degradations.md, Table R), else
    'bicubic'. An untrained layer serves any operator: 'kernels' with a kernel, else 'resizers' (MATLAB bicubic
    included)."""
    if untrained_layer(backbone) is not None:
        return 'kernels' if kernel is not None else 'resizers'
    if kernel is not None and model_card(backbone, scale, 'kernels') is not None:
        return 'kernels'
    return routed_family(backbone, scale, degradation) or 'bicubic'


def routed_family(backbone, scale, degradation):
    """The family ('resizers', then 'kernels') whose card of ``backbone`` x``scale`` lists the resizer
    ``degradation`` in its ``degradations`` (where that layer is the best shipped one, Table R), or None."""
    for family in ('resizers', 'kernels') if degradation is not None else ():
        if degradation in (model_card(backbone, scale, family) or {}).get('degradations', {}):
            return family
    return None


def default_tol(backbone, scale, family='bicubic'):
    """mcnet-sr's default tolerance for the model (its card's ``tol``), None where none ships."""
    card = model_card(backbone, scale, family)
    return None if card is None else card['tol']


def default_extrapolation(backbone, scale, family='bicubic'):
    """mcnet-sr's default extrapolation for the model (its card's ``extrapolation``), None where none ships."""
    card = model_card(backbone, scale, family)
    return None if card is None else card['extrapolation']
