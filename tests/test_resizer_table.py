"""Table R's runner (``mcnet_basicsr.evaluation.resizer_table``) on the colour-prior rows: the layer is made
consistent on R, G and B where its prior denoises them together, and a non-blind anchor (FFDNetPnP) is told the
resizer."""
import argparse
import json

import cv2
import numpy as np
import pytest
import yaml

from conftest import REPO_ROOT, load_script, sample_photo


def test_row_channels_follow_the_prior(monkeypatch):
    from mcnet_basicsr.evaluation.resizer_table import row_channels
    monkeypatch.chdir(REPO_ROOT)
    assert row_channels('mcnet_ffdnet_pnp', 4) == 'rgb'  # colour FFDNet: R, G and B together
    assert row_channels('mcnet_imdn', 4) == 'y'  # DnCNN6 on Y: the tables' protocol
    assert row_channels('ffdnet_pnp', 4) == 'y'  # no layer
    assert row_channels('no_such_row', 4) == 'y'


def test_colour_rows_run_told_the_resizer(tmp_path, monkeypatch):
    """FFDNetPnP told cv2-area and the layer around it, on a real photo: both well above bicubic upsampling of the
    same uint8 LR (Y-PSNR, the table's metric), the layer not below its anchor by more than noise; the layer's cell
    holds whether its solves reached the tolerance, their largest final residual and their iterations."""
    import torch

    from mcnet_basicsr.evaluation.resizer_table import measure
    from mcnet_basicsr.metrics.y_uint8 import y_uint8_metrics
    from mcnet_basicsr.utils.color import luma
    hr = sample_photo('astronaut', 96, (200, 200))
    (tmp_path / 'Tiny' / 'HR').mkdir(parents=True)
    cv2.imwrite(str(tmp_path / 'Tiny' / 'HR' / 'a.png'), hr[:, :, ::-1])
    lr = cv2.resize(hr, (24, 24), interpolation=cv2.INTER_AREA)
    up = cv2.resize(lr, (96, 96), interpolation=cv2.INTER_CUBIC)
    bicubic = y_uint8_metrics(luma(torch.from_numpy(up.transpose(2, 0, 1)[None] / 255.0)), hr[:, :, ::-1], 4)[0]
    out = tmp_path / 'r.json'
    monkeypatch.chdir(REPO_ROOT)
    measure(argparse.Namespace(scale=4, rows=['ffdnet_pnp@true', 'mcnet_ffdnet_pnp@true'], degradations=['cv2-area'],
                               sets=['Tiny'], tol=1e-4, max_iter=60, device='cpu', data=str(tmp_path), out=str(out)))
    cells = json.loads(out.read_text())['cells']
    anchor, layer = (cells[f'{row}|x4|cv2-area|Tiny']['psnr'] for row in ('ffdnet_pnp@true', 'mcnet_ffdnet_pnp@true'))
    assert np.isfinite([anchor, layer]).all()
    assert anchor > bicubic + 0.5, (anchor, bicubic)  # 25.67 against 24.37 when written
    assert layer > anchor - 0.05, (layer, anchor)
    solve = cells['mcnet_ffdnet_pnp@true|x4|cv2-area|Tiny']  # the layer's cell records what its solves did
    assert 'converged' not in cells['ffdnet_pnp@true|x4|cv2-area|Tiny']  # no solve
    assert (solve['converged'] == 1.0) == (solve['residual_max'] <= 1e-4) and 1 <= solve['iterations'] <= 60


def test_fixed_iteration_rows_record_no_solve_statistics(tmp_path, monkeypatch):
    """PnP-ADMM runs a fixed number of iterations and never 'converges': its cell, consistent as it is, holds no
    solve statistics (the kernel table's rule: only an MCNet layer solves to a tolerance)."""
    from mcnet_basicsr.evaluation.resizer_table import measure
    (tmp_path / 'Tiny' / 'HR').mkdir(parents=True)
    cv2.imwrite(str(tmp_path / 'Tiny' / 'HR' / 'a.png'), sample_photo('astronaut', 48, (200, 200))[:, :, ::-1])
    out = tmp_path / 'r.json'
    monkeypatch.chdir(REPO_ROOT)
    measure(argparse.Namespace(scale=2, rows=['pnp@true'], degradations=['cv2-area'], sets=['Tiny'], tol=1e-4,
                               max_iter=60, device='cpu', data=str(tmp_path), out=str(out)))
    cell = json.loads(out.read_text())['cells']['pnp@true|x2|cv2-area|Tiny']
    assert np.isfinite(cell['psnr']) and not {'converged', 'residual_max', 'iterations'} & set(cell)


@pytest.mark.parametrize('script, missing', [('resizer_table', 'not_fetched_x2.pth'), ('resizer_table', 'Nope'),
                                             ('kernel_table', 'kernels_12.mat')])
def test_missing_weights_or_data_stop_the_table_with_one_line(script, missing, tmp_path, monkeypatch, capsys):
    """A row whose option file names backbone weights that are not there (third-party ones not fetched yet), a set
    or the kernels not in the data folder: the table script says what is missing in one line and exits 2, the record
    as it was."""
    opt = yaml.safe_load((REPO_ROOT / 'options' / 'test_mcnet_rcan_compact_x2.yml').read_text())
    opt['network_g']['backbone']['path'] = 'experiments/pretrained_models/not_fetched_x2.pth'
    opt['path']['pretrain_network_g'] = str(REPO_ROOT / opt['path']['pretrain_network_g'])
    (tmp_path / 'options').mkdir()
    (tmp_path / 'options' / 'test_unfetched_x2.yml').write_text(yaml.safe_dump(opt))
    record = tmp_path / 'r.json'
    record.write_text('{}')
    args = (['--scale', '2', '--rows', 'unfetched@true', '--degradations', 'cv2-area'] if script == 'resizer_table'
            else ['--rows', 'unfetched', '--families', 'x2'])
    if missing == 'Nope':  # a set not fetched, for a row whose weights ship
        args = ['--scale', '2', '--rows', 'mcnet_rcan_compact@true', '--degradations', 'cv2-area', '--sets', 'Nope']
    monkeypatch.chdir(REPO_ROOT if missing == 'Nope' else tmp_path)
    with pytest.raises(SystemExit) as stop:
        load_script(script).main(args + ['--data', str(tmp_path), '--device', 'cpu', '--out', str(record)])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f'{script}.py: error: ') and missing in err, err
    assert record.read_text() == '{}'
