"""Run the rows of the paper's Table 2 (PSNR/SSIM) and Table 1 (data fidelity) that this project has.

Every row is a BasicSR test option file evaluated by ``scripts/evaluate.py``'s ``evaluate_option``
under the project protocol (see that script). Rows whose option file, weights or data are missing
are reported as skipped, with the reason. Writes a JSON list of records and a markdown file with
the tables (the paper's numbers are not included: we do not have them reliably).

    python scripts/reproduce_tables.py                 # all rows, x2/x3/x4, Set5 + Set14, GPU if present
    python scripts/reproduce_tables.py --quick         # smoke run: first Set5 image, x2, CPU, loose solvers
    python scripts/reproduce_tables.py --out-json docs/results.json --out-md docs/results_tables.md

Record keys: method (bicubic | pnp | backbone | tvtv | mcnet), backbone (none | srcnn | rdn | rcan),
scale, dataset, psnr, ssim, fidelity (max ||Ax - b||_2 over the set, Y in [0, 1], float output),
seconds_per_image, iterations (mean; null for non-iterative rows), plus fidelity_mean, images,
option, device, overrides.
"""
import argparse
import datetime
import json
import os
import os.path as osp
import sys

import torch
import yaml

REPO_ROOT = osp.abspath(osp.join(osp.dirname(__file__), osp.pardir))
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, osp.abspath(osp.dirname(__file__)))
from evaluate import evaluate_option, set_by_path  # noqa: E402

REQUIRED_KEYS = ('method', 'backbone', 'scale', 'dataset', 'psnr', 'ssim', 'fidelity', 'seconds_per_image',
                 'iterations')
EXTRA_KEYS = ('fidelity_mean', 'images', 'option', 'device', 'overrides')
SCALES = (2, 3, 4)
DATASETS = ('Set5', 'Set14')

# Table rows in the paper's order: (method, backbone, option file pattern). Rows without an option
# file in this repository are reported as skipped.
ROWS = (
    ('bicubic', 'none', 'options/test_bicubic_x{s}.yml'),
    ('pnp', 'none', 'options/test_pnp_x{s}.yml'),
    ('backbone', 'srcnn', 'options/test_srcnn_x{s}.yml'),
    ('tvtv', 'srcnn', 'options/test_tvtv_srcnn_x{s}.yml'),
    ('mcnet', 'srcnn', 'options/test_mcnet_srcnn_x{s}.yml'),
    ('backbone', 'rdn', 'options/test_rdn_x{s}.yml'),
    ('tvtv', 'rdn', 'options/test_tvtv_rdn_x{s}.yml'),
    ('mcnet', 'rdn', 'options/test_mcnet_rdn_x{s}.yml'),
    ('backbone', 'rcan', 'options/test_rcan_x{s}.yml'),
    ('tvtv', 'rcan', 'options/test_tvtv_rcan_x{s}.yml'),
    ('mcnet', 'rcan', 'options/test_mcnet_rcan_x{s}.yml'),
)

# --quick: loose settings so that one image runs in seconds on a CPU (the numbers mean nothing)
QUICK_OVERRIDES = {
    'pnp': ['network_g.iterations=2'],
    'tvtv': ['network_g.iterations=10'],
    'mcnet': ['network_g.solver.forward={solver: anderson, m: 5, tol: 1.0e-3, max_iter: 5}'],
}

ROW_LABELS = {
    ('bicubic', 'none'): 'Bicubic',
    ('pnp', 'none'): 'PnP-ADMM (DnCNN17, beta = 0)',
}


def row_label(method, backbone):
    if (method, backbone) in ROW_LABELS:
        return ROW_LABELS[(method, backbone)]
    name = {'srcnn': 'SRCNN', 'rdn': 'RDN', 'rcan': 'RCAN'}.get(backbone, backbone)
    return {'backbone': name, 'tvtv': f'TV-TV + {name}', 'mcnet': f'MCNet + {name}'}[method]


