"""The projection's set-up on a new image size (mcnet_basicsr.ops): each axis matrix built from its nonzeros,
filled on the input's device, U^T M by either product, and the per-size cache shared by eps = 0 and eps > 0.

The projections themselves are tested against dense references in test_ops.py.
"""
import numpy as np
import pytest
import scipy.sparse
import torch

from mcnet_basicsr.ops import build_operator, separable


def test_folded_taps_sum_like_a_dense_scatter_add():
    """Each axis is built from its nonzeros: taps that fold onto the same pixel (mirrored borders, repeated
    columns) are summed in their order, bit for bit what np.add.at into a dense matrix gives, and exact
    cancellations leave no stored zero."""
    from mcnet_basicsr.ops.matrices import _fold_taps, symmetric_index
    rng = np.random.default_rng(0)
    for out_length, in_length, taps in ((1, 1, 5), (3, 7, 9), (40, 97, 12), (64, 256, 18)):
        rows = np.repeat(np.arange(out_length), taps)
        cols = rng.integers(-2 * in_length, 3 * in_length, size=rows.size)
        weights = rng.standard_normal(rows.size) * 10.0 ** rng.integers(-8, 3, size=rows.size)
        weights[:2], cols[:2], rows[:2] = (1.25, -1.25), (0, 0), (0, 0)  # an exact cancellation at (0, 0)
        ref = np.zeros((out_length, in_length))
        np.add.at(ref, (rows, symmetric_index(cols, in_length)), weights)
        sparse = _fold_taps(rows, cols, weights, out_length, in_length)
        assert np.array_equal(sparse.dense(), ref)
        assert (sparse.data != 0).all() and len(sparse.data) == np.count_nonzero(ref)
        assert np.array_equal(sparse.scipy().toarray(), ref)


