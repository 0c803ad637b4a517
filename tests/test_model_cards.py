"""The model cards (``mcnet_basicsr/zoo/models.yml``) against what they describe: the shipped files, the backbone
presets, the radius names, and the scores recorded for the tables (``benchmarks/records/results.json``)."""
import json
import os

import pytest
import torch
import yaml

from conftest import REPO_ROOT, resizer_table_cells, same_operator_resizers
from mcnet_basicsr.archs.backbone_presets_arch import BACKBONE_PRESETS
from mcnet_basicsr.ops import DEGRADATIONS, QUANTIZATION_EPS_RMS
from mcnet_basicsr.zoo import cards, pretrained
from mcnet_basicsr.zoo.pretrained import MODELS, model_card

CARDS = [(b, s, c) for b, entry in MODELS['backbones'].items() for s, c in entry.get('models', {}).items()]
KERNEL_CARDS = [(b, s) for b, entry in MODELS['backbones'].items() for s in entry.get('kernels', {})]
RESIZER_CARDS = [(b, s) for b, entry in MODELS['backbones'].items() for s in entry.get('resizers', {})]
UNTRAINED = [b for b, entry in MODELS['backbones'].items() if 'untrained_layer' in entry]  # layers given as settings
KEYS = {'backbone', 'layer', 'start', 'tol', 'extrapolation', 'set5', 'set14'}
# the tables' rows of each card's scores: (record backbone, record backbone_weights) by the card's scored_on
RECORD_ROW = {'official': lambda b: (b, 'official'), 'shipped': lambda b: (b.replace('_compact', ''), 'ours-compact')}


def test_cards_are_complete_and_name_shipped_files():
    assert set(MODELS) == {'default', 'max_iter', 'families', 'backbones'}
    assert MODELS['families'] == cards.MODELS['families'] and MODELS['families']['bicubic'] == 'models'
    assert isinstance(MODELS['max_iter'], int) and MODELS['max_iter'] >= 1
    for b, entry in MODELS['backbones'].items():
        # a backbone ships layer files per scale, or one untrained layer (settings) and its backbone file: one for
        # every scale, or one per scale that its cards name
        own = {'untrained_layer'} | ({'backbone'} if 'backbone' in entry else set()) if b in UNTRAINED else {'models'}
        assert set(entry) - {'kernels', 'resizers'} == {'name', 'eps_rms', 'scored_on'} | own, b
        assert b in BACKBONE_PRESETS and entry['eps_rms'] in pretrained.EPS_RMS and entry['scored_on'] in RECORD_ROW
        for s, f in [(s, f) for s in pretrained.SCALES for f in MODELS['families']] if b in UNTRAINED else ():
            assert os.path.isfile(pretrained.weight_path(pretrained.backbone_file(b, s, f))), (b, s, f)
    for b, s, card in CARDS:
        assert set(card) == KEYS and s in pretrained.SCALES, (b, s)
        # YAML 1.1 reads 1e-4 (no dot) as a string
        assert isinstance(card['tol'], float) and 0 < card['tol'] < 1, (b, s, card['tol'])
        assert isinstance(card['extrapolation'], float) and card['extrapolation'] >= 0, (b, s)
        for name in (card['layer'], card['start'], card['backbone']):
            if name not in (None, 'official'):
                assert os.path.isfile(pretrained.weight_path(name)), name
        assert card['layer'] is not None


