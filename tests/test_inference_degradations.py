"""``mcnet-sr`` told how its LR was made (--kernel, --degradation, --noise, --boundary), on small real photos, CPU:
outputs consistent with the libraries that made the LR, bad kernels refused in one line, the layer each card names."""

import cv2
import numpy as np
import pytest
import torch

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from cli_helpers import FAST, MODELS, cli, lr_from, one_error_line, photo, read_summary, snapshot, write
from conftest import sample_photo
from mcnet_basicsr.cli.inference import get_model, super_resolve
from mcnet_basicsr.zoo.pretrained import weight_path


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
        line = one_error_line(capsys.readouterr().err)
        assert code == 2 and what in line, (extra, line)
        assert snapshot(out) == before

    small = write(tmp_path / 'in2' / 'small.png', photo('astronaut', 4, 6))  # 12x8 output
    big = np.ones((9, 9))
    np.save(tmp_path / 'big.npy', big / big.sum())
    out2 = tmp_path / 'out2'
    # SRCNN's layer, whose solve converges on this LR, which the kernel did not make
    srcnn = ['--backbone', 'srcnn']
    code = cli(small, img, '-o', out2, '--scale', 2, '--kernel', tmp_path / 'big.npy', *FAST, *srcnn)
    captured = capsys.readouterr()
    line = one_error_line(captured.err)
    assert code == 1 and str(small) in line and 'the 9x9 blur kernel is larger than the 12x8 output' in line, line
    rows = read_summary(out2)
    assert rows[str(small)]['status'] == 'error' and rows[str(img)]['status'] == 'ok'
    assert (out2 / 'a_x2.png').exists() and not (out2 / 'small_x2.png').exists()
    # a kernel of a .mat cell array, picked by its 0-based index
    assert cli(img, '-o', out2, '--scale', 2, '--kernel', tmp_path / 'cells.mat', '--kernel-index', 1, '--force',
               *FAST, *srcnn) == 0


def test_degradation_cv2_area_is_consistent_with_opencv(tmp_path, capsys):
    """An LR made by OpenCV's INTER_AREA: --degradation cv2-area makes each of R, G, B's cv2.resize equal to it (the
    float result of SRCNN's layer, eps = 0, at rounding level); the default, MATLAB bicubic, does not. The default run
    is the same as --degradation matlab-bicubic, file for file."""
    from mcnet_basicsr.ops import build_degradation
    hr = photo('coffee', 48, 56)
    lr8 = cv2.resize(hr, (28, 24), interpolation=cv2.INTER_AREA)
    img = write(tmp_path / 'in' / 'c.png', lr8)
    outs = {}
    for name, extra in (('default', []), ('matlab', ['--degradation', 'matlab-bicubic']),
                        ('area', ['--degradation', 'cv2-area', '--backbone', 'srcnn'])):
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
    2 x 2 block: --kernel k.npy --channels rgb with SRCNN's layer (eps = 0) makes every channel's blur-and-decimation
    of the result equal to it, tiled or not."""
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
    assert cli(img, '-o', out, '--scale', 2, '--kernel', tmp_path / 'k.npy', '--channels', 'rgb', '--backbone', 'srcnn',
               *FAST) == 0
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
    args = cli_options.parse_args([str(img), '-o', str(out), '--scale', '4', '--degradation', 'cv2-cubic',
                                   '--backbone', 'srcnn'])
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
    args = cli_options.parse_args([str(img), '-o', str(out), '--scale', '2', '--kernel', str(tmp_path / 'k.npy'),
                                   '--backbone', 'srcnn'])
    assert args.layer_family == 'bicubic'


# ------------------------------------------------------------------------------------ the default for such LR
# a smooth region of a real photo: the out-of-focus background of scikit-image's chelsea (48 x 48, top right)
SMOOTH = ('chelsea', 48, (24, 384))
UNTRAINED_LINE = 'MCNet + FFDNet {} x2: layer FFDNet prior ffdnet_rgb.pth, beta 3 (untrained), A = '
DEFAULT_KERNEL_LINE = ('MCNet + FFDNet unfolded x2: layer FFDNet prior ffdnet_rgb.pth, beta 3 growing with the noise '
                       '(untrained), A = ')


def _psnr_rgb(img, hr, crop):
    """RGB PSNR of ``img`` (HWC in [0, 1]) rounded to uint8 against the uint8 ``hr``, ``crop`` pixels off each side."""
    from mcnet_basicsr.data.degradations import psnr_rgb_uint8
    return psnr_rgb_uint8(np.clip(np.rint(img * 255), 0, 255).astype(np.uint8), hr, crop)


def _write_uint8_as_16bit(path, rgb8):
    """``rgb8`` (HWC RGB uint8) as a 16-bit PNG of the same values (v * 257 = v / 255 exactly): the output is then
    16-bit, fine enough to check the float result's consistency."""
    return write(path, (rgb8.astype(np.uint16) * 257)[:, :, ::-1])


