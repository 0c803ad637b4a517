"""Evaluate BasicSR test option files under the project's protocol and write JSON records.

Protocol (everywhere in this project): HR mod-cropped to the scale, LR = MATLAB bicubic then
uint8 (scripts/prepare_datasets.py), the output's Y channel quantised to uint8 (a Y-channel method's
own uint8 output, as the literature measures SRCNN and bicubic), PSNR/SSIM on Y against BasicSR's Y of
the uint8 HR with BasicSR's ``calculate_psnr`` / ``calculate_ssim`` (crop_border = scale), and the data
fidelity ||A x - b||_2 on Y in [0, 1] of the *float* output (mean and max over the set). This protocol
reproduces the literature's figures to the hundredth (Set5 bicubic 33.670 / 30.398 / 28.426, official
SRCNN 36.660 / 32.754 / 30.489 at x2 / x3 / x4).

    python scripts/evaluate.py -opt options/test_mcnet_srcnn_x2.yml --out results.json
    python scripts/evaluate.py -opt options/test_mcnet_srcnn_x2.yml \
        --set network_g.solver.forward.tol=1e-4 --set path.pretrain_network_g=~

Each record: {"method", "backbone", "scale", "dataset", "psnr", "ssim", "fidelity",
"fidelity_mean", "seconds_per_image", "iterations", "iterations_max", "converged", "residual_max", "option",
"device", "overrides"}, plus two secondary
protocols: "psnr_rgb_uint8" / "ssim_rgb_uint8" (the RGB output quantised to uint8 by ``tensor2img``, then
Y in float: what BasicSR's own validation and ``mcnet_basicsr/test.py`` print; 0.005-0.03 dB higher) and
"psnr_float_y" (the float output's Y, not quantised; the paper's secondary protocol). Records written
before 2026-11-27 have the RGB-uint8 numbers under "psnr"/"ssim" and the Y-uint8 ones under
"psnr_y_uint8"/"ssim_y_uint8".

"converged" is the fraction of images whose forward solve reached the option file's tolerance and
"residual_max" the largest relative residual returned (the solver keeps the best iterate when it stops at
``max_iter``); both are None for methods that run a fixed number of iterations (PnP, TV-TV) or none.
Records written before 2026-11-27 do not have them.
"""
import argparse
import contextlib
import json
import os
import os.path as osp
import sys
import time

import cv2
import numpy as np
import torch
import yaml
from tqdm import tqdm

REPO_ROOT = osp.abspath(osp.join(osp.dirname(__file__), osp.pardir))
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, osp.dirname(osp.abspath(__file__)))  # the scripts' own helpers, also when loaded by path
import mcnet_basicsr  # noqa: E402,F401
from atomic_io import write_json  # noqa: E402
from basicsr.archs import build_network  # noqa: E402
from basicsr.metrics import calculate_psnr, calculate_ssim  # noqa: E402
from basicsr.utils import img2tensor, tensor2img  # noqa: E402

from mcnet_basicsr.assets import exit_if_inputs_missing  # noqa: E402
from mcnet_basicsr.metrics import y_uint8_metrics  # noqa: E402
from mcnet_basicsr.ops import build_operator  # noqa: E402
from mcnet_basicsr.utils.checkpoint import load_network  # noqa: E402
from mcnet_basicsr.utils.color import rgb_to_ycbcr  # noqa: E402

IMG_EXT = ('.png', '.bmp', '.jpg', '.jpeg', '.tif', '.tiff')
METHODS = {'MCNetArch': 'mcnet', 'Bicubic': 'bicubic', 'PnPADMM': 'pnp', 'TVTV': 'tvtv'}


@contextlib.contextmanager
def in_repo_root():
    """Run the block from the repository root and return to the caller's directory afterwards, also on an
    error: option files name their inputs (datasets/, experiments/, mcnet_basicsr/weights/) relative to the
    root. The scripts resolve their own path arguments against the caller's directory before entering.
    (``contextlib.chdir`` would do, but needs Python 3.11; setup.py allows 3.9.)"""
    cwd = os.getcwd()
    os.chdir(REPO_ROOT)
    try:
        yield
    finally:
        os.chdir(cwd)


def check_set_items(parser, items):
    """``--set KEY=VALUE`` arguments (this script's and those of the scripts built on it): a parser error for
    an item without ``=``, before anything is evaluated."""
    for item in items:
        if '=' not in item:
            parser.error(f'--set takes KEY=VALUE, got {item!r}')


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
    """(method, backbone) labels of a network_g block."""
    kind = net_opt['type']
    if kind in METHODS:
        backbone = net_opt.get('backbone', {}).get('type', 'none') if isinstance(net_opt.get('backbone'), dict) else 'none'
        return METHODS[kind], backbone.lower()
    return 'backbone', kind.lower()


def load_weights(net, path_opt):
    path = path_opt.get('pretrain_network_g')
    if not path:
        return
    load_network(net, path, path_opt.get('param_key_g', 'params'), strict=path_opt.get('strict_load_g', True))


def read_rgb(path):
    img = cv2.imread(path, cv2.IMREAD_COLOR)
    if img is None:
        raise ValueError(f'cannot read {path}')
    return img.astype(np.float32) / 255.0  # BGR, as BasicSR's datasets


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
            y = rgb_to_ycbcr(out.double())[:, :1] if out.shape[1] == 3 else out.double()
            b = rgb_to_ycbcr(lq.double())[:, :1]
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('-opt', action='append', required=True, help='test option file (repeatable)')
    parser.add_argument('--set', action='append', default=[], metavar='KEY=VALUE',
                        help='override an option, dotted path, YAML value (repeatable)')
    parser.add_argument('--datasets', nargs='*', help='only these dataset names')
    parser.add_argument('--limit', type=int, help='first N images per dataset (quick runs)')
    parser.add_argument('--device', default='auto', choices=['auto', 'cpu', 'cuda'])
    parser.add_argument('--out', help='append records to this JSON list')
    args = parser.parse_args(argv)
    check_set_items(parser, args.set)
    device = torch.device('cuda' if args.device == 'auto' and torch.cuda.is_available() else
                          ('cpu' if args.device == 'auto' else args.device))
    opts = []
    for path in args.opt:
        with open(path) as f:
            opt = yaml.safe_load(f)
        for item in args.set:
            set_by_path(opt, *item.split('=', 1))
        if args.datasets:
            opt['datasets'] = {k: v for k, v in opt['datasets'].items() if v['name'] in args.datasets}
        exit_if_inputs_missing(opt, path)  # every file checked before the first (long) evaluation
        opts.append(opt)
    all_records = []
    for opt in opts:
        records = evaluate_option(opt, device, args.set, args.limit)
        for r in records:
            print(f"{r['option']:28s} {r['dataset']:6s} x{r['scale']}  PSNR {r['psnr']:.3f}  SSIM {r['ssim']:.4f}  "
                  f"fid max {r['fidelity']:.2e}  {r['seconds_per_image'] * 1e3:.1f} ms/img  iters {r['iterations']}"
                  + (f"  converged {r['converged']:.0%} (residual max {r['residual_max']:.1e})"
                     if r['converged'] is not None else ''))
        all_records += records
    if args.out:
        old = json.load(open(args.out)) if osp.exists(args.out) else []
        write_json(args.out, old + all_records)
    return all_records


if __name__ == '__main__':
    main()
