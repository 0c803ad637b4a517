"""Tests of mcnet_basicsr.ops: operators A, adjoints, exact projections, imresize, eps helpers.

References are independent of the code under test wherever possible: basicsr's numpy/loop
imresize for the bicubic operator, numpy ``np.pad(mode='symmetric')`` + explicit convolution for
the box/Gaussian operators, and dense Kronecker matrices with ``torch.linalg.solve`` / bisection
for the projections.
"""
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import dense_ball_projection
from mcnet_basicsr.ops import QUANTIZATION_EPS_RMS, build_operator, eps_from_rms, imresize, solve_secular_equation
from mcnet_basicsr.ops.secular import coefficients_and_inside

SHARED_DATASETS = Path(__file__).resolve().parents[1].parent / 'shared' / 'datasets'
TYPES = ('bicubic', 'box', 'gaussian')
SCALES = (2, 3, 4)


def _basicsr_imresize():
    from basicsr.utils.matlab_functions import imresize as basicsr_imresize
    return basicsr_imresize


# ----------------------------------------------------------------------------- images
def _photo(name, top, left, height, width):
    """A crop of a scikit-image sample photo as float64 HWC in [0, 1] (gray photos get C = 1)."""
    skdata = pytest.importorskip('skimage.data')
    img = getattr(skdata, name)()
    if img.ndim == 2:
        img = img[:, :, None]
    crop = img[top:top + height, left:left + width].astype(np.float64) / 255.0
    assert crop.shape[:2] == (height, width)
    return crop


# sides divisible by 12, some non-square, one gray
PHOTOS = {
    'astronaut': ('astronaut', 20, 140, 144, 180),
    'coffee': ('coffee', 60, 120, 120, 168),
    'chelsea': ('chelsea', 40, 100, 180, 132),
    'rocket': ('rocket', 100, 200, 96, 240),
    'camera': ('camera', 40, 150, 132, 132),
}


def _to_nchw(img):
    return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))[None]


def _to_hwc(t):
    return t[0].detach().numpy().transpose(1, 2, 0)


def _dense(op, height, width):
    """Dense A (hw x HW) for an (H, W) single-channel image, from the operator's 1-D matrices."""
    mh = torch.from_numpy(np.array(op.axis_matrix(height), dtype=np.float64))
    mw = torch.from_numpy(np.array(op.axis_matrix(width), dtype=np.float64))
    return torch.kron(mh, mw)


# ----------------------------------------------------------------------------- bicubic vs basicsr
@pytest.mark.parametrize('scale', SCALES)
def test_bicubic_matches_basicsr_imresize_on_photos(scale):
    basicsr_imresize = _basicsr_imresize()
    op = build_operator({'type': 'bicubic', 'scale': scale})
    for key, spec in PHOTOS.items():
        img = _photo(*spec)
        ref = basicsr_imresize(img, 1 / scale)
        if ref.ndim == 2:
            ref = ref[:, :, None]
        lr = _to_hwc(op(_to_nchw(img)))
        assert lr.shape == ref.shape, key
        assert np.abs(lr - ref).max() <= 1e-5, (key, scale, np.abs(lr - ref).max())
        # the generic imresize builds the same matrices
        lr2 = _to_hwc(imresize(_to_nchw(img), 1 / scale))
        assert np.abs(lr2 - lr).max() <= 1e-12, key


def test_bicubic_batched_float32_matches_per_sample_float64():
    imgs = [_photo('astronaut', 0, 0, 120, 168), _photo('coffee', 30, 50, 120, 168)]
    x64 = torch.cat([_to_nchw(i) for i in imgs])  # N=2, C=3
    op = build_operator({'type': 'bicubic', 'scale': 3})
    y64 = op(x64)
    for n in range(2):
        assert torch.allclose(op(x64[n:n + 1]), y64[n:n + 1], atol=1e-14)
    y32 = op(x64.float())
    assert y32.dtype == torch.float32
    assert (y32.double() - y64).abs().max() <= 2e-6


