"""The tables' evaluation: BasicSR test option files under the project's protocol, one JSON record per set.

A file runs through its model's validation (``build_model(opt).validation``; an ``SRModel`` file through
:class:`ProtocolSRModel`, the SRModel that also measures), and each record aggregates the per-image numbers that
validation logs (``mcnet_basicsr.metrics.image_metrics``): what ``mcnet_basicsr/test.py`` prints for a file is what
the tables say of it.

Protocol: HR mod-cropped to the scale, LR = MATLAB bicubic then uint8 (``scripts/prepare_datasets.py``), the
output's Y channel quantised to uint8 (``mcnet_basicsr.metrics.y_uint8_metrics``, logged as ``psnr_y_uint8``),
PSNR/SSIM on Y against BasicSR's Y of the uint8 HR (crop = scale), and the
data fidelity ||A x - b||_2 on Y in [0, 1] of the *float* output (mean and max over the set). This protocol
reproduces the literature's bicubic and SRCNN figures to the hundredth (docs/results.md, "Protocol").

Each record: {"method", "backbone", "scale", "dataset", "psnr", "ssim", "fidelity", "fidelity_mean",
"seconds_per_image", "iterations", "iterations_max", "converged", "residual_max", "images", "option", "device",
"overrides"}, plus two secondary protocols: "psnr_rgb_uint8" / "ssim_rgb_uint8" (the RGB output quantised to
uint8 by ``tensor2img``, then Y in float: what BasicSR's own validation prints; a little higher) and
"psnr_float_y" (the float output's Y, not quantised; the paper's secondary protocol). "converged" is the
fraction of images whose forward solve reached the option file's tolerance and "residual_max" the largest
relative residual returned; both are None for methods that run a fixed number of iterations (PnP, TV-TV) or none.
Older records (benchmarks/records/) may have the RGB-uint8 numbers under "psnr"/"ssim" and lack the convergence keys.
"""
import contextlib
import copy
import os
import os.path as osp
import tempfile

import numpy as np
import torch
import yaml
from basicsr.data import build_dataloader, build_dataset
from basicsr.models import build_model

from mcnet_basicsr.archs.backbone_presets_arch import backbone_type
from mcnet_basicsr.models.protocol_sr_model import ProtocolSRModel
from mcnet_basicsr.utils.checkpoint import load_network
from mcnet_basicsr.utils.images import IMG_EXT
from mcnet_basicsr.utils.paths import resolve_path
from mcnet_basicsr.zoo.assets import option_inputs

METHODS = {'MCNetArch': 'mcnet', 'Bicubic': 'bicubic', 'PnPADMM': 'pnp', 'TVTV': 'tvtv'}
# the set on which anything is selected (beta, denoisers); Set14 stays a test set
SELECTION_SET = 'Set5'
# quick runs: loose settings so that one image runs in seconds on a CPU (the numbers mean nothing)
QUICK_OVERRIDES = {
    'pnp': ['network_g.iterations=2'],
    'tvtv': ['network_g.iterations=10'],
    'mcnet': ['network_g.settings.solver.forward={solver: anderson, m: 5, tol: 1.0e-3, max_iter: 5}'],
}


@contextlib.contextmanager
def in_directory(path):
    """Run the block from ``path`` (option files name their inputs relative to the repository root) and return
    to the caller's directory afterwards, also on an error. Command lines resolve their own path arguments
    against the caller's directory before entering. (``contextlib.chdir`` needs Python 3.11.)"""
    cwd = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(cwd)


def resolve_device(name):
    """'auto' -> CUDA when available, else CPU; 'cpu' / 'cuda' as given."""
    if name == 'auto':
        return torch.device('cuda' if torch.cuda.is_available() else 'cpu')
    return torch.device(name)


def device_name(device):
    """What a record names a torch device by: the GPU's name (e.g. 'NVIDIA H200'), or 'cpu'."""
    return torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'


def check_set_items(parser, items):
    """``--set KEY=VALUE`` arguments: a parser error for an item without ``=``, before anything is evaluated."""
    for item in items:
        if '=' not in item:
            parser.error(f'--set takes KEY=VALUE, got {item!r}')


def add_selection_arguments(parser):
    """The arguments of every command line that selects on Set5 (search_beta, calibrate_beta)."""
    parser.add_argument('--limit', type=int, help='first N Set5 images (quick runs)')
    parser.add_argument('--data-root', default='datasets', help='prepared data (the option files say datasets/)')
    parser.add_argument('--device', default='auto', choices=['auto', 'cpu', 'cuda'])
    parser.add_argument('--set', action='append', default=[], metavar='KEY=VALUE',
                        help='further option override, dotted path, YAML value (repeatable)')
    parser.add_argument('--out', help='write the JSON result here')


