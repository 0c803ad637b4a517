"""The ``mcnet-sr`` command-line tool (mcnet_basicsr.cli.inference) on small real photos, CPU.

Every call goes through ``main(argv, MODELS)`` in-process (the built models are kept in MODELS, so the slow
first spectral-norm estimate is paid once per distinct model), except one subprocess run of
``python -m mcnet_basicsr.cli.inference``. Solvers are loose (``--tol 1e-3``) unless a test needs more.
"""
import csv
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from basicsr.metrics import calculate_psnr

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from conftest import repo_env, sample_photo
from mcnet_basicsr.cli.inference import get_model, main, super_resolve
from mcnet_basicsr.ops import imresize
from mcnet_basicsr.zoo.pretrained import weight_path

FAST = ['--tol', '1e-3']


def photo(name, h, w):
    return sample_photo(name, (h, w))[:, :, ::-1].copy()  # BGR for cv2


def write(path, arr):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), arr)
    return path


def read_summary(outdir):
    with open(Path(outdir) / 'summary.csv', newline='') as f:
        return {r['input']: r for r in csv.DictReader(f)}


def snapshot(folder):
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in Path(folder).iterdir()}


MODELS = {}


def cli(*args):
    return main([str(a) for a in args], models=MODELS)


def lr_from(hr_bgr, scale):
    """LR made as the benchmarks make it: MATLAB bicubic of the HR, rounded to uint8."""
    t = torch.from_numpy(hr_bgr.astype(np.float64) / 255).permute(2, 0, 1)[None]
    lr = imresize(t, 1 / scale)[0].permute(1, 2, 0).clamp(0, 1).numpy()
    return np.rint(lr * 255).astype(np.uint8)


# ------------------------------------------------------------------------------------ round trips
def test_every_input_kind_round_trips(tmp_path, capsys):
    inp = tmp_path / 'in'
    rgb = photo('astronaut', 32, 40)
    gray = cv2.cvtColor(photo('camera', 36, 28), cv2.COLOR_BGR2GRAY)
    yy, xx = np.mgrid[0:30, 0:34]
    alpha = np.clip(255 * (xx / 33.0) * (yy / 29.0) + 20, 0, 255).astype(np.uint8)
    files = {
        'rgb8.png': rgb,
        'rgb16.png': photo('coffee', 30, 26).astype(np.uint16) * 257 + 100,
        'gray.png': gray,
        'rgba.png': np.dstack([photo('chelsea', 30, 34), alpha]),
        'photo.jpg': photo('rocket', 28, 32),
        'photo16.tif': photo('coffee', 26, 30).astype(np.uint16) * 257,
    }
    for name, arr in files.items():
        write(inp / 'sub' / name if name.endswith('.tif') else inp / name, arr)
    out = tmp_path / 'out'
    # a folder, a glob and an explicit file (the TIFF, in a sub-folder)
    # on the CPU, as the reference below: at FAST's loose tolerance another device's rounding stops elsewhere
    code = cli(inp, str(inp / 'rgb*.png'), inp / 'sub' / 'photo16.tif', '-o', out, '--scale', 2, '--device', 'cpu',
               *FAST)
    assert code == 0
    stdout = capsys.readouterr().out
    rows = {Path(k).name: r for k, r in read_summary(out).items()}
    assert set(rows) == set(files)
    model = get_model(2, torch.device('cpu'), cache=MODELS)
    for name, src in files.items():
        stem = Path(name).stem
        res = cv2.imread(str(out / f'{stem}_x2.png'), cv2.IMREAD_UNCHANGED)
        if name.endswith('.jpg'):
            src = cv2.imread(str(inp / name), cv2.IMREAD_UNCHANGED)  # compare with what was decoded
        assert res.dtype == src.dtype, name
        assert res.shape[:2] == (2 * src.shape[0], 2 * src.shape[1]), name
        assert res.ndim == src.ndim and (res.ndim == 2 or res.shape[2] == src.shape[2]), name
        row = rows[name]
        assert row['status'] == 'ok' and row['error'] == ''
        assert float(row['fidelity']) <= 1e-5, (name, row['fidelity'])
        assert int(row['out_h']) == 2 * src.shape[0] and int(row['bit_depth']) == src.dtype.itemsize * 8
        assert f'{2 * src.shape[1]}x{2 * src.shape[0]}' in stdout and '||Ax-b||' in stdout
    assert not [p for p in out.iterdir() if p.name.startswith('.')]  # no temp files left

    # colour / gray outputs are MCNetArch.forward's (up to the output's rounding) under the command's settings: FAST's
    # tolerance, the default iterations (100) and the model's extrapolation
    from mcnet_basicsr.cli.options import default_extrapolation
    settings = {'solver': {'forward': {'tol': 1e-3, 'max_iter': 100}},
                'extrapolation': default_extrapolation('srcnn', 2)}
    for name, chans in (('rgb8.png', 3), ('gray.png', 1)):
        src = files[name]
        lr = src[:, :, ::-1] if chans == 3 else src[:, :, None]
        lr = torch.from_numpy(lr.astype(np.float32) / 255).permute(2, 0, 1)[None]
        with torch.no_grad():
            ref, _ = model.run(lr, settings=settings)
            ref = ref[0].clamp(0, 1).permute(1, 2, 0).numpy()
        res = cv2.imread(str(out / f'{Path(name).stem}_x2.png'), cv2.IMREAD_UNCHANGED).astype(np.float64) / 255
        res = res[:, :, ::-1] if chans == 3 else res[:, :, None]
        assert np.abs(res - ref).max() <= 1.5 / 255, name
    # alpha: MATLAB bicubic, clipped
    res = cv2.imread(str(out / 'rgba_x2.png'), cv2.IMREAD_UNCHANGED)
    ref = imresize(torch.from_numpy(alpha / 255.0)[None, None], 2)[0, 0].clamp(0, 1).numpy()
    assert np.abs(res[:, :, 3] / 255.0 - ref).max() <= 0.5 / 255 + 1e-9


