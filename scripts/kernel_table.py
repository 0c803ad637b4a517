"""USRNet's Table 1 protocol (CBSD68, 12 blur kernels) for this project's rows, and the table beside the published
rows (``mcnet_basicsr.evaluation.kernel_table``).

    python scripts/kernel_table.py --rows imdn mcnet_imdn --families x3 x4 --out results/kernel_table.json
    python scripts/kernel_table.py --render results/kernel_table.json        # markdown table with published rows
    python scripts/kernel_table.py --render results/kernel_table.json --plot-dir results/   # and a chart per family
    python scripts/kernel_table.py --crops results/crops.png --rows imdn mcnet_imdn_kernels --families x4 \
        --image 101085.png --kernels 1                                          # LR, outputs and ground truth

Data: ``python scripts/fetch_assets.py CBSD68 usrnet_kernels imdn pan usrnet_tiny ffdnet_color``.
"""
import argparse
import os
import os.path as osp
import sys

FAMILIES = ('x2', 'x3', 'x3_n2.55', 'x3_n7.65', 'x4')  # mcnet_basicsr.evaluation.kernel_table.FAMILIES


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--rows', nargs='+', default=[], metavar='ROW',
                   help='option-file rows: imdn, pan, mcnet_imdn, mcnet_pan, tvtv_imdn, pnp, usrnet_tiny, ... '
                   '(options/test_<row>_x<s>.yml)')
    p.add_argument('--families', nargs='+', default=list(FAMILIES), choices=FAMILIES)
    p.add_argument('--kernels', nargs='+', type=int, default=list(range(1, 13)), metavar='K', help='1-based, of 12')
    p.add_argument('--images', type=int, default=None, metavar='N', help='first N images only (quick checks)')
    p.add_argument('--batch', type=int, default=8, help='images per forward (same orientation)')
    p.add_argument('--tol', type=float, default=1e-5, help="MCNet's forward tolerance (default 1e-5)")
    p.add_argument('--max-iter', type=int, default=200, help="MCNet's forward iteration cap (default 200)")
    p.add_argument('--device', default='auto')
    p.add_argument('--tf32', action='store_true',
                   help='convolutions in TF32 on NVIDIA GPUs (cells record it), for rows of fixed iterations (pnp, a '
                   'backbone alone; an MCNet row is refused). Default: float32')
    p.add_argument('--time-limit', type=float, default=None, metavar='S',
                   help='start no new cell after S seconds (the record keeps what is done; run again to go on)')
    p.add_argument('--data', default='datasets', help='folder with CBSD68/HR and kernels/kernels_12.mat')
    p.add_argument('--out', help='JSON record to write (rows are merged into an existing one)')
    p.add_argument('--render', nargs='+', metavar='JSON', help='print the table of records beside the published rows')
    p.add_argument('--published', default=osp.join('benchmarks', 'records', 'usrnet_table1_published.tsv'))
    p.add_argument('--plot-dir', metavar='DIR', help='with --render: also a chart per family, DIR/kernel_table_<f>.png')
    p.add_argument('--crops', metavar='PNG', help='a figure of crops of --image under the first of --families and '
                   '--kernels: the LR, each of --rows, the ground truth')
    p.add_argument('--image', help='a CBSD68 file name for --crops (e.g. 101085.png)')
    args = p.parse_args(argv)
    if args.crops and not (args.rows and args.image):
        p.error('--crops needs --rows and --image')
    if not args.render and not args.crops and not (args.rows and args.out):
        p.error('give --rows and --out to measure, --render JSON, or --crops PNG')
    if args.tf32 and any(row.startswith('mcnet_') for row in args.rows):
        p.error('--tf32 is for rows of fixed iterations (pnp, a backbone alone): an MCNet layer runs its solve in '
                'float32')
    if any(not 1 <= k <= 12 for k in args.kernels):
        p.error(f'--kernels are 1..12, got {args.kernels}')
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import mcnet_basicsr  # noqa: F401  (registries)
    from mcnet_basicsr.evaluation.kernel_table import FAMILIES as families
    from mcnet_basicsr.evaluation.kernel_table import RecordMismatch, crops_figure, measure, plot_family, render
    from mcnet_basicsr.utils.checkpoint import CheckpointError
    if args.render:
        print(render(args.render, args.published))
        if args.plot_dir:
            import cv2
            os.makedirs(args.plot_dir, exist_ok=True)
            for fam in families:
                try:
                    img = plot_family(args.render, args.published, fam, args.rows or None)
                except ValueError:
                    continue  # no row of this family
                cv2.imwrite(osp.join(args.plot_dir, f'kernel_table_{fam}.png'), img)
    elif args.crops:
        import cv2

        from mcnet_basicsr.evaluation.evaluate import resolve_device
        img = crops_figure(args.rows, args.image, args.kernels[0], args.families[0], resolve_device(args.device),
                           args.data)
        os.makedirs(osp.dirname(args.crops) or '.', exist_ok=True)
        cv2.imwrite(args.crops, img)
        print(f'wrote {args.crops}')
    else:
        try:
            measure(args)
        except (RecordMismatch, CheckpointError, FileNotFoundError) as err:  # weights or data not fetched yet
            print(f'kernel_table.py: error: {err}', file=sys.stderr)  # one line; the cells measured are kept
            sys.exit(2)


if __name__ == '__main__':
    main()
