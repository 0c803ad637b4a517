"""Operators equal to the downscaling of Pillow, OpenCV and torch (mcnet_basicsr.ops.resizers).

Each operator's forward against the library itself on random float and uint8 images; the cubic coefficient and the
border rule of each library, found by fitting candidate 1-D matrices built here by loops (independently of the module)
to the library's output; and, per operator, the adjoint, the exact projections against dense float64 references, the
conditioning of A A^T over many sizes and which eigendecomposition eps > 0 uses. MATLAB bicubic is tested in
test_ops.py.
"""
import cv2
import numpy as np
import pytest
import scipy.fft
import torch
import torch.nn.functional as F
from PIL import Image

from mcnet_basicsr.ops import (DEGRADATIONS, OPERATOR_REGISTRY, BlurDownsample, MatlabBicubicDownsample,
                               OpenCVResizeDownsample, PilResizeDownsample, ReflectBlurDownsample, SeparableDownsample,
                               StackedOperator, TorchInterpolateDownsample, build_degradation, build_operator,
                               separable)
from mcnet_basicsr.ops.matrices import cubic_kernel

NAMES = tuple(name for name in DEGRADATIONS if name != 'matlab-bicubic')
LR_SIZES = ((6, 9), (10, 15), (7, 7), (12, 14), (1, 3))  # odd and even, square and not, a one-pixel LR side
PIL_RESAMPLE = {
    'bicubic': Image.Resampling.BICUBIC,
    'bilinear': Image.Resampling.BILINEAR,
    'lanczos': Image.Resampling.LANCZOS,
    'box': Image.Resampling.BOX
}
CV2_INTERPOLATION = {'area': cv2.INTER_AREA, 'linear': cv2.INTER_LINEAR, 'cubic': cv2.INTER_CUBIC}
# Float dtypes each library takes (Pillow's float images, mode "F", are float32).
LIBRARY_DTYPES = {'pil_resize': (np.float32, ), 'cv2_resize': (np.float32, np.float64),
                  'torch_interpolate': (np.float32, np.float64)}
F32_TOL = 1e-6  # relative to max |x|: 8 float32 ulps at 1 (the libraries round each pass, and torch its weights)
F64_TOL = 1e-13


def library_resize(name, img, scale):
    """The library's own downscaling by ``scale`` of an HWC numpy image (float32, float64 or uint8), as HWC."""
    opts = DEGRADATIONS[name]
    h, w, c = img.shape
    size = (w // scale, h // scale)
    if opts['type'] == 'pil_resize':
        resample = PIL_RESAMPLE[opts['resample']]
        if img.dtype == np.uint8:  # "L" / "RGB"
            out = np.asarray(Image.fromarray(img[..., 0] if c == 1 else img).resize(size, resample))
        else:  # one float32 "F" image per channel
            planes = [Image.fromarray(np.ascontiguousarray(img[..., k])) for k in range(c)]
            assert all(p.mode == 'F' for p in planes)
            out = np.stack([np.asarray(p.resize(size, resample)) for p in planes], axis=2)
        return out.reshape(h // scale, w // scale, c)
    if opts['type'] == 'cv2_resize':
        out = cv2.resize(img[..., 0] if c == 1 else img, size, interpolation=CV2_INTERPOLATION[opts['interpolation']])
        return out.reshape(h // scale, w // scale, c)
    assert opts['type'] == 'torch_interpolate'
    x = torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))[None]
    out = F.interpolate(x, size=(h // scale, w // scale), mode=opts['mode'], align_corners=False,
                        antialias=opts['antialias'])
    return out[0].numpy().transpose(1, 2, 0)


def ours(op, img):
    """The operator on an HWC numpy image, in float64, as HWC."""
    x = torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1), dtype=np.float64))[None]
    return op(x)[0].numpy().transpose(1, 2, 0)