def test_defaults_per_family_of_lr_run_on_shipped_weights_alone():
    """The cards' ``default``: SRCNN for MATLAB-bicubic LR, the unfolded anchor and its untrained layer for LR made
    by a blur kernel, and for LR made by another resizer the stage-3 anchor's layer where its card routes the resizer
    (OpenCV's cubic at x2 and x3, not at x4), else the compact RCAN: its layer trained for resizers on OpenCV's area,
    linear and cubic LR at every scale and on Pillow's bicubic at x2, its bicubic layer on Pillow's at x3 and x4;
    each runs without any weights fetched, and ``layer_family`` picks the family of its layer for such LR."""
    resizers = ['ffdnet_unfolded16', 'rcan_compact']
    assert MODELS['default'] == {'bicubic': {2: 'srcnn', 3: 'srcnn', 4: 'srcnn'},
                                 'kernels': {2: 'ffdnet_unfolded16', 3: 'ffdnet_unfolded16', 4: 'ffdnet_unfolded16'},
                                 'resizers': {2: resizers, 3: resizers, 4: resizers}}
    lr = {'bicubic': [{}], 'kernels': [{'kernel': 'k.npy'}],
          'resizers': [{'degradation': 'pil-bicubic'}, {'degradation': 'cv2-cubic'}]}
    for family in MODELS['default']:
        assert set(MODELS['default'][family]) == set(pretrained.SCALES), family
        for s in pretrained.SCALES:
            for given in lr[family]:
                b = cards.default_backbone(s, **given)
                assert cards.lr_family(**given) == family
                if family != 'resizers':
                    expected = (MODELS['default'][family][s], family)
                elif given['degradation'] == 'cv2-cubic':
                    expected = ('ffdnet_unfolded16', 'resizers') if s < 4 else ('rcan_compact', 'resizers')
                else:
                    expected = ('rcan_compact', 'resizers' if s == 2 else 'bicubic')
                assert (b, cards.layer_family(b, s, **given)) == expected, (family, s, given)
                assert model_card(b, s, expected[1]) is not None and not pretrained._official_weights(b), (family, s)
                pretrained.check_available(b, s, family=expected[1])  # no path needed
    assert cards.default_backbone(2, degradation='matlab-bicubic') == 'srcnn'  # the bicubic family, named


@pytest.mark.parametrize('backbone, scale', KERNEL_CARDS)
def test_kernel_layers_are_shipped_and_scored_by_their_table_records(backbone, scale):
    """Each layer trained on blur kernels ships, and its card's CBSD68 score is the noise-free row mean of its Table K
    record (docs/degradations.md): the row and option file ``mcnet_<backbone>_kernels`` (also where a backbone with
    an untrained layer ships a trained file for a scale), or for an untrained layer ``mcnet_<backbone>``
    (``options/test_mcnet_<backbone>_x<s>.yml``, no layer file); a card's score is ``~`` exactly while no record
    holds its row."""
    card = model_card(backbone, scale, 'kernels')
    untrained = backbone in UNTRAINED and 'layer' not in card  # a backbone's untrained layer, or its trained file
    own = set() if untrained else {'layer'}
    assert set(card) - {'degradations', 'backbone'} == {'tol', 'extrapolation', 'cbsd68'} | own
    assert 'backbone' not in card or os.path.isfile(pretrained.weight_path(card['backbone']))
    assert isinstance(card['tol'], float) and 0 < card['tol'] < 1 and isinstance(card['extrapolation'], float)
    assert cards.model_card(backbone, scale, 'kernels') == card
    records = [json.loads(p.read_text()) for p in (REPO_ROOT / 'benchmarks' / 'records').glob('kernel_table_*.json')]
    name = f'mcnet_{backbone}' if untrained else f'mcnet_{backbone}_kernels'
    row = f'{name}|x{scale}|'
    means = [sum(c['psnr'] for k, c in r['cells'].items() if k.startswith(row)) / 12 for r in records
             if sum(k.startswith(row) for k in r['cells']) == 12]
    if card['cbsd68'] is None:  # not measured: once a record holds the row, the card must give its mean
        assert means == [], (backbone, scale, [round(m, 2) for m in means])
    else:
        assert card['cbsd68'] in [round(m, 2) for m in means], (backbone, scale, means)
    # the layer file is the one the shipped test option loads (none for an untrained layer)
    option = yaml.safe_load((REPO_ROOT / 'options' / f'test_{name}_x{scale}.yml').read_text())
    if untrained:
        assert option['path']['pretrain_network_g'] is None
    else:
        assert os.path.basename(option['path']['pretrain_network_g']) == card['layer']
        assert os.path.isfile(pretrained.weight_path(card['layer']))


