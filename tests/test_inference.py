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
from cli_helpers import FAST, MODELS, cli, lr_from, one_error_line, photo, read_summary, snapshot, write
from conftest import repo_env
from mcnet_basicsr.cli.inference import get_model, main, super_resolve
from mcnet_basicsr.ops import imresize
from mcnet_basicsr.zoo.pretrained import weight_path


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
        line = one_error_line(capsys.readouterr().err)
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
        line = one_error_line(capsys.readouterr().err)
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
    assert code == 1 and 'NaN' in one_error_line(err) and str(img) in err
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
    assert code == 2 and 'not exact' in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / 'rcan_tiled' / 'c_x2.png').exists()

    gray = write(tmp_path / 'in' / 'g.png', cv2.cvtColor(photo('camera', 24, 24), cv2.COLOR_BGR2GRAY))
    code = cli(gray, '-o', tmp_path / 'gray', '--scale', 2, '--backbone', 'rdn_compact', *FAST)
    assert code == 1 and 'use --backbone srcnn' in capsys.readouterr().err
    code = cli(img, '-o', tmp_path / 'bad', '--scale', 2, '--backbone', 'rdn_compact', '--backbone-weights',
               weight_path('srcnn_x2.pth'))
    assert code == 2 and 'does not fit the compact RDN backbone' in one_error_line(capsys.readouterr().err)


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
    assert 'give one of them' in one_error_line(capsys.readouterr().err)


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
