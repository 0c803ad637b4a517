"""Pick the denoiser for PnP / MCNet the way the paper did: run the method with each candidate on Set5
only and keep the one with the highest mean Y-PSNR (evaluation protocol of scripts/evaluate.py).

    python benchmarks/select_denoiser.py "experiments/train_DnCNN6_sigma_*/models/net_g_latest.pth" \
        "experiments/pretrained_models/dncnn6_authors_sigma_*.pth" --scale 2 --out results/select_x2.json
    python benchmarks/select_denoiser.py experiments/train_DnCNN17_SN_sigma_0.04000_0.08000/models/net_g_latest.pth \
        --denoiser "{depth: 17, spectral_norm: true, batch_norm: false}"
    python benchmarks/select_denoiser.py "experiments/train_DnCNN6_sigma_*/models/net_g_latest.pth" --method mcnet

Candidates are checkpoint paths or globs, in any layout ``load_dncnn`` reads (our BasicSR
``net_g_*.pth`` with ``params``, the MCNet authors' DnCNN6 files, Ryu et al.'s DnCNN17).
``--method pnp`` (default) runs the PnPADMM baseline of ``options/test_pnp_x<scale>.yml``;
``--method mcnet`` runs the *untrained* MCNet layer of ``options/test_mcnet_srcnn_x<scale>.yml``
(``path.pretrain_network_g`` = null, beta = beta_init), which is how MCNet uses the denoiser.
``--iterations`` is the number of PnP iterations, or MCNet's forward ``max_iter``.
The JSON (``--out``) holds every candidate's record and the best one.
"""
import argparse
import glob
import json
import os.path as osp

import torch
import yaml
from tqdm import tqdm

from mcnet_basicsr.evaluation.evaluate import check_set_items, evaluate_option, set_by_path
from mcnet_basicsr.utils.files import write_json

REPO_ROOT = osp.abspath(osp.join(osp.dirname(__file__), osp.pardir))
OPTIONS = {'pnp': 'test_pnp_x{}.yml', 'mcnet': 'test_mcnet_srcnn_x{}.yml'}
DEFAULT_DENOISER = '{depth: 6, num_feat: 64, bias: false, batch_norm: false, spectral_norm: true, lipschitz: 0.9}'


def expand_candidates(patterns):
    """Paths in the order given (globs sorted); a path or glob that names no file is an error."""
    found, missing = [], []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        matches = [m for m in matches if osp.isfile(m)]
        if not matches:
            missing.append(pattern)
        found += [m for m in matches if m not in found]
    if missing:
        raise FileNotFoundError(f'denoiser checkpoint(s) not found: {", ".join(missing)}')
    return found


def _repo_path(path):
    """Relative paths of the option files are relative to the repository root."""
    return path if path is None or osp.isabs(path) or osp.exists(path) else osp.join(REPO_ROOT, path)


def build_option(method, scale, data_root, denoiser, iterations, extra_sets=()):
    """The test option of ``method`` at ``scale`` reduced to Set5 under ``data_root`` (no checkpoint yet)."""
    if method not in OPTIONS:
        raise ValueError(f'Unsupported method {method!r}. Supported ones are: {", ".join(OPTIONS)}.')
    opt_path = osp.join(REPO_ROOT, 'options', OPTIONS[method].format(scale))
    if not osp.isfile(opt_path):
        raise FileNotFoundError(f'no option file {opt_path} for method {method} at x{scale}.')
    with open(opt_path) as f:
        opt = yaml.safe_load(f)
    set5 = [ds for ds in opt['datasets'].values() if ds['name'] == 'Set5']
    if not set5:
        raise ValueError(f'{opt_path} has no Set5 dataset: the selection runs on Set5 only.')
    ds = dict(set5[0])
    for key in ('dataroot_gt', 'dataroot_lq'):
        rel = osp.relpath(ds[key], 'datasets') if ds[key].startswith('datasets/') else ds[key]
        ds[key] = osp.join(data_root, rel)
        if not osp.isdir(ds[key]):
            raise FileNotFoundError(f'{ds[key]} not found: prepare it with scripts/prepare_datasets.py '
                                    f'(or point --data-root at the folder holding Set5/).')
    opt['datasets'] = {'test_1': ds}
    net = opt['network_g']
    net['denoiser'] = dict(denoiser)
    overrides = [f'network_g.denoiser={json.dumps(denoiser)}']
    if method == 'pnp':
        if iterations is not None:
            net['iterations'] = iterations
            overrides.append(f'network_g.iterations={iterations}')
    else:
        opt.setdefault('path', {})['pretrain_network_g'] = None
        overrides.append('path.pretrain_network_g=~')
        net['backbone']['path'] = _repo_path(net['backbone'].get('path'))
        if iterations is not None:
            net.setdefault('settings', {}).setdefault('solver', {}).setdefault('forward', {})['max_iter'] = iterations
            overrides.append(f'network_g.settings.solver.forward.max_iter={iterations}')
    for item in extra_sets:
        set_by_path(opt, *item.split('=', 1))
        overrides.append(item)
    return opt, overrides