def _untrained_option_file(backbone, scale, family):
    """The option file of ``backbone``'s untrained layer of ``family`` at ``scale``: a card that gives its own dual has
    its own, ``options/test_mcnet_<backbone>_<family>_x<s>.yml``, else ``options/test_mcnet_<backbone>_x<s>.yml``."""
    own = 'dual' in model_card(backbone, scale, family)
    return REPO_ROOT / 'options' / f"test_mcnet_{backbone}{'_' + family if own else ''}_x{scale}.yml"


@pytest.mark.parametrize('backbone', UNTRAINED)
def test_untrained_layers_are_their_option_files(backbone):
    """An untrained layer's card and its option file (``options/test_mcnet_<backbone>_x<s>.yml``, or the family's own
    where its card gives a dual) say the same: backbone arch and file, channels, rho, beta, dual,
    prior (arch, level, file), radius and tolerance; and ``build_pretrained_mcnet`` builds the network that option
    file builds (layer=False: not a trained file a card may name), weights and beta included, at every scale of its
    kernel and resizer cards."""
    from mcnet_basicsr.archs.backbone_presets_arch import backbone_type
    from mcnet_basicsr.utils.registration import build_network
    entry, layer = MODELS['backbones'][backbone], cards.untrained_layer(backbone)
    families = [f for f in ('kernels', 'resizers') if f in entry]
    scales = set().union(*(entry[f] for f in families))
    assert scales == set(pretrained.SCALES) and layer['beta']['learn'] is False
    for scale, family in [(s, f) for s in sorted(scales) for f in families if s in entry[f]]:
        opt = yaml.safe_load(_untrained_option_file(backbone, scale, family).read_text())
        net_opt, card = opt['network_g'], model_card(backbone, scale, family)
        assert opt['scale'] == net_opt['operator']['scale'] == scale
        assert net_opt['backbone']['net']['type'] == backbone_type(backbone)
        assert os.path.basename(net_opt['backbone']['path']) == pretrained.backbone_file(backbone, scale, family)
        for key in ('channels', 'rho', 'beta'):
            assert net_opt[key] == layer[key], (scale, family, key)
        assert net_opt.get('dual', 'full') == card.get('dual', 'full'), (scale, family)
        assert dict(net_opt['denoiser'], path=os.path.basename(net_opt['denoiser']['path'])) == layer['denoiser']
        assert net_opt['eps_rms'] == pytest.approx(pretrained.EPS_RMS[entry['eps_rms']], rel=1e-4)
        assert net_opt['settings']['solver']['forward']['tol'] == card['tol'], (scale, family)
        # the network: the option file's (paths from the repository root) and the card's
        for part in (net_opt['backbone'], net_opt['denoiser']):
            part['path'] = str(REPO_ROOT / part['path'])
        from_option = build_network(net_opt)
        from_card = pretrained.build_pretrained_mcnet(scale, backbone=backbone, family=family, layer=False,
                                                      eps_rms=pretrained.default_eps_rms(backbone))
        assert (from_card.channels, from_card.rho, from_card.scale) == (from_option.channels, from_option.rho, scale)
        assert from_card.dual == from_option.dual and from_card.eps_rms == pytest.approx(from_option.eps_rms, rel=1e-4)
        assert not from_card.log_beta.requires_grad and float(from_card.beta) == pytest.approx(3.0)
        mine, theirs = from_card.state_dict(), from_option.state_dict()
        assert set(mine) == set(theirs)
        # all but the record of the operator it was built with (the option file's: no blur, the card's: bicubic)
        assert all(torch.equal(mine[k], theirs[k]) for k in mine if k != '_extra_state'), (scale, family)
        assert from_card.trained_for() == from_option.trained_for() == f'{backbone_type(backbone)} x{scale}'
        backbones = from_card.backbone.state_dict(), from_option.backbone.state_dict()
        assert all(torch.equal(backbones[0][k], backbones[1][k]) for k in backbones[1])