def _read_16bit(path):
    return cv2.imread(str(path), cv2.IMREAD_UNCHANGED)[:, :, ::-1] / 65535.0


def _check_in_ball(residuals, m, row):
    """Each channel's ``||A x_c - b_c||`` of the 16-bit output within the uint8 ball (``m`` LR pixels) the summary
    reports, up to the 16-bit rounding of the output."""
    eps = (1 / 255) / np.sqrt(12) * np.sqrt(m)
    assert float(row['eps']) == pytest.approx(eps, rel=1e-5)
    assert np.all(np.asarray(residuals) <= eps + 0.5 / 65535 * np.sqrt(m)), (residuals, eps)


def test_kernel_without_backbone_runs_the_unfolded_anchors_layer_consistent_and_above_bicubic_on_a_smooth_region(
        tmp_path, capsys):
    """``mcnet-sr --kernel k.npy`` without --backbone runs the x2 unfolded anchor and its untrained layer (shipped
    weights alone): every channel of its output is in the uint8 ball for the kernel (scipy's circular blur, upper-left
    decimation), and on a smooth region it is at or above bicubic upsampling and above SRCNN's bicubic layer told the
    kernel, which paints texture there."""
    from scipy.ndimage import convolve

    from mcnet_basicsr.ops import QUANTIZATION_EPS_RMS, BlurDownsample, imresize
    name, size, top_left = SMOOTH
    hr = sample_photo(name, size, top_left)
    y, x = np.mgrid[-3:4, -3:4]
    k = np.exp(-x**2 / (2 * 0.8**2) - y**2 / (2 * 1.3**2)) * np.linspace(1, 2, 7)  # anisotropic, skewed
    k /= k.sum()
    np.save(tmp_path / 'k.npy', k)

    def degrade(img):
        return np.stack([convolve(img[:, :, c], k, mode='wrap')[::2, ::2] for c in range(3)], axis=2)

    lr8 = np.rint(degrade(hr / 255.0) * 255).astype(np.uint8)
    img = _write_uint8_as_16bit(tmp_path / 'in' / 'sky.png', lr8)
    psnr = {}
    for label, extra in (('default', []), ('srcnn', ['--backbone', 'srcnn'])):
        out = tmp_path / label
        capsys.readouterr()
        assert cli(img, '-o', out, '--scale', 2, '--kernel', tmp_path / 'k.npy', '--device', 'cpu', *extra) == 0
        first = capsys.readouterr().out.splitlines()[0]
        sr = _read_16bit(out / 'sky_x2.png')
        psnr[label] = _psnr_rgb(sr, hr, 2)
        if label == 'default':
            assert first == DEFAULT_KERNEL_LINE + 'kernel k.npy'
            row = read_summary(out)[str(img)]
            assert row['status'] == 'ok'
            residuals = np.sqrt(((degrade(sr) - lr8 / 255.0)**2).sum(axis=(0, 1)))  # R, G, B
            _check_in_ball(residuals, 24 * 24, row)
    lr = torch.from_numpy(lr8 / 255.0).permute(2, 0, 1)[None]
    psnr['bicubic'] = _psnr_rgb(hwc(imresize(lr, 2)), hr, 2)
    assert psnr['default'] >= psnr['bicubic'] and psnr['default'] > psnr['srcnn'] + 0.5, psnr
    # the layer's anchor is FFDNetPnP told the kernel, not the layer's own operator (MATLAB bicubic)
    model = get_model(2, torch.device('cpu'), backbone='ffdnet_pnp', cache=MODELS, eps_rms=QUANTIZATION_EPS_RMS,
                      family='kernels')
    with torch.no_grad(), model.settings(solver={'forward': {'tol': 1e-3, 'max_iter': 100}}):
        w = super_resolve(model, lr, operator=BlurDownsample(2, k))['w']
        told, untold = (model.backbone_estimate(lr.float(), operator=op)[0] for op in (BlurDownsample(2, k), None))
    assert torch.equal(w, told) and (w - untold).abs().max() > 1e-2