def _load_png(path):
    Image = pytest.importorskip('PIL.Image')
    with Image.open(path) as im:
        arr = np.asarray(im)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    return arr[:, :, :3].astype(np.float64) / 255.0


@pytest.mark.parametrize('dataset', ['Set5', 'Set14'])
def test_bicubic_matches_basicsr_on_benchmark_sets(dataset):
    folder = SHARED_DATASETS / dataset / 'HR'
    if not folder.is_dir():
        pytest.skip(f'{folder} not found (needs ../shared/datasets next to the repo)')
    paths = sorted(folder.glob('*.png'))
    if not paths:
        pytest.skip(f'no PNG files in {folder}')
    basicsr_imresize = _basicsr_imresize()
    for path in paths:
        img = _load_png(path)
        for scale in SCALES:
            h, w = img.shape[0] - img.shape[0] % scale, img.shape[1] - img.shape[1] % scale  # mod-crop
            hr = img[:h, :w]
            ref = basicsr_imresize(hr, 1 / scale)
            if ref.ndim == 2:
                ref = ref[:, :, None]
            lr = _to_hwc(build_operator({'type': 'bicubic', 'scale': scale})(_to_nchw(hr)))
            assert np.abs(lr - ref).max() <= 1e-5, (path.name, scale)


@pytest.mark.parametrize('scale', [2, 3, 4, 1.5, 0.75, 1 / 3])
def test_imresize_matches_basicsr_both_directions(scale):
    basicsr_imresize = _basicsr_imresize()
    img = _photo('chelsea', 10, 20, 60, 84) if scale > 1 else _photo('rocket', 0, 0, 97, 130)
    ref = basicsr_imresize(img, scale)
    out = _to_hwc(imresize(_to_nchw(img), scale))
    assert out.shape == ref.shape
    assert np.abs(out - ref).max() <= 1e-5, np.abs(out - ref).max()


def test_imresize_is_batched_and_differentiable():
    x = torch.rand(2, 3, 12, 16, dtype=torch.float64, requires_grad=True)
    y = imresize(x, 2)
    assert y.shape == (2, 3, 24, 32)
    assert torch.allclose(y[1:], imresize(x[1:], 2))
    assert torch.autograd.gradcheck(lambda t: imresize(t, 0.5), (x[:1, :1].detach().requires_grad_(),))
    # imresize with antialias, x 1/s == bicubic operator
    op = build_operator({'type': 'bicubic', 'scale': 2})
    assert torch.allclose(imresize(y, 0.5), op(y), atol=1e-14)


# ----------------------------------------------------------------------------- box / gaussian vs numpy
def _numpy_blur_decimate(img, taps, scale, offset):
    """Reference: symmetric pad (edge repeated), separable correlation, keep pixel i*scale+offset."""
    half = len(taps) // 2
    pad = np.pad(img, ((0, 0), (0, 0), (half, half), (half, half)), mode='symmetric')
    h, w = img.shape[-2:]
    rows = sum(taps[k] * pad[..., k:k + h, :] for k in range(len(taps)))
    both = sum(taps[k] * rows[..., :, k:k + w] for k in range(len(taps)))
    return both[..., offset::scale, offset::scale]


@pytest.mark.parametrize('scale', SCALES)
def test_box_is_block_average(scale):
    x = torch.rand(2, 3, 12 * scale, 8 * scale, dtype=torch.float64)
    op = build_operator({'type': 'box', 'scale': scale})
    assert torch.allclose(op(x), F.avg_pool2d(x, scale), atol=1e-14)


@pytest.mark.parametrize('scale,sigma,kernel_size,offset', [(2, 1.0, 7, 0), (3, 1.6, 7, 0), (4, 2.2, None, 1),
                                                            (3, 0.8, 3, 2)])
