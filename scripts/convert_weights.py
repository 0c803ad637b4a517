"""Convert third-party backbone weights into BasicSR checkpoints for our archs (see mcnet_basicsr.zoo.convert).

    python scripts/convert_weights.py --type srcnn_mat srcnn_955_imagenet_x2.mat srcnn_955_imagenet_x3.mat
    python scripts/convert_weights.py --type srcnn_pth TORCH/srcnn_x2.pth --out-dir /tmp/weights
    python scripts/convert_weights.py --type rdn RDN_x2.pt --name rdn_official_x2
    python scripts/convert_weights.py --type rcan RCAN_BIX2.pt --name RCAN_BIX2   # what options/*rcan_x2.yml read

Outputs go to experiments/pretrained_models/ (git-ignored: third-party conversions are never committed);
existing files are kept unless --force is given.
"""
import argparse
import logging
import os.path as osp
import sys

from mcnet_basicsr.zoo.convert import CONVERTERS, ConversionError, convert_weights

REPO_ROOT = osp.abspath(osp.join(osp.dirname(__file__), osp.pardir))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--type', required=True, choices=sorted(CONVERTERS), dest='kind', help='input format')
    parser.add_argument('inputs', nargs='+', help='input files')
    parser.add_argument(
        '--out-dir', default=osp.join(REPO_ROOT, 'experiments', 'pretrained_models'), help='output folder')
    parser.add_argument('--name', nargs='+', help='output file names, one per input (default: from the input name)')
    parser.add_argument('--force', action='store_true', help='overwrite existing outputs')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    try:
        convert_weights(args.kind, args.inputs, args.out_dir, args.name, args.force)
    except ConversionError as err:
        logging.getLogger('convert_weights').error('error: %s', err)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