# ------------------------------------------------------------------------------------ bad input
def test_bad_inputs_are_reported_and_others_still_written(tmp_path, capsys):
    inp, out = tmp_path / 'in', tmp_path / 'out'
    good = write(inp / 'good.png', photo('astronaut', 24, 24))
    exists = write(inp / 'exists.png', photo('coffee', 24, 24))
    tiny = write(inp / 'tiny.png', photo('coffee', 3, 3))
    notimg = inp / 'notes.png'
    notimg.write_text('this is not an image\n')
    empty = inp / 'empty.png'
    empty.write_bytes(b'')
    truncated = inp / 'truncated.png'
    truncated.write_bytes(good.read_bytes()[:60])
    dup = write(inp / 'dup' / 'good.png', photo('rocket', 24, 24))  # same stem as good.png
    missing = inp / 'missing.png'
    out.mkdir()
    (out / 'exists_x2.png').write_bytes(b'precious')
    before = snapshot(out)

    code = cli(good, exists, tiny, notimg, empty, truncated, dup, missing, str(inp / 'nothing*.png'), '-o', out,
               '--scale', 2, *FAST)
    assert code == 1
    err = capsys.readouterr().err
    err_lines = [line for line in err.splitlines() if line.startswith('error:')]
    expect = {exists: 'already exists', tiny: 'too small', notimg: 'not a readable image', empty: 'empty',
              truncated: 'not a readable image', dup: 'same file stem', missing: 'no such file',
              inp / 'nothing*.png': 'no image file matches'}
    for path, what in expect.items():
        assert any(str(path) in line and what in line for line in err_lines), (path, what, err)
    assert len(err_lines) == len(expect)

    assert (out / 'exists_x2.png').read_bytes() == b'precious'
    assert (out / 'exists_x2.png').stat().st_mtime_ns == before['exists_x2.png'][1]
    assert (out / 'good_x2.png').is_file()
    assert sorted(p.name for p in out.iterdir()) == ['exists_x2.png', 'good_x2.png', 'summary.csv']
    rows = read_summary(out)
    assert rows[str(good)]['status'] == 'ok'
    assert rows[str(tiny)]['in_h'] == '3' and 'too small' in rows[str(tiny)]['error']
    with open(out / 'summary.csv', newline='') as f:
        errors = [r for r in csv.DictReader(f) if r['status'] == 'error']
    # an input refused because its output is in the way (a file there, or another input's) was not processed: no row
    refused = {str(exists), str(dup)}
    assert {r['input'] for r in errors} == {str(p) for p in expect} - refused and all(r['error'] for r in errors)

    # --force overwrites, atomically
    assert cli(exists, '-o', out, '--scale', 2, '--force', *FAST) == 0
    assert cv2.imread(str(out / 'exists_x2.png')).shape == (48, 48, 3)


def _one_error_line(err):
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1 and lines[0].startswith('error: '), err
    return lines[0]


def test_usage_and_weight_errors_touch_nothing(tmp_path, capsys):
    img = write(tmp_path / 'in' / 'a.png', photo('astronaut', 24, 24))
    out = tmp_path / 'out'
    out.mkdir()
    (out / 'a_x2.png').write_bytes(b'precious')
    before = snapshot(out)
    junk = tmp_path / 'junk.pth'
    junk.write_text('not a checkpoint')
    cases = [
        (['--scale', 5], 'unsupported scale 5'),
        (['--scale', 2, '--weights', tmp_path / 'nope.pth'], 'nope.pth'),
        (['--scale', 2, '--weights', weight_path('srcnn_x2.pth')], 'not an MCNet layer checkpoint'),
        (['--scale', 2, '--weights', weight_path('mcnet_srcnn_x3.pth')], 'x3'),
        (['--scale', 2, '--weights', junk], 'not a readable PyTorch checkpoint'),
        (['--scale', 2, '--backbone-weights', weight_path('mcnet_srcnn_x2.pth')], 'does not fit the SRCNN backbone'),
        (['--scale', 2, '--backbone-weights', weight_path('srcnn_x4.pth')], 'x4'),
        (['--scale', 2, '--tile', 2], '--tile'),
        (['--scale', 2, '--gt', tmp_path / 'a.png'], '--gt'),
    ]
    for extra, what in cases:
        code = cli(img, '-o', out, '--force', *extra)
        line = _one_error_line(capsys.readouterr().err)
        assert code == 2 and what in line, (extra, line)
        assert snapshot(out) == before
    assert main(['--help']) == 0


def test_a_layer_is_checked_by_its_saved_record_not_its_name(tmp_path, capsys):
    """A layer records the backbone and scale it was trained for: renamed, a layer for another scale or backbone is
    one error line and exit status 2, nothing written; the right layer under a misleading name runs."""
    img = write(tmp_path / 'in' / 'a.png', photo('astronaut', 24, 24))
    out = tmp_path / 'out'
    for src, extra, trained, wanted in (('mcnet_srcnn_x3.pth', [], 'SRCNN x3', 'SRCNN x2'),
                                        ('mcnet_rcan_compact_x2.pth', [], 'RCAN x2', 'SRCNN x2'),
                                        ('mcnet_srcnn_x2.pth', ['--backbone', 'rdn_compact'], 'SRCNN x2', 'RDN x2')):
        layer = tmp_path / 'layer.pth'
        shutil.copy(weight_path(src), layer)
        code = cli(img, '-o', out, '--scale', 2, '--weights', layer, *extra, *FAST)
        line = _one_error_line(capsys.readouterr().err)
        assert code == 2 and f'trained for {trained} (the record saved in it)' in line and wanted in line, line
        assert not out.exists()
    misnamed = tmp_path / 'mcnet_srcnn_x4.pth'
    shutil.copy(weight_path('mcnet_srcnn_x2.pth'), misnamed)
    assert cli(img, '-o', out, '--scale', 2, '--weights', misnamed, *FAST) == 0
    assert cv2.imread(str(out / 'a_x2.png')).shape == (48, 48, 3)


def test_nan_result_is_an_error_and_overwrites_nothing(tmp_path, capsys):
    state = torch.load(weight_path('mcnet_srcnn_x2.pth'), map_location='cpu')
    state['params']['log_beta'] = torch.tensor(float('nan'))
    bad = tmp_path / 'nan_layer.pth'
    torch.save(state, bad)
    img = write(tmp_path / 'in' / 'a.png', photo('astronaut', 24, 24))
    out = tmp_path / 'out'
    out.mkdir()
    (out / 'a_x2.png').write_bytes(b'precious')
    before = snapshot(out)
    code = cli(img, '-o', out, '--scale', 2, '--weights', bad, '--force', '--iters', 3)
    err = capsys.readouterr().err
    assert code == 1 and 'NaN' in _one_error_line(err) and str(img) in err
    assert (out / 'a_x2.png').read_bytes() == b'precious'
    assert snapshot(out)['a_x2.png'] == before['a_x2.png']
    assert read_summary(out)[str(img)]['status'] == 'error'


