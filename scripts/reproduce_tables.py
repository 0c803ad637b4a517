"""Run the rows of the paper's Table 2 (PSNR/SSIM) and Table 1 (data fidelity) that this project has.

Every row is a BasicSR test option file run through its model's validation by
``mcnet_basicsr.evaluation.evaluate.evaluate_option`` under the project protocol (see that module). Rows whose option
file, weights or data are missing are reported as skipped, with the reason. Writes a JSON list of records and a
markdown file with the tables (the paper's numbers are not included: we do not have them reliably).

    python scripts/reproduce_tables.py                 # all rows, x2/x3/x4, Set5 + Set14, GPU if present
    python scripts/reproduce_tables.py --quick         # smoke run: first Set5 image, x2, CPU, loose solvers
    python scripts/reproduce_tables.py --from-json benchmarks/records/results.json   # the tables from the records

Record keys: method (bicubic | pnp | backbone | tvtv | mcnet), backbone (none | srcnn | rdn | rcan | imdn | pan),
scale, dataset, psnr, ssim, fidelity (max ||Ax - b||_2 over the set, Y in [0, 1], float output),
seconds_per_image, iterations (mean; null for non-iterative rows), plus fidelity_mean, images,
option, device, overrides, and for MCNet iterations_max, converged (fraction of images whose solve reached
the tolerance) and residual_max (see mcnet_basicsr.evaluation).
"""
import argparse
import json
import os.path as osp
import re

from mcnet_basicsr.evaluation.evaluate import (QUICK_OVERRIDES, evaluate_option, in_directory, missing_inputs,
                                               read_option, resolve_device, restrict_datasets)
from mcnet_basicsr.evaluation.tables import DATASETS, ROWS, SCALES, key_of, markdown, row_label, to_record
from mcnet_basicsr.utils.files import write_json, write_text

REPO_ROOT = osp.abspath(osp.join(osp.dirname(__file__), osp.pardir))


def load_row(pattern, scale, quick, method, data_root, datasets, extra=()):
    """The option dict of one cell (with --quick / data-root changes), its overrides, or a skip reason."""
    path = pattern.format(s=scale)
    if not osp.isfile(path):
        return None, [], f'no option file {path}'
    overrides = (list(QUICK_OVERRIDES.get(method, [])) if quick else []) + list(extra)
    opt = restrict_datasets(read_option(path, overrides), datasets, data_root)
    missing = missing_inputs(opt)
    if missing:
        return None, overrides, f'{path}: missing {", ".join(missing)}'
    return opt, overrides, None


def run(quick=False, device='auto', data_root='datasets', limit=None, log=print, only=None, overrides_extra=()):
    """Evaluate every available cell. Returns (records, skipped) with skipped = [(label, scale, reason)].

    ``only``: regular expression; rows whose option pattern does not match it are left out (not skipped).
    ``overrides_extra``: ``(regex, 'key.path=value')`` pairs applied to the rows whose pattern matches.
    """
    if quick:
        dev, scales, datasets, limit = resolve_device('cpu'), (2, ), ('Set5', ), 1
    else:
        dev = resolve_device(device)
        scales, datasets = SCALES, DATASETS
    records, skipped = [], []
    for method, backbone, weights, pattern in ROWS:
        if only and not re.search(only, pattern):
            continue
        extra = [item for rx, item in overrides_extra if re.search(rx, pattern)]
        for s in scales:
            extra_s = [item.format(s=s) for item in extra]
            opt, overrides, reason = load_row(pattern, s, quick, method, data_root, datasets, extra_s)
            if reason:
                skipped.append((row_label(method, backbone, weights), s, reason))
                log(f'skip {row_label(method, backbone, weights)} x{s}: {reason}')
                continue
            for r in evaluate_option(opt, dev, overrides, limit):
                r['backbone_weights'] = weights
                records.append(to_record(r))
                log(f"{row_label(r['method'], r['backbone'], weights):32s} {r['dataset']:6s} x{s}  "
                    f"PSNR {r['psnr']:.3f}  "
                    f"SSIM {r['ssim']:.4f}  fid max {r['fidelity']:.2e}  {r['seconds_per_image']:.3f} s/img  "
                    f"iters {r['iterations']}")
    return records, skipped


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--quick', action='store_true', help='first Set5 image at x2 on CPU, loose solver settings')
    parser.add_argument('--device', default='auto', choices=['auto', 'cpu', 'cuda'], help='ignored with --quick')
    parser.add_argument('--data-root', default='datasets', help='prepared data (the option files say datasets/)')
    parser.add_argument('--limit', type=int, help='first N images per dataset')
    parser.add_argument('--out-json', default='benchmarks/records/results.json')
    parser.add_argument('--out-md', default='docs/results_tables.md')
    parser.add_argument('--only', help='regular expression on the option file pattern: run only those rows')
    parser.add_argument('--set', action='append', default=[], metavar='REGEX:KEY.PATH=VALUE',
                        help='override for the rows matching REGEX ({s} is the scale), e.g. '
                        '"test_pnp_x:network_g.denoiser.path=experiments/x.pth"')
    parser.add_argument('--from-json', nargs='+', metavar='JSON',
                        help='do not evaluate: merge these record files and write the tables from them')
    args = parser.parse_args(argv)
    extra = []
    for item in args.set:
        rx, sep, assignment = item.partition(':')
        if not sep or '=' not in assignment:
            parser.error(f'--set wants REGEX:KEY.PATH=VALUE, got {item!r}')
        extra.append((rx, assignment))
    # option files name their inputs relative to the repository root: run from there (both modes, so that the
    # skip reasons of --from-json are those a fresh run would give)
    out_json, out_md, data_root = (osp.abspath(p) for p in (args.out_json, args.out_md, args.data_root))
    from_json = [osp.abspath(p) for p in args.from_json or []]
    with in_directory(REPO_ROOT):
        if from_json:
            records = []
            for path in from_json:
                with open(path) as f:
                    records += json.load(f)
            skipped = rows_without_records(records, data_root)
        else:
            records, skipped = run(args.quick, args.device, data_root, args.limit, only=args.only,
                                   overrides_extra=extra)
    _write(out_json, out_md, records, skipped, args.quick)
    return records, skipped


def rows_without_records(records, data_root):
    """(label, scale, reason) for every table row the records do not have: why a fresh run would skip it
    (option file, weights or data missing here), else that the given files have no records for it."""
    have = {key_of(r)[:3] for r in records}
    skipped = []
    for method, backbone, weights, pattern in ROWS:
        if (method, backbone, weights) in have:
            continue
        for s in SCALES:
            _, _, reason = load_row(pattern, s, False, method, data_root, DATASETS)
            skipped.append((row_label(method, backbone, weights), s, reason or 'no records in the given files'))
    return skipped


def _write(out_json, out_md, records, skipped, quick):
    write_json(out_json, records)
    write_text(out_md, markdown(records, skipped, quick))
    print(f'wrote {out_json} ({len(records)} records) and {out_md}; {len(skipped)} cells skipped')


if __name__ == '__main__':
    main()
