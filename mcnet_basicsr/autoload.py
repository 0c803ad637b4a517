"""Opt-in: make BasicSR's own ``basicsr/train.py`` and ``basicsr/test.py`` see mcnet_basicsr.

    python -m mcnet_basicsr.autoload install      # into this interpreter's site-packages
    python -m mcnet_basicsr.autoload install --user
    python -m mcnet_basicsr.autoload status
    python -m mcnet_basicsr.autoload uninstall

``install`` writes ``mcnet_basicsr_autoload.pth`` whose single line imports the stdlib-only
:mod:`mcnet_basicsr_hook` and activates it; see that module for what it does and costs.
"""
import argparse
import os
import site
import sys
import sysconfig

PTH_NAME = 'mcnet_basicsr_autoload.pth'
PTH_LINE = 'import mcnet_basicsr_hook; mcnet_basicsr_hook.activate()\n'


def site_dir(user=False, target=None):
    if target:
        return os.path.abspath(target)
    if user:
        return site.getusersitepackages()
    return sysconfig.get_paths()['purelib']


def install(directory):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, PTH_NAME)
    tmp = path + '.tmp'
    with open(tmp, 'w') as f:
        f.write(PTH_LINE)
    os.replace(tmp, path)
    return path


def uninstall(directory):
    path = os.path.join(directory, PTH_NAME)
    if os.path.exists(path):
        os.remove(path)
        return path
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(prog='python -m mcnet_basicsr.autoload', description=__doc__.splitlines()[0])
    parser.add_argument('action', choices=['install', 'uninstall', 'status'])
    where = parser.add_mutually_exclusive_group()
    where.add_argument('--user', action='store_true', help='use the user site-packages (PYTHONUSERBASE)')
    where.add_argument('--target', help='write into this directory (must be a site directory to take effect)')
    args = parser.parse_args(argv)
    directory = site_dir(args.user, args.target)
    if args.action == 'install':
        print(f'installed {install(directory)}: BasicSR scripts now import mcnet_basicsr after basicsr')
    elif args.action == 'uninstall':
        removed = uninstall(directory)
        print(f'removed {removed}' if removed else f'nothing to remove in {directory}')
    else:
        path = os.path.join(directory, PTH_NAME)
        active = 'mcnet_basicsr_hook' in sys.modules
        print(f'{path}: {"present" if os.path.exists(path) else "absent"}; active in this interpreter: {active}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