@pytest.mark.parametrize('backbone', UNTRAINED)
def test_an_untrained_layer_serves_every_operator(backbone):
    """An untrained layer is the same for every operator: ``layer_family`` gives 'kernels' for any kernel and
    'resizers' for every resizer (MATLAB bicubic, the default, included), never 'bicubic', which is refused; where its
    card has no such section (FFDNetHQS's data step needs a kernel), that family is refused in one line."""
    for scale in pretrained.SCALES:
        assert cards.layer_family(backbone, scale, kernel='k.npy') == 'kernels'
        for resizer in (None, *DEGRADATIONS):
            assert cards.layer_family(backbone, scale, degradation=resizer) == 'resizers', resizer
        for family in ('kernels', 'resizers'):
            if model_card(backbone, scale, family) is None:
                with pytest.raises(ValueError, match=f'No MCNet layer .* ships for {backbone} at x{scale}'):
                    pretrained.check_available(backbone, scale, family=family)
    assert [b for b in UNTRAINED if 'resizers' not in MODELS['backbones'][b]] == ['ffdnet_hqs']
    with pytest.raises(ValueError, match="serves any operator.*family 'kernels' or 'resizers'"):
        pretrained.check_available(backbone, 2)
    # FFDNetHQS's cards name its trained files, FFDNetPnP's and FFDNetUnfolded's name none
    for scale in pretrained.SCALES:
        expected = {'ffdnet_hqs': f'mcnet_ffdnet_hqs_x{scale}.pth',
                    'ffdnet_pnp': 'FFDNet prior ffdnet_rgb.pth, beta 3 (untrained)',
                    'ffdnet_unfolded16': 'FFDNet prior ffdnet_rgb.pth, beta 3 growing with the noise (untrained)'}
        assert pretrained.describe_layer(backbone, scale, 'kernels') == expected[backbone]
        if backbone == 'ffdnet_unfolded16':  # its resizer cards give their own dual and anchor
            assert pretrained.describe_layer(backbone, scale, 'resizers') == (
                f'{expected[backbone]}, null-space dual, around ffdnet_unfolded16_mix_x{scale}.pth')


def test_a_trained_file_on_an_untrained_layers_card_loads_over_its_settings(tmp_path, monkeypatch):
    """Where the card of a backbone with an untrained layer names a ``layer`` file (a trained FFDNetHQS layer), the
    layer is built from the card's settings with the options the file fixes (a beta per noise level, a hyper-network
    of its width) and loads the file: describe_layer and mcnet-sr's first line name the file."""
    untrained = pretrained.build_pretrained_mcnet(3, backbone='ffdnet_hqs', family='kernels', layer=False)
    from mcnet_basicsr.archs.mcnet_arch import MCNetArch
    weights = str(REPO_ROOT / 'mcnet_basicsr' / 'weights' / 'ffdnet_rgb.pth')
    trained = MCNetArch(backbone={'net': 'ffdnet_hqs', 'path': weights}, operator={'type': 'bicubic', 'scale': 2},
                        channels='rgb', beta={'init': 2.0, 'noise': True},
                        denoiser=dict(cards.untrained_layer('ffdnet_hqs')['denoiser'], path=weights),
                        hyper={'hidden': 4})
    with torch.no_grad():
        trained.log_beta_slope.fill_(0.25)
        trained.hyper.net[-1].bias.fill_(0.1)
    torch.save({'params': trained.state_dict()}, tmp_path / 'mcnet_ffdnet_hqs_x2.pth')
    card = dict(model_card('ffdnet_hqs', 2, 'kernels'), layer='mcnet_ffdnet_hqs_x2.pth')
    monkeypatch.setitem(MODELS['backbones']['ffdnet_hqs']['kernels'], 2, card)
    untrained_card = {k: v for k, v in model_card('ffdnet_hqs', 3, 'kernels').items() if k != 'layer'}
    monkeypatch.setitem(MODELS['backbones']['ffdnet_hqs']['kernels'], 3, untrained_card)  # a card naming no file
    monkeypatch.setattr(pretrained, 'WEIGHTS_DIR', str(tmp_path))
    real_path = pretrained.weight_path
    monkeypatch.setattr(pretrained, 'weight_path',
                        lambda name: weights if name == 'ffdnet_rgb.pth' else real_path(name))
    net = pretrained.build_pretrained_mcnet(2, backbone='ffdnet_hqs', family='kernels')
    assert net.hyper is not None and float(net.log_beta_slope.detach()) == pytest.approx(0.25)
    assert float(net.beta) == pytest.approx(2.0) and float(untrained.beta) == pytest.approx(3.0)
    assert float(net.hyper.net[-1].bias[0].detach()) == pytest.approx(0.1)
    assert pretrained.describe_layer('ffdnet_hqs', 2, 'kernels') == 'mcnet_ffdnet_hqs_x2.pth'
    assert pretrained.describe_layer('ffdnet_hqs', 3, 'kernels') == 'FFDNet prior ffdnet_rgb.pth, beta 3 (untrained)'
    assert pretrained.layer_file_options(trained.state_dict()) == {'beta': {'noise': True}, 'hyper': {'hidden': 4}}
    assert pretrained.layer_file_options(untrained.state_dict()) == {'beta': {'noise': False}}


