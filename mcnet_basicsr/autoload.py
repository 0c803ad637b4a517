"""Opt-in: make BasicSR's own ``basicsr/train.py`` and ``basicsr/test.py`` see mcnet_basicsr.

    python -m mcnet_basicsr.autoload install      # into this interpreter's site-packages
    python -m mcnet_basicsr.autoload install --user
    python -m mcnet_basicsr.autoload status
    python -m mcnet_basicsr.autoload uninstall

``install`` writes ``mcnet_basicsr_autoload.pth`` whose single line imports the stdlib-only
:mod:`mcnet_basicsr_hook` and activates it; see that module for what it does and costs.

Python reads ``.pth`` files only in its site directories: site-packages, and the user site-packages
when user site is enabled (it is off in a virtual environment without ``--system-site-packages``, under
``python -s`` and with ``PYTHONNOUSERSITE``). ``install --user`` refuses where it is off, ``install
--target`` warns when the folder is not a site directory, and ``status`` says ``active`` only when a
new interpreter started like this one loads the hook (exit status 0; 1 otherwise, with the reason).
"""
import argparse
import os
import site
import subprocess
import sys
import sysconfig
import tempfile

PTH_NAME = 'mcnet_basicsr_autoload.pth'
PTH_LINE = 'import mcnet_basicsr_hook; mcnet_basicsr_hook.activate()\n'


def site_dir(user=False, target=None):
    if target:
        return os.path.abspath(target)
    if user:
        return site.getusersitepackages()
    return sysconfig.get_paths()['purelib']


def processed_site_dirs():
    """The directories whose ``.pth`` files this interpreter runs at start-up."""
    dirs = list(site.getsitepackages()) if hasattr(site, 'getsitepackages') else []
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [os.path.realpath(d) for d in dirs]


def fresh_interpreter_has_hook():
    """Whether a new interpreter started like this one (same executable, environment and -s/-E/-I flags, another
    working directory) has the hook's finder installed: what BasicSR's scripts would get."""
    flags = [f for f, on in (('-s', sys.flags.no_user_site), ('-E', sys.flags.ignore_environment),
                             ('-I', sys.flags.isolated)) if on]
    code = 'import sys; print(any(type(f).__name__ == "BasicsrPluginFinder" for f in sys.meta_path))'
    proc = subprocess.run([sys.executable, *flags, '-c', code], cwd=tempfile.gettempdir(), capture_output=True,
                          text=True, timeout=120)
    return proc.stdout.strip() == 'True'


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
    if args.action == 'status':
        return status()
    if args.action == 'install' and args.user and not site.ENABLE_USER_SITE:
        print('error: user site-packages are disabled for this interpreter (a virtual environment without '
              '--system-site-packages, python -s or PYTHONNOUSERSITE), so a hook there would never load; run '
              f'"{os.path.basename(sys.executable)} -m mcnet_basicsr.autoload install" without --user to install '
              f'into this environment ({site_dir()})', file=sys.stderr)
        return 2
    directory = site_dir(args.user, args.target)
    if args.action == 'install':
        print(f'installed {install(directory)}: BasicSR scripts now import mcnet_basicsr after basicsr')
        if os.path.realpath(directory) not in processed_site_dirs():
            print(f'warning: {directory} is not a site directory of this interpreter; the hook loads only where '
                  'Python reads .pth files from it (site.addsitedir)', file=sys.stderr)
    else:
        removed = uninstall(directory)
        print(f'removed {removed}' if removed else f'nothing to remove in {directory}')
    return 0


def status():
    found = [d for d in processed_site_dirs() if os.path.isfile(os.path.join(d, PTH_NAME))]
    if fresh_interpreter_has_hook():
        print(f'active: BasicSR scripts run by {sys.executable} import mcnet_basicsr '
              f'(hook file in {", ".join(found) or "a site directory"})')
        return 0
    if found:
        print(f'not active: {", ".join(found)} holds {PTH_NAME}, but a new interpreter does not load the hook '
              '(is mcnet_basicsr_hook importable there? install the package into this environment)')
    else:
        print(f'not active: no {PTH_NAME} in the site directories of {sys.executable} '
              f'({", ".join(processed_site_dirs())})')
    return 1


if __name__ == '__main__':
    sys.exit(main())
