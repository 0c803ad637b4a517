"""Fetch the third-party data sets and weights listed in mcnet_basicsr/zoo/assets.yml, with checksums.

    python scripts/fetch_assets.py                      # everything (about 130 MB), from GitHub
    python scripts/fetch_assets.py Set5 Set14 srcnn_955_imagenet
    python scripts/fetch_assets.py --from /path/to/copy # copy from a local folder instead (layout: the
                                                        # manifest's `mirror` paths, e.g. datasets/Set5/HR/)
    python scripts/fetch_assets.py --list               # names, sources, licences, what is present

Files land under the repository root (datasets/<Name>/HR/, experiments/pretrained_models/); weights
that need converting (official SRCNN .mat, IMDN, PAN) are converted into experiments/pretrained_models/.
Every file is verified against its SHA256 before it takes its final name; a mismatch deletes the
partial file and names it. Files already present with the right checksum are skipped; nothing is
replaced without --force. Then make BasicSR's evaluation folders and training LMDBs with
``python scripts/prepare_datasets.py``. Exit status: 0 done, 1 some files failed, 2 usage error.
"""
import argparse
import os.path as osp
import sys

from mcnet_basicsr.zoo.assets import AssetError, fetch, load_manifest, missing_outputs, select

REPO_ROOT = osp.abspath(osp.join(osp.dirname(__file__), osp.pardir))


def list_assets(names, root):
    for asset in select(load_manifest(), names):
        missing = missing_outputs(asset, root)
        state = 'present' if not missing else f'{len(missing)} of {len(asset.outputs())} missing'
        convert = f', converted ({asset.convert}) into {asset.out_dir}/' if asset.convert else ''
        print(f'{asset.name:20s} {len(asset.files):3d} file(s) -> {asset.dest}/{convert} [{state}]\n'
              f'{"":20s} in a --from copy: {osp.dirname(asset.files[0].mirror)}/\n'
              f'{"":20s} {asset.description}\n'
              f'{"":20s} from github.com/{asset.repo} @ {asset.commit}; terms: {asset.licence}')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('names', nargs='*', metavar='NAME', help='assets to fetch (default: all; see --list)')
    parser.add_argument('--from', dest='mirror', metavar='DIR',
                        help='copy from this local folder (laid out like the manifest\'s mirror paths) '
                        'instead of downloading')
    parser.add_argument('--root', default=REPO_ROOT, help='where datasets/ and experiments/ go (default: the '
                        'repository root)')
    parser.add_argument('--force', action='store_true', help='replace files and converted weights that exist')
    parser.add_argument('--list', action='store_true', help='list the assets and whether they are present')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        if args.list:
            list_assets(args.names, args.root)
            return 0
        failures = fetch(args.names, root=args.root, mirror=args.mirror, force=args.force)
        if not failures:
            return 0
        selected = select(load_manifest(), args.names)
        incomplete = sum(bool(missing_outputs(asset, args.root)) for asset in selected)
    except AssetError as err:
        print(f'error: {err}', file=sys.stderr)
        return 2
    print(f'{incomplete} of {len(selected)} asset(s) incomplete, {len(failures)} file(s) failed; running the command '
          'again retries what failed', file=sys.stderr)
    if args.mirror is None:
        print('offline: --from DIR copies the files from a folder of your own instead, laid out like the manifest\'s '
              'mirror paths (--list shows them)', file=sys.stderr)
    return 1


if __name__ == '__main__':
    sys.exit(main())