# ------------------------------------------------------------------------------------ tiling
@pytest.mark.parametrize('scale', [2, 3])
def test_tiled_matches_untiled_and_is_consistent(tmp_path, scale):
    h, w = 45, 52  # not multiples of the tile: ragged last tiles
    lr8 = photo('coffee', h, w)
    lr16 = lr8.astype(np.uint16) * 257
    img = write(tmp_path / 'in' / 'c.png', lr16)
    results = {}
    for tile in (None, 16):
        out = tmp_path / f'out_{tile}'
        extra = [] if tile is None else ['--tile', tile]
        assert cli(img, '-o', out, '--scale', scale, '--tol', '1e-4', *extra) == 0
        row = read_summary(out)[str(img)]
        assert float(row['fidelity']) <= 1e-5
        assert int(row['tiles']) == (1 if tile is None else 3 * 4)  # ceil(45/16) x ceil(52/16)
        results[tile] = cv2.imread(str(out / f'c_x{scale}.png'), cv2.IMREAD_UNCHANGED).astype(np.float64) / 65535
    assert results[16].shape == (scale * h, scale * w, 3)
    assert np.abs(results[16] - results[None]).max() <= 1e-3 + 1 / 65535

    # the float results themselves
    model = get_model(scale, torch.device('cpu'), cache=MODELS)
    lr = torch.from_numpy(lr8[:, :, ::-1] / 255.0).permute(2, 0, 1)[None].contiguous()
    res = {}
    for tile in (None, 16, 9):
        with model.settings(solver={'forward': {'tol': 1e-4, 'max_iter': 100}}):
            res[tile] = super_resolve(model, lr, tile)
        y = res[tile]['y']
        assert float(model.operator.residual_norm(y, res[tile]['b'])[0]) <= 1e-5
    for tile in (16, 9):
        assert (res[tile]['sr'] - res[None]['sr']).abs().max() <= 1e-3
        assert (res[tile]['w'] - res[None]['w']).abs().max() <= 1e-5  # the backbone tiles are exact


def test_cpu_model_runs_the_denoiser_channels_last():
    """On the CPU mcnet-sr runs the denoiser channels-last (oneDNN's faster layout there): the exact spectral-norm
    estimate survives the conversion, and the result (under the command's settings) is the contiguous model's to
    float32 rounding, in as many iterations."""
    from mcnet_basicsr.cli import options as cli_options
    from mcnet_basicsr.cli.inference import command_settings, prepare_model
    from mcnet_basicsr.cli.measurement import resolve_measurement
    cpu = torch.device('cpu')
    args = cli_options.parse_args(['x.png', '-o', 'out', '--scale', '2', '--device', 'cpu', '--tol', '1e-4'])
    model = prepare_model(args, resolve_measurement(args), cpu, models={})
    reference = get_model(2, cpu)
    settings = command_settings(args)
    assert settings.extrapolation == 0.25  # the command's default for this layer
    assert settings.forward_solver.tol == 1e-4
    convs = list(model.denoiser.sn_convs())
    assert all(m.weight.is_contiguous(memory_format=torch.channels_last) and not m.weight.is_contiguous()
               for m in convs if m.weight.shape[1] > 1)
    assert all(m.estimate_is_exact() for m in convs)
    lr = torch.from_numpy(photo('chelsea', 40, 48)[:, :, ::-1] / 255.0).permute(2, 0, 1)[None].contiguous()
    with model.settings(settings):
        fast = super_resolve(model, lr)
    with reference.settings(solver={'forward': {'preset': 'fast', 'tol': 1e-4}}, extrapolation=args.extrapolation):
        ref = super_resolve(reference, lr)
    assert int(fast['stats'].iterations[0]) == int(ref['stats'].iterations[0])
    assert (fast['sr'] - ref['sr']).abs().max() <= 2e-5  # float32 rounding, carried through the solve (1.1e-5 seen)
    assert not any(m.weight.is_contiguous(memory_format=torch.channels_last) and not m.weight.is_contiguous()
                   for m in reference.denoiser.sn_convs())


# ------------------------------------------------------------------------------------ figures
def test_compare_figure_with_and_without_gt(tmp_path):
    hr = photo('astronaut', 96, 84)
    lr = lr_from(hr, 2)
    img = write(tmp_path / 'lr' / 'astro.png', lr)
    write(tmp_path / 'gt' / 'astro.png', hr)
    out = tmp_path / 'out'
    assert cli(img, '-o', out, '--scale', 2, '--compare', '--gt', tmp_path / 'gt', *FAST) == 0
    fig = cv2.imread(str(out / 'astro_compare.png'))
    assert fig is not None and fig.shape[1] >= 4 * 256 and fig.shape[0] > 256 * 96 / 84 + 256
    row = read_summary(out)[str(img)]
    psnr = {k: float(row[f'psnr_{k}']) for k in ('bicubic', 'backbone', 'mcnet')}
    assert all(20 < v < 60 for v in psnr.values()), psnr
    sr = cv2.imread(str(out / 'astro_x2.png'))
    assert psnr['mcnet'] == pytest.approx(calculate_psnr(sr, hr, crop_border=2, test_y_channel=True), abs=1e-4)

    out2 = tmp_path / 'out2'
    assert cli(img, '-o', out2, '--scale', 2, '--compare', *FAST) == 0
    fig2 = cv2.imread(str(out2 / 'astro_compare.png'))
    assert fig2.shape[1] < fig.shape[1] and fig2.shape[1] >= 3 * 256
    assert read_summary(out2)[str(img)]['psnr_mcnet'] == ''


