"""Every option file in options/ is consistent with its scale and builds its network.

Weights are not needed: backbone/denoiser paths are dropped, so the networks are random. This is
what catches a copy-paste slip (an x3 file with an x2 crop border or LR folder) before a GPU run.
"""
import copy
import re
from pathlib import Path

import pytest
import torch
import yaml
from basicsr.utils.registry import ARCH_REGISTRY

import mcnet_basicsr  # noqa: F401  (registers the archs)
from mcnet_basicsr.archs.frozen_backbone import BackboneOptions

OPTIONS = sorted((Path(__file__).resolve().parents[1] / 'options').glob('*.yml'))


def _load(path):
    with open(path) as f:
        return yaml.safe_load(f)


def _scale_from_name(path):
    match = re.search(r'_x(\d)\.yml$', path.name)
    return int(match.group(1)) if match else None


@pytest.mark.parametrize('path', OPTIONS, ids=lambda p: p.name)
def test_option_file_is_consistent_with_its_scale(path):
    opt = _load(path)
    s = _scale_from_name(path)
    if s is None:  # only the denoiser recipes are scale-free
        assert opt['model_type'] == 'DenoiserModel', f'{path.name}: SR option files end in _x<scale>.yml'
        return
    assert opt['scale'] == s
    assert opt['name'] and opt['model_type'] in ('SRModel', 'ProtocolSRModel', 'MCNetModel', 'MCNetStartModel',
                                                 'DenoiserModel')
    for ds in opt.get('datasets', {}).values():
        for key in ('dataroot_gt', 'dataroot_lq'):
            root = ds.get(key)
            # DenoiserModel, BicubicPairDataset and DegradedPairDataset read HR images only (the LR is made from them)
            hr_only = ('BicubicPairDataset', 'DegradedPairDataset')
            if root is None or opt['model_type'] == 'DenoiserModel' or ds['type'] in hr_only:
                continue
            if root.endswith('.lmdb'):
                assert root.endswith(f'_x{s}.lmdb'), (key, root)
            else:
                assert root.endswith(f'HR_mod{s}') or root.endswith(f'X{s}'), (key, root)
    for metric in (opt['val'].get('metrics') or {}).values():
        if 'crop_border' in metric:
            assert metric['crop_border'] == s
        if metric['type'] == 'calculate_data_fidelity':
            assert metric['scale'] == s
    assert 'suffix' in opt['val'], 'BasicSR test option files need val.suffix'
    net = opt['network_g']
    # a preset name is built at the operator's scale
    backbone = BackboneOptions.from_options(net['backbone']).net if 'backbone' in net else None
    for block in (net, backbone if isinstance(backbone, dict) else {}):
        for key in ('upscale', 'scale'):
            if key in block and block is not net.get('operator'):
                assert block[key] == s, (key, block[key])
    if 'operator' in net:
        assert net['operator']['scale'] == s


# the groups of network_g that name weights by their ``path`` (MCNetArch, PnPADMM, TVTV)
WEIGHT_GROUPS = ('backbone', 'denoiser', 'start')


def _weight_paths(net_opt):
    """``{group: path}`` of the weights ``network_g`` options name (a group's ``path``; a preset name or network
    options alone as ``backbone`` name none)."""
    return {key: net_opt[key].get('path') for key in WEIGHT_GROUPS
            if isinstance(net_opt.get(key), dict) and 'type' not in net_opt[key] and net_opt[key].get('path')}


def _random_network_options(opt):
    """``network_g`` of ``opt`` with every weight path dropped (random networks)."""
    net = copy.deepcopy(opt['network_g'])
    for key in _weight_paths(net):
        net[key]['path'] = None
    return net


@pytest.mark.parametrize('path', OPTIONS, ids=lambda p: p.name)
def test_option_file_builds_its_network(path):
    opt = _load(path)
    net_opt = _random_network_options(opt)
    net = ARCH_REGISTRY.get(net_opt.pop('type'))(**net_opt)
    assert isinstance(net, torch.nn.Module)


@pytest.mark.parametrize('name', ['test_rcan_compact_x3.yml', 'test_rdn_compact_x4.yml',
                                  'test_mcnet_rcan_compact_x2.yml', 'test_mcnet_rdn_compact_x3.yml'])
def test_compact_backbone_option_runs_forward(name):
    path = next(p for p in OPTIONS if p.name == name)
    opt = _load(path)
    s = opt['scale']
    net_opt = _random_network_options(opt)
    if net_opt['type'] == 'MCNetArch':
        net_opt['settings'] = {'solver': {'forward': {'solver': 'anderson', 'tol': 1e-3, 'max_iter': 3}}}
    net = ARCH_REGISTRY.get(net_opt.pop('type'))(**net_opt).eval()
    torch.manual_seed(0)
    lr = torch.rand(1, 3, 8, 8)
    with torch.no_grad():
        out = net(lr)
    assert out.shape == (1, 3, 8 * s, 8 * s)
    assert torch.isfinite(out).all()


WEIGHTS = Path(__file__).resolve().parents[1] / 'mcnet_basicsr' / 'weights'


@pytest.mark.parametrize('name', sorted(p.name for p in OPTIONS
                                        if p.name.startswith('test_') and 'mcnet_basicsr/weights/' in p.read_text()))
