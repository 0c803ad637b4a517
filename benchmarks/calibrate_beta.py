"""Recalibrate the learned beta of a *trained* MCNet layer on Set5, the selection set.

Training learns ``log_beta`` on T91 patches; this script evaluates the trained layer with its beta
multiplied by each factor of a grid, on Set5 only (the set the paper validates and selects
checkpoints on; Set14 is never read), and can write the checkpoint of the Set5-best factor. It is a
one-parameter selection of the same kind as picking a checkpoint on Set5, and the choice is made
before any test set is looked at. ``scripts/search_beta.py`` grids the initial beta of the
*untrained* layer instead.

    python benchmarks/calibrate_beta.py mcnet_basicsr/weights/mcnet_srcnn_x4.pth --scale 4 \\
        --grid 0.7 0.8 0.85 0.9 1.0 1.15 1.3 --out calibrate_beta_x4.json --save-best /tmp/mcnet_srcnn_x4.pth

Protocol and solver are those of ``options/test_mcnet_srcnn_x<scale>.yml`` through
``mcnet_basicsr.evaluation`` (change them with ``--set``). ``--out`` writes {"checkpoint", "option",
"dataset", "learned_beta", "grid", "records", "best"}; each record is an ``evaluate_option`` record
plus ``beta_factor`` and ``beta``. ``--save-best`` writes the input checkpoint with ``log_beta``
shifted by log(best factor) (``params`` only; the factor 1.0 gives the input back unchanged).
"""
import argparse
import math
import os.path as osp
import tempfile

import torch
from tqdm import tqdm

from mcnet_basicsr.evaluation.evaluate import (SELECTION_SET, add_selection_arguments, check_set_items, evaluate_option,
                                               in_directory, load_selection_option, resolve_device)
from mcnet_basicsr.utils.checkpoint import load_state_dict
from mcnet_basicsr.utils.files import write_json

REPO_ROOT = osp.abspath(osp.join(osp.dirname(__file__), osp.pardir))
DEFAULT_OPTION = 'options/test_mcnet_srcnn_x{scale}.yml'


def read_layer(path, param_key='params'):
    """The layer's state dict (``params`` of a BasicSR checkpoint, or a bare state dict)."""
    state = load_state_dict(path, param_key)
    if 'log_beta' not in state:
        raise ValueError(f'{path}: no MCNet layer with a log_beta entry (under "{param_key}" or at the top level)')
    return state


def with_beta_factor(state, factor):
    """A copy of ``state`` whose beta is ``factor`` times the learned one."""
    if not factor > 0:
        raise ValueError(f'beta factors must be > 0, got {factor}')
    out = dict(state)
    out['log_beta'] = state['log_beta'] + math.log(factor)
    return out


def calibrate(state, scale, grid, option=DEFAULT_OPTION, data_root='datasets', device='cpu', extra=(), limit=None):
    """Evaluate the layer ``state`` (see :func:`read_layer`) with every factor on Set5; returns the learned beta
    and the records (each with ``beta_factor`` and ``beta``)."""
    learned = math.exp(float(state['log_beta']))
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        bar = tqdm(grid, desc=f'beta factors x{scale}', unit='factor')
        for factor in bar:
            path = osp.join(tmp, f'layer_beta_x{factor:g}.pth')
            torch.save({'params': with_beta_factor(state, factor)}, path)
            overrides = [f'path.pretrain_network_g={path}', 'path.param_key_g=params'] + list(extra)
            opt = load_selection_option(option.format(scale=scale, s=scale), overrides, data_root)
            (rec, ) = evaluate_option(opt, resolve_device(device), overrides, limit)
            rec['overrides'] = [o for o in rec['overrides'] if not o.startswith('path.pretrain_network_g=')]
            rec.update(beta_factor=float(factor), beta=learned * factor)
            records.append(rec)
            bar.write(f"x{scale} beta x{factor:<6g} ({learned * factor:.5f})  PSNR {rec['psnr']:.4f}  "
                      f"SSIM {rec['ssim']:.4f}  iters {rec['iterations']:.1f}")
    return learned, records


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('checkpoint', help='trained MCNet layer (BasicSR checkpoint with params, or a state dict)')
    parser.add_argument('--scale', type=int, required=True, choices=[2, 3, 4])
    parser.add_argument('--grid', type=float, nargs='+', default=[0.8, 0.9, 1.0, 1.1, 1.25],
                        help='factors applied to the learned beta (1.0 = as trained)')
    parser.add_argument('-opt', '--option', help=f'MCNet test option file, "{{scale}}" filled in. Default: '
                        f'{DEFAULT_OPTION} (in the repository)')
    parser.add_argument('--param-key', default='params', help='state dict key in the checkpoint (params_ema for EMA)')
    add_selection_arguments(parser)
    parser.add_argument('--save-best', metavar='PATH', help='write the checkpoint with the Set5-best factor here')
    args = parser.parse_args(argv)
    if any(f <= 0 for f in args.grid):
        parser.error(f'beta factors must be > 0, got {args.grid}')
    if 1.0 not in args.grid:
        parser.error('the grid must contain 1.0 (the layer as trained), the baseline of the selection')
    check_set_items(parser, args.set)
    device = resolve_device(args.device)
    state = read_layer(args.checkpoint, args.param_key)
    option = osp.abspath(args.option) if args.option else DEFAULT_OPTION
    data_root = osp.abspath(args.data_root)
    out, save_best = (osp.abspath(p) if p else None for p in (args.out, args.save_best))
    with in_directory(REPO_ROOT):
        learned, records = calibrate(state, args.scale, args.grid, option, data_root, device, args.set, args.limit)
    # the layer as trained wins ties: a factor must do better on Set5 to be chosen
    base = next(r for r in records if r['beta_factor'] == 1.0)
    best = max(records, key=lambda r: (r['psnr'], r is base))
    print(f"learned beta {learned:.5f}; Set5-best factor {best['beta_factor']:g} (beta {best['beta']:.5f}): "
          f"{best['psnr']:.4f} dB against {base['psnr']:.4f} as trained ({best['psnr'] - base['psnr']:+.4f})")
    result = {'checkpoint': args.checkpoint, 'option': args.option or DEFAULT_OPTION, 'dataset': SELECTION_SET,
              'scale': args.scale, 'learned_beta': learned, 'grid': [float(f) for f in args.grid], 'records': records,
              'best': {k: best[k] for k in ('beta_factor', 'beta', 'psnr', 'ssim', 'iterations')}}
    if out:
        write_json(out, result)
        print(f'wrote {out}')
    if save_best:
        torch.save({'params': with_beta_factor(state, best['beta_factor'])}, save_best)
        print(f'wrote {save_best}')
    return result


if __name__ == '__main__':
    main()