# ------------------------------------------------------------------------------------ packaging
@pytest.mark.slow
def test_python_dash_m_runs(tmp_path):
    img = write(tmp_path / 'in' / 'a.png', photo('chelsea', 24, 28))
    out = tmp_path / 'out'
    env = repo_env(OMP_NUM_THREADS='1')
    proc = subprocess.run([sys.executable, '-m', 'mcnet_basicsr.cli.inference', str(img), '-o', str(out), '--scale',
                           '2', '--threads', '1', *FAST], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert cv2.imread(str(out / 'a_x2.png')).shape == (48, 56, 3)
    assert 'a.png: 28x24 -> 56x48' in proc.stdout


# ------------------------------------------------------------------------------------ compact backbones
def test_compact_backbones(tmp_path, capsys):
    """--backbone rdn_compact / rcan_compact: shipped RGB backbones with their layers, on the eps ball they were
    trained with; RDN tiles exactly, RCAN (global channel attention) refuses --tile, gray input is refused."""
    h, w = 45, 52
    img = write(tmp_path / 'in' / 'c.png', photo('coffee', h, w))
    eps = 0.0011320 * (h * w) ** 0.5  # QUANTIZATION_EPS_RMS * sqrt(#LR pixels)
    results = {}
    for tile in (None, 16):
        out = tmp_path / f'rdn_{tile}'
        extra = [] if tile is None else ['--tile', tile]
        assert cli(img, '-o', out, '--scale', 2, '--backbone', 'rdn_compact', '--tol', '1e-4', *extra) == 0
        row = read_summary(out)[str(img)]
        assert float(row['eps']) == pytest.approx(eps, rel=1e-4)
        # the backbone is outside the ball, so the output is on it (up to the float32 rounding of x, as eps = 0's 1e-5)
        assert 0.9 * eps < float(row['fidelity']) <= eps + 1e-5
        results[tile] = cv2.imread(str(out / 'c_x2.png')).astype(int)
    assert results[None].shape == (2 * h, 2 * w, 3) and np.abs(results[16] - results[None]).max() <= 1

    assert cli(img, '-o', tmp_path / 'rcan', '--scale', 2, '--backbone', 'rcan_compact', *FAST) == 0
    assert float(read_summary(tmp_path / 'rcan')[str(img)]['fidelity']) <= eps + 1e-5
    code = cli(img, '-o', tmp_path / 'rcan_tiled', '--scale', 2, '--backbone', 'rcan_compact', '--tile', 16)
    assert code == 2 and 'not exact' in _one_error_line(capsys.readouterr().err)
    assert not (tmp_path / 'rcan_tiled' / 'c_x2.png').exists()

    gray = write(tmp_path / 'in' / 'g.png', cv2.cvtColor(photo('camera', 24, 24), cv2.COLOR_BGR2GRAY))
    code = cli(gray, '-o', tmp_path / 'gray', '--scale', 2, '--backbone', 'rdn_compact', *FAST)
    assert code == 1 and 'use --backbone srcnn' in capsys.readouterr().err
    code = cli(img, '-o', tmp_path / 'bad', '--scale', 2, '--backbone', 'rdn_compact', '--backbone-weights',
               weight_path('srcnn_x2.pth'))
    assert code == 2 and 'does not fit the compact RDN backbone' in _one_error_line(capsys.readouterr().err)


# ------------------------------------------------------------------------------------ records and console
def test_summary_keeps_earlier_runs(tmp_path, capsys):
    """A second run into the same folder appends its rows: the first run's record is still there, unchanged."""
    a = write(tmp_path / 'in' / 'a.png', photo('astronaut', 24, 28))
    b = write(tmp_path / 'in' / 'b.png', photo('coffee', 26, 24))
    out = tmp_path / 'out'
    assert cli(a, '-o', out, '--scale', 2, *FAST) == 0
    first = (out / 'summary.csv').read_text()
    assert cli(b, a, '-o', out, '--scale', 2, *FAST) == 1  # a_x2.png exists: refused, an error line and no row
    text = (out / 'summary.csv').read_text()
    assert text.startswith(first), 'the first run\'s rows were rewritten'
    with open(out / 'summary.csv', newline='') as f:
        rows = list(csv.DictReader(f))
    seen = [(Path(r['input']).name, r['status']) for r in rows]
    assert seen == [('a.png', 'ok'), ('b.png', 'ok')]
    assert all(r['run'] for r in rows)
    assert '1 of 2 image(s) done, 1 failed (1 refused: outputs in the way)' in capsys.readouterr().out

    # someone else's summary.csv is left alone; the rows go to a new numbered file, which the tool names
    other = tmp_path / 'other'
    other.mkdir()
    (other / 'summary.csv').write_text('my own notes\n')
    capsys.readouterr()
    assert cli(b, '-o', other, '--scale', 2, *FAST) == 0
    assert (other / 'summary.csv').read_text() == 'my own notes\n'
    assert 'summary_2.csv' in capsys.readouterr().out
    with open(other / 'summary_2.csv', newline='') as f:
        assert [Path(r['input']).name for r in csv.DictReader(f)] == ['b.png']


def test_skip_existing_resumes_a_folder(tmp_path, capsys):
    """--skip-existing: inputs whose outputs all exist are left alone and counted, and add no row to summary.csv
    (one row per image processed); exit status 0 when every input is done now or was done before. Without it they are
    failures, as before; with --force it is refused."""
    a = write(tmp_path / 'in' / 'a.png', photo('astronaut', 24, 28))
    b = write(tmp_path / 'in' / 'b.png', photo('coffee', 26, 24))
    c = write(tmp_path / 'in' / 'c.png', photo('chelsea', 24, 24))
    out = tmp_path / 'out'
    assert cli(a, b, '-o', out, '--scale', 2, *FAST) == 0
    before = snapshot(out)
    capsys.readouterr()
    assert cli(tmp_path / 'in', '-o', out, '--scale', 2, '--skip-existing', *FAST) == 0
    stdout = capsys.readouterr().out
    assert '1 of 3 image(s) done, 2 skipped (done before: outputs exist), 0 failed' in stdout, stdout
    assert f'{a}: skipped, {out / "a_x2.png"} exists' in stdout
    now = snapshot(out)
    assert all(now[n] == before[n] for n in ('a_x2.png', 'b_x2.png')) and (out / 'c_x2.png').is_file()
    with open(out / 'summary.csv', newline='') as f:
        rows = list(csv.DictReader(f))
    assert [(Path(r['input']).name, r['status']) for r in rows] == [('a.png', 'ok'), ('b.png', 'ok'), ('c.png', 'ok')]
    # with --compare the figure is an output too: an input whose figure is missing is not done
    assert cli(a, c, '-o', out, '--scale', 2, '--skip-existing', '--compare', *FAST) == 1
    assert 'c_compare.png' not in {p.name for p in out.iterdir()}
    assert 'already exists' in capsys.readouterr().err
    assert cli(a, '-o', out, '--scale', 2, *FAST) == 1  # without the flag an existing output is a failure
    assert 'already exists' in capsys.readouterr().err
    assert cli(a, '-o', out, '--scale', 2, '--skip-existing', '--force') == 2
    assert 'give one of them' in _one_error_line(capsys.readouterr().err)


def test_saved_files_consistency_is_reported_with_its_clipping(tmp_path, capsys):
    """The saved file's ||Ax-b|| is its RGB clipped to [0, 1] and rounded: on this photo the clipping is most of it,
    so a 16-bit file (rounding 257 times finer) is nearly as far off as an 8-bit one. The console gives each as an
    rms per LR pixel in 8-bit levels, ||Ax-b|| / sqrt(#LR pixels) * 255 (with --verbose)."""
    rgb = photo('astronaut', 64, 64)
    a8, a16 = write(tmp_path / 'in' / 'a8.png', rgb), write(tmp_path / 'in' / 'a16.png', rgb.astype(np.uint16) * 257)
    out = tmp_path / 'out'
    assert cli(a8, a16, '-o', out, '--scale', 2, '--device', 'cpu', '-v', *FAST) == 0
    lines = {ln.split(':')[0]: ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(str(tmp_path))}
    rows = read_summary(out)
    fid = {bits: {k: float(rows[str(path)][k]) for k in ('fidelity', 'fidelity_clipped', 'fidelity_saved')}
           for bits, path in ((8, a8), (16, a16))}
    for bits, path in ((8, a8), (16, a16)):
        levels = 255 / 64  # 64 x 64 LR pixels
        assert (f'{fid[bits]["fidelity_saved"]:.2e} saved {bits}-bit (rms {fid[bits]["fidelity_saved"] * levels:.3f}'
                f'/255 per LR pixel; clipping to [0, 1] alone: {fid[bits]["fidelity_clipped"] * levels:.3f}/255)'
                in lines[str(path)]), lines[str(path)]
        assert fid[bits]['fidelity'] < 1e-5 < fid[bits]['fidelity_clipped'] <= fid[bits]['fidelity_saved']
    # the same LR values (v * 257 / 65535 = v / 255): the same float result, the same clipped one
    assert fid[16]['fidelity_clipped'] == pytest.approx(fid[8]['fidelity_clipped'], rel=1e-4)
    # rounding to 16 bit moves each HR RGB value by <= 0.5 / 65535, so Y (weights summing to 0.86) as much and A x
    # (||A||_2 <= 1) by at most that times sqrt(#HR pixels)
    assert abs(fid[16]['fidelity_saved'] - fid[16]['fidelity_clipped']) <= 0.5 / 65535 * 128
    assert fid[16]['fidelity_saved'] > 0.75 * fid[8]['fidelity_saved']


def test_console_shows_psnr_both_fidelities_and_solver_progress(tmp_path, capsys, monkeypatch):
    from tqdm import tqdm

    import mcnet_basicsr.utils.progress as progress
    bars = []

    class RecordingBar(tqdm):

        def __init__(self, *args, **kwargs):
            kwargs['disable'] = False  # the test's stderr is not a terminal
            super().__init__(*args, **kwargs)
            bars.append(self)

    monkeypatch.setattr(progress, 'tqdm', RecordingBar)
    hr = photo('astronaut', 64, 60)
    img = write(tmp_path / 'lr' / 'astro.png', lr_from(hr, 2))
    write(tmp_path / 'gt' / 'astro.png', hr)
    out = tmp_path / 'out'
    # on the CPU, where a solve takes long enough to need a progress bar (on a GPU it has none)
    assert cli(img, '-o', out, '--scale', 2, '--compare', '--gt', tmp_path / 'gt', '--device', 'cpu', *FAST) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith('astro.png: '))
    assert len(line) <= 120, line  # a line a person reads; the details with --verbose
    row = read_summary(out)[str(img)]
    assert f'Y-PSNR {float(row["psnr_mcnet"]):.2f} dB, SRCNN {float(row["psnr_backbone"]):.2f}, bicubic ' \
        f'{float(row["psnr_bicubic"]):.2f}' in line, line
    fid_float, fid_saved = (float(line.split('||Ax-b|| ')[1].split(' / ')[0]),
                            float(line.split(' / ')[1].split(' saved')[0]))
    assert fid_float == pytest.approx(float(row['fidelity']), rel=5e-2)
    assert fid_saved == pytest.approx(float(row['fidelity_saved']), rel=5e-2) and fid_saved > fid_float
    assert 'stopped at' not in line and row['status'] == 'ok'
    solve = [bar for bar in bars if bar.desc == 'astro.png solve']
    assert len(solve) == 1 and solve[0].n >= int(row['iterations']) >= 1, [(b.desc, b.n) for b in bars]