def test_gaussian_matches_numpy_reference(scale, sigma, kernel_size, offset):
    img = _photo('coffee', 100, 100, 48, 60).transpose(2, 0, 1)[None]
    opt = {'type': 'gaussian', 'scale': scale, 'sigma': sigma, 'kernel_size': kernel_size, 'offset': offset}
    op = build_operator(opt)
    ks = kernel_size or 2 * math.ceil(3 * sigma) + 1
    taps = np.exp(-0.5 * ((np.arange(ks) - ks // 2) / sigma)**2)
    taps /= taps.sum()
    ref = _numpy_blur_decimate(img, taps, scale, offset)
    out = op(torch.from_numpy(img)).numpy()
    assert out.shape == ref.shape
    assert np.abs(out - ref).max() <= 1e-12


# ----------------------------------------------------------------------------- adjoint
@pytest.mark.parametrize('op_type', TYPES)
@pytest.mark.parametrize('scale', SCALES)
@pytest.mark.parametrize('dtype,tol', [(torch.float32, 1e-5), (torch.float64, 1e-12)])
def test_adjoint_identity(op_type, scale, dtype, tol):
    gen = torch.Generator().manual_seed(scale)
    op = build_operator({'type': op_type, 'scale': scale})
    x = torch.randn(3, 2, 12 * scale, 7 * scale, generator=gen, dtype=torch.float64).to(dtype)
    y = torch.randn(3, 2, 12, 7, generator=gen, dtype=torch.float64).to(dtype)
    lhs = (op(x) * y).sum().double()
    rhs = (x * op.adjoint(y)).sum().double()
    scale_ref = (op(x).double().norm() * y.double().norm()).item()
    assert abs(lhs - rhs).item() <= tol * scale_ref, (lhs.item(), rhs.item())
    assert op.adjoint(y).shape == x.shape


def test_adjoint_equals_dense_transpose():
    op = build_operator({'type': 'bicubic', 'scale': 3})
    a = _dense(op, 18, 24)
    y = torch.randn(1, 1, 6, 8, dtype=torch.float64)
    assert torch.allclose(op.adjoint(y).flatten(), a.T @ y.flatten(), atol=1e-14)
    x = torch.randn(1, 1, 18, 24, dtype=torch.float64)
    assert torch.allclose(op(x).flatten(), a @ x.flatten(), atol=1e-14)


# ----------------------------------------------------------------------------- projection, eps = 0
def _random_problem(op, n, c, h, w, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, c, h, w, generator=gen, dtype=torch.float64)
    x_true = torch.rand(n, c, h, w, generator=gen, dtype=torch.float64)
    b = op(x_true) + 0.01 * torch.randn(op(x_true).shape, generator=gen, dtype=torch.float64)
    return x.to(dtype), b.to(dtype)


@pytest.mark.parametrize('op_type', TYPES)
@pytest.mark.parametrize('scale', SCALES)
def test_project_eps0_matches_dense_least_norm_solution(op_type, scale):
    op = build_operator({'type': op_type, 'scale': scale})
    h, w = 6 * scale, 4 * scale
    x, b = _random_problem(op, 2, 2, h, w)
    p = op.project(x, b, 0.0)
    a = _dense(op, h, w)
    xf, bf = x.reshape(4, -1).T, b.reshape(4, -1).T
    ref = xf - a.T @ torch.linalg.solve(a @ a.T, a @ xf - bf)
    assert torch.allclose(p.reshape(4, -1).T, ref, atol=1e-11)
    # and the defining properties, without the dense reference
    assert (op.residual_norm(p, b) <= 1e-12 * b.flatten(1).norm(dim=1)).all()
    d = x - p  # must lie in range(A^T): d = A^T v with (A A^T) v = A d
    v = torch.linalg.solve(a @ a.T, a @ d.reshape(4, -1).T)
    assert torch.allclose(d.reshape(4, -1).T, a.T @ v, atol=1e-12)


@pytest.mark.parametrize('op_type', TYPES)
@pytest.mark.parametrize('scale', SCALES)
def test_project_eps0_per_axis_inverses_equal_the_eigenbasis_formula(op_type, scale):
    """eps = 0 goes through (M M^T)^{-1} per axis (banded Cholesky); it equals the eigenbasis formula
    x - R^T diag(1 / sig) (R x - U_h^T b U_w), R = U^T M, that eps > 0 uses, to float64 rounding."""
    op = build_operator({'type': op_type, 'scale': scale})
    h, w = 23 * scale, 17 * scale
    x, b = _random_problem(op, 3, 2, h, w, seed=5)
    ah, aw = (op._axis(n, torch.float64, 'cpu', need='spectral') for n in (h, w))
    sig = ah['eigvals'][:, None] * aw['eigvals'][None, :]
    r_rot = ah['rotated'] @ x @ aw['rotated'].T - ah['eigvecs'].T @ b @ aw['eigvecs']
    ref = x - ah['rotated'].T @ (r_rot / sig) @ aw['rotated']
    p = op.project(x, b, 0.0)
    assert ((p - ref).flatten(1).norm(dim=1) <= 1e-12 * ref.flatten(1).norm(dim=1)).all()
    assert ((p - ref).abs().max() <= 1e-12 * ref.abs().max())


@pytest.mark.parametrize('op_type,scale', [('bicubic', 2), ('bicubic', 3), ('bicubic', 4), ('box', 3),
                                           ('gaussian', 2), ('gaussian', 3)])
@pytest.mark.parametrize('lr_length', [1, 2, 7, 64, 301])
def test_axis_eigenpairs_match_dense_eigh(op_type, scale, lr_length):
    """The cached eigenpairs of M M^T (the DCT-II basis for bicubic and box, LAPACK's for the Gaussian) against
    numpy's dense eigh of M M^T, all float64: equal eigenvalues, eigenpairs and orthonormality to rounding,
    U^T M as cached, and equal spectral functions U f(s) U^T (which do not depend on how a repeated
    eigenvalue's eigenvectors are chosen)."""
    op = build_operator({'type': op_type, 'scale': scale})
    entry = op._axis(lr_length * scale, torch.float64, 'cpu', need='spectral')
    s, u, rotated = (entry[k].numpy() for k in ('eigvals', 'eigvecs', 'rotated'))
    m = np.array(op.axis_matrix(lr_length * scale), dtype=np.float64)
    gram = m @ m.T
    ref_s, ref_u = np.linalg.eigh(gram)
    tol = 1e-13 * ref_s[-1]
    assert np.abs(s - ref_s).max() <= tol  # ascending, like eigh
    assert np.abs(gram @ u - u * s).max() <= tol
    assert np.abs(u.T @ u - np.eye(lr_length)).max() <= 1e-13
    assert np.abs(rotated - u.T @ m).max() <= 1e-13
    for f in (lambda t: 1.0 / t, lambda t: 0.7 / (1.0 + 0.7 * t)):  # eps = 0 and an eps > 0 multiplier
        assert np.abs((u * f(s)) @ u.T - (ref_u * f(ref_s)) @ ref_u.T).max() <= 1e-12 * np.abs(f(ref_s)).max()


@pytest.mark.parametrize('op_type,scale', [('bicubic', 2), ('bicubic', 4), ('box', 3)])
def test_project_eps_positive_dct_equals_dense_eigh_path(monkeypatch, op_type, scale):
    """eps > 0 through the DCT-II eigenpairs equals the same projection through LAPACK's eigenpairs (the
    fallback, forced here) to float64 rounding."""
    from mcnet_basicsr.ops import separable
    op = build_operator({'type': op_type, 'scale': scale})
    h, w = 31 * scale, 20 * scale
    x, b = _random_problem(op, 3, 2, h, w, seed=7)
    eps = op.residual_norm(x, b) * torch.tensor([0.3, 0.01, 2.0], dtype=torch.float64)
    p = op.project(x, b, eps)

    def lapack_eigenpairs(gram, dense_fallback=True):
        eigvals, eigvecs = torch.linalg.eigh(torch.from_numpy(gram.toarray()))
        return eigvals.numpy(), eigvecs.numpy()

    monkeypatch.setattr(separable, '_gram_eigenpairs', lapack_eigenpairs)
    ref = build_operator({'type': op_type, 'scale': scale}).project(x, b, eps)
    assert ((p - ref).flatten(1).norm(dim=1) <= 1e-12 * ref.flatten(1).norm(dim=1)).all()
    assert torch.equal(p[2], x[2])  # inside its ball


@pytest.mark.parametrize('op_type', TYPES)
@pytest.mark.parametrize('scale', SCALES)
def test_project_eps0_float32_feasible_and_idempotent(op_type, scale):
    op = build_operator({'type': op_type, 'scale': scale})
    img = _photo('astronaut', 0, 0, 144, 180)
    x = _to_nchw(img).float()
    b = op(_to_nchw(_photo('astronaut', 40, 60, 144, 180)).float())  # measurements of another image
    p = op.project(x, b, 0.0)
    assert p.dtype == torch.float32
    assert op.residual_norm(p, b).item() <= 1e-5 * b.norm().item()
    # idempotent, and the component of x - P(x) orthogonal to range(A^T) vanishes (via float64)
    pp = op.project(p, b, 0.0)
    assert (pp - p).norm() <= 1e-5 * p.norm()
    d = (x - p).double()
    d_range = op.adjoint(_solve_gram(op, op(d)))  # A^T (A A^T)^{-1} A d, dense per-axis solves
    assert (d - d_range).norm() <= 1e-5 * d.norm()
    # P(x) is closer to x than another feasible point (the projection of a different image)
    other = op.project(torch.rand_like(x), b, 0.0)
    assert (x - p).norm() < (x - other).norm()


def _solve_gram(op, rhs):
    """(A A^T)^{-1} rhs with dense per-axis factors in float64 (independent of the operator's eigen cache)."""
    h, w = rhs.shape[-2] * op.scale, rhs.shape[-1] * op.scale
    mh = torch.from_numpy(np.array(op.axis_matrix(h), dtype=np.float64))
    mw = torch.from_numpy(np.array(op.axis_matrix(w), dtype=np.float64))
    gh, gw = mh @ mh.T, mw @ mw.T
    return torch.linalg.solve(gh, torch.linalg.solve(gw, rhs.transpose(-1, -2)).transpose(-1, -2))


# ----------------------------------------------------------------------------- projection, eps > 0
@pytest.mark.parametrize('op_type,scale', [('bicubic', 2), ('bicubic', 3), ('gaussian', 2), ('box', 4)])
def test_project_eps_positive_per_sample(op_type, scale):
    op = build_operator({'type': op_type, 'scale': scale})
    h, w = 4 * scale, 5 * scale
    x, b = _random_problem(op, 4, 2, h, w, seed=1)
    r = op.residual_norm(x, b)
    # outside (on sphere after), inside (unchanged), exactly consistent (eps=0), far outside
    eps = torch.stack([0.4 * r[0], 1.5 * r[1], torch.zeros(()), 1e-3 * r[3]])
    p = op.project(x, b, eps)
    res = op.residual_norm(p, b)
    assert abs(res[0] - eps[0]) <= 1e-12 * eps[0]
    assert torch.equal(p[1], x[1])
    assert res[2] <= 1e-12 * b[2].norm()
    assert abs(res[3] - eps[3]) <= 1e-9 * eps[3]
    # KKT: x - P(x) = mu A^T (A P(x) - b) with mu >= 0
    for n in (0, 3):
        d = (x - p)[n:n + 1]
        g = op.adjoint(op(p[n:n + 1]) - b[n:n + 1])
        mu = (d * g).sum() / (g * g).sum()
        assert mu > 0
        assert (d - mu * g).norm() <= 1e-8 * d.norm()
    # against a dense bisection reference
    a = _dense(op, h, w)
    for n in (0, 1, 3):
        ref = dense_ball_projection(torch.block_diag(a, a), x[n].flatten(), b[n].flatten(), eps[n].item())
        assert torch.allclose(p[n].flatten(), ref, atol=1e-8), n
    # idempotent
    assert torch.allclose(op.project(p, b, eps), p, atol=1e-12)


@pytest.mark.parametrize('cond', [1.0, 1e2, 1e6])
@pytest.mark.parametrize('ratio', [0.999, 0.3, 1e-6])
def test_secular_solver_to_machine_precision(cond, ratio):
    """mu solves sum e / (1 + mu s)^2 = eps^2 to ~1 ulp, also for badly conditioned spectra."""
    gen = torch.Generator().manual_seed(7)
    sig = torch.logspace(0, -math.log10(cond), 500, dtype=torch.float64)
    energy = torch.rand(3, 500, generator=gen, dtype=torch.float64)
    norms = energy.sum(1).sqrt()
    eps = torch.stack([ratio * norms[0], 2.0 * norms[1], torch.zeros((), dtype=torch.float64)])
    mu = solve_secular_equation(energy, sig, eps)
    assert mu[0] > 0 and mu[1] == 0 and mu[2] == 0  # outside, inside, eps = 0
    residual = (energy[0] / (1 + mu[0] * sig)**2).sum().sqrt()
    assert abs(residual / eps[0] - 1) <= 1e-14


@pytest.mark.parametrize('shared_sig', [True, False])
@pytest.mark.parametrize('n', [1, 3])
def test_projection_coefficients_with_and_without_gradient(n, shared_sig):
    """Without a gradient the coefficients come from the solver's own mu; with one, from a Newton step after a looser
    stop. Both are mu / (1 + mu sig) at the root to rounding, and the samples reported inside are those with
    ||r|| <= eps > 0 (eps = 0 gets 1 / sig)."""
    gen = torch.Generator().manual_seed(3)
    k = 400
    sig = torch.logspace(0, -8, k, dtype=torch.float64)
    if not shared_sig:
        sig = sig[torch.randperm(k, generator=gen)].expand(n, k).clone()
    energy = torch.rand(n, k, generator=gen, dtype=torch.float64) * torch.logspace(-6, 0, k, dtype=torch.float64)
    norms = energy.sum(1).sqrt()
    eps = torch.tensor([0.01, 2.0, 0.0][:n], dtype=torch.float64) * norms
    plain, inside = coefficients_and_inside(energy, sig, eps)
    with_grad, inside_grad = coefficients_and_inside(energy.clone().requires_grad_(), sig, eps)
    assert with_grad.requires_grad and not plain.requires_grad
    np.testing.assert_array_equal(inside, [False, True, False][:n])
    np.testing.assert_array_equal(inside_grad, inside)
    assert torch.allclose(with_grad.detach(), plain, rtol=1e-13, atol=0)
    residual = (energy[0] * (1 - plain[0] * sig.expand(n, k)[0]).square()).sum().sqrt()  # ||(I + mu K)^-1 r||
    assert abs(residual / eps[0] - 1) <= 1e-14
    if n == 3:
        assert torch.equal(plain[1], torch.zeros(k, dtype=torch.float64))
        assert torch.equal(plain[2], 1.0 / sig.expand(n, k)[2])


def test_project_eps_positive_float32_on_sphere():
    op = build_operator({'type': 'bicubic', 'scale': 4})
    x = _to_nchw(_photo('chelsea', 0, 0, 180, 132)).float()
    b = op(_to_nchw(_photo('chelsea', 60, 200, 180, 132)).float())
    r = op.residual_norm(x, b)
    eps = 0.1 * r.item()
    p = op.project(x, b, eps)
    assert abs(op.residual_norm(p, b).item() - eps) <= 1e-4 * eps
    assert torch.equal(op.project(x, b, 2 * r.item()), x)


def test_project_eps_scalar_tensor_and_errors():
    op = build_operator({'type': 'bicubic', 'scale': 2})
    x, b = _random_problem(op, 2, 1, 8, 8)
    r = op.residual_norm(x, b)
    eps = 0.5 * r.min()
    assert torch.allclose(op.project(x, b, eps), op.project(x, b, eps.item()), atol=1e-14)
    with pytest.raises(ValueError, match='eps'):
        op.project(x, b, -0.1)
    with pytest.raises(ValueError, match='eps'):
        op.project(x, b, torch.ones(3))
    with pytest.raises(ValueError, match='b has shape'):
        op.project(x, b[..., :3], 0.0)


# ----------------------------------------------------------------------------- gradients
@pytest.mark.parametrize('op_type', ['bicubic', 'gaussian'])
def test_gradcheck_project_eps0(op_type):
    op = build_operator({'type': op_type, 'scale': 2})
    x, b = _random_problem(op, 1, 1, 12, 18, seed=3)
    x.requires_grad_(), b.requires_grad_()
    assert torch.autograd.gradcheck(lambda x_, b_: op.project(x_, b_, 0.0), (x, b))


@pytest.mark.parametrize('op_type', ['bicubic', 'gaussian'])
def test_gradcheck_project_eps_positive(op_type):
    op = build_operator({'type': op_type, 'scale': 2})
    x, b = _random_problem(op, 1, 1, 12, 18, seed=4)
    eps = (0.3 * op.residual_norm(x, b)).detach()
    x.requires_grad_(), b.requires_grad_(), eps.requires_grad_()
    assert torch.autograd.gradcheck(lambda x_, b_, e_: op.project(x_, b_, e_), (x, b, eps))


def test_gradcheck_project_mixed_samples():
    """Per-sample eps: outside (implicit gradient of mu), inside (P = x), and eps = 0 in one batch."""
    op = build_operator({'type': 'bicubic', 'scale': 2})
    x, b = _random_problem(op, 3, 2, 6, 8, seed=5)
    r = op.residual_norm(x, b)
    eps = torch.stack([0.3 * r[0], 2.0 * r[1], torch.zeros(())]).detach()
    x.requires_grad_(), b.requires_grad_()
    assert torch.autograd.gradcheck(lambda x_, b_: op.project(x_, b_, eps), (x, b))


def test_project_gradient_inside_is_identity():
    op = build_operator({'type': 'bicubic', 'scale': 2})
    x, b = _random_problem(op, 1, 1, 8, 8)
    x.requires_grad_(), b.requires_grad_()
    big = 10 * op.residual_norm(x, b).item()
    gx, gb = torch.autograd.grad(op.project(x, b, big).sum(), (x, b))
    assert torch.equal(gx, torch.ones_like(x)) and torch.equal(gb, torch.zeros_like(b))


# ----------------------------------------------------------------------------- real-photo consistency
def test_consistency_on_real_photo_at_quantisation_level():
    op = build_operator({'type': 'bicubic', 'scale': 4})
    x_star = _to_nchw(_photo('astronaut', 0, 96, 240, 240))
    b = torch.round(op(x_star) * 255) / 255
    lr_numel = b[0].numel()
    rms = op.residual_norm(x_star, b).item() / math.sqrt(lr_numel)
    assert 0.5 * QUANTIZATION_EPS_RMS <= rms <= 1.5 * QUANTIZATION_EPS_RMS, rms
    p = op.project(x_star, b, 0.0)
    assert op.residual_norm(p, b).item() <= 1e-12 * b.norm().item()
    change_rms = (p - x_star).pow(2).mean().sqrt().item()
    assert 0 < change_rms < 1 / 255, change_rms
    # a radius of twice the quantisation level already contains x*: nothing moves
    eps = eps_from_rms(2 * QUANTIZATION_EPS_RMS, lr_numel)
    assert torch.equal(op.project(x_star, b, eps), x_star)


def test_eps_from_rms_is_size_independent():
    assert eps_from_rms(0.01, 100) == pytest.approx(0.1)
    assert QUANTIZATION_EPS_RMS == pytest.approx(1 / 255 / math.sqrt(12))
    op = build_operator({'type': 'bicubic', 'scale': 2})
    for size in (24, 96):
        x, b = _random_problem(op, 1, 3, size, size)
        eps = eps_from_rms(1e-3, b[0].numel())
        p = op.project(x, b, eps)
        assert op.residual_norm(p, b).item() / math.sqrt(b[0].numel()) == pytest.approx(1e-3, rel=1e-10)
