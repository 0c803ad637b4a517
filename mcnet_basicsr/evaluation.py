"""The tables' evaluation: BasicSR test option files under the project's protocol, one JSON record per set.

Protocol: HR mod-cropped to the scale, LR = MATLAB bicubic then uint8 (``scripts/prepare_datasets.py``), the
output's Y channel quantised to uint8 (``mcnet_basicsr.metrics.y_uint8_metrics``, the function MCNetModel's
validation logs as ``psnr_y_uint8``), PSNR/SSIM on Y against BasicSR's Y of the uint8 HR (crop = scale), and the
data fidelity ||A x - b||_2 on Y in [0, 1] of the *float* output (mean and max over the set). This protocol
reproduces the literature's figures to the hundredth (Set5 bicubic 33.670 / 30.398 / 28.426, official SRCNN
36.660 / 32.754 / 30.489 at x2 / x3 / x4).

Each record: {"method", "backbone", "scale", "dataset", "psnr", "ssim", "fidelity", "fidelity_mean",
"seconds_per_image", "iterations", "iterations_max", "converged", "residual_max", "images", "option", "device",
"overrides"}, plus two secondary protocols: "psnr_rgb_uint8" / "ssim_rgb_uint8" (the RGB output quantised to
uint8 by ``tensor2img``, then Y in float: what BasicSR's own validation prints; 0.005-0.03 dB higher) and
"psnr_float_y" (the float output's Y, not quantised; the paper's secondary protocol). "converged" is the
fraction of images whose forward solve reached the option file's tolerance and "residual_max" the largest
relative residual returned; both are None for methods that run a fixed number of iterations (PnP, TV-TV) or none.
Older records (docs/records/) may have the RGB-uint8 numbers under "psnr"/"ssim" and lack the convergence keys.
"""
import contextlib
import os
import os.path as osp
import time

import numpy as np
import torch
import yaml
from basicsr.archs import build_network
from basicsr.metrics import calculate_psnr, calculate_ssim
from basicsr.utils import img2tensor, tensor2img
from tqdm import tqdm

from mcnet_basicsr.archs.backbone_presets_arch import backbone_type
from mcnet_basicsr.metrics import y_uint8_metrics
from mcnet_basicsr.ops import build_operator
from mcnet_basicsr.utils.checkpoint import load_network
from mcnet_basicsr.utils.color import luma, rgb_to_ycbcr
from mcnet_basicsr.utils.images import IMG_EXT, read_rgb