def test_a_solve_stopped_at_its_iteration_cap_says_so(tmp_path, capsys):
    """--iters 2 stops the solve before --tol 1e-9: the output is written, and the image's line, its summary.csv row
    (status) and the run's last line say so; --verbose keeps the line's details."""
    a = write(tmp_path / 'in' / 'a.png', photo('astronaut', 24, 28))
    b = write(tmp_path / 'in' / 'b.png', photo('coffee', 26, 24))
    out = tmp_path / 'out'
    assert cli(a, b, '-o', out, '--scale', 2, '--iters', 2, '--tol', '1e-9', '--device', 'cpu') == 0
    stdout = capsys.readouterr().out.splitlines()
    rows = read_summary(out)
    for path in (a, b):
        row = rows[str(path)]
        assert row['status'] == 'not converged' and row['iterations'] == '2' and float(row['solver_residual']) > 1e-9
        line = next(ln for ln in stdout if ln.startswith(f'{path.name}: '))
        assert f'2 iters (stopped at --iters: residual {float(row["solver_residual"]):.1e} > --tol 1e-09)' in line
    assert stdout[-1].startswith('2 of 2 image(s) done, 0 failed, 2 stopped at --iters 2 before --tol; summary: ')
    assert (out / 'a_x2.png').is_file() and (out / 'b_x2.png').is_file()
    # --verbose: the whole path, the fidelity details and the operator on the line
    assert cli(a, '-o', out, '--scale', 2, '--iters', 2, '--tol', '1e-9', '--device', 'cpu', '--force', '-v') == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(f'{a}: '))
    assert 'stopped at --iters' in line and 'per LR pixel; clipping to [0, 1] alone' in line
    assert '[A = matlab-bicubic, on Y]' in line


# ------------------------------------------------------------------------------------ measurement options
def lr_tensor(bgr):
    return torch.from_numpy(bgr[:, :, ::-1] / 255.0).permute(2, 0, 1)[None].contiguous()


def hwc(t):
    return t[0].permute(1, 2, 0).numpy()


def test_bad_kernels_are_one_line_and_touch_nothing(tmp_path, capsys):
    """Every kernel --kernel cannot use is one error line naming it, exit status 2, before any image; a kernel larger
    than one image's output fails that image only (exit status 1), the others are written."""
    import scipy.io
    img = write(tmp_path / 'in' / 'a.png', photo('astronaut', 24, 24))
    out = tmp_path / 'out'
    out.mkdir()
    (out / 'a_x2.png').write_bytes(b'precious')
    before = snapshot(out)
    good = np.outer(np.hanning(7)[1:-1], np.hanning(7)[1:-1])
    kernels = {'3d.npy': np.ones((2, 3, 3)), 'neg.npy': -good, 'zero.npy': np.array([[1.0, -2.0, 1.0]]),
               'nan.npy': good * np.nan}
    for name, k in kernels.items():
        np.save(tmp_path / name, k)
    (tmp_path / 'junk.npy').write_bytes(b'not an array')
    (tmp_path / 'junk.png').write_bytes(b'not an image')
    (tmp_path / 'k.txt').write_text('1 2 1')
    cells = np.empty((1, 3), dtype=object)
    cells[0, :] = [good, good.T, good]
    scipy.io.savemat(tmp_path / 'cells.mat', {'kernels': cells})
    cases = [
        (['--kernel', tmp_path / '3d.npy'], 'must have shape (kh, kw)'),
        (['--kernel', tmp_path / 'neg.npy'], 'must have a sum > 0'),
        (['--kernel', tmp_path / 'zero.npy'], 'must have a sum > 0'),
        (['--kernel', tmp_path / 'nan.npy'], 'non-finite values'),
        (['--kernel', tmp_path / 'junk.npy'], 'junk.npy'),
        (['--kernel', tmp_path / 'junk.png'], 'junk.png: --kernel file cannot be read as a kernel'),
        (['--kernel', tmp_path / 'k.txt'], "extension '.txt'; supported: .npy, .png, .mat"),
        (['--kernel', tmp_path / 'cells.mat', '--kernel-index', 3], 'index 3 is out of range'),
        (['--kernel', tmp_path / 'cells.mat'], 'pick one with index (0 to 2)'),
        (['--kernel', tmp_path / '3d.npy', '--kernel-index', 1], 'picks a kernel of a .mat cell array'),
    ]
    for extra, what in cases:
        code = cli(img, '-o', out, '--scale', 2, '--force', *FAST, *extra)
        line = _one_error_line(capsys.readouterr().err)
        assert code == 2 and what in line, (extra, line)
        assert snapshot(out) == before

    small = write(tmp_path / 'in2' / 'small.png', photo('astronaut', 4, 6))  # 12x8 output
    big = np.ones((9, 9))
    np.save(tmp_path / 'big.npy', big / big.sum())
    out2 = tmp_path / 'out2'
    code = cli(small, img, '-o', out2, '--scale', 2, '--kernel', tmp_path / 'big.npy', *FAST)
    captured = capsys.readouterr()
    line = _one_error_line(captured.err)
    assert code == 1 and str(small) in line and 'the 9x9 blur kernel is larger than the 12x8 output' in line, line
    rows = read_summary(out2)
    assert rows[str(small)]['status'] == 'error' and rows[str(img)]['status'] == 'ok'
    assert (out2 / 'a_x2.png').exists() and not (out2 / 'small_x2.png').exists()
    # a kernel of a .mat cell array, picked by its 0-based index
    assert cli(img, '-o', out2, '--scale', 2, '--kernel', tmp_path / 'cells.mat', '--kernel-index', 1, '--force',
               *FAST) == 0


