"""Evaluate BasicSR test option files under the project's protocol and write JSON records.

The protocol and the record keys are documented in ``mcnet_basicsr.evaluation``.

    python scripts/evaluate.py -opt options/test_mcnet_srcnn_x2.yml --out results.json
    python scripts/evaluate.py -opt options/test_mcnet_srcnn_x2.yml \
        --set network_g.settings.solver.forward.tol=1e-4 --set path.pretrain_network_g=~
"""
import argparse

from mcnet_basicsr.evaluation.evaluate import check_set_items, evaluate_option, read_option, resolve_device
from mcnet_basicsr.utils.files import read_json_list, write_json
from mcnet_basicsr.zoo.assets import exit_if_inputs_missing


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
    device = resolve_device(args.device)
    opts = []
    for path in args.opt:
        opt = read_option(path, args.set)
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
        write_json(args.out, read_json_list(args.out) + all_records)
    return all_records


if __name__ == '__main__':
    main()
