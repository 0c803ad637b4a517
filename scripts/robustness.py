"""Robustness: a backbone alone vs MCNet on it when the LR input is perturbed.

The uint8 LR images ``b`` of one prepared set (default Set5 x2) are perturbed, deterministically
(seeded per perturbation and image), written as PNG into a temporary data root, and each option file
of a pair (backbone, MCNet + backbone) is evaluated on them by
``mcnet_basicsr.evaluation.evaluate_option`` with the ground truth unchanged (``HR_mod<s>``). Perturbations:

    none      the prepared LR (MATLAB bicubic of the mod-cropped HR, rounded to uint8)
    noise1/2/5  + Gaussian noise of std 1, 2, 5 (on 0..255) on every RGB value, rounded, clipped
    jpeg90    JPEG at quality 90 (OpenCV), decoded
    blur0.5   operator mismatch: Gaussian blur (std 0.5 HR pixels, 5x5, replicate border) of the HR
              before the MATLAB bicubic downscaling, rounded
    area      operator mismatch: OpenCV INTER_AREA (box average) downscaling of the HR, rounded

Recorded per (perturbation, method): PSNR/SSIM against the unchanged HR, and the data fidelity
||A x - b||_2 (Y in [0, 1], float output, max and mean over the images) against the *perturbed* b,
the one the method saw; ``b_change`` is the mean ||b_perturbed - b||_2 (Y in [0, 1]) from the
prepared LR. MCNet with eps = 0 (the option files) projects exactly onto the perturbed
measurement, noise included. ``--eps-rms noise`` (default) adds the variant "MCNet, eps_rms =
noise" for the Gaussian cases: ``network_g.eps_rms`` = the std of the noise on Y in [0, 1]
(sigma * 0.5742 / 255, BT.601 luma weights), so the consistency ball holds the clean measurement's
distance to b. A number instead (``--eps-rms 0.002``) adds that variant on every perturbation;
``--eps-rms none`` drops it.

    python scripts/robustness.py                      # Set5 x2; SRCNN, RCAN, RCAN_compact pairs; GPU if present
    python scripts/robustness.py --quick              # first image, CPU, loose MCNet solver
    python scripts/robustness.py --out benchmarks/records/robustness.json --out-md docs/robustness.md

Pairs whose option files, weights or data are missing are reported as skipped, with the reason.
``--out`` writes {"dataset", "scale", "seed", "quick", "perturbations", "records", "skipped"};
each record is an ``evaluate_option`` record plus perturbation, variant, label, eps_rms, b_change.
``--out-md FILE`` writes the tables between ``<!-- robustness:begin -->`` and
``<!-- robustness:end -->`` in FILE (added at the end when the markers are absent; the rest of the
file is kept).
"""
import argparse
import datetime
import os.path as osp
import tempfile

from tqdm import tqdm

from mcnet_basicsr.evaluation.evaluate import (QUICK_OVERRIDES, evaluate_option, in_directory, missing_inputs,
                                               read_option, resolve_device)
from mcnet_basicsr.evaluation.perturbations import NOISE_SIGMA, PERTURBATIONS, Y_NOISE_GAIN, make_lr_set
from mcnet_basicsr.utils.files import replace_section, write_json

REPO_ROOT = osp.abspath(osp.join(osp.dirname(__file__), osp.pardir))

# (backbone key, label, backbone option, MCNet option); {s} is the scale
PAIRS = (
    ('srcnn', 'SRCNN', 'options/test_srcnn_x{s}.yml', 'options/test_mcnet_srcnn_x{s}.yml'),
    ('rcan', 'RCAN', 'options/test_rcan_x{s}.yml', 'options/test_mcnet_rcan_x{s}.yml'),
    ('rcan_compact', 'RCAN_compact', 'options/test_rcan_compact_x{s}.yml', 'options/test_mcnet_rcan_compact_x{s}.yml'),
    ('imdn', 'IMDN', 'options/test_imdn_x{s}.yml', 'options/test_mcnet_imdn_x{s}.yml'),
    ('pan', 'PAN', 'options/test_pan_x{s}.yml', 'options/test_mcnet_pan_x{s}.yml'),
)
MD_SECTION = 'robustness'