# ----------------------------------------------------------------------------- forward = the library
@pytest.mark.parametrize('name', NAMES)
@pytest.mark.parametrize('scale', (2, 3, 4, 5))
def test_forward_equals_the_library_on_float_images(name, scale):
    """float64 operator against the library on float32 (and float64, where it takes them) images, gray and RGB.
    OpenCV's INTER_AREA multiplies each block sum by 1/s^2 rounded to float32, float64 images too (exact at
    s = 2, 4): there the float64 tolerance is that rounding, 2^-24 relative."""
    op = build_degradation(name, scale)
    rng = np.random.default_rng(scale)
    f64_tol = 2.0**-24 if name == 'cv2-area' else F64_TOL
    for lh, lw in LR_SIZES:
        for channels in (1, 3):
            img = rng.random((lh * scale, lw * scale, channels))
            for dtype in LIBRARY_DTYPES[DEGRADATIONS[name]['type']]:
                x = img.astype(dtype)
                ref = library_resize(name, x, scale)
                assert ref.dtype == dtype and ref.shape == (lh, lw, channels)
                out = ours(op, x)
                tol = (F32_TOL if dtype == np.float32 else f64_tol) * np.abs(x).max()
                assert np.abs(out - ref).max() <= tol, (name, scale, (lh, lw, channels), dtype,
                                                        np.abs(out - ref).max())


@pytest.mark.parametrize('name', NAMES)
@pytest.mark.parametrize('scale', (2, 3, 4))
def test_forward_rounded_is_within_one_level_of_the_library_on_uint8(name, scale):
    """uint8 images go through the libraries' fixed-point paths (integer coefficients, rounding): their output is
    within one level of our float output rounded (and clipped). Pillow and torch round and clip the first
    (horizontal) pass to uint8, a nonlinearity no linear operator follows where that pass overshoots [0, 255]
    (torch's bicubic without antialiasing, a = -0.75, misses by many levels on full-range noise); the images here
    stay in [40, 215], where no filter's first pass leaves [0, 255] (checked)."""
    op = build_degradation(name, scale)
    rng = np.random.default_rng(10 + scale)
    for lh, lw in LR_SIZES[:4]:
        for channels in (1, 3):
            img = rng.integers(40, 216, size=(lh * scale, lw * scale, channels), dtype=np.uint8)
            first = np.einsum('hwc,vw->hvc', img.astype(np.float64), op.axis_matrix(lw * scale))  # horizontal pass
            assert first.min() >= 0 and first.max() < 255.5
            ref = library_resize(name, img, scale)
            assert ref.dtype == np.uint8 and ref.shape == (lh, lw, channels)
            out = np.clip(np.floor(ours(op, img) + 0.5), 0, 255)
            assert np.abs(out - ref.astype(np.float64)).max() <= 1, (name, scale, (lh, lw, channels))


def test_pillow_resize_has_no_reduce_step_by_default():
    """``reducing_gap=None`` (resize's default) resamples the image itself; a reducing gap first block-averages it
    with ``reduce()``, which the operator does not model."""
    img = np.random.default_rng(0).random((48, 36)).astype(np.float32)
    plain = np.asarray(Image.fromarray(img).resize((9, 12), Image.Resampling.BICUBIC))
    explicit = np.asarray(Image.fromarray(img).resize((9, 12), Image.Resampling.BICUBIC, reducing_gap=None))
    reduced = np.asarray(Image.fromarray(img).resize((9, 12), Image.Resampling.BICUBIC, reducing_gap=1.0))
    assert np.array_equal(plain, explicit)
    assert np.abs(plain - reduced).max() > 1e-3
    assert np.abs(ours(build_degradation('pil-bicubic', 4), img[..., None])[..., 0] - plain).max() <= F32_TOL