def select(candidates, method='pnp', scale=2, data_root=None, denoiser=None, iterations=None, limit=None,
           device='cpu', extra_sets=()):
    """Evaluate every candidate on Set5; returns (records sorted as given, best record)."""
    data_root = data_root or osp.join(REPO_ROOT, 'datasets')
    denoiser = yaml.safe_load(DEFAULT_DENOISER) if denoiser is None else denoiser
    device = torch.device(device)
    base, overrides = build_option(method, scale, data_root, denoiser, iterations, extra_sets)
    records = []
    for path in tqdm(candidates, desc=f'{method} x{scale} Set5', unit='denoiser'):
        opt = yaml.safe_load(yaml.safe_dump(base))  # deep copy
        opt['network_g']['denoiser']['path'] = path
        (rec, ) = evaluate_option(opt, device, overrides + [f'network_g.denoiser.path={path}'], limit)
        rec['checkpoint'] = path
        records.append(rec)
        tqdm.write(f'{osp.basename(osp.dirname(osp.dirname(path))) or "."}/{osp.basename(path)}: '
                   f'PSNR {rec["psnr"]:.3f}  SSIM {rec["ssim"]:.4f}')
    best = max(records, key=lambda r: r['psnr'])
    return records, best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('checkpoints', nargs='+', help='denoiser checkpoints (paths or globs)')
    parser.add_argument('--method', default='pnp', choices=sorted(OPTIONS))
    parser.add_argument('--scale', type=int, default=2, choices=[2, 3, 4])
    parser.add_argument('--iterations', type=int,
                        help="PnP iterations / MCNet forward max_iter (default: the option file's)")
    parser.add_argument('--denoiser', default=DEFAULT_DENOISER,
                        help=f'DnCNN options as a YAML mapping (default: DnCNN6 SN, {DEFAULT_DENOISER})')
    parser.add_argument('--limit', type=int, help='first N Set5 images (quick runs)')
    parser.add_argument('--data-root',
                        help='folder holding Set5/HR_mod<s> and Set5/LR_bicubic/X<s> (default: <repo>/datasets)')
    parser.add_argument('--device', default='auto', choices=['auto', 'cpu', 'cuda'])
    parser.add_argument('--set', action='append', default=[], metavar='KEY=VALUE',
                        help='extra option override, dotted path, YAML value (repeatable)')
    parser.add_argument('--out', help='write the records and the choice to this JSON file')
    args = parser.parse_args(argv)
    denoiser = yaml.safe_load(args.denoiser)
    if not isinstance(denoiser, dict):
        parser.error(f'--denoiser must be a YAML mapping of DnCNN options, got {args.denoiser!r}')
    check_set_items(parser, args.set)
    try:
        candidates = expand_candidates(args.checkpoints)
    except FileNotFoundError as err:
        parser.error(str(err))
    device = 'cuda' if args.device == 'auto' and torch.cuda.is_available() else (
        'cpu' if args.device == 'auto' else args.device)
    records, best = select(candidates, args.method, args.scale, args.data_root, denoiser, args.iterations,
                           args.limit, device, args.set)
    width = max(len(r['checkpoint']) for r in records)
    print(f'\n{"checkpoint":{width}s}  PSNR     SSIM    fid max   s/img   ({args.method} x{args.scale}, Set5)')
    for r in records:
        mark = '  <- best' if r is best else ''
        print(f'{r["checkpoint"]:{width}s}  {r["psnr"]:.3f}  {r["ssim"]:.4f}  {r["fidelity"]:.1e}  '
              f'{r["seconds_per_image"]:.3f}{mark}')
    print(f'best: {best["checkpoint"]} (PSNR {best["psnr"]:.3f} dB)')
    result = {'method': args.method, 'scale': args.scale, 'dataset': 'Set5', 'limit': args.limit,
              'iterations': args.iterations, 'denoiser': denoiser, 'candidates': records, 'best': best['checkpoint'],
              'best_psnr': best['psnr']}
    if args.out:
        write_json(args.out, result)
    return result


if __name__ == '__main__':
    main()
