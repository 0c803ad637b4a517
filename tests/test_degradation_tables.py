"""The two degradation tables' runners (scripts/kernel_table.py, scripts/resizer_table.py) on a tiny set: each cell is
the PSNR an independent computation gives (the protocol's LR by scipy / OpenCV themselves, bicubic upsampling, the
metric), and the kernel table renders beside the published rows."""
import json
import os
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
import scipy.io
import torch

from conftest import REPO_ROOT, load_script, sample_photo
from mcnet_basicsr.data.degradations import psnr_rgb_uint8, usrnet_mod_crop
from mcnet_basicsr.data.kernel_family import gaussian_kernel
from mcnet_basicsr.metrics.y_uint8 import y_uint8_metrics
from mcnet_basicsr.ops import imresize
from mcnet_basicsr.utils.color import luma


@pytest.fixture
def data(tmp_path):
    for name in ('CBSD68', 'Set5'):
        (tmp_path / name / 'HR').mkdir(parents=True)
    for name, size in (('astronaut', (100, 90)), ('coffee', (90, 100))):
        img = sample_photo(name, size)[:, :, ::-1]
        cv2.imwrite(str(tmp_path / 'CBSD68' / 'HR' / f'{name}.png'), img)
        cv2.imwrite(str(tmp_path / 'Set5' / 'HR' / f'{name}.png'), img)
    (tmp_path / 'kernels').mkdir()
    kernels = np.empty((1, 12), dtype=object)
    for i in range(12):
        kernels[0, i] = gaussian_kernel(25, 0.7 + 0.2 * i).astype(np.float32)
    scipy.io.savemat(tmp_path / 'kernels' / 'kernels_12.mat', {'kernels': kernels})
    return tmp_path


def test_kernel_table_cell_is_the_protocols_psnr_and_renders(data, monkeypatch, keep_tf32_flags):
    from scipy import ndimage

    from mcnet_basicsr.evaluation.kernel_table import build_row, measure, render
    monkeypatch.chdir(REPO_ROOT)  # option files are read from options/
    out = data / 'k.json'
    measure(SimpleNamespace(rows=['bicubic'], families=['x3'], kernels=[2], images=None, batch=2, tol=1e-4,
                            max_iter=5, device='cpu', data=str(data), out=str(out), time_limit=None, tf32=False))
    cell = json.loads(out.read_text())['cells']['bicubic|x3|k2']
    assert 'tf32' not in cell and not torch.backends.cudnn.allow_tf32
    k = gaussian_kernel(25, 0.9).astype(np.float32).astype(np.float64)
    psnrs = []
    for name in ('astronaut', 'coffee'):
        hr = usrnet_mod_crop(cv2.imread(str(data / 'CBSD68' / 'HR' / f'{name}.png'))[:, :, ::-1], 3)
        lr = ndimage.convolve(np.ascontiguousarray(hr), k[..., None], mode='wrap')[0::3, 0::3] / np.float32(255)
        up = imresize(torch.from_numpy(lr.astype(np.float32)).permute(2, 0, 1)[None], 3)
        sr = (up.clamp(0, 1) * 255).round().byte()[0].permute(1, 2, 0).numpy()
        psnrs.append(psnr_rgb_uint8(sr, hr, 9))
    assert cell['images'] == 2 and cell['psnr'] == pytest.approx(np.mean(psnrs), abs=1e-9)
    published = REPO_ROOT / 'benchmarks' / 'records' / 'usrnet_table1_published.tsv'
    table = render([str(out)], str(published))
    assert '| USRNet (published) | 27.16 | 27.76 |' in table and '| bicubic | - | ' in table
    # --tf32: cuDNN's convolutions only (the separable projections' matrix products stay float32), and the cells say so
    measure(SimpleNamespace(rows=['bicubic'], families=['x3'], kernels=[2], images=None, batch=2, tol=1e-4,
                            max_iter=5, device='cpu', data=str(data), out=str(data / 'k32.json'), time_limit=None,
                            tf32=True))
    cell32 = json.loads((data / 'k32.json').read_text())['cells']['bicubic|x3|k2']
    assert cell32['tf32'] is True and cell32['psnr'] == cell['psnr']  # no TF32 on a CPU
    assert torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
    with pytest.raises(ValueError, match='fixed iterations'):  # an MCNet layer keeps its float32 solve
        build_row('mcnet_srcnn', 2, torch.device('cpu'), 1e-4, 5, tf32=True)


