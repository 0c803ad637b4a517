"""The README's main command, `python -m mcnet_basicsr.demo` (it made docs/figures/demo.png), on one small photo with
the shipped weights."""
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
    assert fig is not None and fig.shape[1] == 6 * 256 + 5 * 4  # six panels of 96 px shown at 256 px, 4 px gaps
    # the compact RCAN's layer keeps eps_rms = 1/255/sqrt(12) per LR pixel: 48x48 LR pixels here
    assert psnr['RCAN-c (ours)'] > psnr['bicubic'] + 0.5
    assert rows['MCNet+RCAN-c'][2] <= 1.1320e-3 * 48 + 1e-5


def test_demo_figure_has_a_zoom_and_each_methods_fidelity(tmp_path, monkeypatch, capsys):
    """Each panel of the demo's figure is titled with its method's PSNR and ||Ax-b|| (the table's numbers), and the
    figure is mcnet-sr --compare's: full images above a zoomed crop, which in the ground-truth column is a
    nearest-neighbour enlargement of a crop of the HR photo."""
    import numpy as np

    from mcnet_basicsr import demo
    calls = []

    def recording(panels, scale):
        figure = compose_figure(panels, scale)
        calls.append((panels, figure))
        return figure

    compose_figure = demo.compose_figure
    monkeypatch.setattr(demo, 'compose_figure', recording)
    assert demo.main(['--photos', 'coffee', '--size', '48', '--out', str(tmp_path), '--device', 'cpu']) == 0
    table = {}
    for line in capsys.readouterr().out.splitlines():
        parts = line.split()
        if parts and parts[0] == 'coffee':
            table[' '.join(parts[1:-4])] = parts[-4:]
    (panels, figure), = calls
    titles = [title for title, _ in panels]
    assert len(titles) == len(table) + 1 and titles[-1].startswith('ground truth\n||Ax-b|| ')
    for title, (method, (psnr, _, fidelity, _)) in zip(titles, table.items()):
        assert title == f'{method} {psnr} dB\n||Ax-b|| {float(fidelity):.1e}', (title, method)
    assert np.array_equal(cv2.imread(str(tmp_path / 'coffee_x2.png')), figure)

    hr = demo.sample_hr('coffee', 48, 2)[:, :, ::-1]
    column = figure[:, -256:]  # the ground truth, shown 256 px wide
    zoom = column[-256:]
    found = [(y, x) for y in range(48 - 16 + 1) for x in range(48 - 16 + 1)
             if np.array_equal(cv2.resize(np.ascontiguousarray(hr[y:y + 16, x:x + 16]), (256, 256),
                                          interpolation=cv2.INTER_NEAREST), zoom)]
    assert found, 'the bottom row is not a zoomed crop of the ground truth'
