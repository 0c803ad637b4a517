"""The shipped models' cards (``models.yml`` beside this module), with PyYAML alone: what ``mcnet-sr``'s options and
:mod:`.pretrained` read their defaults, files and families from."""
from ..package_data import read_model_cards

MODELS = read_model_cards()  # the model cards (see models.yml for the keys)
SCALES = tuple(sorted(MODELS['default']))
BACKBONES = tuple(MODELS['backbones'])


def model_card(backbone, scale, family='bicubic'):
    """The card of the shipped model ``backbone`` x``scale`` (a dict, see models.yml), or None if none ships;
    ``family`` 'kernels' / 'resizers': of its layer trained for LR made by blur kernels and noise / by resizers
    (the cards' sections ``kernels`` / ``resizers``)."""
    return MODELS['backbones'].get(backbone, {}).get(MODELS['families'][family], {}).get(scale)


def backbone_name(backbone):
    """How ``mcnet-sr`` calls a shipped backbone ('compact RCAN', ...)."""
    return MODELS['backbones'][backbone]['name']


def layer_family(backbone, scale, degradation=None, kernel=None):
    """The family of the layer mcnet-sr runs for LR made by ``degradation`` (a resizer name) or a blur ``kernel``:
    'kernels' with a kernel where such a layer ships; for a resizer, the family whose card lists it in
    ``degradations`` (the resizers on which that layer is the best shipped one: docs/degradations.md, Table R), else
    'bicubic'."""
    if kernel is not None and model_card(backbone, scale, 'kernels') is not None:
        return 'kernels'
    for family in ('resizers', 'kernels') if degradation is not None else ():
        if degradation in (model_card(backbone, scale, family) or {}).get('degradations', {}):
            return family
    return 'bicubic'


def default_tol(backbone, scale, family='bicubic'):
    """mcnet-sr's default tolerance for the model (its card's ``tol``), None where none ships."""
    card = model_card(backbone, scale, family)
    return None if card is None else card['tol']


def default_extrapolation(backbone, scale, family='bicubic'):
    """mcnet-sr's default extrapolation for the model (its card's ``extrapolation``), None where none ships."""
    card = model_card(backbone, scale, family)
    return None if card is None else card['extrapolation']