def _rebase(path, data_root):
    """``datasets/...`` -> ``<data_root>/...`` (option files name the prepared data relative to the repo)."""
    if data_root and path.startswith('datasets/'):
        return osp.join(data_root, path[len('datasets/'):])
    return path


def missing_inputs(opt):
    """Paths an option file needs that are not there (weights, data)."""
    net = opt['network_g']
    paths = [net.get('backbone_path'), net.get('denoiser_path'), opt.get('path', {}).get('pretrain_network_g')]
    for ds in opt['datasets'].values():
        paths += [ds.get('dataroot_gt'), ds.get('dataroot_lq')]
    return [p for p in paths if p and not osp.exists(p)]


def load_row(pattern, scale, quick, method, data_root, datasets):
    """The option dict of one cell (with --quick / data-root changes), its overrides, or a skip reason."""
    path = pattern.format(s=scale)
    if not osp.isfile(path):
        return None, [], f'no option file {path}'
    with open(path) as f:
        opt = yaml.safe_load(f)
    overrides = list(QUICK_OVERRIDES.get(method, [])) if quick else []
    for item in overrides:
        set_by_path(opt, *item.split('=', 1))
    opt['datasets'] = {k: v for k, v in opt['datasets'].items() if v['name'] in datasets}
    for ds in opt['datasets'].values():
        for key in ('dataroot_gt', 'dataroot_lq'):
            ds[key] = _rebase(ds[key], data_root)
    missing = missing_inputs(opt)
    if missing:
        return None, overrides, f'{path}: missing {", ".join(missing)}'
    return opt, overrides, None


def to_record(r):
    return {k: r[k] for k in REQUIRED_KEYS + EXTRA_KEYS}


def run(quick=False, device='auto', data_root='datasets', limit=None, log=print):
    """Evaluate every available cell. Returns (records, skipped) with skipped = [(label, scale, reason)]."""
    if quick:
        dev, scales, datasets, limit = torch.device('cpu'), (2, ), ('Set5', ), 1
    else:
        dev = torch.device('cuda' if device == 'auto' and torch.cuda.is_available() else
                           ('cpu' if device == 'auto' else device))
        scales, datasets = SCALES, DATASETS
    records, skipped = [], []
    for method, backbone, pattern in ROWS:
        for s in scales:
            opt, overrides, reason = load_row(pattern, s, quick, method, data_root, datasets)
            if reason:
                skipped.append((row_label(method, backbone), s, reason))
                log(f'skip {row_label(method, backbone)} x{s}: {reason}')
                continue
            for r in evaluate_option(opt, dev, overrides, limit):
                records.append(to_record(r))
                log(f"{row_label(r['method'], r['backbone']):32s} {r['dataset']:6s} x{s}  PSNR {r['psnr']:.3f}  "
                    f"SSIM {r['ssim']:.4f}  fid max {r['fidelity']:.2e}  {r['seconds_per_image']:.3f} s/img  "
                    f"iters {r['iterations']}")
    return records, skipped


def _cells(records, key, fmt):
    table = {}
    for r in records:
        table[(r['method'], r['backbone'], r['dataset'], r['scale'])] = fmt(r[key]) if r[key] is not None else '-'
    return table