def test_shipped_weights_load_strictly_into_their_option_files(name):
    """The option files that name shipped weights build networks those weights fit exactly (strict loading); a
    layer checkpoint that does not ship is the EMA output of the recipe in options/ that trains it."""
    opt = _load(next(p for p in OPTIONS if p.name == name))
    net_opt = copy.deepcopy(opt['network_g'])
    paths = _weight_paths(net_opt)
    assert any(p.startswith('mcnet_basicsr/weights/') for p in paths.values()) or opt['path']['pretrain_network_g']
    for key, path in paths.items():
        # shipped weights are loaded strictly by the arch; others (third-party) are dropped
        net_opt[key]['path'] = str(WEIGHTS / Path(path).name) if path.startswith('mcnet_basicsr/weights/') else None
    net = ARCH_REGISTRY.get(net_opt.pop('type'))(**net_opt)  # denoiser.path: load_dncnn is strict
    ckpt = opt['path']['pretrain_network_g']
    run = re.fullmatch(r'experiments/(train_\w+)/models/net_g_latest\.pth', ckpt or '')
    if run:
        recipe = [p for p in OPTIONS if p.name.startswith('train_') and _load(p)['name'] == run.group(1)]
        assert len(recipe) == 1 and opt['path']['param_key_g'] == 'params_ema', (ckpt, recipe)
    elif ckpt:
        assert ckpt.startswith('mcnet_basicsr/weights/'), ckpt
        state = torch.load(WEIGHTS / Path(ckpt).name, map_location='cpu', weights_only=True)['params']
        result = net.load_state_dict(state, strict=True)
        assert not result.missing_keys and not result.unexpected_keys
    if paths.get('start'):  # a fitted start, kept by the layer's loading, not the identity it begins as
        assert net.start.dncnn[-1].weight.abs().sum() > 0


def test_shipped_weights_stay_within_60_mb():
    """The package ships only small weights it trained itself (60 MB in all: the budget of the trained kernel
    layers)."""
    total = sum(p.stat().st_size for p in WEIGHTS.glob('*.pth'))
    assert total <= 60_000_000, f'{total / 1e6:.2f} MB of weights in {WEIGHTS}'


@pytest.mark.parametrize('name', sorted(p.name for p in OPTIONS if p.name.startswith('train_mcnet_')
                                        and not p.name.startswith('train_mcnet_start_')))
def test_training_options_start_from_a_shipped_denoiser(name):
    """MCNet training runs from a clean clone: its starting denoiser is one the package ships, a DnCNN6 (trained by
    options/train_dncnn6_sigma_*.yml), the colour FFDNet (options/train_ffdnet_rgb.yml) or the denoiser of a shipped
    layer (trained by its own option file), and that
    checkpoint fits the option file's denoiser strictly."""
    opt = _load(next(p for p in OPTIONS if p.name == name))
    path = opt['network_g']['denoiser']['path']
    match = re.fullmatch(r'mcnet_basicsr/weights/(dncnn6_sigma_[0-9.]+_[0-9.]+|ffdnet_rgb|mcnet_[a-z0-9_]+)\.pth', path)
    assert match, path
    recipe = OPTIONS[0].parent / f'train_{match.group(1)}.yml'
    assert recipe.is_file(), recipe
    shipped = WEIGHTS / Path(path).name
    if not shipped.is_file():
        pytest.skip(f'{shipped} is not in this checkout yet (made by {recipe.name})')
    net_opt = _random_network_options(opt)
    net_opt['denoiser']['path'] = str(shipped)
    net = ARCH_REGISTRY.get(net_opt.pop('type'))(**net_opt)  # load_dncnn is strict
    assert isinstance(net, torch.nn.Module)


def test_validation_shows_progress():
    """Every option file turns on BasicSR's validation progress bar (``val.pbar``): on a CPU a test set takes
    minutes, which would otherwise pass without a line of output."""
    quiet = [path.name for path in OPTIONS if (_load(path).get('val') or {}).get('pbar') is not True]
    assert not quiet, quiet


def test_training_doc_short_run_recipe_sets_keys_of_its_option_file():
    """The short training run of docs/Training.md: every ``--force_yml`` item names a key of the option file (BasicSR
    cannot create a block), its values read as BasicSR reads them, and it validates only once, after the last
    iteration."""
    from basicsr.utils.options import _postprocess_yml_value
    doc = (OPTIONS[0].parents[1] / 'docs' / 'Training.md').read_text()
    start = '    python mcnet_basicsr/train.py -opt options/train_mcnet_srcnn_x2.yml --force_yml '
    items = doc.split(start, 1)[1].split('\n\n', 1)[0].replace('\\\n', ' ').split()
    opt = _load(OPTIONS[0].parent / 'train_mcnet_srcnn_x2.yml')
    for item in items:
        keys, value = item.split('=')
        *parents, last = keys.split(':')
        node = opt
        for key in parents:
            node = node[key]
        assert last in node, item
        node[last] = _postprocess_yml_value(value)
    assert opt['train']['total_iter'] == 20 and opt['logger']['print_freq'] == 1
    assert opt['val']['val_freq'] > opt['train']['total_iter']