METHODS = {'MCNetArch': 'mcnet', 'Bicubic': 'bicubic', 'PnPADMM': 'pnp', 'TVTV': 'tvtv'}
# the set on which anything is selected (beta, denoisers); Set14 stays a test set
SELECTION_SET = 'Set5'
# quick runs: loose settings so that one image runs in seconds on a CPU (the numbers mean nothing)
QUICK_OVERRIDES = {
    'pnp': ['network_g.iterations=2'],
    'tvtv': ['network_g.iterations=10'],
    'mcnet': ['network_g.solver.forward={solver: anderson, m: 5, tol: 1.0e-3, max_iter: 5}'],
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


def psnr_float_y(y, gt, scale):
    """The paper's secondary protocol: PSNR of the *float* output Y (clipped to [0, 1], not rounded) against
    the HR Y, both BT.601 in [0, 1], crop = scale. ``y``: 1x1xHxW tensor; ``gt``: HxWx3 BGR float in [0, 1]
    (as ``read_rgb`` returns it)."""
    gt_y = rgb_to_ycbcr(torch.from_numpy(np.ascontiguousarray(gt[:, :, ::-1].transpose(2, 0, 1)))[None].double())[:, :1]
    diff = (y.double().cpu().clamp(0, 1) - gt_y)[..., scale:-scale, scale:-scale]
    return float(10 * torch.log10(1 / diff.pow(2).mean()))


def evaluate_option(opt, device, overrides=(), limit=None):
    net = build_network(opt['network_g'])
    load_weights(net, opt.get('path', {}))
    net.eval().to(device)
    scale = opt['scale']
    op = build_operator({'type': 'bicubic', 'scale': scale})
    method, backbone = describe(opt['network_g'])
    # radius of the consistency ball of the constrained methods (eps absolute or eps_rms per LR pixel)
    eps_abs, eps_rms = opt['network_g'].get('eps'), opt['network_g'].get('eps_rms')
    records = []
    for ds in opt['datasets'].values():
        names = sorted(f for f in os.listdir(ds['dataroot_gt']) if f.lower().endswith(IMG_EXT))[:limit]
        psnrs, ssims, fids, secs, iters, ratios, psnrs_fy, psnrs_rgb, ssims_rgb = [], [], [], [], [], [], [], [], []
        converged, residuals = [], []
        for name in tqdm(names, desc=f'{opt["name"]} {ds["name"]}', unit='img', leave=False):
            gt = read_rgb(osp.join(ds['dataroot_gt'], name))
            lq = img2tensor(read_rgb(osp.join(ds['dataroot_lq'], name)), bgr2rgb=True, float32=True)[None].to(device)
            if device.type == 'cuda':
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.no_grad():
                out = net(lq)
            if device.type == 'cuda':
                torch.cuda.synchronize()
            secs.append(time.perf_counter() - t0)
            y, b = luma(out.double()), luma(lq.double())
            fids.append(float(op.residual_norm(y, b)[0]))
            eps_i = float(eps_rms) * b[0, 0].numel() ** 0.5 if eps_rms else float(eps_abs or 0.0)
            if eps_i > 0:
                ratios.append(fids[-1] / eps_i)
            # tensor2img clamps in place (on CPU tensors): hand it a copy, after the fidelity
            sr_img = tensor2img([out.detach().cpu().clone()])
            gt_img = (gt * 255.0).round().astype(np.uint8)
            p_yu8, s_yu8 = y_uint8_metrics(y, gt_img, scale)
            psnrs.append(p_yu8)
            ssims.append(s_yu8)
            psnrs_rgb.append(calculate_psnr(sr_img, gt_img, crop_border=scale, test_y_channel=True))
            ssims_rgb.append(calculate_ssim(sr_img, gt_img, crop_border=scale, test_y_channel=True))
            psnrs_fy.append(psnr_float_y(y, gt, scale))
            stats = getattr(net, 'last_stats', None)
            if stats:
                iters.append(float(stats['forward'].iterations.float().mean()))
                if method == 'mcnet':  # a tolerance-stopped solve (the baselines run a fixed iteration count)
                    converged.append(bool(stats['forward'].converged.all()))
                    residuals.append(float(stats['forward'].residual.max()))
        records.append({
            'method': method, 'backbone': backbone, 'scale': scale, 'dataset': ds['name'],
            'psnr': float(np.mean(psnrs)), 'ssim': float(np.mean(ssims)), 'fidelity': float(np.max(fids)),
            'fidelity_mean': float(np.mean(fids)), 'seconds_per_image': float(np.mean(secs[1:] or secs)),
            'iterations': float(np.mean(iters)) if iters else None, 'iterations_max': max(iters) if iters else None,
            'converged': float(np.mean(converged)) if converged else None,
            'residual_max': max(residuals) if residuals else None, 'images': len(names), 'option': opt['name'],
            'psnr_float_y': float(np.mean(psnrs_fy)),
            'psnr_rgb_uint8': float(np.mean(psnrs_rgb)), 'ssim_rgb_uint8': float(np.mean(ssims_rgb)),
            'eps': eps_abs, 'eps_rms': eps_rms, 'fidelity_over_eps': float(np.max(ratios)) if ratios else None,
            'device': torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu',
            'overrides': list(overrides)})
    return records


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
    """Paths an option file needs that are not there (weights, data)."""
    net = opt['network_g']
    paths = [net.get('backbone_path'), net.get('denoiser_path'), opt.get('path', {}).get('pretrain_network_g')]
    for ds in opt['datasets'].values():
        paths += [ds.get('dataroot_gt'), ds.get('dataroot_lq')]
    return [p for p in paths if p and not osp.exists(p)]


def load_selection_option(option_path, overrides, data_root):
    """An MCNet option file for a selection on Set5: overrides applied, Set5 only, data under ``data_root``."""
    if not osp.isfile(option_path):
        raise FileNotFoundError(f'no option file {option_path}')
    opt = read_option(option_path, overrides)
    if opt['network_g'].get('type') != 'MCNetArch':
        raise ValueError(f'{option_path}: network_g.type is {opt["network_g"].get("type")!r}; beta_init is an '
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