# ---------------------------------------------------------------------------------------- evaluation
def load_option(pattern, scale, dataset, gt_dir, lq_dir, overrides):
    """Option dict on one dataset (GT and LR folders given), overrides applied; or (None, reason)."""
    path = pattern.format(s=scale)
    if not osp.isfile(path):
        return None, f'no option file {path}'
    opt = read_option(path, overrides)
    if opt.get('scale') != scale:
        return None, f'{path}: scale {opt.get("scale")} is not {scale}'
    first = next(iter(opt['datasets'].values()))
    opt['datasets'] = {'test_1': {**first, 'name': dataset, 'dataroot_gt': gt_dir, 'dataroot_lq': lq_dir}}
    missing = missing_inputs(opt)
    if missing:
        return None, f'{path}: missing {", ".join(missing)}'
    return opt, None


def variants(backbone_label, perturbation, eps_rms):
    """(variant, label, extra MCNet overrides, eps_rms) of the MCNet rows for one perturbation."""
    out = [('mcnet', f'MCNet + {backbone_label}', [], None)]
    if eps_rms == 'noise' and perturbation in NOISE_SIGMA:
        value = float(f'{NOISE_SIGMA[perturbation] * Y_NOISE_GAIN / 255.0:.4g}')
        out.append(('mcnet_eps_rms', f'MCNet + {backbone_label}, eps_rms = noise', [], value))
    elif eps_rms not in ('noise', 'none'):
        value = float(eps_rms)
        out.append(('mcnet_eps_rms', f'MCNet + {backbone_label}, eps_rms = {value:g}', [], value))
    return [(v, label, extra + ([] if e is None else ['network_g.eps=~', f'network_g.eps_rms={e!r}']), e)
            for v, label, extra, e in out]


def run(dataset='Set5', scale=2, perturbations=tuple(PERTURBATIONS), pairs=PAIRS, data_root='datasets',
        work_dir=None, seed=0, eps_rms='noise', quick=False, limit=None, device='auto', set_backbone=(), set_mcnet=(),
        log=print):
    """Evaluate every pair on every perturbation. Returns (records, skipped) with skipped = [{backbone, reason}]."""
    if quick:
        dev, limit = resolve_device('cpu'), 1
    else:
        dev = resolve_device(device)
    gt_dir = osp.join(data_root, dataset, f'HR_mod{scale}')
    lq_dir = osp.join(data_root, dataset, 'LR_bicubic', f'X{scale}')
    for d in (gt_dir, lq_dir):
        if not osp.isdir(d):
            raise FileNotFoundError(f'no folder {d}: prepare the data with scripts/prepare_datasets.py')
    mcnet_quick = list(QUICK_OVERRIDES['mcnet']) if quick else []

    # which pairs can run (check with the prepared data; the LR folder is swapped per perturbation)
    runnable, skipped = [], []
    for key, label, bb_pattern, mc_pattern in pairs:
        reasons = []
        for pattern, overrides in ((bb_pattern, set_backbone), (mc_pattern, mcnet_quick + list(set_mcnet))):
            _, reason = load_option(pattern, scale, dataset, gt_dir, lq_dir, overrides)
            if reason:
                reasons.append(reason)
        if reasons:
            skipped.append({'backbone': key, 'label': label, 'reason': '; '.join(reasons)})
            log(f'skip {label} pair: {"; ".join(reasons)}')
        else:
            runnable.append((key, label, bb_pattern, mc_pattern))

    jobs = []
    for p in perturbations:
        for key, label, bb_pattern, mc_pattern in runnable:
            jobs.append((p, key, 'backbone', label, bb_pattern, list(set_backbone), None))
            for variant, vlabel, extra, e in variants(label, p, eps_rms):
                jobs.append((p, key, variant, vlabel, mc_pattern, mcnet_quick + list(set_mcnet) + extra, e))

    records, lr_sets = [], {}
    with tempfile.TemporaryDirectory(prefix='robustness_') as tmp:
        root = work_dir or tmp
        bar = tqdm(jobs, desc='robustness', unit='run')
        for p, key, variant, label, pattern, overrides, e in bar:
            bar.set_postfix_str(f'{p} {label}')
            if p not in lr_sets:
                out_dir = osp.join(root, p, dataset, f'X{scale}')
                lr_sets[p] = (out_dir, make_lr_set(p, gt_dir, lq_dir, out_dir, scale, seed, limit))
            out_dir, b_change = lr_sets[p]
            opt, reason = load_option(pattern, scale, dataset, gt_dir, out_dir, overrides)
            if reason:  # checked above; a file removed meanwhile
                raise FileNotFoundError(reason)
            (rec, ) = evaluate_option(opt, dev, overrides, limit)
            rec.update(perturbation=p, variant=variant, label=label, backbone=key, eps_rms=e, b_change=b_change,
                       seed=seed)
            records.append(rec)
            bar.write(f"{p:8s} {label:36s} PSNR {rec['psnr']:.3f}  SSIM {rec['ssim']:.4f}  fid max "
                      f"{rec['fidelity']:.2e} mean {rec['fidelity_mean']:.2e}  |b'-b| {b_change:.2e}")
    return records, skipped