def set_by_path(opt, dotted, value):
    keys = dotted.split('.')
    node = opt
    for k in keys[:-1]:
        if not isinstance(node.get(k), dict):
            node[k] = {}
        node = node[k]
    value = yaml.safe_load(value)
    if isinstance(value, str):  # YAML 1.1 leaves `1e-4` a string
        try:
            value = float(value)
        except ValueError:
            pass
    node[keys[-1]] = value


def describe(net_opt):
    """(method, backbone) labels of a network_g block: the backbone's arch type in lower case (a preset's too)."""
    kind = net_opt['type']
    if kind in METHODS:
        backbone = net_opt.get('backbone')
        if isinstance(backbone, dict) and 'net' in backbone:  # the group: the network and how it is fed
            backbone = backbone['net']
        if isinstance(backbone, str):
            return METHODS[kind], backbone_type(backbone).lower()
        return METHODS[kind], backbone.get('type', 'none').lower() if isinstance(backbone, dict) else 'none'
    if kind == 'BackbonePreset':
        return 'backbone', backbone_type(net_opt['preset']).lower()
    return 'backbone', kind.lower()


def load_weights(net, path_opt):
    path = path_opt.get('pretrain_network_g')
    if not path:
        return
    load_network(net, path, path_opt.get('param_key_g', 'params'), strict=path_opt.get('strict_load_g', True))


def test_options(opt, device):
    """A copy of a test option dict as BasicSR's test pipeline would run it on ``device``: one process, no
    result folders written (images are not saved), ``SRModel`` measured by :class:`ProtocolSRModel`. BasicSR's own
    validation metrics are left out: the records carry the same numbers per image (``psnr_rgb_uint8`` ...)."""
    opt = copy.deepcopy(opt)
    if opt.get('model_type', 'SRModel') == 'SRModel':
        opt['model_type'] = 'ProtocolSRModel'  # SRModel plus the measurements; same network, same test()
    opt.update(is_train=False, dist=False, rank=0, world_size=1, num_gpu=1 if device.type == 'cuda' else 0)
    opt['path'] = dict(opt.get('path') or {})
    opt['val'] = dict(opt.get('val') or {}, metrics=None, pbar=True)
    for ds in opt['datasets'].values():
        ds.update(phase='test', scale=opt['scale'])
    return opt


def evaluate_option(opt, device, overrides=(), limit=None):
    """One record per dataset of a test option dict: the set's images (sorted by name, the first ``limit``) run
    through the model's validation (``build_model(opt).validation``), aggregated from its per-image measurements
    (:class:`~mcnet_basicsr.models.protocol_sr_model.ProtocolSRModel`)."""
    if device.type == 'cuda' and device.index is not None:
        torch.cuda.set_device(device)
    opt = test_options(opt, device)
    model = build_model(opt)
    if not isinstance(model, ProtocolSRModel):
        raise ValueError(f'model_type {opt["model_type"]!r} does not measure the tables\' protocol; use SRModel, '
                         'ProtocolSRModel or MCNetModel (or a subclass of ProtocolSRModel).')
    method, backbone = describe(opt['network_g'])
    eps_abs, eps_rms = opt['network_g'].get('eps'), opt['network_g'].get('eps_rms')
    records = []
    for ds in opt['datasets'].values():
        dataset = build_image_set(ds, limit)
        loader = build_dataloader(dataset, ds, num_gpu=opt['num_gpu'], dist=False, sampler=None)
        model.validation(loader, current_iter=0, tb_logger=None, save_img=False)
        images = model.image_results[ds['name']]
        records.append(set_record(images, method, backbone, opt, ds['name'], eps_abs, eps_rms, device, overrides))
    return records


def build_image_set(ds, limit=None):
    """A test dataset of the GT folder's images sorted by name (the first ``limit``), each paired with the LR file
    of the same name: BasicSR's ``meta_info_file`` pairing, so an LR folder may hold just those files."""
    ds = dict(ds)
    if ds.get('meta_info_file') or ds.get('io_backend', {}).get('type') != 'disk':
        dataset = build_dataset(ds)
        dataset.paths = sorted(dataset.paths, key=lambda p: osp.basename(p['gt_path']))[:limit]
        return dataset
    names = sorted(f for f in os.listdir(ds['dataroot_gt']) if f.lower().endswith(IMG_EXT))[:limit]
    with tempfile.TemporaryDirectory(prefix='image_set_') as tmp:
        ds['meta_info_file'] = osp.join(tmp, 'meta_info.txt')
        with open(ds['meta_info_file'], 'w') as f:
            f.write(''.join(f'{name}\n' for name in names))
        dataset = build_dataset(ds)  # reads the list at construction
    # the pairs themselves (the meta-info format splits names at spaces)
    dataset.paths = [{'lq_path': osp.join(ds['dataroot_lq'], n), 'gt_path': osp.join(ds['dataroot_gt'], n)}
                     for n in names]
    return dataset


