"""Table R's runner (``mcnet_basicsr.evaluation.resizer_table``) on the colour-prior rows: the layer is made
consistent on R, G and B where its prior denoises them together, and a non-blind anchor (FFDNetPnP) is told the
resizer."""
import argparse
import json

import cv2
import numpy as np

from conftest import REPO_ROOT, sample_photo


def test_row_channels_follow_the_prior(monkeypatch):
    from mcnet_basicsr.evaluation.resizer_table import row_channels
    monkeypatch.chdir(REPO_ROOT)
    assert row_channels('mcnet_ffdnet_pnp', 4) == 'rgb'  # colour FFDNet: R, G and B together
    assert row_channels('mcnet_imdn', 4) == 'y'  # DnCNN6 on Y: the tables' protocol
    assert row_channels('ffdnet_pnp', 4) == 'y'  # no layer
    assert row_channels('no_such_row', 4) == 'y'


def test_colour_rows_run_told_the_resizer(tmp_path, monkeypatch):
    """FFDNetPnP told cv2-area and the layer around it, on a real photo: both well above bicubic upsampling of the
    same uint8 LR (Y-PSNR, the table's metric), the layer not below its anchor by more than noise."""
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
