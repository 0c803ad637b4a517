"""BlurDownsample: any 2-D kernel, circular boundary, then decimation; its adjoint, exact projections and kernel files.

References are independent of the FFT code under test: ``scipy.ndimage.convolve(mode='wrap')`` and slicing for A,
a dense float64 A built column by column (A applied to unit images) for the adjoint, ``A A^T``'s eigenvalues and the
projections (pseudo-inverse for eps = 0, bisection on mu for eps > 0).
"""
import math

import numpy as np
import pytest
import scipy.io
import scipy.ndimage
import torch

from conftest import dense_ball_projection, sample_photo, shared_path
from mcnet_basicsr.ops import OPERATOR_REGISTRY, BlurDownsample, build_operator, load_kernel
from mcnet_basicsr.ops.blur import DEFAULT_FLOOR

DT = torch.float64
SCALES = (2, 3, 4)
KERNEL_SIZES = [(3, 3), (4, 4), (5, 2), (2, 6), (7, 4), (1, 1)]


def random_kernel(kh, kw, seed=0):
    """Positive random taps (not normalised: the operator keeps a kernel as given)."""
    return np.random.default_rng(seed).random((kh, kw)) + 0.05


def gaussian_kernel(sigma, size):
    t = np.arange(size) - size // 2
    g = np.exp(-0.5 * (t / sigma)**2)
    k = np.outer(g, g)
    return k / k.sum()


