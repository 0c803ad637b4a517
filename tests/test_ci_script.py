""".ci/run tests what a new user installs: every run makes a fresh virtual environment in a temporary folder, runs the
README's test command verbatim inside it, and removes the folder on exit. The script runs here with a stand-in
``python3`` whose ``-m venv`` writes an ``activate`` that only records, for each ``pip`` and ``python`` call, the
environment it ran in and its arguments."""
import os
import shlex
import shutil
import subprocess

import pytest

from conftest import REPO_ROOT

FAKE_PYTHON3 = r'''#!/usr/bin/env bash
# stand-in for "python3 -m venv DIR": an environment whose pip and python only log their calls
[ "$1" = -m ] && [ "$2" = venv ] || exit 64
mkdir -p "$3/bin"
cat > "$3/bin/activate" <<EOF
export VIRTUAL_ENV="$3"
pip() { printf '%s|pip %s\n' "\$VIRTUAL_ENV" "\$*" >> "\$CI_LOG"; [ -z "\${CI_FAIL:-}" ]; }
python() { printf '%s|python %s\n' "\$VIRTUAL_ENV" "\$*" >> "\$CI_LOG"; }
EOF
'''

OUTSIDE = """#!/usr/bin/env bash
printf '|{} %s\\n' "$*" >> "$CI_LOG"
"""


def readme_test_command():
    """The README's test command: its one indented code line that runs pytest."""
    lines = [line.strip() for line in (REPO_ROOT / 'README.md').read_text().splitlines()
             if line.startswith('    ') and 'python -m pytest' in line]
    assert len(lines) == 1, lines
    return lines[0]


def run_ci(tmp_path, **env):
    bin_dir, scratch = tmp_path / 'bin', tmp_path / 'tmp'
    bin_dir.mkdir(exist_ok=True)
    scratch.mkdir(exist_ok=True)
    # outside an environment, pip and python are stand-ins too: they log with no environment and install nothing
    for name, text in (('python3', FAKE_PYTHON3), ('pip', OUTSIDE.format('pip')), ('python', OUTSIDE.format('python'))):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / 'log'
    log.write_text('')
    proc = subprocess.run(['bash', str(REPO_ROOT / '.ci' / 'run')], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PATH=f'{bin_dir}{os.pathsep}{os.environ["PATH"]}', TMPDIR=str(scratch),
                                   CI_LOG=str(log), **env))
    calls = [line.split('|', 1) for line in log.read_text().splitlines()]
    return proc, calls, scratch


@pytest.mark.skipif(shutil.which('bash') is None, reason='.ci/run is a bash script')
def test_ci_runs_the_readmes_test_command_in_a_fresh_environment_and_removes_it(tmp_path):
    command = readme_test_command()
    assert command in (REPO_ROOT / '.ci' / 'run').read_text().splitlines()
    expected = [' '.join(shlex.split(part)) for part in command.split(' && ')]
    venvs = []
    for _ in range(2):
        proc, calls, scratch = run_ci(tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert [call for _, call in calls] == expected
        envs = {env for env, _ in calls}
        assert len(envs) == 1 and os.path.dirname(os.path.dirname(envs.pop())).startswith(str(scratch))
        venvs.append(calls[0][0])
        assert not os.listdir(scratch)  # the temporary folder is gone after the run
    assert venvs[0] != venvs[1]  # a new environment for every run


@pytest.mark.skipif(shutil.which('bash') is None, reason='.ci/run is a bash script')
def test_ci_fails_when_the_install_fails_and_still_cleans_up(tmp_path):
    proc, calls, scratch = run_ci(tmp_path, CI_FAIL='1')
    assert proc.returncode != 0 and len(calls) == 1 and calls[0][1].startswith('pip install torch')
    assert not os.listdir(scratch)