def test_ffdnet_pnp_runs_consistent_with_pillow_and_with_matlab(tmp_path, capsys):
    """``mcnet-sr --backbone ffdnet_pnp --degradation pil-bicubic`` runs the untrained layer, told Pillow's bicubic:
    Pillow's own resize of each channel of the output is within the uint8 ball of the LR it made. ``--backbone
    ffdnet_pnp`` without --kernel or --degradation runs it with MATLAB bicubic, consistent with MATLAB's imresize (the
    package's)."""
    from PIL import Image

    from mcnet_basicsr.ops import imresize

    def pil_resize(img, size):  # one float32 "F" image per channel
        return np.stack([np.asarray(Image.fromarray(np.ascontiguousarray(img[:, :, c], dtype=np.float32)).resize(
            size, Image.Resampling.BICUBIC)) for c in range(3)], axis=2).astype(np.float64)

    name, size, top_left = SMOOTH
    hr = sample_photo(name, size, top_left)
    lr8 = np.rint(np.clip(pil_resize(hr / 255.0, (24, 24)), 0, 1) * 255).astype(np.uint8)
    img = _write_uint8_as_16bit(tmp_path / 'in' / 'sky.png', lr8)
    out = tmp_path / 'pil'
    capsys.readouterr()
    assert cli(img, '-o', out, '--scale', 2, '--degradation', 'pil-bicubic', '--backbone', 'ffdnet_pnp', '--device',
               'cpu') == 0
    assert capsys.readouterr().out.splitlines()[0] == UNTRAINED_LINE.format('PnP') + 'pil-bicubic'
    sr = _read_16bit(out / 'sky_x2.png')
    residuals = np.sqrt(((pil_resize(sr, (24, 24)) - lr8 / 255.0)**2).sum(axis=(0, 1)))
    _check_in_ball(residuals, 24 * 24, read_summary(out)[str(img)])

    # on MATLAB-bicubic LR, named as the backbone: the same layer told MATLAB bicubic
    lr8 = np.rint(np.clip(hwc(imresize(torch.from_numpy(hr / 255.0).permute(2, 0, 1)[None], 0.5)), 0, 1) * 255)
    img = _write_uint8_as_16bit(tmp_path / 'in2' / 'sky.png', lr8.astype(np.uint8))
    out = tmp_path / 'matlab'
    assert cli(img, '-o', out, '--scale', 2, '--backbone', 'ffdnet_pnp', '--device', 'cpu') == 0
    assert capsys.readouterr().out.splitlines()[0] == UNTRAINED_LINE.format('PnP') + 'matlab-bicubic'
    sr = torch.from_numpy(_read_16bit(out / 'sky_x2.png').copy()).permute(2, 0, 1)[None]
    residuals = np.sqrt(((hwc(imresize(sr, 0.5)) - lr8 / 255.0)**2).sum(axis=(0, 1)))
    _check_in_ball(residuals, 24 * 24, read_summary(out)[str(img)])


def test_degradation_without_backbone_runs_the_stage3_anchors_null_space_layer_where_its_card_routes(tmp_path, capsys):
    """``mcnet-sr --degradation cv2-cubic --scale 2`` without --backbone runs the untrained layer around the stage-3
    anchor ``ffdnet_unfolded16_mix_x2.pth`` with its dual in the null space (the cards route OpenCV's cubic at x2 to
    it): every channel of its output, resized by OpenCV itself, is within the uint8 ball of the LR, and its PSNR is
    above that anchor's alone. ``--degradation pil-bicubic``, which no such card routes, runs the compact RCAN's
    layer."""
    from mcnet_basicsr.archs.frozen_backbone import non_blind_forward
    from mcnet_basicsr.ops import build_degradation
    from mcnet_basicsr.zoo.pretrained import build_pretrained_backbone
    hr = sample_photo('chelsea', 64, (200, 100))  # fur, no value near 0 or 255: the saved output is not clipped
    lr8 = np.stack([cv2.resize(hr[:, :, c], (32, 32), interpolation=cv2.INTER_CUBIC) for c in range(3)], axis=2)
    img = _write_uint8_as_16bit(tmp_path / 'in' / 'face.png', lr8)
    capsys.readouterr()
    assert cli(img, '-o', tmp_path / 'out', '--scale', 2, '--degradation', 'cv2-cubic', '--device', 'cpu') == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        'MCNet + FFDNet unfolded x2: layer FFDNet prior ffdnet_rgb.pth, beta 3 growing with the noise (untrained), '
        'null-space dual, around ffdnet_unfolded16_mix_x2.pth, A = cv2-cubic')
    sr = _read_16bit(tmp_path / 'out' / 'face_x2.png')
    resized = np.stack([cv2.resize(sr[:, :, c], (32, 32), interpolation=cv2.INTER_CUBIC) for c in range(3)], axis=2)
    _check_in_ball(np.sqrt(((resized - lr8 / 255.0)**2).sum(axis=(0, 1))), 32 * 32,
                   read_summary(tmp_path / 'out')[str(img)])
    anchor = build_pretrained_backbone('ffdnet_unfolded16', 2, family='resizers')
    lr = torch.from_numpy(lr8 / 255.0).permute(2, 0, 1)[None].float()
    with torch.no_grad():
        w = non_blind_forward(anchor, lr, build_degradation('cv2-cubic', 2))
    assert _psnr_rgb(sr, hr, 2) > _psnr_rgb(hwc(w.clamp(0, 1).double()), hr, 2)
    capsys.readouterr()
    assert cli(img, '-o', tmp_path / 'pil', '--scale', 2, '--degradation', 'pil-bicubic', '--device', 'cpu') == 0
    assert capsys.readouterr().out.splitlines()[0].startswith('MCNet + compact RCAN x2: layer mcnet_rcan_compact_')