def scipy_blur_decimate(x, kernel, scale, offset=0):
    """Reference A: scipy's circular convolution of every channel, then pixel ``offset`` of each block."""
    x = np.asarray(x)
    out = np.empty(x.shape[:2] + (x.shape[2] // scale, x.shape[3] // scale))
    for n in range(x.shape[0]):
        k = kernel[n] if kernel.ndim == 3 else kernel
        for c in range(x.shape[1]):
            out[n, c] = scipy.ndimage.convolve(x[n, c], k, mode='wrap')[offset::scale, offset::scale]
    return out


def dense_matrix(op, hr_h, hr_w):
    """Dense A (h w x H W) of one channel, column by column: A applied to every unit image."""
    eye = torch.eye(hr_h * hr_w, dtype=DT).reshape(hr_h * hr_w, 1, hr_h, hr_w)
    if op.per_sample:
        raise ValueError('dense_matrix takes an operator with one kernel')
    return op(eye).reshape(hr_h * hr_w, -1).T


def random_problem(op, n, c, hr_h, hr_w, seed=0, dtype=DT):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, c, hr_h, hr_w, generator=gen, dtype=DT)
    x_true = torch.rand(n, c, hr_h, hr_w, generator=gen, dtype=DT)
    b = op(x_true) + 0.01 * torch.randn(op(x_true).shape, generator=gen, dtype=DT)
    return x.to(dtype), b.to(dtype)


def looped(op):
    """The same operator with one FFT call per polyphase component (the path large images take)."""
    op.batched_numel = 0
    return op


# ----------------------------------------------------------------------------- A against scipy
@pytest.mark.parametrize('kh,kw', KERNEL_SIZES)
@pytest.mark.parametrize('scale', SCALES)
def test_forward_matches_scipy_convolve_wrap(kh, kw, scale):
    """Odd and even kernel sizes, non-square images, every offset: equal to scipy to float64 rounding, through the
    batched FFTs and the per-component ones."""
    kernel = random_kernel(kh, kw, seed=kh * 10 + kw)
    x = np.random.default_rng(scale).random((2, 3, 4 * scale, 3 * scale + 2 * scale))
    for offset in range(scale):
        ref = scipy_blur_decimate(x, kernel, scale, offset)
        for op in (BlurDownsample(scale, kernel, offset=offset), looped(BlurDownsample(scale, kernel, offset=offset))):
            out = op(torch.from_numpy(x)).numpy()
            assert out.shape == ref.shape
            assert np.abs(out - ref).max() <= 1e-13 * np.abs(ref).max(), (offset, np.abs(out - ref).max())


def test_forward_kernel_as_large_as_the_image():
    """A kernel as large as the image wraps around it several times, as scipy's does."""
    kernel = random_kernel(9, 8, seed=3)
    x = np.random.default_rng(0).random((1, 2, 10, 8))
    out = BlurDownsample(2, kernel, offset=1)(torch.from_numpy(x)).numpy()
    assert np.abs(out - scipy_blur_decimate(x, kernel, 2, 1)).max() <= 1e-13


def test_fft_calls_batch_every_component_on_an_accelerator():
    """On the CPU a large image loops over its polyphase components (one FFT call each); on an accelerator one call
    takes them all at any size (the tests above check both paths against scipy)."""
    op = BlurDownsample(3, random_kernel(5, 5))
    big = op.batched_numel + 1
    assert op._chunk(torch.device('cpu'), op.batched_numel) == 9 and op._chunk(torch.device('cpu'), big) == 1
    assert op._chunk(torch.device('cuda'), big) == 9 and op._chunk(torch.device('cuda', 1), 10**9) == 9


def test_usrnet_kernels_match_scipy():
    """USRNet's 12 kernels (25 x 25, loaded from their .mat cell array) at x2-x4, as in their Table 1 protocol."""
    path = shared_path('kernels', 'usrnet', 'kernels_12.mat')
    raw = scipy.io.loadmat(str(path))['kernels']
    x = np.random.default_rng(0).random((1, 3, 48, 36))
    for index in range(12):
        kernel = load_kernel(path, index)
        assert kernel.shape == (25, 25) and np.array_equal(kernel, raw[0, index].astype(np.float64))
        for scale in SCALES:
            op = build_operator({'type': 'blur', 'scale': scale, 'kernel': str(path), 'index': index})
            ref = scipy_blur_decimate(x, kernel, scale)
            assert np.abs(op(torch.from_numpy(x)).numpy() - ref).max() <= 1e-13, (index, scale)


# ----------------------------------------------------------------------------- A^T and A A^T
@pytest.mark.parametrize('kh,kw', [(3, 3), (4, 6), (7, 2)])
@pytest.mark.parametrize('scale', SCALES)
@pytest.mark.parametrize('dtype,tol', [(torch.float32, 1e-5), (torch.float64, 1e-13)])
def test_adjoint_identity(kh, kw, scale, dtype, tol):
    gen = torch.Generator().manual_seed(scale)
    op = BlurDownsample(scale, random_kernel(kh, kw), offset=scale - 1)
    x = torch.randn(3, 2, 5 * scale, 7 * scale, generator=gen, dtype=DT).to(dtype)
    y = torch.randn(3, 2, 5, 7, generator=gen, dtype=DT).to(dtype)
    for operator in (op, looped(BlurDownsample(scale, random_kernel(kh, kw), offset=scale - 1))):
        lhs, rhs = (operator(x) * y).sum().double(), (x * operator.adjoint(y)).sum().double()
        assert abs(lhs - rhs).item() <= tol * (operator(x).double().norm() * y.double().norm()).item()
        assert operator.adjoint(y).shape == x.shape and operator.adjoint(y).dtype == dtype


def test_adjoint_equals_dense_transpose_and_hr_size():
    op = BlurDownsample(3, random_kernel(4, 5), offset=2)
    a = dense_matrix(op, 12, 9)
    y = torch.randn(2, 1, 4, 3, dtype=DT)
    assert torch.allclose(op.adjoint(y).reshape(2, -1), (a.T @ y.reshape(2, -1).T).T, atol=1e-14)
    assert torch.allclose(op.adjoint(y, hr_size=(12, 9)), op.adjoint(y), atol=0)
    with pytest.raises(ValueError, match='hr_size 12x12 does not match LR size 4x3 at scale 3'):
        op.adjoint(y, hr_size=(12, 12))


@pytest.mark.parametrize('scale,size', [(2, (12, 10)), (3, (12, 9)), (4, (16, 12))])
def test_aliased_power_is_the_spectrum_of_a_at(scale, size):
    """d (the half spectrum) holds exactly the eigenvalues of the dense A A^T, each listed once per conjugate pair."""
    op = BlurDownsample(scale, random_kernel(5, 4, seed=scale), offset=1)
    a = dense_matrix(op, *size)
    eig = np.sort(np.linalg.eigvalsh((a @ a.T).numpy()))
    d = op.aliased_power(*size)[0]
    h, w = d.shape[0], size[1] // scale
    full = np.concatenate([d, d[(-np.arange(h)) % h][:, 1:w - w // 2][:, ::-1]], axis=1)  # d(-v) = d(v)
    assert full.shape == (h, w)
    assert np.abs(np.sort(full.ravel()) - eig).max() <= 1e-13 * eig.max()


# ----------------------------------------------------------------------------- projection, eps = 0
@pytest.mark.parametrize('kernel,scale,offset,size', [
    ((3, 3), 2, 0, (12, 12)),
    ((4, 4), 2, 1, (16, 12)),
    ((5, 2), 3, 0, (12, 12)),
    ((6, 5), 4, 3, (16, 12)),
    ((9, 9), 2, 0, (12, 10)),
])
def test_project_eps0_matches_dense_least_squares(kernel, scale, offset, size):
    """P(x) = x - A^T (A A^T)^+ (A x - b) with the dense pseudo-inverse, several samples and channels."""
    op = BlurDownsample(scale, random_kernel(*kernel, seed=scale), offset=offset)
    x, b = random_problem(op, 2, 2, *size)
    a = dense_matrix(op, *size)
    xf, bf = x.reshape(4, -1).T, b.reshape(4, -1).T
    ref = xf - a.T @ (torch.linalg.pinv(a @ a.T) @ (a @ xf - bf))
    for operator in (op, looped(BlurDownsample(scale, random_kernel(*kernel, seed=scale), offset=offset))):
        p = operator.project(x, b, 0.0)
        assert torch.allclose(p.reshape(4, -1).T, ref, atol=1e-12, rtol=0)
        assert (operator.residual_norm(p, b) <= 1e-13 * b.flatten(1).norm(dim=1)).all()
        assert torch.allclose(operator.project(p, b, 0.0), p, atol=1e-13, rtol=0)  # idempotent


def test_project_eps0_float32_agrees_with_float64_on_a_photo():
    """A photo (gray, 120 x 96) measured by a Gaussian blur at x3, projected from another photo's crop."""
    img = sample_photo('astronaut', (240, 192))[..., 1].astype(np.float64) / 255
    truth, start = (torch.from_numpy(np.ascontiguousarray(a))[None, None] for a in (img[:120, :96], img[120:, 96:]))
    op = BlurDownsample(3, gaussian_kernel(1.6, 13))
    b = op(truth)
    p64 = op.project(start, b, 0.0)
    p32 = op.project(start.float(), b.float(), 0.0)
    assert p32.dtype == torch.float32
    assert (p32.double() - p64).norm() <= 1e-5 * p64.norm()
    assert op.residual_norm(p32.double(), b) <= 1e-6 * b.norm()
    assert op.residual_norm(p64, b) <= 1e-14 * b.norm()
    assert (op(start.float()).double() - op(start)).abs().max() <= 1e-6


# ----------------------------------------------------------------------------- projection, eps > 0
@pytest.mark.parametrize('kernel,scale,offset', [((3, 3), 2, 0), ((4, 5), 3, 2), ((6, 6), 4, 1)])
def test_project_eps_positive_against_dense_bisection(kernel, scale, offset):
    """Per-sample radii: outside (on the sphere after), inside (unchanged), eps = 0 and far outside in one batch;
    feasibility, optimality (KKT), the dense reference and idempotence."""
    op = BlurDownsample(scale, random_kernel(*kernel, seed=7), offset=offset)
    hr_h, hr_w = 3 * scale, 4 * scale  # LR 3 x 4: odd height, even width (a Nyquist column)
    x, b = random_problem(op, 4, 2, hr_h, hr_w, seed=1)
    r = op.residual_norm(x, b)
    eps = torch.stack([0.4 * r[0], 1.5 * r[1], torch.zeros((), dtype=DT), 1e-3 * r[3]])
    p = op.project(x, b, eps)
    res = op.residual_norm(p, b)
    assert abs(res[0] - eps[0]) <= 1e-12 * eps[0] and abs(res[3] - eps[3]) <= 1e-9 * eps[3]
    assert torch.equal(p[1], x[1])
    assert res[2] <= 1e-13 * b[2].norm()
    for n in (0, 3):  # x - P(x) = mu A^T (A P(x) - b), mu > 0
        d, g = (x - p)[n:n + 1], op.adjoint(op(p[n:n + 1]) - b[n:n + 1])
        mu = (d * g).sum() / (g * g).sum()
        assert mu > 0 and (d - mu * g).norm() <= 1e-9 * d.norm()
    a = dense_matrix(op, hr_h, hr_w)
    for n in (0, 1, 3):
        ref = dense_ball_projection(torch.block_diag(a, a), x[n].flatten(), b[n].flatten(), eps[n].item())
        assert torch.allclose(p[n].flatten(), ref, atol=1e-9, rtol=0), n
    assert torch.allclose(op.project(p, b, eps), p, atol=1e-12, rtol=0)
    loop = looped(BlurDownsample(scale, random_kernel(*kernel, seed=7), offset=offset))
    assert torch.allclose(loop.project(x, b, eps), p, atol=1e-13, rtol=0)


def test_project_eps_positive_float32_on_the_sphere():
    op = BlurDownsample(2, gaussian_kernel(1.2, 9))
    x, b = random_problem(op, 2, 3, 40, 32, seed=2, dtype=torch.float32)
    eps = 0.2 * op.residual_norm(x, b)
    p = op.project(x, b, eps)
    assert p.dtype == torch.float32
    assert torch.allclose(op.residual_norm(p.double(), b.double()), eps.double(), rtol=1e-5)
    assert (p.double() - op.project(x.double(), b.double(), eps.double())).norm() <= 1e-5 * p.double().norm()


# ----------------------------------------------------------------------------- per-sample kernels
def test_per_sample_kernels_equal_one_operator_per_sample():
    kernels = np.stack([random_kernel(5, 5, seed=s) for s in range(3)])
    kernels[1] = gaussian_kernel(0.9, 5)
    op = BlurDownsample(2, kernels, offset=1)
    singles = [BlurDownsample(2, k, offset=1) for k in kernels]
    x, b = random_problem(singles[0], 3, 2, 12, 10, seed=4)
    r = torch.stack([s.residual_norm(x[n:n + 1], b[n:n + 1])[0] for n, s in enumerate(singles)])
    eps = torch.stack([0.3 * r[0], torch.zeros((), dtype=DT), 2.0 * r[2]])
    y = torch.randn(3, 2, 6, 5, dtype=DT)
    results = {'A x': op(x), 'A^T y': op.adjoint(y), 'P eps=0': op.project(x, b, 0.0), 'P eps': op.project(x, b, eps)}
    for n, single in enumerate(singles):
        expected = {'A x': single(x[n:n + 1]), 'A^T y': single.adjoint(y[n:n + 1]),
                    'P eps=0': single.project(x[n:n + 1], b[n:n + 1], 0.0),
                    'P eps': single.project(x[n:n + 1], b[n:n + 1], eps[n:n + 1])}
        for key, value in expected.items():
            assert torch.allclose(results[key][n:n + 1], value, atol=1e-13, rtol=0), (key, n)
    assert torch.equal(results['P eps'][2], x[2])  # inside its ball
    with pytest.raises(ValueError, match='3 kernels \\(one per sample\\) for a batch of 2 images'):
        op(x[:2])
    with pytest.raises(ValueError, match='3 kernels'):
        op.project(x[:2], b[:2], 0.0)


# ----------------------------------------------------------------------------- gradients
def test_gradcheck_project_eps0():
    op = BlurDownsample(2, random_kernel(3, 4), offset=1)
    x, b = random_problem(op, 1, 1, 8, 6, seed=3)
    x.requires_grad_(), b.requires_grad_()
    assert torch.autograd.gradcheck(lambda x_, b_: op.project(x_, b_, 0.0), (x, b))


@pytest.mark.parametrize('per_component', [False, True], ids=['batched', 'per_component'])
def test_gradcheck_project_eps_positive(per_component):
    op = BlurDownsample(3, random_kernel(4, 4), offset=0)
    if per_component:
        looped(op)
    x, b = random_problem(op, 1, 2, 9, 6, seed=4)
    eps = (0.3 * op.residual_norm(x, b)).detach()
    x.requires_grad_(), b.requires_grad_(), eps.requires_grad_()
    assert torch.autograd.gradcheck(lambda x_, b_, e_: op.project(x_, b_, e_), (x, b, eps))


def test_gradcheck_project_per_sample_kernels_and_mixed_radii():
    """Per-sample kernels; samples outside (implicit gradient of mu), inside (P = x) and at eps = 0 in one batch."""
    op = BlurDownsample(2, np.stack([random_kernel(3, 3, seed=s) for s in range(3)]))
    x, b = random_problem(op, 3, 1, 6, 8, seed=5)
    r = op.residual_norm(x, b)
    eps = torch.stack([0.3 * r[0], 2.0 * r[1], torch.zeros((), dtype=DT)]).detach()
    x.requires_grad_(), b.requires_grad_()
    assert torch.autograd.gradcheck(lambda x_, b_: op.project(x_, b_, eps), (x, b))


# ----------------------------------------------------------------------------- the floor
def test_floor_leaves_the_null_components_and_corrects_the_rest():
    """A 4 x 4 box at x2 has d = 0 exactly on a set of frequencies (both aliases on a zero of its spectrum). Those
    components count as outside the range: the projection is exact elsewhere, and the residual left is the part
    of A x - b on the dropped components, which A cannot change anyway."""
    op = BlurDownsample(2, np.full((4, 4), 1 / 16))
    x, b = random_problem(op, 1, 2, 16, 12, seed=6)
    b = b + 0.1 * torch.randn(b.shape, generator=torch.Generator().manual_seed(1), dtype=DT)  # not in range(A)
    d = op.aliased_power(16, 12)[0]
    dropped = d <= DEFAULT_FLOOR * d.max()
    assert 0 < dropped.sum() < dropped.size
    p = op.project(x, b, 0.0)
    assert torch.isfinite(p).all()

    def dropped_part(r):  # the component of r on the dropped frequencies (real half spectrum)
        spectrum = np.fft.rfft2(r.numpy())
        return np.fft.irfft2(np.where(dropped, spectrum, 0), s=r.shape[-2:])

    r_before, r_after = op(x) - b, op(p) - b
    assert np.abs(r_after.numpy() - dropped_part(r_before)).max() <= 1e-13
    assert np.abs(dropped_part(r_before)).max() > 1e-3  # the test can fail: something is left
    # against the dense pseudo-inverse of A A^T (whose null space is exactly those components)
    a = dense_matrix(op, 16, 12)
    xf, bf = x.reshape(2, -1).T, b.reshape(2, -1).T
    ref = xf - a.T @ (torch.linalg.pinv(a @ a.T, hermitian=True, rtol=1e-10) @ (a @ xf - bf))
    assert torch.allclose(p.reshape(2, -1).T, ref, atol=1e-12, rtol=0)
    # eps > 0: the ball bounds the residual on the kept components
    kept_norm = (r_before - torch.from_numpy(dropped_part(r_before))).flatten(1).norm(dim=1)
    p = op.project(x, b, 0.5 * kept_norm)
    left = (op(p) - b) - torch.from_numpy(dropped_part(r_before))
    assert torch.allclose(left.flatten(1).norm(dim=1), 0.5 * kept_norm, rtol=1e-12)
    assert torch.equal(op.project(x, b, 1.01 * kept_norm), x)


def test_floor_keeps_every_component_of_a_wide_gaussian_when_zero():
    """The floor is relative to max d: with floor 0 nothing of a well-posed kernel is dropped, and the result equals
    the default's when no component falls under the default floor."""
    kernel = gaussian_kernel(1.2, 7)
    x, b = random_problem(BlurDownsample(2, kernel), 1, 1, 12, 12)
    d = BlurDownsample(2, kernel).aliased_power(12, 12)
    assert d.min() > DEFAULT_FLOOR * d.max()
    exact = BlurDownsample(2, kernel, floor=0).project(x, b, 0.0)
    assert torch.equal(exact, BlurDownsample(2, kernel).project(x, b, 0.0))
    high = BlurDownsample(2, kernel, floor=0.5)  # drops most components: their residual stays
    assert high.residual_norm(high.project(x, b, 0.0), b) > 1e-3 * b.norm()


# ----------------------------------------------------------------------------- MCNetArch drop-in
def test_mcnet_arch_with_a_blur_operator_is_consistent(srcnn_ckpt):
    from basicsr.archs import build_network

    from conftest import tiny_layer_options
    kernel = gaussian_kernel(1.0, 5)
    opt = tiny_layer_options(srcnn_ckpt, {'tol': 1e-5, 'max_iter': 30}, {'tol': 1e-4, 'max_iter': 30},
                             operator={'type': 'blur', 'scale': 2, 'kernel': kernel.tolist()})
    torch.manual_seed(0)
    net = build_network(opt).double().eval()
    assert isinstance(net.operator, BlurDownsample) and net.operator.scale == 2
    hr = torch.from_numpy(sample_photo('astronaut', 24)[..., 1].astype(np.float64) / 255)[None, None]
    lr = net.operator(hr)
    with torch.no_grad():
        out = net(lr)
    assert out.shape == hr.shape
    assert net.operator.residual_norm(out, lr) <= 1e-12 * lr.norm()


# ----------------------------------------------------------------------------- kernel files and bad input
def test_load_kernel_npy_png_mat(tmp_path):
    kernel = random_kernel(5, 3)
    np.save(tmp_path / 'k.npy', kernel)
    assert np.array_equal(load_kernel(tmp_path / 'k.npy'), kernel)

    Image = pytest.importorskip('PIL.Image')
    gray = (np.arange(12).reshape(3, 4) * 20).astype(np.uint8)
    Image.fromarray(gray, mode='L').save(tmp_path / 'k.png')
    assert np.allclose(load_kernel(tmp_path / 'k.png'), gray / gray.sum(), rtol=0, atol=1e-16)
    wide = (np.arange(6).reshape(2, 3) * 9000 + 7).astype(np.uint16)
    Image.fromarray(wide).save(tmp_path / 'k16.png')
    assert np.allclose(load_kernel(tmp_path / 'k16.png'), wide / wide.sum(), rtol=0, atol=1e-16)

    scipy.io.savemat(tmp_path / 'one.mat', {'k': kernel})
    assert np.array_equal(load_kernel(tmp_path / 'one.mat'), kernel)
    cells = np.empty((1, 3), dtype=object)
    for i in range(3):
        cells[0, i] = random_kernel(3 + i, 3, seed=i)
    scipy.io.savemat(tmp_path / 'cells.mat', {'kernels': cells})
    for i in range(3):
        assert np.array_equal(load_kernel(tmp_path / 'cells.mat', index=i), cells[0, i])
    op = build_operator({'type': 'blur', 'scale': 2, 'kernel': str(tmp_path / 'cells.mat'), 'index': 2})
    assert np.array_equal(op.kernel, cells[0, 2]) and 'index=2' in repr(op)


def one_line_error(call, *match):
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    assert '\n' not in message, message
    for text in match:
        assert text in message, message
    return message


def test_bad_kernels_and_files_give_one_clear_line(tmp_path):
    x = torch.rand(1, 1, 8, 8, dtype=DT)
    one_line_error(lambda: BlurDownsample(2, np.ones((2, 2, 2, 2))), 'shape (kh, kw) or (N, kh, kw)', '(2, 2, 2, 2)')
    one_line_error(lambda: BlurDownsample(2, np.ones(5)), 'shape', '(5,)')
    one_line_error(lambda: BlurDownsample(2, np.zeros((0, 3))), 'shape', '(0, 3)')
    one_line_error(lambda: BlurDownsample(2, [[1.0, np.nan], [1.0, 1.0]]), 'non-finite', 'NaN')
    one_line_error(lambda: BlurDownsample(2, [[1.0, np.inf]]), 'non-finite')
    one_line_error(lambda: BlurDownsample(2, [[1.0, -2.0]]), 'sum > 0', '-1')
    one_line_error(lambda: BlurDownsample(2, np.stack([np.ones((2, 2)), -np.ones((2, 2))])), 'kernel 1 of 2')
    one_line_error(lambda: BlurDownsample(2, [['a', 'b']]), 'numeric')
    one_line_error(lambda: BlurDownsample(2, np.ones((9, 3)))(x), 'kernel of size 9x3', 'image 8x8')
    one_line_error(lambda: BlurDownsample(2, np.ones((3, 9))).project(x, torch.zeros(1, 1, 4, 4, dtype=DT), 0.0),
                   'kernel of size 3x9', 'image 8x8')
    one_line_error(lambda: BlurDownsample(2, np.ones((3, 3)), offset=2), 'offset', '[0, 2)')
    one_line_error(lambda: BlurDownsample(2, np.ones((3, 3)), floor=1.0), 'floor', '[0, 1)')
    one_line_error(lambda: BlurDownsample(2, np.ones((3, 3)), index=1), 'index', 'path')
    one_line_error(lambda: BlurDownsample(3, np.ones((3, 3)))(torch.zeros(1, 1, 8, 9)), '8x9', 'scale 3')

    np.save(tmp_path / 'stack.npy', np.ones((2, 3, 3)))
    one_line_error(lambda: load_kernel(tmp_path / 'stack.npy'), 'shape (kh, kw)', '(2, 3, 3)')
    np.save(tmp_path / 'nan.npy', np.array([[np.nan]]))
    one_line_error(lambda: load_kernel(tmp_path / 'nan.npy'), 'non-finite')
    np.save(tmp_path / 'neg.npy', -np.ones((2, 2)))
    one_line_error(lambda: BlurDownsample(2, str(tmp_path / 'neg.npy')), 'sum > 0', '-4')
    one_line_error(lambda: load_kernel(tmp_path / 'k.txt'), "'.txt'", '.npy, .png, .mat')
    one_line_error(lambda: load_kernel(tmp_path / 'neg.npy', index=0), 'index=0', 'one kernel')
    cells = np.empty((1, 12), dtype=object)
    for i in range(12):
        cells[0, i] = np.ones((3, 3))
    scipy.io.savemat(tmp_path / 'cells.mat', {'kernels': cells})
    one_line_error(lambda: load_kernel(tmp_path / 'cells.mat', index=12), 'index 12', '12 kernels', '0 to 11')
    one_line_error(lambda: load_kernel(tmp_path / 'cells.mat'), 'cell array of 12 kernels', 'index')
    scipy.io.savemat(tmp_path / 'two.mat', {'a': np.ones((2, 2)), 'b': np.ones((2, 2))})
    one_line_error(lambda: load_kernel(tmp_path / 'two.mat'), '2 variables')
    scipy.io.savemat(tmp_path / 'one.mat', {'k': np.ones((2, 2))})
    one_line_error(lambda: load_kernel(tmp_path / 'one.mat', index=1), 'index=1', "'k'")
    Image = pytest.importorskip('PIL.Image')
    Image.fromarray(np.zeros((3, 3, 3), dtype=np.uint8)).save(tmp_path / 'rgb.png')
    one_line_error(lambda: load_kernel(tmp_path / 'rgb.png'), 'grayscale', 'RGB')
    Image.fromarray(np.zeros((3, 3), dtype=np.uint8)).save(tmp_path / 'black.png')
    one_line_error(lambda: load_kernel(tmp_path / 'black.png'), 'sum > 0')


def test_registry_options_and_repr():
    assert 'blur' in OPERATOR_REGISTRY and OPERATOR_REGISTRY.get('blur') is BlurDownsample
    opt = {'type': 'blur', 'scale': 3, 'kernel': [[0.0, 1.0], [1.0, 2.0]], 'offset': 1}
    op = build_operator(opt)
    assert opt['kernel'] == [[0.0, 1.0], [1.0, 2.0]] and op.kernel.sum() == 4.0  # as given, not normalised
    assert repr(op) == f'BlurDownsample(scale=3, kernel=<2x2>, offset=1, floor={DEFAULT_FLOOR:g})'
    assert 'kernel=<4x2x2 (per sample)>' in repr(BlurDownsample(2, torch.ones(4, 2, 2)))
    assert not op.kernel.flags.writeable


def test_spectra_cached_per_size_dtype_device():
    op = BlurDownsample(2, random_kernel(3, 3))
    x, b = random_problem(BlurDownsample(2, random_kernel(3, 3)), 1, 1, 8, 8)
    other = random_problem(BlurDownsample(2, random_kernel(3, 3)), 1, 1, 12, 8)
    calls = []
    real = op._polyphase_spectra

    def counting(*args):
        calls.append(args)
        return real(*args)

    op._polyphase_spectra = counting
    for dtype in (DT, torch.float32, DT, torch.float32):
        op.project(x.to(dtype), b.to(dtype), 0.0)
        op.project(x.to(dtype), b.to(dtype), 0.1)
        op(x.to(dtype))
    assert len(calls) == 2 and len(op._power) == 1
    op.project(*other, 0.0)
    assert len(calls) == 3 and len(op._power) == 2
    op.clear_cache()
    op(x)
    assert len(calls) == 4 and math.isclose(op.floor, DEFAULT_FLOOR)


@pytest.mark.parametrize('shape', [(5, 5), (4, 6), (3, 8), (25, 25)])
@pytest.mark.parametrize('scale, offset', [(2, 0), (3, 1), (4, 3)])
def test_reflect_blur_downsample_is_scipy_reflect_convolve_then_decimation(shape, scale, offset):
    """The measurement model of a blur that mirrored the borders: scipy.ndimage.convolve(mode='reflect') (odd and even
    kernels), then pixel (offset, offset) of each block, per channel; reflect_pad is numpy's 'symmetric' pad."""
    from scipy import ndimage

    from mcnet_basicsr.ops import ReflectBlurDownsample, reflect_pad
    rng = np.random.default_rng(sum(shape) + scale)
    k = rng.random(shape)
    k /= k.sum()
    x = rng.random((2, 3, 24, 36))
    y = ReflectBlurDownsample(scale, k, offset)(torch.from_numpy(x)).numpy()
    ref = np.stack([[ndimage.convolve(x[n, c], k, mode='reflect')[offset::scale, offset::scale] for c in range(3)]
                    for n in range(2)])
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-13)
    padded = reflect_pad(torch.from_numpy(x), 3, 1, 0, 5).numpy()
    np.testing.assert_array_equal(padded, np.pad(x, ((0, 0), (0, 0), (3, 1), (0, 5)), mode='symmetric'))
    with pytest.raises(ValueError, match='exceed the 24x36 image'):
        reflect_pad(torch.from_numpy(x), 25, 0, 0, 0)