def _cell_key(cells, row, scale, resizer, dataset, same):
    """The key of the recorded cell of ``row`` on LR made by ``resizer``, or by a resizer with the same operator (its
    own name first); None where none is recorded."""
    keys = [f'{row}|x{scale}|{name}|{dataset}' for name in sorted(same[resizer], key=lambda n: n != resizer)]
    return next((k for k in keys if k in cells), None)


def _has(cells, row, scale, resizer, dataset, same):
    return _cell_key(cells, row, scale, resizer, dataset, same) is not None


def _cell(cells, row, scale, resizer, dataset, same):
    key = _cell_key(cells, row, scale, resizer, dataset, same)
    if key is None:
        raise KeyError(f'{row}|x{scale}|{resizer}|{dataset}')
    return cells[key]


@pytest.mark.parametrize('backbone, scale', [(b, s) for b, s in RESIZER_CARDS if b not in UNTRAINED])
def test_resizer_layers_are_shipped_and_load_as_their_test_options_do(backbone, scale):
    card = model_card(backbone, scale, 'resizers')
    assert {'layer', 'tol', 'extrapolation'} <= set(card) <= {'layer', 'tol', 'extrapolation', 'degradations'}
    assert isinstance(card['tol'], float) and 0 < card['tol'] < 1 and isinstance(card['extrapolation'], float)
    assert cards.model_card(backbone, scale, 'resizers') == card
    option = yaml.safe_load((REPO_ROOT / 'options' / f'test_mcnet_{backbone}_resizers_x{scale}.yml').read_text())
    assert os.path.basename(option['path']['pretrain_network_g']) == card['layer']
    assert os.path.isfile(pretrained.weight_path(card['layer']))


FAMILY_CARDS = (('kernels', KERNEL_CARDS), ('resizers', RESIZER_CARDS))
SHIPPED_BACKBONE_FAMILY_CARDS = [(b, s, f) for f, family_cards in FAMILY_CARDS for b, s in family_cards
                                 if not pretrained._official_weights(b)]


@pytest.mark.parametrize('backbone, scale, family', SHIPPED_BACKBONE_FAMILY_CARDS)
def test_family_layers_run_on_the_shipped_backbone_of_their_scale(backbone, scale, family):
    """A kernel or resizer layer of a shipped backbone builds with nothing given and runs on the same weights as the
    backbone alone of that family: the file its card names, else the scale's MATLAB-bicubic card's or the backbone's
    own."""
    net = pretrained.build_pretrained_mcnet(scale, backbone=backbone, family=family)
    alone = pretrained.build_pretrained_backbone(backbone, scale, family=family).state_dict()
    mine = net.backbone.state_dict()
    assert mine.keys() == alone.keys() and all(torch.equal(mine[k], alone[k]) for k in alone), (backbone, scale)