def test_degradation_cv2_area_is_consistent_with_opencv(tmp_path, capsys):
    """An LR made by OpenCV's INTER_AREA: --degradation cv2-area makes each of R, G, B's cv2.resize equal to it (the
    float result, at rounding level); the default, MATLAB bicubic, does not. The default run is the same as
    --degradation matlab-bicubic, file for file."""
    from mcnet_basicsr.ops import build_degradation
    hr = photo('coffee', 48, 56)
    lr8 = cv2.resize(hr, (28, 24), interpolation=cv2.INTER_AREA)
    img = write(tmp_path / 'in' / 'c.png', lr8)
    outs = {}
    for name, extra in (('default', []), ('matlab', ['--degradation', 'matlab-bicubic']),
                        ('area', ['--degradation', 'cv2-area'])):
        outs[name] = tmp_path / name
        assert cli(img, '-o', outs[name], '--scale', 2, '--tol', '1e-4', '-v', *extra) == 0
    console = capsys.readouterr().out
    assert (outs['default'] / 'c_x2.png').read_bytes() == (outs['matlab'] / 'c_x2.png').read_bytes()
    assert '[A = cv2-area, the largest of R, G, B]' in console and '[A = matlab-bicubic, on Y]' in console
    row = read_summary(outs['area'])[str(img)]
    assert float(row['fidelity']) <= 1e-9

    rgb_model = get_model(2, torch.device('cpu'), cache=MODELS, channels='rgb')
    model = get_model(2, torch.device('cpu'), cache=MODELS)
    lr = lr_tensor(lr8)
    with rgb_model.settings(solver={'forward': {'tol': 1e-4, 'max_iter': 100}}):
        sr = super_resolve(rgb_model, lr, operator=build_degradation('cv2-area', 2))['sr']
    back = cv2.resize(hwc(sr), (28, 24), interpolation=cv2.INTER_AREA)
    assert np.abs(back - hwc(lr)).max() <= 1e-9
    with model.settings(solver={'forward': {'tol': 1e-4, 'max_iter': 100}}):
        bicubic_sr = super_resolve(model, lr)['sr']
    assert np.abs(cv2.resize(hwc(bicubic_sr), (28, 24), interpolation=cv2.INTER_AREA) - hwc(lr)).max() > 1e-3


def test_kernel_rgb_is_consistent_with_scipy_blur_in_every_channel(tmp_path):
    """An LR made by circular blur (scipy.ndimage.convolve, mode='wrap') and keeping the upper-left pixel of each
    2 x 2 block: --kernel k.npy --channels rgb makes every channel's blur-and-decimation of the result equal to it,
    tiled or not."""
    from scipy.ndimage import convolve

    from mcnet_basicsr.ops import BlurDownsample
    hr = photo('astronaut', 40, 48)[:, :, ::-1] / 255.0  # RGB
    y, x = np.mgrid[-3:4, -3:4]
    # an anisotropic Gaussian, skewed: no aliased frequency it removes (a kernel whose spectrum vanishes on all s x s
    # aliases leaves that part of the rounded LR outside the range of A, which no x can match)
    k = np.exp(-x**2 / (2 * 0.8**2) - y**2 / (2 * 1.3**2)) * np.linspace(1, 2, 7)
    k /= k.sum()
    np.save(tmp_path / 'k.npy', k)

    def degrade(x):
        return np.stack([convolve(x[:, :, c], k, mode='wrap')[::2, ::2] for c in range(3)], axis=2)

    lr16 = np.rint(degrade(hr) * 65535).astype(np.uint16)
    img = write(tmp_path / 'in' / 'a.png', lr16[:, :, ::-1])
    out = tmp_path / 'out'
    assert cli(img, '-o', out, '--scale', 2, '--kernel', tmp_path / 'k.npy', '--channels', 'rgb', *FAST) == 0
    assert float(read_summary(out)[str(img)]['fidelity']) <= 1e-9

    model = get_model(2, torch.device('cpu'), cache=MODELS, channels='rgb')
    lr = torch.from_numpy(lr16 / 65535.0).permute(2, 0, 1)[None].contiguous()
    with model.settings(solver={'forward': {'tol': 1e-3, 'max_iter': 100}}):
        res = {t: super_resolve(model, lr, t, operator=BlurDownsample(2, k))['sr'] for t in (None, 8)}
    for sr in res.values():
        assert np.abs(degrade(hwc(sr)) - hwc(lr)).max() <= 1e-9
    assert (res[8] - res[None]).abs().max() <= 1e-3


