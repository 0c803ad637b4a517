"""The README's main command, `python -m mcnet_basicsr.demo`, on one small photo with the shipped weights."""
import subprocess
import sys

import cv2
import pytest

from conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # runs the demo in a subprocess


def test_demo_end_to_end(tmp_path):
    proc = subprocess.run([sys.executable, '-m', 'mcnet_basicsr.demo', '--photos', 'coffee', '--size', '96', '--out',
                           str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if parts and parts[0] == 'coffee':
            method = ' '.join(parts[1:-4])
            rows[method] = [float(v) for v in parts[-4:]]
    assert set(rows) == {'bicubic', 'SRCNN (ours)', 'MCNet+SRCNN', 'RCAN-c (ours)', 'MCNet+RCAN-c'}, proc.stdout
    psnr = {m: v[0] for m, v in rows.items()}
    # shipped weights do their job on a real photo: SRCNN beats bicubic, MCNet beats SRCNN
    assert psnr['SRCNN (ours)'] > psnr['bicubic'] + 0.5
    assert psnr['MCNet+SRCNN'] > psnr['SRCNN (ours)']
    # eps = 0: MCNet's output reproduces the LR input; the others do not
    assert rows['MCNet+SRCNN'][2] <= 1e-5 < rows['SRCNN (ours)'][2]
    fig = cv2.imread(str(tmp_path / 'coffee_x2.png'))
    assert fig is not None and fig.shape[1] == 6 * 96
    # the compact RCAN's layer keeps eps_rms = 1/255/sqrt(12) per LR pixel: 48x48 LR pixels here
    assert psnr['RCAN-c (ours)'] > psnr['bicubic'] + 0.5
    assert rows['MCNet+RCAN-c'][2] <= 1.1320e-3 * 48 + 1e-5