SETS = ('Set5', 'Set14', 'CBSD68')
ROUTED = sorted({(b, s) for b, s in RESIZER_CARDS + KERNEL_CARDS if b not in UNTRAINED})  # trained layers: routed


@pytest.mark.parametrize('backbone, scale', ROUTED)
def test_each_resizer_runs_the_best_shipped_layer_measured_and_cards_score_it(backbone, scale):
    """The resizers a kernel or resizer card lists in ``degradations`` (those mcnet-sr --degradation runs its layer
    for) are exactly the recorded ones on which its row (Table R, told the resizer) beats, on each of Set5, Set14 and
    CBSD68, the bicubic layer told the resizer (the backbone alone where no bicubic layer ships), and whose mean over
    the three sets is above the other family's row where that one is measured on the three sets; each listed score is
    the row's CBSD68 cell; ``layer_family`` follows the cards."""
    cells, same = resizer_table_cells(), same_operator_resizers(scale)
    base = f'mcnet_{backbone}@true' if model_card(backbone, scale) is not None else backbone
    rows = {f: f'mcnet_{backbone}_{f}@true' for f in ('kernels', 'resizers') if model_card(backbone, scale, f)}
    listed = {}
    for family, row in rows.items():
        card = model_card(backbone, scale, family)
        names = card.get('degradations', {})
        assert set(names) <= set(DEGRADATIONS), (family, names)
        measured = {m for k in cells if k.startswith(f'{row}|x{scale}|') for m in same[k.split('|')[2]]}
        measured = {r for r in measured if all(_has(cells, row, scale, r, s, same) for s in SETS)}
        for resizer in sorted(measured):
            mine = [_cell(cells, row, scale, resizer, s, same) for s in SETS]
            wins = [m > _cell(cells, base, scale, resizer, s, same) for m, s in zip(mine, SETS)]
            for other in set(rows.values()) - {row}:
                if all(_has(cells, other, scale, resizer, s, same) for s in SETS):  # measured on every set
                    wins.append(sum(mine) > sum(_cell(cells, other, scale, resizer, s, same) for s in SETS))
            assert (resizer in names) == all(wins), (family, resizer, wins)
        assert set(names) <= measured, (family, set(names) - measured)
        assert names == {r: round(_cell(cells, row, scale, r, 'CBSD68', same), 2) for r in names}, family
        listed.update({r: family for r in names})
    for resizer in DEGRADATIONS:
        assert cards.layer_family(backbone, scale, degradation=resizer) == listed.get(resizer, 'bicubic')


def _row_run_for(backbone, scale, resizer):
    """The Table R row of the layer mcnet-sr runs on ``backbone`` x``scale`` for LR made by ``resizer``: an untrained
    layer's option-file row, else the routed family's layer or the bicubic layer told the resizer."""
    family = cards.layer_family(backbone, scale, degradation=resizer)
    if backbone in UNTRAINED:
        return _untrained_option_file(backbone, scale, family).stem[len('test_'):-len(f'_x{scale}')] + '@true'
    return f"mcnet_{backbone}{'' if family == 'bicubic' else '_' + family}@true"


LISTED = [(s, choice) for s, choice in MODELS['default']['resizers'].items() if not isinstance(choice, str)]


@pytest.mark.parametrize('scale, choice', LISTED)
def test_a_listed_default_routes_the_resizers_where_its_layer_beats_the_next(scale, choice):
    """Where ``default.resizers`` of a scale lists backbones, each but the last lists in its resizer card's
    ``degradations`` exactly the recorded resizers on which the layer mcnet-sr runs on it beats, on each of Set5, Set14
    and CBSD68, the layer mcnet-sr would run without it (the rest of the list); each score is its CBSD68 cell."""
    cells, same = resizer_table_cells(), same_operator_resizers(scale)
    for i, backbone in enumerate(choice[:-1]):
        names = model_card(backbone, scale, 'resizers').get('degradations', {})
        assert set(names) <= set(DEGRADATIONS), names
        for resizer in DEGRADATIONS:
            fallback = next((b for b in choice[i + 1:] if cards.routed_family(b, scale, resizer)), choice[-1])
            mine, theirs = _row_run_for(backbone, scale, resizer), _row_run_for(fallback, scale, resizer)
            if not all(_has(cells, row, scale, resizer, s, same) for row in (mine, theirs) for s in SETS):
                assert resizer not in names, (backbone, resizer, 'not measured')
                continue
            wins = [_cell(cells, mine, scale, resizer, s, same) > _cell(cells, theirs, scale, resizer, s, same)
                    for s in SETS]
            assert (resizer in names) == all(wins), (backbone, resizer, theirs, wins)
            if resizer in names:
                assert names[resizer] == round(_cell(cells, mine, scale, resizer, 'CBSD68', same), 2), resizer
                assert cards.default_backbone(scale, degradation=resizer) == (
                    next(b for b in choice if cards.routed_family(b, scale, resizer)))