def markdown(records, skipped, quick=False):
    present = {(r['dataset'], r['scale']) for r in records}
    cols = [(d, s) for d in DATASETS for s in SCALES if (d, s) in present]
    rows = []
    for method, backbone, _ in ROWS:
        if any(r['method'] == method and r['backbone'] == backbone for r in records):
            rows.append((method, backbone))
    devices = sorted({r['device'] for r in records})
    head = '| | ' + ' | '.join(f'{d} x{s}' for d, s in cols) + ' |\n|---|' + '---|' * len(cols) + '\n'

    def table(cell):
        out = head
        for m, b in rows:
            out += f'| {row_label(m, b)} | ' + ' | '.join(cell.get((m, b, d, s), 'n/a') for d, s in cols) + ' |\n'
        return out

    psnr = _cells(records, 'psnr', lambda v: f'{v:.2f}')
    ssim = _cells(records, 'ssim', lambda v: f'{v:.4f}')
    both = {k: f'{psnr[k]} / {ssim[k]}' for k in psnr}
    fid = _cells(records, 'fidelity', lambda v: f'{v:.1e}')
    fid_mean = _cells(records, 'fidelity_mean', lambda v: f'{v:.1e}')
    fid_both = {k: f'{fid[k]} ({fid_mean[k]})' for k in fid}
    secs = _cells(records, 'seconds_per_image', lambda v: f'{v:.3f}')
    iters = _cells(records, 'iterations', lambda v: f'{v:.0f}')
    timing = {k: f'{secs[k]} ({iters[k]})' for k in secs}
    overrides = sorted({o for r in records for o in r['overrides']})

    md = '# Table 1 and Table 2 rows reproduced by `scripts/reproduce_tables.py`\n\n'
    if quick:
        md += ('**QUICK SMOKE RUN** (`--quick`: first Set5 image, x2, CPU, loose solver settings). '
               'These numbers say nothing about the methods.\n\n')
    md += (f'Generated {datetime.date.today().isoformat()} on {", ".join(devices) or "-"}. Protocol: '
           '`scripts/evaluate.py` (HR mod-crop, LR = MATLAB bicubic then uint8, outputs rounded to uint8, '
           'Y-PSNR/SSIM with BasicSR, crop = scale; fidelity on the float output).\n'
           'The paper\'s numbers are not shown: we do not have a reliable copy of them, and none are typed in '
           'from memory.\n')
    if overrides:
        md += f'Option overrides: `{"`, `".join(overrides)}`.\n'
    md += '\n## Table 2: PSNR (dB) / SSIM on Y\n\n' + table(both)
    md += ('\n## Table 1: data fidelity ||A x - b||_2 (Y in [0, 1]), max over the set (mean)\n\n' + table(fid_both))
    md += '\n## Seconds per image (mean iterations)\n\n' + table(timing)
    md += ('\nNotes: PnP-ADMM uses Ryu et al.\'s DnCNN17 (BatchNorm, no spectral normalisation) instead of the '
           'paper\'s real-spectral-norm DnCNN17 (not available), with a fixed number of iterations; TV-TV is solved '
           'by ADMM with the exact projection onto the consistency set '
           '(see `mcnet_basicsr/archs/baselines_arch.py`).\n')
    if skipped:
        md += '\n## Skipped\n\n' + ''.join(f'- {label} x{s}: {reason}\n' for label, s, reason in skipped)
    return md


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--quick', action='store_true', help='first Set5 image at x2 on CPU, loose solver settings')
    parser.add_argument('--device', default='auto', choices=['auto', 'cpu', 'cuda'], help='ignored with --quick')
    parser.add_argument('--data-root', default='datasets', help='prepared data (the option files say datasets/)')
    parser.add_argument('--limit', type=int, help='first N images per dataset')
    parser.add_argument('--out-json', default='docs/results.json')
    parser.add_argument('--out-md', default='docs/results_tables.md')
    args = parser.parse_args(argv)
    # option files name their inputs relative to the repository root: run from there
    out_json, out_md, data_root = (osp.abspath(p) for p in (args.out_json, args.out_md, args.data_root))
    cwd = os.getcwd()
    os.chdir(REPO_ROOT)
    try:
        records, skipped = run(args.quick, args.device, data_root, args.limit)
    finally:
        os.chdir(cwd)
    for path, text in ((out_json, json.dumps(records, indent=1) + '\n'),
                       (out_md, markdown(records, skipped, args.quick))):
        os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
        with open(path + '.tmp', 'w') as f:
            f.write(text)
        os.replace(path + '.tmp', path)
    print(f'wrote {out_json} ({len(records)} records) and {out_md}; {len(skipped)} cells skipped')
    return records, skipped


if __name__ == '__main__':
    main()