def test_reflect_boundary_solves_on_the_padded_input_and_reports_the_true_model(tmp_path):
    """--boundary reflect (an LR blurred with mirrored borders, scipy.ndimage.convolve mode='reflect'): the output is
    the image part of the layer's output on the LR padded by reflection, the summary's ||Ax-b|| is against the
    reflect-boundary model, and that model is matched far better than by the circular model on the bare LR."""
    from scipy.ndimage import convolve

    from mcnet_basicsr.ops import BlurDownsample, ReflectBlurDownsample, reflect_pad
    hr = photo('astronaut', 40, 48)[:, :, ::-1] / 255.0  # RGB
    y, x = np.mgrid[-4:5, -4:5]
    k = np.exp(-x**2 / (2 * 1.1**2) - y**2 / (2 * 1.6**2)) * np.linspace(1, 2, 9)
    k /= k.sum()
    np.save(tmp_path / 'k.npy', k)
    lr16 = np.rint(np.stack([convolve(hr[:, :, c], k, mode='reflect')[::2, ::2] for c in range(3)], axis=2) * 65535)
    img = write(tmp_path / 'in' / 'a.png', lr16.astype(np.uint16)[:, :, ::-1])
    rows = {}
    for boundary in ('circular', 'reflect'):
        out = tmp_path / boundary
        assert cli(img, '-o', out, '--scale', 2, '--kernel', tmp_path / 'k.npy', '--boundary', boundary, *FAST) == 0
        rows[boundary] = read_summary(out)[str(img)]
        assert (int(rows[boundary]['out_h']), int(rows[boundary]['out_w'])) == (40, 48)
    saved = {b: cv2.imread(str(tmp_path / b / 'a_x2.png'), cv2.IMREAD_UNCHANGED)[:, :, ::-1] / 65535.0
             for b in rows}
    true_op = ReflectBlurDownsample(2, k)
    lr = torch.from_numpy(lr16 / 65535.0).permute(2, 0, 1)[None].contiguous()
    # the summary's fidelity is the reflect model's (R, G, B: the largest); the circular model on the bare LR misses it
    with torch.no_grad():
        true_res = {b: float(true_op.residual_norm(torch.from_numpy(v.copy()).permute(2, 0, 1)[:, None],
                                                   lr[0][:, None]).max()) for b, v in saved.items()}
    assert float(rows['reflect']['fidelity_saved']) == pytest.approx(true_res['reflect'], rel=1e-3, abs=1e-6)
    assert true_res['reflect'] < 0.5 * true_res['circular'], true_res
    # the output is the crop of the layer's output on the padded LR
    from mcnet_basicsr.cli import options as cli_options
    from mcnet_basicsr.cli.inference import command_settings, prepare_model
    from mcnet_basicsr.cli.measurement import resolve_measurement
    args = cli_options.parse_args([str(img), '-o', 'out', '--scale', '2', '--device', 'cpu', '--kernel',
                                   str(tmp_path / 'k.npy'), '--boundary', 'reflect', *FAST])
    model = prepare_model(args, resolve_measurement(args), torch.device('cpu'), models={})
    pad = true_op.lr_padding
    assert pad == 2 + 2  # radius 4 HR pixels = 2 LR pixels, plus two
    with torch.no_grad(), model.settings(command_settings(args)):
        full = super_resolve(model, reflect_pad(lr, pad, pad, pad, pad), operator=BlurDownsample(2, k))['sr']
    crop = hwc(full[..., 2 * pad:-2 * pad, 2 * pad:-2 * pad].clamp(0, 1))
    assert np.abs(crop - saved['reflect']).max() <= 0.5 / 65535 + 1e-7


def test_noise_widens_the_ball_to_its_radius(tmp_path, capsys):
    """--noise SIGMA (0..255): the radius becomes SIGMA/255 * 0.574 * sqrt(#LR pixels) on Y (the noise of Y for
    noise SIGMA on each of R, G, B); the backbone's estimate lies outside that ball, so the result is on its
    boundary: ||A x - b|| equals the radius."""
    hr = photo('astronaut', 48, 48)
    img = write(tmp_path / 'in' / 'a.png', lr_from(hr, 2))
    out = tmp_path / 'out'
    sigma = 1.0
    assert cli(img, '-o', out, '--scale', 2, '--noise', sigma, *FAST) == 0
    row = read_summary(out)[str(img)]
    luma_noise = np.sqrt(65.481**2 + 128.553**2 + 24.966**2) / 255  # BT.601's Y row
    radius = sigma / 255 * luma_noise * np.sqrt(24 * 24)
    assert float(row['eps']) == pytest.approx(radius, rel=1e-5)  # summary.csv keeps 6 digits
    assert float(row['fidelity']) == pytest.approx(radius, rel=1e-5)
    model = get_model(2, torch.device('cpu'), cache=MODELS)
    res = super_resolve(model, lr_tensor(lr_from(hr, 2)))
    assert float(model.operator.residual_norm(res['w'].double(), res['b'])[0]) > 1.5 * radius  # outside the ball
    capsys.readouterr()


def _backbone_and_resized_lr(tmp_path, scale, degradation, hr, net='imdn'):
    """An IMDN (or another ``net``) of the official architecture at ``scale`` with random weights (the real ones are
    third-party) saved in ``tmp_path``, and the LR of ``hr`` made by ``degradation`` written as uint8: (backbone path,
    LR image path)."""
    from mcnet_basicsr.archs.backbone_presets_arch import backbone_options
    from mcnet_basicsr.ops import build_degradation
    from mcnet_basicsr.utils.registration import build_network
    backbone = tmp_path / f'{net}_x{scale}.pth'
    torch.save({'params': build_network(backbone_options(net, scale)).state_dict()}, backbone)
    lr = build_degradation(degradation, scale)(torch.from_numpy(hr.astype(np.float64) / 255).permute(2, 0, 1)[None])
    img = write(tmp_path / 'a.png', np.rint(lr[0].permute(1, 2, 0).clamp(0, 1).numpy() * 255).astype(np.uint8))
    return backbone, img


def _assert_runs_layer(args, layer):
    """The model mcnet-sr builds for ``args`` holds the shipped ``layer``'s weights (its ``_extra_state``, the record of
    backbone and scale, is checked on loading)."""
    from mcnet_basicsr.cli.inference import prepare_model
    from mcnet_basicsr.cli.measurement import resolve_measurement
    state = prepare_model(args, resolve_measurement(args), torch.device('cpu'), models={}).state_dict()
    for name, value in torch.load(weight_path(layer), map_location='cpu')['params'].items():
        if name != '_extra_state':
            assert torch.equal(state[name], value), (layer, name)


def test_degradation_at_x4_runs_the_layer_its_cards_name(tmp_path, capsys):
    """--degradation at x4 runs the layer whose card lists the resizer (IMDN: the one trained on blur kernels, for
    OpenCV's resizers; PAN: the one trained on resizers, for Pillow's Lanczos) and the bicubic layer for the others;
    the output is consistent with the resizer in R, G and B."""
    from mcnet_basicsr.cli import options as cli_options
    torch.manual_seed(0)
    backbone, img = _backbone_and_resized_lr(tmp_path, 4, 'cv2-area', photo('astronaut', 64, 80))
    common = ['--scale', '4', '--backbone', 'imdn', '--backbone-weights', backbone]
    for degradation, family, layer in (('cv2-cubic', 'kernels', 'mcnet_imdn_kernels_x4.pth'),
                                       ('cv2-area', 'kernels', 'mcnet_imdn_kernels_x4.pth'),
                                       ('pil-bicubic', 'bicubic', 'mcnet_imdn_x4.pth')):
        args = cli_options.parse_args([str(a) for a in [img, '-o', tmp_path / 'o', '--device', 'cpu', *common,
                                                        '--degradation', degradation]])
        assert args.layer_family == family and args.tol == 1e-4, degradation
        _assert_runs_layer(args, layer)
    out = tmp_path / 'out'
    capsys.readouterr()
    assert cli(img, '-o', out, *common, '--degradation', 'cv2-area') == 0
    # the run says which layer it runs, and what for
    assert capsys.readouterr().out.splitlines()[0] == ('MCNet + IMDN x4: layer mcnet_imdn_kernels_x4.pth (trained for '
                                                       'LR made by blur kernels and noise), A = cv2-area')
    eps = (1 / 255) / np.sqrt(12) * np.sqrt(16 * 20)  # the uint8 level, per channel
    assert float(read_summary(out)[str(img)]['fidelity']) <= eps * (1 + 1e-6)
    pan, _ = _backbone_and_resized_lr(tmp_path, 4, 'pil-lanczos', photo('astronaut', 64, 80), net='pan')
    args = cli_options.parse_args([str(a) for a in [img, '-o', tmp_path / 'o', '--device', 'cpu', '--scale', '4',
                                                    '--backbone', 'pan', '--backbone-weights', pan,
                                                    '--degradation', 'pil-lanczos']])
    assert args.layer_family == 'resizers'
    _assert_runs_layer(args, 'mcnet_pan_resizers_x4.pth')
    # SRCNN has no layer trained on resizers: --degradation keeps its bicubic layer
    args = cli_options.parse_args([str(img), '-o', str(out), '--scale', '4', '--degradation', 'cv2-cubic'])
    assert args.layer_family == 'bicubic'