def set_record(images, method, backbone, opt, dataset, eps_abs, eps_rms, device, overrides):
    """The record of one set (keys: the module docstring) from ProtocolSRModel's per-image dicts."""
    def mean(key):
        return float(np.mean([im[key] for im in images]))

    secs = [im['seconds'] for im in images]
    iters = [im['iterations'] for im in images if 'iterations' in im]
    # tolerance-stopped solves only (the baselines run a fixed iteration count)
    solved = [im for im in images if 'converged' in im] if method == 'mcnet' else []
    ratios = [im['fidelity'] / im['eps'] for im in images if im['eps'] > 0]
    fids = [im['fidelity'] for im in images]
    return {
        'method': method, 'backbone': backbone, 'scale': opt['scale'], 'dataset': dataset,
        'psnr': mean('psnr'), 'ssim': mean('ssim'), 'fidelity': float(np.max(fids)),
        'fidelity_mean': float(np.mean(fids)), 'seconds_per_image': float(np.mean(secs[1:] or secs)),
        'iterations': float(np.mean(iters)) if iters else None, 'iterations_max': max(iters) if iters else None,
        'converged': float(np.mean([im['converged'] for im in solved])) if solved else None,
        'residual_max': max(im['residual'] for im in solved) if solved else None, 'images': len(images),
        'option': opt['name'], 'psnr_float_y': mean('psnr_float_y'),
        'psnr_rgb_uint8': mean('psnr_rgb_uint8'), 'ssim_rgb_uint8': mean('ssim_rgb_uint8'),
        'eps': eps_abs, 'eps_rms': eps_rms, 'fidelity_over_eps': float(np.max(ratios)) if ratios else None,
        'device': device_name(device),
        'overrides': list(overrides)}


def read_option(path, overrides=()):
    """An option file as a dict, with ``KEY=VALUE`` overrides (dotted paths, YAML values) applied."""
    with open(path) as f:
        opt = yaml.safe_load(f)
    for item in overrides:
        set_by_path(opt, *item.split('=', 1))
    return opt


def rebase(path, data_root):
    """``datasets/...`` -> ``<data_root>/...`` (option files name the prepared data relative to the repo)."""
    if data_root and path.startswith('datasets/'):
        return osp.join(data_root, path[len('datasets/'):])
    return path


def restrict_datasets(opt, names, data_root=None):
    """Keep the dataset blocks named in ``names``, their folders rebased to ``data_root``; returns ``opt``."""
    opt['datasets'] = {k: v for k, v in opt['datasets'].items() if v['name'] in names}
    for ds in opt['datasets'].values():
        for key in ('dataroot_gt', 'dataroot_lq'):
            ds[key] = rebase(ds[key], data_root)
    return opt


def missing_inputs(opt):
    """Paths an option file needs that are not there (data, weights; :func:`mcnet_basicsr.zoo.assets.option_inputs`)."""
    return [path for _, path in option_inputs(opt) if not osp.exists(resolve_path(path))]


def load_selection_option(option_path, overrides, data_root):
    """An MCNet option file for a selection on Set5: overrides applied, Set5 only, data under ``data_root``."""
    if not osp.isfile(option_path):
        raise FileNotFoundError(f'no option file {option_path}')
    opt = read_option(option_path, overrides)
    if opt['network_g'].get('type') != 'MCNetArch':
        raise ValueError(f'{option_path}: network_g.type is {opt["network_g"].get("type")!r}; beta is an '
                         'option of MCNetArch only.')
    names = [ds['name'] for ds in opt['datasets'].values()]
    restrict_datasets(opt, [SELECTION_SET], data_root)
    if not opt['datasets']:
        raise ValueError(f'{option_path}: no {SELECTION_SET} block in datasets (has {names}); the selection uses '
                         f'{SELECTION_SET} only.')
    missing = missing_inputs(opt)
    if missing:
        raise FileNotFoundError(f'{option_path}: missing {", ".join(missing)}')
    return opt