@pytest.mark.parametrize('op_type,scale', [('bicubic', 2), ('bicubic', 4), ('box', 3), ('gaussian', 3)])
@pytest.mark.parametrize('dtype', [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_axis_matrix_filled_from_nonzeros_equals_the_cast_dense_matrix(op_type, scale, dtype):
    """The operator's matrices are filled on the input's device from the float64 nonzeros: bit for bit the
    cast of the dense float64 matrix, in every dtype."""
    op = build_operator({'type': op_type, 'scale': scale})
    for length in (scale, 13 * scale, 257 * scale):
        dense = torch.from_numpy(np.array(op.axis_matrix(length)))
        filled = op._axis(length, dtype, 'cpu')['matrix']
        assert filled.dtype == dtype and torch.equal(filled, dense.to(dtype))


@pytest.mark.parametrize('op_type,scale', [('bicubic', 2), ('bicubic', 4), ('box', 3), ('gaussian', 2)])
def test_rotated_by_a_dense_product_equals_the_sparse_one(op_type, scale):
    """On an accelerator U^T M is one dense float64 product there; on the host a sparse one. Both orders of
    summation give the same matrix to float64 rounding (run here on the CPU, where either can be chosen)."""
    op = build_operator({'type': op_type, 'scale': scale})
    for length in (scale, 31 * scale, 300 * scale):
        host = op._axis_spectrum(length)
        cpu = torch.device('cpu')
        sparse, dense = op._rotated(host, cpu, gemm=False), op._rotated(host, cpu, gemm=True)
        assert sparse.shape == dense.shape == (length // scale, length)
        assert (sparse - dense).abs().max() <= 1e-15 * 64


@pytest.mark.parametrize('op_type,scale', [('bicubic', 2), ('bicubic', 4), ('box', 3)])
def test_inverse_from_dct_pairs_equals_the_banded_one(op_type, scale):
    """On an accelerator (M M^T)^{-1} is (U / s) U^T from the DCT pairs, one float64 product there; the host
    inverts the banded Cholesky factor. Both are the same matrix to float64 rounding (cond(M M^T) is about 2;
    run here on the CPU, where either can be chosen)."""
    op = build_operator({'type': op_type, 'scale': scale})
    cpu = torch.device('cpu')
    for length in (scale, 31 * scale, 300 * scale):
        banded, product = op._gram_inverse(length, cpu, gemm=False), op._gram_inverse(length, cpu, gemm=True)
        assert 'eigvals' in op._axis_float64(length)  # the product came from the pairs
        assert (banded - product).abs().max() <= 64 * 1e-16 * banded.abs().max()


@pytest.mark.parametrize('op_type,scale', [('bicubic', 2), ('gaussian', 2), ('gaussian', 4), ('pil-lanczos', 3),
                                           ('pil-bilinear', 2), ('cv2-cubic', 4)])
def test_banded_inverse_is_symmetric_and_its_lower_triangle_is_the_whole_columns_solve(op_type, scale):
    """The host solves each block of identity columns only from its first column down: the lower triangle is bit for
    bit LAPACK's solve of the whole columns, the upper one its transpose, and the matrix the dense inverse to float64
    rounding; in float32, the lower triangle is the rounded float64 one (lengths below, at and across the block)."""
    import scipy.linalg

    from mcnet_basicsr.ops import DEGRADATIONS
    op = build_operator(dict(DEGRADATIONS.get(op_type, {'type': op_type}), scale=scale))
    for lr in (1, 5, separable._INVERSE_BLOCK, 2 * separable._INVERSE_BLOCK + 37):
        length = lr * scale
        factor = op._axis_inverse(length)['gram_factor']
        whole = torch.from_numpy(scipy.linalg.cho_solve_banded((factor, False), np.eye(lr)))
        inverse = op._banded_inverse(length, torch.float64)
        assert torch.equal(inverse.tril(), whole.tril()) and torch.equal(inverse, inverse.T)
        gram = op._sparse_gram(op._axis_float64(length)).toarray()
        assert np.abs(inverse.numpy() - np.linalg.inv(gram)).max() <= 64 * 1e-16 * np.linalg.cond(gram)
        single = op._banded_inverse(length, torch.float32)
        assert torch.equal(single.tril(), whole.tril().float()) and torch.equal(single, single.T)


def test_inverse_without_dct_pairs_never_runs_a_dense_eigendecomposition(monkeypatch):
    """An operator whose M M^T the DCT does not diagonalise (a Gaussian) gets the banded inverse on an accelerator
    too: an O(length^3) eigh would cost more than it saves. The failed check is remembered."""
    op = build_operator({'type': 'gaussian', 'scale': 2})
    monkeypatch.setattr(separable, '_eigh', lambda *a, **k: pytest.fail('an eigendecomposition for eps = 0'))
    cpu = torch.device('cpu')
    product = op._gram_inverse(64, cpu, gemm=True)
    assert op._axis_float64(64)['dct'] is False and 'eigvals' not in op._axis_float64(64)
    assert torch.equal(product, op._gram_inverse(64, cpu, gemm=False))
    assert torch.equal(op._gram_inverse(64, cpu, gemm=True), product)
    monkeypatch.undo()
    assert 'eigvals' in op._axis_spectrum(64)  # eps > 0 still gets its (dense) pairs


def test_cast_entry_keeps_what_each_projection_needs():
    """eps = 0 and eps > 0 projections on one size share one cast entry: neither rebuilds the other's factors."""
    op = build_operator({'type': 'bicubic', 'scale': 2})
    g = torch.Generator().manual_seed(1)
    x = torch.rand(1, 1, 24, 24, generator=g, dtype=torch.float64)
    b = torch.rand(1, 1, 12, 12, generator=g, dtype=torch.float64)
    op.project(x, b, 0.0)
    entry = op._cast_axes[(24, torch.float64, torch.device('cpu'))]
    matrix, gram_inv = entry['matrix'], entry['gram_inv']
    op.project(x, b, 0.05)
    op.project(x, b, 0.0)
    entry = op._cast_axes[(24, torch.float64, torch.device('cpu'))]
    assert entry['matrix'] is matrix and entry['gram_inv'] is gram_inv and 'rotated' in entry


def test_eps_positive_projection_builds_no_dense_operator_matrix():
    """An eps > 0 projection on a new size casts only what it uses (U, U^T M): M itself, as large as U^T M, is filled
    when a forward or adjoint first needs it, and the pairs stay in the entry."""
    from mcnet_basicsr.ops import DEGRADATIONS
    op = build_operator(dict(DEGRADATIONS['pil-bicubic'], scale=2))
    g = torch.Generator().manual_seed(2)
    x = torch.rand(1, 1, 24, 20, generator=g, dtype=torch.float64)
    b = torch.rand(1, 1, 12, 10, generator=g, dtype=torch.float64)
    out = op.project(x, b, 0.05)
    entry = op._cast_axes[(24, torch.float64, torch.device('cpu'))]
    assert 'matrix' not in entry and 'rotated' in entry
    rotated = entry['rotated']
    assert abs(float(torch.linalg.norm(op(out) - b)) - 0.05) < 1e-12
    entry = op._cast_axes[(24, torch.float64, torch.device('cpu'))]
    assert 'matrix' in entry and entry['rotated'] is rotated


@pytest.mark.parametrize('opt', [{'type': 'bicubic', 'scale': 2}, {'type': 'bicubic', 'scale': 4},
                                 {'type': 'box', 'scale': 3}, {'type': 'gaussian', 'scale': 3, 'offset': 1},
                                 {'type': 'gaussian', 'scale': 2}, {'type': 'cv2_resize', 'scale': 3,
                                                                    'interpolation': 'cubic'},
                                 {'type': 'pil_resize', 'scale': 2, 'resample': 'bicubic'}])
def test_dct2_check_by_diagonals_agrees_with_the_whole_basis_residual(opt):
    """The O(n * band) check of the DCT-II pairs (M M^T against the matrix the DCT-II diagonalises, diagonal by
    diagonal) accepts exactly the operators and lengths whose ``M M^T C - C diag(c_k^T M M^T c_k)`` stays at float64
    rounding, with the Rayleigh quotients as eigenvalues; and the pairs written from it are those of the whole basis."""
    op = build_operator(opt)
    for lr in (1, 2, 5, 6, 7, 40, 129):
        gram = op._sparse_gram({'sparse': op.axis_sparse(lr * op.scale)})
        tol = separable._rounding_level(gram)
        rayleigh, residual = separable._dct2_residual(gram, separable._dct2_basis(lr))
        symbol = separable._dct2_symbol(gram, tol)
        assert (symbol is None) == (residual > tol), (lr, residual)
        if symbol is not None:
            assert np.abs(symbol - rayleigh).max() <= 1e-14 * rayleigh.max()
            vals, vecs = separable._dct2_pairs(gram, tol)
            order = np.argsort(symbol, kind='stable')
            assert np.array_equal(vals, symbol[order])
            assert np.abs(vecs - separable._dct2_basis(lr)[:, order]).max() <= 1e-15  # mirrored rows: one rounding
    # a centred (symmetric) Gaussian is DCT-diagonal like the interpolating operators; one keeping the first pixel of
    # each block, and Pillow's renormalised window, are not
    centred = opt['type'] in ('bicubic', 'box', 'cv2_resize') or opt.get('offset') == 1
    assert (separable._dct2_symbol(gram, tol) is not None) == centred


def test_centrosymmetric_eigenpairs_equal_a_dense_eigendecomposition():
    """A symmetric centrosymmetric matrix (J G J = G) is split into two half-size eigenproblems: its eigenvalues are
    the dense ones, its eigenvectors orthonormal eigenvectors, for odd and even sizes; any other matrix gets None."""
    from mcnet_basicsr.ops.separable import _centrosymmetric_eigenpairs
    rng = np.random.default_rng(0)
    for n in (2, 3, 8, 51, 64):
        a = rng.standard_normal((n, n))
        a = a + a.T + (a + a.T)[::-1, ::-1]
        vals, vecs = _centrosymmetric_eigenpairs(scipy.sparse.csr_matrix(a))
        assert np.allclose(vals, np.linalg.eigvalsh(a), rtol=0, atol=1e-12 * n)
        assert np.abs(vecs.T @ vecs - np.eye(n)).max() < 1e-13 * n
        assert np.abs(a @ vecs - vecs * vals).max() < 1e-12 * n
    a = rng.standard_normal((6, 6))
    assert _centrosymmetric_eigenpairs(scipy.sparse.csr_matrix(a + a.T)) is None


@pytest.mark.parametrize('n', [2, 3, 4, 9, 10, 64, 65])
@pytest.mark.parametrize('band', [0, 1, 3, 5])
def test_centrosymmetric_halves_from_the_band_equal_the_dense_blocks(n, band):
    """The halves are built from the band's diagonals: they equal ``G11 + G13 J`` (bordered by ``sqrt(2)`` times
    the middle column and the middle entry where n is odd) and ``G11 - G13 J`` of the dense matrix, symmetrised, to
    the bit, for bands narrower and wider than the halves."""
    from mcnet_basicsr.ops.separable import _centrosymmetric_halves
    rng = np.random.default_rng(10 * n + band)
    a = rng.standard_normal((n, n))
    a = a + a.T
    a = np.triu(np.tril(a + a[::-1, ::-1], band), -band)
    plus, minus, found = _centrosymmetric_halves(scipy.sparse.csr_matrix(a))
    h = n // 2
    g11, g13j = a[:h, :h], a[:h, n - h:][:, ::-1]
    ref_plus, ref_minus = g11 + g13j, g11 - g13j
    if n % 2:
        middle = np.sqrt(2.0) * a[:h, h:h + 1]
        ref_plus = np.block([[ref_plus, middle], [middle.T, a[h, h]]])
    assert found == min(band, n - 1)
    assert np.array_equal(plus, 0.5 * (ref_plus + ref_plus.T))
    assert np.array_equal(minus, 0.5 * (ref_minus + ref_minus.T))
    a[0, 0] += 1.0 + abs(a).max()  # no longer centrosymmetric: a[-1, -1] is unchanged
    assert _centrosymmetric_halves(scipy.sparse.csr_matrix(a)) is None


@pytest.mark.parametrize('n,band', [(1, 0), (1, 3), (2, 1), (3, 3), (9, 0), (64, 1), (64, 2), (301, 3), (64, 5),
                                    (64, 20)])
def test_banded_eigendecompositions_equal_a_dense_one(n, band):
    """A symmetric matrix with ``band`` diagonals each side (the resizers' halves have 1, 3 or 5; the Gaussian's
    axis 2-5) gets its eigenvalues ascending and orthonormal eigenvectors, to float64 rounding, in row-major memory
    (the host's sparse products of U^T M read U's rows)."""
    rng = np.random.default_rng(n + band)
    a = rng.standard_normal((n, n))
    a = np.triu(np.tril(a + a.T, band), -band)
    vals, vecs = separable._eigh(a)  # a band at least the size: the matrix is dense
    assert vals.shape == (n, ) and vecs.shape == (n, n) and vecs.flags['C_CONTIGUOUS']
    assert np.abs(vals - np.linalg.eigvalsh(a)).max() <= 1e-13 * n
    assert np.abs(vecs.T @ vecs - np.eye(n)).max() <= 1e-13 * n
    assert np.abs(a @ vecs - vecs * vals).max() <= 1e-13 * n


@pytest.mark.parametrize('name', ['pil-bicubic', 'pil-lanczos', 'torch-bilinear'])
def test_antialiasing_resizers_are_diagonalised_by_half_size_eigendecompositions(name, monkeypatch):
    """The eps > 0 set-up of Pillow's and torch's antialiasing resizers (mirror-symmetric filters and borders, no
    DCT basis) runs LAPACK's eigh only on matrices of half the axis' length, and its pairs diagonalise M M^T."""
    from mcnet_basicsr.ops import DEGRADATIONS
    sizes = []
    eigh = separable._eigh
    monkeypatch.setattr(separable, '_eigh', lambda m: sizes.append(m.shape[0]) or eigh(m))
    for scale, length in ((2, 2 * 37), (3, 3 * 40), (4, 4 * 64)):
        op = build_operator(dict(DEGRADATIONS[name], scale=scale))
        entry = op._axis_spectrum(length)
        sizes_now, sizes[:] = list(sizes), []
        n = length // scale
        assert sorted(sizes_now) == sorted({n // 2, (n + 1) // 2} if n % 2 else [n // 2, n // 2]), sizes_now
        m = np.array(op.axis_matrix(length))
        u, s = entry['eigvecs'].numpy(), entry['eigvals'].numpy()
        assert np.abs(u.T @ (m @ m.T) @ u - np.diag(s)).max() < 1e-13 * n