def test_a_row_takes_another_backbone_file(tmp_path, monkeypatch):
    """``build_row(..., backbone_path=...)``: an MCNet row's layer around another checkpoint of its backbone (an anchor
    in training), everything else as its option file says; a row that is no MCNet layer refuses it."""
    from mcnet_basicsr.evaluation.kernel_table import build_row
    monkeypatch.chdir(REPO_ROOT)
    shipped = torch.load('mcnet_basicsr/weights/ffdnet_unfolded16_x2.pth', map_location='cpu')['params']
    other = {k: v * 0.5 if v.is_floating_point() else v for k, v in shipped.items()}
    torch.save({'params': other}, tmp_path / 'anchor.pth')
    net, consistent = build_row('mcnet_ffdnet_unfolded16', 2, torch.device('cpu'), 1e-4, 5,
                                backbone_path=str(tmp_path / 'anchor.pth'))
    base, _ = build_row('mcnet_ffdnet_unfolded16', 2, torch.device('cpu'), 1e-4, 5)
    assert consistent
    loaded, before = net.backbone.state_dict(), base.backbone.state_dict()
    assert loaded.keys() == other.keys()
    assert all(torch.equal(loaded[k], other[k].to(loaded[k].dtype)) for k in other)
    assert not all(torch.equal(loaded[k], before[k]) for k in loaded)  # not the file the option names
    assert all(torch.equal(v, base.denoiser.state_dict()[k]) for k, v in net.denoiser.state_dict().items())
    with pytest.raises(ValueError, match='backbone_path is for MCNet layers'):
        build_row('ffdnet_unfolded16', 2, torch.device('cpu'), 1e-4, 5, backbone_path=str(tmp_path / 'anchor.pth'))


def test_solve_summary_counts_an_image_converged_only_if_each_channel_is():
    """A cell's solve statistics over batches of images (their R, G, B the samples): images whose every channel
    reached the tolerance, the largest residual of any sample, iterations averaged per image then over images."""
    from mcnet_basicsr.deq.config import SolverStats
    from mcnet_basicsr.evaluation.kernel_table import solve_summary
    two = SolverStats(iterations=torch.tensor([4, 4, 4, 10, 10, 100]), residual=torch.tensor([1e-5] * 5 + [3e-3]),
                      converged=torch.tensor([True] * 5 + [False]))  # the second image's B channel stopped short
    one = SolverStats(iterations=torch.tensor([7, 7, 7]), residual=torch.tensor([2e-5, 5e-5, 1e-5]),
                      converged=torch.tensor([True] * 3))
    summary = solve_summary([(two, 2), (one, 1)])
    assert summary['converged'] == pytest.approx(2 / 3) and summary['residual_max'] == pytest.approx(3e-3)
    assert summary['iterations'] == pytest.approx((4 + 40 + 7) / 3)
    assert solve_summary([]) == {}


def test_kernel_table_script_refuses_tf32_for_mcnet_rows(capsys, tmp_path):
    with pytest.raises(SystemExit):
        load_script('kernel_table').main(['--rows', 'pnp', 'mcnet_imdn', '--tf32', '--out', str(tmp_path / 'k')])
    assert 'fixed iterations' in capsys.readouterr().err and not (tmp_path / 'k').exists()


