"""The opt-in start-up hook's command line tells the truth about where the hook can load."""
import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, make_venv, repo_env

pytestmark = pytest.mark.slow  # every test starts interpreters (and one a venv)

PTH = 'mcnet_basicsr_autoload.pth'


def _autoload(python, *args, flags=(), env=None):
    return subprocess.run([str(python), *flags, '-m', 'mcnet_basicsr.autoload', *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_user_install_refused_where_user_site_is_off(tmp_path):
    """Under ``python -s`` (as in a venv without system site-packages) a --user hook would never load."""
    env = repo_env(PYTHONUSERBASE=str(tmp_path / 'userbase'))
    proc = _autoload(sys.executable, 'install', '--user', flags=('-s', ), env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert 'user site-packages are disabled' in proc.stderr and 'without --user' in proc.stderr
    assert not (tmp_path / 'userbase').exists(), 'something was written although it could never load'


def test_status_in_a_venv_follows_install_and_uninstall(tmp_path):
    python = make_venv(tmp_path / 'venv')
    env = repo_env(PYTHONUSERBASE=str(tmp_path / 'userbase'))
    env.pop('PYTHONNOUSERSITE', None)
    proc = _autoload(python, 'status', env=env)
    assert proc.returncode == 1 and proc.stdout.startswith('not active: no ' + PTH), proc.stdout + proc.stderr

    proc = _autoload(python, 'install', env=env)
    assert proc.returncode == 0 and 'warning' not in proc.stderr, proc.stderr
    site_packages = subprocess.run([str(python), '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
                                   capture_output=True, text=True, check=True).stdout.strip()
    assert os.path.isfile(os.path.join(site_packages, PTH))
    proc = _autoload(python, 'status', env=env)
    assert proc.returncode == 0 and proc.stdout.startswith('active:'), proc.stdout + proc.stderr

    # a hook file outside any site directory does nothing: install says so, status does not count it
    proc = _autoload(python, 'install', '--target', str(tmp_path / 'elsewhere'), env=env)
    assert proc.returncode == 0 and 'is not a site directory' in proc.stderr
    proc = _autoload(python, 'uninstall', env=env)
    assert proc.returncode == 0 and not os.path.exists(os.path.join(site_packages, PTH))
    proc = _autoload(python, 'status', env=env)
    assert proc.returncode == 1 and proc.stdout.startswith('not active'), proc.stdout