# ---------------------------------------------------------------------------------------- report
def markdown(records, skipped, dataset, scale, seed, quick=False):
    devices = sorted({r['device'] for r in records})
    images = sorted({r['images'] for r in records})
    overrides = sorted({o for r in records for o in r['overrides']})
    perts = list(dict.fromkeys(r['perturbation'] for r in records))
    md = f'## Robustness to perturbed LR inputs, {dataset} x{scale} (`scripts/robustness.py`)\n\n'
    if quick:
        md += ('**QUICK SMOKE RUN** (`--quick`: first image, CPU, loose MCNet solver). These numbers say nothing '
               'about the methods.\n\n')
    md += (f'Generated {datetime.date.today().isoformat()} on {", ".join(devices) or "-"}, '
           f'{"/".join(map(str, images)) or "-"} image(s), seed {seed}. The LR input b is perturbed, the ground '
           'truth is the unchanged HR; PSNR/SSIM on Y as in the tables above. Fidelity is ||A x - b||_2 (Y in '
           '[0, 1], float output) against the perturbed b the method saw, max over the images (mean); '
           "'change of b' is the mean ||b' - b||_2 of the perturbed b' from the prepared b. MCNet uses eps = 0 (exact "
           'projection onto the perturbed b) unless the row says eps_rms.\n')
    if overrides:
        md += f'Option overrides: `{"`, `".join(overrides)}`.\n'
    md += '\nPerturbations:\n\n' + ''.join(f'- `{p}` {PERTURBATIONS[p]}\n' for p in perts)
    for key in dict.fromkeys(r['backbone'] for r in records):
        rows = [r for r in records if r['backbone'] == key]
        labels = list(dict.fromkeys(r['label'] for r in rows))
        cell = {(r['perturbation'], r['label']): r for r in rows}
        head = "| perturbation | change of b | " + ' | '.join(labels) + ' |\n|---|---|' + '---|' * len(labels) + '\n'
        for title, fmt in (('PSNR (dB) / SSIM', lambda r: f"{r['psnr']:.2f} / {r['ssim']:.4f}"),
                           ('||A x - b||_2, max (mean)', lambda r: f"{r['fidelity']:.1e} ({r['fidelity_mean']:.1e})")):
            md += f'\n### {labels[0]}: {title}\n\n' + head
            for p in perts:
                b_change = next(r['b_change'] for r in rows if r['perturbation'] == p)
                md += (f'| {p} | {b_change:.1e} | ' +
                       ' | '.join(fmt(cell[(p, lab)]) if (p, lab) in cell else '-' for lab in labels) + ' |\n')
    md += (f'\n`eps_rms = noise`: eps_rms = sigma * {Y_NOISE_GAIN:.4f} / 255 (4 significant digits), the std of the '
           'added noise on Y.\n')
    if skipped:
        md += '\nSkipped: ' + '; '.join(f"{s['label']} ({s['reason']})" for s in skipped) + '.\n'
    return md


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--dataset', default='Set5')
    parser.add_argument('--scale', type=int, default=2)
    parser.add_argument('--perturbations', nargs='+', default=list(PERTURBATIONS), choices=list(PERTURBATIONS))
    parser.add_argument('--backbones', nargs='+', default=[p[0] for p in PAIRS], choices=[p[0] for p in PAIRS])
    parser.add_argument('--eps-rms', default='noise',
                        help="extra MCNet row: 'noise' (Gaussian cases, eps_rms = noise std on Y), a number (every "
                        "perturbation), or 'none'. Default: noise")
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--quick', action='store_true', help='first image, CPU, loose MCNet solver settings')
    parser.add_argument('--limit', type=int, help='first N images (ignored with --quick: 1)')
    parser.add_argument('--data-root', default='datasets', help='prepared data (<root>/<dataset>/HR_mod<s>, '
                        'LR_bicubic/X<s>)')
    parser.add_argument('--work-dir', help='keep the perturbed LR sets here (default: a temporary folder)')
    parser.add_argument('--device', default='auto', choices=['auto', 'cpu', 'cuda'], help='ignored with --quick')
    parser.add_argument('--set-backbone', action='append', default=[], metavar='KEY=VALUE',
                        help='override in the backbone option files (repeatable)')
    parser.add_argument('--set-mcnet', action='append', default=[], metavar='KEY=VALUE',
                        help='override in the MCNet option files (repeatable)')
    parser.add_argument('--out', help='write the JSON result here')
    parser.add_argument('--out-md', help=f'write the tables into this markdown file (section "{MD_SECTION}")')
    args = parser.parse_args(argv)
    for item in args.set_backbone + args.set_mcnet:
        if '=' not in item:
            parser.error(f'--set-backbone / --set-mcnet take KEY=VALUE, got {item!r}')
    if args.eps_rms not in ('noise', 'none'):
        try:
            if float(args.eps_rms) < 0:
                raise ValueError
        except ValueError:
            parser.error(f"--eps-rms takes 'noise', 'none' or a number >= 0, got {args.eps_rms!r}")
    pairs = [p for p in PAIRS if p[0] in args.backbones]
    data_root = osp.abspath(args.data_root)
    work_dir = osp.abspath(args.work_dir) if args.work_dir else None
    out, out_md = (osp.abspath(p) if p else None for p in (args.out, args.out_md))
    with in_directory(REPO_ROOT):
        records, skipped = run(args.dataset, args.scale, args.perturbations, pairs, data_root, work_dir, args.seed,
                               args.eps_rms, args.quick, args.limit, args.device, args.set_backbone, args.set_mcnet)
    result = {'dataset': args.dataset, 'scale': args.scale, 'seed': args.seed, 'quick': args.quick,
              'perturbations': {p: PERTURBATIONS[p] for p in args.perturbations}, 'records': records,
              'skipped': skipped}
    if out:
        write_json(out, result)
        print(f'wrote {out} ({len(records)} records, {len(skipped)} pairs skipped)')
    if out_md:
        replace_section(out_md, MD_SECTION, markdown(records, skipped, args.dataset, args.scale, args.seed, args.quick))
        print(f'wrote section "{MD_SECTION}" of {out_md}')
    return result


if __name__ == '__main__':
    main()