def test_degradation_with_imdn_at_x2_runs_the_layer_trained_on_blur_kernels(tmp_path, capsys):
    """At x2, where no bicubic layer ships, --backbone imdn --degradation cv2-cubic runs the layer trained on blur
    kernels (its card lists OpenCV's resizers: the best shipped layer there), says so, and its output is consistent
    with the resizer; a resizer no card lists is refused in one line, nothing written. PAN at x2 / x3 runs its
    layers trained on blur kernels too."""
    from mcnet_basicsr.cli import options as cli_options
    torch.manual_seed(0)
    backbone, img = _backbone_and_resized_lr(tmp_path, 2, 'cv2-cubic', photo('astronaut', 32, 40))
    common = ['--scale', '2', '--backbone', 'imdn', '--backbone-weights', backbone]
    args = cli_options.parse_args([str(a) for a in [img, '-o', tmp_path / 'o', '--device', 'cpu', *common,
                                                    '--degradation', 'cv2-cubic']])
    assert args.layer_family == 'kernels'
    _assert_runs_layer(args, 'mcnet_imdn_kernels_x2.pth')
    for scale in (2, 3):  # PAN's layers trained on blur kernels run there too
        (tmp_path / f'pan{scale}').mkdir()
        pan, lr = _backbone_and_resized_lr(tmp_path / f'pan{scale}', scale, 'cv2-cubic', photo('astronaut', 48, 60),
                                           net='pan')
        args = cli_options.parse_args([str(a) for a in [lr, '-o', tmp_path / 'o', '--device', 'cpu', '--scale', scale,
                                                        '--backbone', 'pan', '--backbone-weights', pan,
                                                        '--degradation', 'cv2-cubic']])
        assert args.layer_family == 'kernels', scale
        _assert_runs_layer(args, f'mcnet_pan_kernels_x{scale}.pth')
    out = tmp_path / 'out'
    capsys.readouterr()
    assert cli(img, '-o', out, *common, '--degradation', 'cv2-cubic') == 0
    assert capsys.readouterr().out.splitlines()[0] == ('MCNet + IMDN x2: layer mcnet_imdn_kernels_x2.pth (trained for '
                                                       'LR made by blur kernels and noise), A = cv2-cubic')
    eps = (1 / 255) / np.sqrt(12) * np.sqrt(16 * 20)
    assert float(read_summary(out)[str(img)]['fidelity']) <= eps * (1 + 1e-6)
    refused = tmp_path / 'refused'
    assert cli(img, '-o', refused, *common, '--degradation', 'pil-bicubic') == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'No MCNet layer ships for imdn at x2' in err[0], err
    assert not refused.exists()


def test_kernel_with_imdn_runs_its_layer_trained_on_blur_kernels(tmp_path, capsys):
    """--backbone imdn --kernel runs the layer trained on blur kernels (at x2, where no bicubic layer ships, too): its
    beta per noise level and denoiser are the shipped file's, the solve takes --noise, and the output is consistent
    with the kernel in R, G and B. A layer with a beta per noise level given by --weights loads as well."""
    from mcnet_basicsr.archs.backbone_presets_arch import backbone_options
    from mcnet_basicsr.cli import options as cli_options
    from mcnet_basicsr.cli.inference import prepare_model
    from mcnet_basicsr.cli.measurement import resolve_measurement
    from mcnet_basicsr.utils.registration import build_network
    torch.manual_seed(0)
    backbone = tmp_path / 'imdn_x2.pth'  # an IMDN x2 of the official architecture (the weights are third-party)
    torch.save({'params': build_network(backbone_options('imdn', 2)).state_dict()}, backbone)
    y, x = np.mgrid[-3:4, -3:4]
    k = np.exp(-x**2 / (2 * 0.8**2) - y**2 / (2 * 1.3**2)) * np.linspace(1, 2, 7)
    np.save(tmp_path / 'k.npy', k / k.sum())
    img = write(tmp_path / 'a.png', lr_from(photo('astronaut', 32, 40), 2))
    common = ['--scale', '2', '--backbone', 'imdn', '--backbone-weights', backbone, '--kernel', tmp_path / 'k.npy']
    shipped = torch.load(weight_path('mcnet_imdn_kernels_x2.pth'), map_location='cpu')['params']
    for extra in ([], ['--weights', weight_path('mcnet_imdn_kernels_x2.pth')]):
        argv = [str(a) for a in [img, '-o', tmp_path / 'o', '--device', 'cpu', *common, *extra]]
        args = cli_options.parse_args(argv)
        assert args.layer_family == 'kernels' and args.tol == 1e-4
        state = prepare_model(args, resolve_measurement(args), torch.device('cpu'), models={}).state_dict()
        for name, value in shipped.items():
            if torch.is_tensor(value):
                assert torch.equal(state[name], value), name
    out = tmp_path / 'out'
    assert cli(img, '-o', out, *common, '--noise', 2.55) == 0
    row = read_summary(out)[str(img)]
    eps = np.sqrt((1 / 255) ** 2 / 12 + (2.55 / 255) ** 2) * np.sqrt(16 * 20)  # the uint8 level and the noise
    assert 0.5 * eps < float(row['fidelity']) <= eps * (1 + 1e-6)  # on the ball the noise widened
    # a file that is not a layer is named as the layer, not as the backbone, and nothing is written
    (tmp_path / 'junk.pth').write_bytes(b'junk')
    capsys.readouterr()
    assert cli(img, '-o', tmp_path / 'none', *common, '--weights', tmp_path / 'junk.pth') == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith('error: layer checkpoint') and 'junk.pth' in err[0], err
    assert not (tmp_path / 'none').exists()
    # SRCNN has no layer trained on blur kernels: --kernel keeps its bicubic layer
    args = cli_options.parse_args([str(img), '-o', str(out), '--scale', '2', '--kernel', str(tmp_path / 'k.npy')])
    assert args.layer_family == 'bicubic'
