"""Table R: LR made by Pillow / OpenCV / torch resizers (and MATLAB bicubic), rounded to uint8, for this project's
option-file rows: a backbone alone, MCNet assuming MATLAB bicubic, MCNet told the true resizer (``<row>@true``)
(``mcnet_basicsr.evaluation.resizer_table``).

    python scripts/resizer_table.py --scale 4 --rows imdn mcnet_imdn mcnet_imdn@true --out results/resizer_table.json

Data: ``python scripts/fetch_assets.py Set5 Set14 imdn``.
"""
import argparse
import sys

DEGRADATIONS = ('matlab-bicubic', 'pil-bicubic', 'cv2-cubic', 'cv2-linear', 'cv2-area', 'torch-bicubic')


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--scale', type=int, required=True, choices=(2, 3, 4))
    p.add_argument('--rows', nargs='+', required=True, metavar='ROW',
                   help='options/test_<row>_x<s>.yml rows; <row>@true: told the resizer that made the LR')
    p.add_argument('--degradations', nargs='+', default=list(DEGRADATIONS), metavar='NAME',
                   help='names of mcnet_basicsr.ops.DEGRADATIONS (default: %(default)s)')
    p.add_argument('--sets', nargs='+', default=['Set5', 'Set14'])
    p.add_argument('--tol', type=float, default=1e-4, help="MCNet's forward tolerance (default 1e-4)")
    p.add_argument('--max-iter', type=int, default=100)
    p.add_argument('--device', default='auto')
    p.add_argument('--data', default='datasets', help='folder with <Set>/HR')
    p.add_argument('--out', required=True, help='JSON record (cells already in it are skipped)')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import mcnet_basicsr  # noqa: F401  (registries)
    from mcnet_basicsr.evaluation.kernel_table import RecordMismatch
    from mcnet_basicsr.evaluation.resizer_table import measure
    from mcnet_basicsr.utils.checkpoint import CheckpointError
    try:
        measure(args)
    except (RecordMismatch, CheckpointError, FileNotFoundError) as err:  # weights or data not fetched yet
        print(f'resizer_table.py: error: {err}', file=sys.stderr)  # one line; the cells measured are kept
        sys.exit(2)


if __name__ == '__main__':
    main()