def test_a_record_keeps_one_device_and_one_mcnet_solver_setting(data, monkeypatch, capsys):
    """A run that would put cells of another device, or MCNet cells of another solver setting, into a record is refused
    with one line before it measures anything; rows without an MCNet solve join it and leave its setting as it is."""
    from mcnet_basicsr.evaluation.kernel_table import RecordMismatch, join_record, measure
    solver, cpu = {'tol': 1e-4, 'max_iter': 200}, torch.device('cpu')
    record = {'device': 'cpu', 'mcnet_solver': dict(solver), 'cells': {'mcnet_imdn_kernels|x3|k1': {'psnr': 26.0}}}
    with pytest.raises(RecordMismatch, match='same --tol'):
        join_record(record, 'k.json', cpu, {'tol': 1e-5, 'max_iter': 200}, ['mcnet_pan_kernels'])
    gpu_record = dict(record, device='NVIDIA H200')
    with pytest.raises(RecordMismatch, match='one device per record'):
        join_record(gpu_record, 'k.json', cpu, solver, ['pnp'])
    resizer_record = {'device': 'cpu', 'mcnet_solver': dict(solver), 'cells': {'mcnet_imdn@true|x4|cv2-area|Set5': {}}}
    with pytest.raises(RecordMismatch):
        join_record(resizer_record, 'r.json', cpu, {'tol': 1e-4, 'max_iter': 50}, ['mcnet_imdn@true'])
    join_record(record, 'k.json', cpu, {'tol': 1e-5, 'max_iter': 200}, ['pnp', 'tvtv_imdn'])
    assert record['mcnet_solver'] == solver
    fresh = {}
    join_record(fresh, 'new.json', cpu, {'tol': 1e-5, 'max_iter': 300}, ['pnp'])
    assert fresh == {'device': 'cpu', 'mcnet_solver': {'tol': 1e-5, 'max_iter': 300}}

    # through measure and the script: the record on disk is left as it was
    monkeypatch.chdir(REPO_ROOT)
    out = data / 'k.json'
    out.write_text(json.dumps(record))
    before = out.read_text()
    with pytest.raises(SystemExit):
        load_script('kernel_table').main(['--rows', 'mcnet_imdn_kernels', '--families', 'x3', '--tol', '1e-5',
                                          '--device', 'cpu', '--data', str(data), '--out', str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'solved with' in err[0] and out.read_text() == before
    measure(SimpleNamespace(rows=['bicubic'], families=['x3'], kernels=[2], images=None, batch=2, tol=1e-5,
                            max_iter=5, device='cpu', data=str(data), out=str(out), time_limit=None, tf32=False))
    joined = json.loads(out.read_text())
    assert joined['mcnet_solver'] == solver and set(joined['cells']) == {'mcnet_imdn_kernels|x3|k1', 'bicubic|x3|k2'}


def test_resizer_table_cell_is_the_librarys_lr_upsampled(data, monkeypatch):
    from mcnet_basicsr.data.degradations import degraded_lr_uint8
    from mcnet_basicsr.evaluation.resizer_table import measure
    from mcnet_basicsr.ops import build_degradation
    monkeypatch.chdir(REPO_ROOT)
    out = data / 'r.json'
    measure(SimpleNamespace(rows=['bicubic'], degradations=['cv2-area'], sets=['Set5'], scale=2, tol=1e-4,
                            max_iter=5, device='cpu', data=str(data), out=str(out)))
    cell = json.loads(out.read_text())['cells']['bicubic|x2|cv2-area|Set5']
    psnrs = []
    for name in sorted(os.listdir(data / 'Set5' / 'HR')):
        hr = cv2.imread(str(data / 'Set5' / 'HR' / name))
        lr = cv2.resize(hr.astype(np.float32), (hr.shape[1] // 2, hr.shape[0] // 2), interpolation=cv2.INTER_AREA)
        lr = np.clip(np.floor(lr + 0.5), 0, 255) / 255
        ours = degraded_lr_uint8(build_degradation('cv2-area', 2), hr) / 255
        diff = np.abs(ours - lr) * 255
        assert diff.max() < 1e-4  # the same rounding, ties included
        up = imresize(torch.from_numpy(lr[..., ::-1].copy()).permute(2, 0, 1)[None].double(), 2)
        psnrs.append(y_uint8_metrics(luma(up), hr, 2)[0])
    assert cell["psnr"] == pytest.approx(np.mean(psnrs), abs=1e-6)


@pytest.mark.slow  # a subprocess
def test_prepare_datasets_writes_lr_sets_of_a_resizer_and_a_kernel(data, tmp_path):
    """scripts/prepare_datasets.py --degradation cv2-area --kernel k.npy: LR folders equal to OpenCV's own INTER_AREA
    (rounded) and to scipy's circular blur then upper-left decimation (rounded)."""
    import subprocess
    import sys

    from scipy import ndimage

    from conftest import repo_env
    k = gaussian_kernel(7, 1.1, 0.6, 0.4)
    np.save(tmp_path / 'k.npy', k)
    root = tmp_path / 'out'
    cmd = [sys.executable, 'scripts/prepare_datasets.py', '--src', str(data), '--root', str(root), '--eval-sets',
           'Set5', '--train-sets', '--scales', '2', '--degradation', 'cv2-area', '--kernel', str(tmp_path / 'k.npy')]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=repo_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ('astronaut', 'coffee'):
        hr = cv2.imread(str(root / 'Set5' / 'HR_mod2' / f'{name}.png'))
        area = cv2.imread(str(root / 'Set5' / 'LR_cv2-area' / 'X2' / f'{name}.png'))
        ref = cv2.resize(hr.astype(np.float32), (hr.shape[1] // 2, hr.shape[0] // 2), interpolation=cv2.INTER_AREA)
        assert np.array_equal(area, np.clip(np.floor(ref + 0.5), 0, 255).astype(np.uint8))
        blur = cv2.imread(str(root / 'Set5' / 'LR_k' / 'X2' / f'{name}.png'))
        ref = ndimage.convolve(hr.astype(np.float64), k[..., None], mode='wrap')[0::2, 0::2]
        assert np.abs(blur.astype(np.float64) - ref).max() <= 0.5 + 1e-6
    again = subprocess.run(cmd, cwd=REPO_ROOT, env=repo_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and 'LR_' not in again.stderr and 'up to date' in again.stdout