# ----------------------------------------------------------------------------- the libraries' filters, by fitting
def _reference_axis(in_length, scale, kernel, rule):
    """A 1-D downscaling matrix by loops, for one of four border rules.

    'clip' and 'symmetric': output ``i`` centred at ``c = (i + 0.5) s`` (pixel j covers [j, j + 1)), the kernel
    stretched by s; 'clip' keeps the taps of ``[int(c - R + 0.5), int(c + R + 0.5))`` (R = s * support) inside the
    image and renormalises them, 'symmetric' mirrors the taps outside (half-sample) and normalises by the sum of all.
    'replicate' and 'drop': interpolation at ``x = (i + 0.5) s - 0.5`` (pixel centres at integers), the kernel
    unstretched, taps ``floor(x) - support + 1 .. floor(x) + support``; 'replicate' clamps their index, 'drop' drops
    those outside and renormalises.
    """
    fn, support = kernel
    m = np.zeros((in_length // scale, in_length))
    for i in range(in_length // scale):
        if rule in ('clip', 'symmetric'):
            centre, radius = (i + 0.5) * scale, support * scale
            taps = range(int(np.floor(centre - radius)) - 1, int(np.ceil(centre + radius)) + 1)
            if rule == 'clip':
                lo, hi = max(int(centre - radius + 0.5), 0), min(int(centre + radius + 0.5), in_length)
                taps = range(lo, hi)
            for j in taps:
                jj = j if 0 <= j < in_length else (-1 - j if j < 0 else 2 * in_length - 1 - j)
                m[i, jj] += fn((j + 0.5 - centre) / scale)
        else:
            x = (i + 0.5) * scale - 0.5
            base = int(np.floor(x))
            for j in range(base - int(support) + 1, base + int(support) + 1):
                if rule == 'replicate':
                    m[i, min(max(j, 0), in_length - 1)] += fn(x - j)
                elif 0 <= j < in_length:
                    m[i, j] += fn(x - j)
        m[i] /= m[i].sum()
    return m


def _cubic(a):
    return (lambda t: float(cubic_kernel(np.float64(t), a)), 2.0)


TRIANGLE = (lambda t: max(1.0 - abs(t), 0.0), 1.0)
LANCZOS3 = (lambda t: float(np.sinc(t) * np.sinc(t / 3)) if -3 <= t < 3 else 0.0, 3.0)
AA_CANDIDATES = {f'{rule} {kernel}': (rule, k) for rule in ('clip', 'symmetric')
                 for kernel, k in (('cubic -0.5', _cubic(-0.5)), ('cubic -0.75', _cubic(-0.75)))}
INTERP_CANDIDATES = {f'{rule} {kernel}': (rule, k) for rule in ('replicate', 'drop')
                     for kernel, k in (('cubic -0.5', _cubic(-0.5)), ('cubic -0.75', _cubic(-0.75)))}


@pytest.mark.parametrize('name,scales,candidates,found', [
    ('pil-bicubic', (2, 3, 4), AA_CANDIDATES, 'clip cubic -0.5'),
    ('torch-bicubic', (2, 3, 4), AA_CANDIDATES, 'clip cubic -0.5'),
    ('cv2-cubic', (2, ), INTERP_CANDIDATES, 'replicate cubic -0.75'),
    ('torch-bicubic-noaa', (2, ), INTERP_CANDIDATES, 'replicate cubic -0.75'),
    ('pil-bilinear', (2, 3, 4), {'clip': ('clip', TRIANGLE), 'symmetric': ('symmetric', TRIANGLE)}, 'clip'),
    ('torch-bilinear', (2, 3, 4), {'clip': ('clip', TRIANGLE), 'symmetric': ('symmetric', TRIANGLE)}, 'clip'),
    ('pil-lanczos', (2, 3, 4), {'clip': ('clip', LANCZOS3), 'symmetric': ('symmetric', LANCZOS3)}, 'clip'),
])
def test_cubic_coefficient_and_border_rule_found_by_the_library(name, scales, candidates, found):
    """Of the candidate filters (cubic a = -0.5 or -0.75; windows clipped and renormalised or mirrored for the
    antialiasing libraries, clamped or dropped taps for interpolation), exactly one reproduces the library, and the
    operator's matrix is that one. The interpolating libraries' border shows only at x2 (at x4 no tap leaves the
    image, at odd scales each output is one pixel); there a clamped index equals a half-sample mirror."""
    rng = np.random.default_rng(3)
    for scale in scales:
        img = rng.random((8 * scale, 5 * scale, 1))
        dtype = LIBRARY_DTYPES[DEGRADATIONS[name]['type']][-1]  # float64 where the library takes it
        ref = library_resize(name, img.astype(dtype), scale)[..., 0]
        tol = F32_TOL if dtype == np.float32 else F64_TOL
        misses = {}
        for key, (rule, kernel) in candidates.items():
            mh, mw = (_reference_axis(n, scale, kernel, rule) for n in img.shape[:2])
            misses[key] = np.abs(mh @ img[..., 0].astype(dtype).astype(np.float64) @ mw.T - ref).max()
            if key == found:
                op = build_degradation(name, scale)
                assert np.abs(op.axis_matrix(8 * scale) - mh).max() <= 1e-15
                assert np.abs(op.axis_matrix(5 * scale) - mw).max() <= 1e-15
        assert [key for key, miss in misses.items() if miss <= tol] == [found], (scale, misses)
        assert min(miss for key, miss in misses.items() if key != found) > 1e-3, (scale, misses)


def test_operators_that_coincide():
    """Equalities the libraries' rules imply at integer scales, as matrices: Pillow's box, OpenCV's area and the
    block average; torch's antialiasing and Pillow's resampling; torch without antialiasing and OpenCV; OpenCV's
    linear at x2 and the block average; OpenCV's linear and cubic at an odd scale keep pixel ``i s + (s - 1) / 2``."""
    def same(a, b, length):
        return np.array_equal(a.axis_matrix(length), b.axis_matrix(length))

    for scale in (2, 3, 4, 5):
        for length in (scale, 7 * scale, 12 * scale):
            box = build_operator({'type': 'box', 'scale': scale})
            assert same(build_degradation('pil-box', scale), box, length)
            assert same(build_degradation('cv2-area', scale), box, length)
            assert same(build_degradation('torch-bicubic', scale), build_degradation('pil-bicubic', scale), length)
            assert same(build_degradation('torch-bilinear', scale), build_degradation('pil-bilinear', scale), length)
            assert same(build_degradation('torch-bicubic-noaa', scale), build_degradation('cv2-cubic', scale), length)
            assert same(build_degradation('torch-bilinear-noaa', scale), build_degradation('cv2-linear', scale),
                        length)
            if scale == 2:
                assert same(build_degradation('cv2-linear', scale), box, length)
            if scale % 2:
                keep = np.zeros((length // scale, length))
                keep[np.arange(length // scale), np.arange(length // scale) * scale + (scale - 1) // 2] = 1.0
                for name in ('cv2-linear', 'cv2-cubic'):
                    assert np.array_equal(build_degradation(name, scale).axis_matrix(length), keep)
    # and the bicubic ones that do not: MATLAB mirrors the border, Pillow renormalises its clipped window
    assert not same(build_degradation('pil-bicubic', 2), build_degradation('matlab-bicubic', 2), 16)


# ----------------------------------------------------------------------------- the degradation table
def test_degradation_names_build_their_operators():
    expected = {
        'matlab-bicubic': (MatlabBicubicDownsample, {}),
        'pil-bicubic': (PilResizeDownsample, {'resample': 'bicubic'}),
        'pil-bilinear': (PilResizeDownsample, {'resample': 'bilinear'}),
        'pil-lanczos': (PilResizeDownsample, {'resample': 'lanczos'}),
        'pil-box': (PilResizeDownsample, {'resample': 'box'}),
        'cv2-area': (OpenCVResizeDownsample, {'interpolation': 'area'}),
        'cv2-linear': (OpenCVResizeDownsample, {'interpolation': 'linear'}),
        'cv2-cubic': (OpenCVResizeDownsample, {'interpolation': 'cubic'}),
        'torch-bicubic': (TorchInterpolateDownsample, {'mode': 'bicubic', 'antialias': True}),
        'torch-bicubic-noaa': (TorchInterpolateDownsample, {'mode': 'bicubic', 'antialias': False}),
        'torch-bilinear': (TorchInterpolateDownsample, {'mode': 'bilinear', 'antialias': True}),
        'torch-bilinear-noaa': (TorchInterpolateDownsample, {'mode': 'bilinear', 'antialias': False}),
    }
    assert list(DEGRADATIONS) == list(expected)
    for name, (cls, attrs) in expected.items():
        op = build_degradation(name, 3)
        assert type(op) is cls and op.scale == 3 and 'scale' not in DEGRADATIONS[name]
        assert all(getattr(op, key) == value for key, value in attrs.items()), name
        assert OPERATOR_REGISTRY.get(DEGRADATIONS[name]['type']) is cls
        assert name == name.lower() and ' ' not in name and '_' not in name
    with pytest.raises(TypeError):
        DEGRADATIONS['pil-bicubic']['resample'] = 'box'  # read-only: callers copy it
    with pytest.raises(TypeError):
        DEGRADATIONS['mine'] = {'type': 'box'}


@pytest.mark.parametrize('call,match', [
    (lambda: build_degradation('pil_bicubic', 2), r"unknown degradation 'pil_bicubic'; allowed: matlab-bicubic, "
     r'pil-bicubic, .*torch-bilinear-noaa'),
    (lambda: build_degradation(['cv2-area'], 2), r"unknown degradation \['cv2-area'\]"),
    (lambda: build_degradation('cv2-area', 2.5), 'scale must be a positive integer, got 2.5'),
    (lambda: PilResizeDownsample(2, 'hamming'), r"resample must be one of \['bicubic', 'bilinear', 'lanczos', "
     r"'box'\], got 'hamming'"),
    (lambda: OpenCVResizeDownsample(2, 'nearest'), r"interpolation must be one of \['area', 'linear', 'cubic'\], "
     r"got 'nearest'"),
    (lambda: TorchInterpolateDownsample(2, 'area'), r"mode must be one of \['bicubic', 'bilinear'\], got 'area'"),
    (lambda: TorchInterpolateDownsample(2, 'bicubic', antialias=1), 'antialias must be True or False, got 1'),
])
def test_bad_options_name_the_allowed_values(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ----------------------------------------------------------------------------- adjoint, projections, rank
def _dense(op, height, width):
    return torch.kron(*(torch.from_numpy(op.axis_matrix(n)) for n in (height, width)))


def _problem(op, n, c, h, w, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, c, h, w, generator=gen, dtype=torch.float64)
    b = op(torch.rand(n, c, h, w, generator=gen, dtype=torch.float64))
    return x, b + 0.01 * torch.randn(b.shape, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize('name', NAMES)
@pytest.mark.parametrize('scale', (2, 3, 4))
def test_adjoint_and_exact_projections(name, scale):
    """Per operator: <A x, y> = <x, A^T y>; eps = 0 gives the least-norm correction of a dense float64 solve (A P(x)
    = b to 1e-12, float32 to 1e-5); eps > 0 lands on the sphere with the KKT condition x - P(x) = mu A^T (A P(x) - b),
    mu > 0, and leaves a point inside the ball as it is."""
    op = build_degradation(name, scale)
    h, w = 6 * scale, 5 * scale
    x, b = _problem(op, 3, 2, h, w, seed=scale)
    y = torch.randn(b.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    lhs, rhs = (op(x) * y).sum(), (x * op.adjoint(y)).sum()
    assert abs(lhs - rhs) <= 1e-13 * op(x).norm() * y.norm()

    p = op.project(x, b, 0.0)
    a = _dense(op, h, w)
    xf, bf = x.reshape(6, -1).T, b.reshape(6, -1).T
    ref = xf - a.T @ torch.linalg.solve(a @ a.T, a @ xf - bf)
    assert (p.reshape(6, -1).T - ref).abs().max() <= 1e-12
    assert (op.residual_norm(p, b) <= 1e-12 * b.flatten(1).norm(dim=1)).all()
    p32 = op.project(x.float(), b.float(), 0.0)
    assert (op.residual_norm(p32.double(), b) <= 1e-5 * b.flatten(1).norm(dim=1)).all()

    r = op.residual_norm(x, b)
    eps = torch.stack([0.3 * r[0], 1e-3 * r[1], 1.5 * r[2]])
    p = op.project(x, b, eps)
    assert ((op.residual_norm(p, b)[:2] - eps[:2]).abs() <= 1e-10 * eps[:2]).all()
    assert torch.equal(p[2], x[2])
    for n in (0, 1):
        d, g = x[n] - p[n], op.adjoint(op(p[n:n + 1]) - b[n:n + 1])[0]
        mu = (d * g).sum() / (g * g).sum()
        assert mu > 0 and (d - mu * g).norm() <= 1e-9 * d.norm()


@pytest.mark.parametrize('name', NAMES)
def test_gram_matrices_are_well_conditioned_at_every_size(name):
    """A A^T has full row rank for every operator, scale 2-6 and LR axis length 1-40: cond(M M^T) < 4, so the
    projection never meets the singular case. The bound is the antialiased bilinear's at x2, whose taps
    (1, 3, 3, 1) / 8 give M M^T the symbol (20 + 12 cos w) / 64 away from the borders (cond -> 4 on long axes)."""
    for scale in range(2, 7):
        op = build_degradation(name, scale)
        for lr in range(1, 41):
            m = op.axis_matrix(lr * scale)
            eigvals = np.linalg.eigvalsh(m @ m.T)
            assert eigvals[0] > 0 and eigvals[-1] < 4 * eigvals[0], (scale, lr, eigvals[[0, -1]])


def test_rank_deficient_operator_is_refused_naming_the_axis():
    """A custom operator whose A A^T is singular: both projections say so, with the operator and the axis length."""
    class Smear(SeparableDownsample):
        def axis_matrix(self, length):  # every output the mean of the whole axis: rank 1
            return np.full((length // self.scale, length), 1.0 / length)

    x, b = torch.rand(1, 1, 8, 8, dtype=torch.float64), torch.rand(1, 1, 4, 4, dtype=torch.float64)
    for eps in (0.0, 0.1):
        with pytest.raises(ValueError, match=r'Smear: A A\^T is \(numerically\) singular along an axis of length 8'):
            Smear(2).project(x, b, eps)


DCT_DIAGONAL = ('pil-box', 'cv2-area', 'cv2-linear', 'cv2-cubic', 'torch-bicubic-noaa', 'torch-bilinear-noaa')


@pytest.mark.parametrize('name', NAMES)
def test_eps_positive_eigenpairs_dct_where_exact_else_lapack(monkeypatch, name):
    """The DCT-II basis diagonalises M M^T of the block average and of the interpolating operators (a clamped tap is
    at most one pixel outside, where it equals a half-sample mirror) to float64 rounding, at every scale; Pillow's and
    torch's antialiasing renormalise a clipped window at the borders, which no DCT diagonalises (residual ~1e-2), so
    they get LAPACK's eigh. Either way the pairs agree with numpy's dense eigh, and the eps > 0 projection through the
    DCT pairs equals the one through LAPACK's."""
    calls = []
    real_eigh, lapack = torch.linalg.eigh, separable._eigh
    monkeypatch.setattr(separable, '_eigh', lambda *a, **k: calls.append(1) or lapack(*a, **k))
    for scale in (2, 3, 4):
        op = build_degradation(name, scale)
        for lr in (1, 2, 7, 40):
            entry = op._axis(lr * scale, torch.float64, 'cpu', need='spectral')
            s, u = entry['eigvals'].numpy(), entry['eigvecs'].numpy()
            m = op.axis_matrix(lr * scale)
            ref = np.linalg.eigvalsh(m @ m.T)
            assert np.abs(s - ref).max() <= 1e-13 * ref[-1]
            assert np.abs(m @ m.T @ u - u * s).max() <= 1e-13 * ref[-1]
            assert np.abs(u.T @ u - np.eye(lr)).max() <= 1e-13
    assert (calls == []) == (name in DCT_DIAGONAL), len(calls)
    if name in DCT_DIAGONAL:
        op = build_degradation(name, 2)
        x, b = _problem(op, 2, 2, 62, 40, seed=7)
        eps = 0.2 * op.residual_norm(x, b)
        p = op.project(x, b, eps)
        monkeypatch.setattr(separable, '_gram_eigenpairs', lambda gram, dense_fallback=True: tuple(
            t.numpy() for t in real_eigh(torch.from_numpy(gram.toarray()))))
        q = build_degradation(name, 2).project(x, b, eps)
        assert ((p - q).flatten(1).norm(dim=1) <= 1e-12 * q.flatten(1).norm(dim=1)).all()


@pytest.mark.parametrize('name', sorted(set(NAMES) - set(DCT_DIAGONAL)))
def test_no_dct_diagonalises_a_clipped_renormalised_window(name):
    """For the antialiasing operators no orthonormal DCT of types I-IV (basis vectors as the rows or the columns of
    scipy's matrix) is a set of eigenvectors of M M^T: each leaves ||M M^T C - C diag(c_k^T M M^T c_k)||_max above
    1e-3 ||M M^T||_inf, where the DCT-II pairs of the other operators reach float64 rounding."""
    for scale in (2, 3, 4):
        m = build_degradation(name, scale).axis_matrix(64 * scale)
        gram = m @ m.T
        for kind in (1, 2, 3, 4):
            matrix = scipy.fft.dct(np.eye(64), type=kind, norm='ortho', axis=0)
            for basis in (matrix, matrix.T):
                product = gram @ basis
                residual = np.abs(product - basis * np.einsum('ik,ik->k', basis, product)).max()
                assert residual > 1e-3 * np.abs(gram).sum(1).max(), (scale, kind)


# ------------------------------------------------------------------------------------------- circular blur equivalents
@pytest.mark.parametrize('scale', [2, 3, 4])
@pytest.mark.parametrize('name', sorted(DEGRADATIONS))
def test_circular_blur_equals_the_resizer_away_from_the_borders(name, scale):
    """What a network told a blur kernel is told for a resizer: a circular blur with upper-left decimation that gives
    the resizer's own LR on every pixel whose taps stay inside the image (near the borders the two may differ)."""
    op = build_degradation(name, scale)
    blur = op.circular_blur()
    assert blur.offset == 0 and blur.kernel.shape[0] % 2 == 1
    assert blur.kernel.sum() == pytest.approx(1.0, abs=1e-12)
    x = torch.rand(2, 3, 20 * scale, 22 * scale, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    margin = blur.kernel.shape[0] // (2 * scale) + 1
    inside = (..., slice(margin, -margin), slice(margin, -margin))
    torch.testing.assert_close(blur(x)[inside], op(x)[inside], rtol=0, atol=1e-13)


def test_circular_blur_of_blurs_and_stacks():
    """A blur with an offset becomes the same blur with upper-left decimation (exact, circular); a mirrored blur its
    circular twin; a stack of resizers and blurs one blur with a kernel per sample."""
    kernel = np.random.default_rng(3).random((5, 4))
    x = torch.rand(3, 1, 24, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    shifted = BlurDownsample(3, kernel, offset=2)
    torch.testing.assert_close(shifted.circular_blur()(x), shifted(x), rtol=0, atol=1e-13)
    plain = BlurDownsample(3, kernel)
    assert plain.circular_blur() is plain
    mirrored = ReflectBlurDownsample(3, kernel, offset=1)
    torch.testing.assert_close(mirrored.circular_blur()(x)[..., 2:-2, 2:-2], mirrored(x)[..., 2:-2, 2:-2], rtol=0,
                               atol=1e-13)
    stack = StackedOperator([build_degradation('pil-bicubic', 3), shifted, build_degradation('cv2-area', 3)])
    joint = stack.circular_blur()
    assert joint.kernel.shape == (3, 13, 13)
    for i, op in enumerate(stack.operators):
        torch.testing.assert_close(joint(x)[i:i + 1], op.circular_blur()(x[i:i + 1]), rtol=0, atol=1e-13)
