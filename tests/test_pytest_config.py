"""pytest.ini and tests/conftest.py: the suite starts with and without pytest-xdist, and uses xdist's workers only
where it is installed (and only when the command line asks for none itself)."""
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO_ROOT

SELECTION = ['tests/test_layout.py', '-k', 'find_cycle_sees_a_cycle', '-v', '-p', 'no:cacheprovider']


def run_pytest(*args, **env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(('PYTEST_XDIST', 'PYTEST_ADDOPTS'))}
    return subprocess.run([sys.executable, '-m', 'pytest', *SELECTION, *args], cwd=REPO_ROOT, env=dict(clean, **env),
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_runs_in_one_process_where_xdist_is_missing():
    """No entry-point plugin loaded (as in an environment with pytest alone): the options pytest.ini and conftest
    name must not make pytest refuse to start."""
    proc = run_pytest(PYTEST_DISABLE_PLUGIN_AUTOLOAD='1')
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert '1 passed' in proc.stdout and 'xdist' not in proc.stdout and 'gw0' not in proc.stdout, proc.stdout


@pytest.mark.slow
def test_xdist_workers_with_work_stealing_unless_the_command_line_says_otherwise():
    pytest.importorskip('xdist')
    proc = run_pytest()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 'created:' in proc.stdout and 'WorkStealingScheduling' in proc.stdout, proc.stdout
    proc = run_pytest('-n', '0')
    assert proc.returncode == 0 and '1 passed' in proc.stdout and 'created:' not in proc.stdout, proc.stdout
    proc = run_pytest('-p', 'no:xdist')
    assert proc.returncode == 0 and '1 passed' in proc.stdout and 'created:' not in proc.stdout, proc.stdout


def test_no_test_monkeypatches_torchs_backend_flags():
    """Since pytest 9, monkeypatch's undo deletes an attribute it did not find in the object's ``__dict__``; torch
    serves ``torch.backends.cuda.matmul.allow_tf32`` through ``__getattr__``, so the undo raised an AttributeError in
    the teardown. The tests restore those flags by assignment (conftest's ``keep_tf32_flags``, ``set_tf32_flags``)."""
    pattern = re.compile(r'monkeypatch\.(setattr|delattr)\(\s*torch\.backends\b')
    offenders = [f'{path.name}:{n}' for path in sorted((REPO_ROOT / 'tests').glob('*.py'))
                 for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert not offenders, offenders