def test_radius_names_are_the_package_constants():
    assert pretrained.default_eps_rms('srcnn') is None
    assert pretrained.default_eps_rms('rcan_compact') == QUANTIZATION_EPS_RMS


@pytest.mark.parametrize('backbone, scale', [(b, s) for b, s, _ in CARDS])
def test_scores_are_the_recorded_tables(backbone, scale):
    """Each card's Set5/Set14 [PSNR, SSIM] is its row of the tables' records, rounded as docs/results.md prints it."""
    records = json.loads((REPO_ROOT / 'benchmarks' / 'records' / 'results.json').read_text())
    row = RECORD_ROW[MODELS['backbones'][backbone]['scored_on']](backbone)
    card = model_card(backbone, scale)
    for dataset in ('Set5', 'Set14'):
        rec, = [r for r in records if r['method'] == 'mcnet' and (r['backbone'], r['backbone_weights']) == row
                and r['scale'] == scale and r['dataset'] == dataset]
        assert card[dataset.lower()] == [round(rec['psnr'], 2), round(rec['ssim'], 4)], (backbone, scale, dataset)


def test_unshipped_pairs_are_refused_with_the_shipped_scales():
    for b, entry in MODELS['backbones'].items():
        for s in set(pretrained.SCALES) - set(entry.get('models', pretrained.SCALES)):
            assert model_card(b, s) is None and cards.default_tol(b, s) is None
            with pytest.raises(ValueError, match=f'No MCNet layer ships for {b} at x{s}.*layers exist for x3 and x4'):
                pretrained.check_available(b, s, backbone_path='weights.pth')
    with pytest.raises(ValueError, match='official imdn weights are not shipped'):
        pretrained.check_available('imdn', 4)
    with pytest.raises(ValueError, match='third-party and not shipped'):
        pretrained.build_pretrained_backbone('pan', 3)


def test_readme_and_model_zoo_tables_are_the_cards():
    """The model-zoo tables of the README and docs/ModelZoo.md are the cards' scores as ``model_zoo_table`` renders
    them, and that table has one row per card with its Set5 and Set14 PSNR / SSIM."""
    table = pretrained.model_zoo_table()
    rows = table.splitlines()[2:]
    assert len(rows) == len(CARDS)
    for row, (b, s, card) in zip(rows, CARDS):
        cells = [c.strip() for c in row.strip('|').split('|')]
        assert f'(`{b}`)' in cells[0] and cells[1] == f'x{s}', row
        for cell, (psnr, ssim) in zip(cells[3:], (card['set5'], card['set14'])):
            assert [float(v) for v in cell.split(' / ')] == [psnr, ssim], row
    readme = (REPO_ROOT / 'README.md').read_text()
    block = readme.split('<!-- model-zoo: mcnet_basicsr.zoo.pretrained.model_zoo_table() -->\n', 1)[1]
    assert block.split('<!-- /model-zoo -->', 1)[0] == table
    assert table in (REPO_ROOT / 'docs' / 'ModelZoo.md').read_text()
    kernel_table = pretrained.kernel_layers_table()
    assert len(kernel_table.splitlines()) == 2 + len(KERNEL_CARDS)
    block = (REPO_ROOT / 'docs' / 'ModelZoo.md').read_text().split(
        '<!-- kernel-layers: mcnet_basicsr.zoo.pretrained.kernel_layers_table() -->\n', 1)[1]
    assert block.split('<!-- /kernel-layers -->', 1)[0] == kernel_table
    resizer_table = pretrained.resizer_layers_table()
    routing = sorted(set(RESIZER_CARDS + KERNEL_CARDS))  # every card that may route resizers, untrained ones too
    assert len(resizer_table.splitlines()) == 2 + sum(bool((model_card(b, s, f) or {}).get('degradations'))
                                                      for b, s in routing for f in ('kernels', 'resizers'))
    block = (REPO_ROOT / 'docs' / 'ModelZoo.md').read_text().split(
        '<!-- resizer-layers: mcnet_basicsr.zoo.pretrained.resizer_layers_table() -->\n', 1)[1]
    assert block.split('<!-- /resizer-layers -->', 1)[0] == resizer_table


def test_a_default_list_runs_the_first_backbone_whose_card_routes_the_resizer():
    """``default.resizers`` of a scale may be a list: ``mcnet-sr --degradation`` without ``--backbone`` runs the first
    backbone whose card lists the resizer in ``degradations``, else the last; the help text says so."""
    from mcnet_basicsr.cli import options as cli_options
    assert MODELS['default']['resizers'][2] == ['ffdnet_unfolded16', 'rcan_compact']
    assert cards.default_backbone(2, degradation='cv2-cubic') == 'ffdnet_unfolded16'
    assert cards.default_backbone(2, degradation='pil-bicubic') == 'rcan_compact'  # rcan_compact's card routes it
    assert cards.default_backbone(2, degradation='pil-lanczos') == 'ffdnet_unfolded16'
    assert not any(cards.routed_family(b, 3, 'pil-bicubic') for b in MODELS['default']['resizers'][3])
    assert cards.default_backbone(3, degradation='pil-bicubic') == 'rcan_compact'  # no card routes it: the last
    assert 'ffdnet_unfolded16 where its card routes the resizer, else rcan_compact for resizer LR' in \
        cli_options.shipped_layers_text()


def test_a_card_dual_builds_that_familys_map(monkeypatch):
    """An untrained layer's card may give its family's ADMM dual at that scale (``dual: null_space`` for resizers) and
    its own backbone file; without them the layer keeps the full dual and runs on the scale's shared file."""
    resizers = pretrained.build_pretrained_mcnet(2, backbone='ffdnet_unfolded16', family='resizers')
    kernels = pretrained.build_pretrained_mcnet(2, backbone='ffdnet_unfolded16', family='kernels')
    assert (resizers.dual, kernels.dual) == ('null_space', 'full')

    def same(a, b):
        return all(torch.equal(v, b.state_dict()[k]) for k, v in a.state_dict().items())

    mix = pretrained.build_pretrained_backbone('ffdnet_unfolded16', 2, family='resizers')
    assert same(resizers.backbone, mix) and not same(resizers.backbone, kernels.backbone)
    options = pretrained.untrained_layer_options('ffdnet_unfolded16')
    row = yaml.safe_load((REPO_ROOT / 'options' / 'test_mcnet_ffdnet_unfolded16_resizers_x2.yml').read_text())
    assert row['network_g']['dual'] == resizers.dual and row['network_g']['rho'] == options['rho']
    monkeypatch.setitem(MODELS['backbones']['ffdnet_unfolded16']['resizers'], 2, {'tol': 1.0e-3, 'extrapolation': 0.0})
    plain = pretrained.build_pretrained_mcnet(2, backbone='ffdnet_unfolded16', family='resizers')
    assert plain.dual == 'full' and same(plain.backbone, kernels.backbone)
    monkeypatch.setitem(MODELS['backbones']['ffdnet_unfolded16']['resizers'][2], 'dual', 'nullspace')
    with pytest.raises(ValueError, match="dual must be one of"):
        pretrained.build_pretrained_mcnet(2, backbone='ffdnet_unfolded16', family='resizers')
