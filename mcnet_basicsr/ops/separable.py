"""Separable linear measurement operators and the exact projection onto their consistency set.

An operator A here acts on every channel of an NCHW image X as ``A X = M_h X M_w^T``, with 1-D
matrices ``M_h`` (h x H) and ``M_w`` (w x W) built once in float64 by a subclass. Everything else
follows from that structure and lives in :class:`SeparableDownsample`:

* ``forward`` / ``adjoint``: two matrix products each; ``adjoint`` is exactly ``A^T`` (the
  boundary handling is folded into the matrices, so there is no padding whose adjoint could be
  forgotten).
* ``project``: the Euclidean projection onto ``S = {z : ||A z - b||_2 <= eps}`` per sample. With
  ``K = A A^T = (M_h M_h^T) kron (M_w M_w^T)`` and the eigendecompositions
  ``M_h M_h^T = U_h diag(s_h) U_h^T`` (same for w), K is diagonal after the per-axis rotations, with
  eigenvalues ``sig_ij = s_h[i] s_w[j]``. For ``r = A x - b`` and ``r~ = U_h^T r U_w``:

  - ``eps = 0``: ``P(x) = x - A^T U diag(1 / sig) U^T r = x - A^T K^{-1} r`` (the minimum-norm correction),
    computed as ``x - A^T ((M_h M_h^T)^{-1} r (M_w M_w^T)^{-1})`` with per-axis inverses from banded Cholesky
    factorisations, so this case needs no eigendecomposition;
  - ``eps > 0``: ``P(x) = x`` if ``||r|| <= eps``, otherwise ``P(x) = x - A^T U diag(mu / (1 + mu sig)) U^T r``
    with the unique ``mu > 0`` such that ``||(I + mu K)^{-1} r|| = eps``.

  Nothing is iterative in the image space: the only iteration is a scalar Newton solve per sample
  for ``mu`` (see :func:`solve_secular_equation`), run to machine precision in float64. The result
  is exact up to floating-point rounding.

Cached: the float64 matrices and their factorisations per axis length, and their casts per
(length, dtype, device), in a small LRU cache on the operator instance. An (H, W) input uses the
entries for H and W, so the first call on a new size pays, per new axis length, one banded Cholesky
factorisation and inverse of the (H/s x H/s) matrix ``M M^T`` (eps = 0) or its eigendecomposition (eps > 0;
``M M^T`` and ``U^T M`` come from sparse products, M being banded), and later calls only matrix products.
The eigendecomposition is the DCT-II basis where that diagonalises ``M M^T`` to float64 rounding (bicubic
and box: see :func:`_gram_eigenpairs`), else two half-size eigenproblems where ``M M^T`` is centrosymmetric (Pillow's
and torch's antialiasing resizers: :func:`_centrosymmetric_eigenpairs`), else one of the whole length; each is
torch's (LAPACK's) dense ``eigh`` (:func:`_eigh`). The factorisations run on the CPU in float64 from the nonzeros of M
(:meth:`SeparableDownsample.axis_sparse`); M itself is filled on the input's device from those (only where a forward,
an adjoint or an eps = 0 projection uses it), and ``U^T M`` is one float64 product there on an accelerator (sparse
products of row blocks on the CPU); so is ``(M M^T)^{-1} = U diag(1/s) U^T`` where the DCT pairs apply (banded Cholesky
solves of column blocks on the CPU and for other operators). Everything is rounded to the input's dtype once, from
float64 (on the CPU block by block, so no float64 copy of these matrices is held whole), so float32 projections are
feasible to ~1e-7 relative (K is well conditioned for bicubic/box: cond(M M^T) ~ 2 and 1).

The 1-D matrices are stored dense: the products are then plain GEMMs (fast on GPU, and on CPU
still several times faster than basicsr's loop), at the price of O(H * W * (h + w)) flops instead
of O(H * W * taps) for a banded implementation.
"""
import collections
import math

import numpy as np
import torch

from .base import DownsampleOperator
from .blur import BlurDownsample
from .matrices import AxisMatrix
from .secular import projection_coefficients, solve_secular_equation

__all__ = ['SeparableDownsample', 'solve_secular_equation']

_DBL_EPS = float(np.finfo(np.float64).eps)
#: rows of (U^T M)^T per sparse product of the host's set-up (2 MB of float64 at LR 1024)
_ROTATED_BLOCK = 256
#: rows of the DCT-II basis per block as it is written (1 MB of float64 at LR 1024)
_DCT_BLOCK = 128
#: columns of (M M^T)^{-1} per banded solve (1 MB of float64 at LR 1024)
_INVERSE_BLOCK = 128


def _host_array(shape):
    """An uninitialised float64 numpy array in memory that torch allocated, for the set-up's arrays of an axis length
    squared. numpy advises the kernel to back arrays of 4 MB and more with transparent huge pages (``madvise``); where
    the kernel's THP defrag setting is ``madvise``, the first fill of such an
    array can then stall while the kernel compacts memory, longer than the arithmetic of a new size's set-up. torch's
    allocator gives no such advice, so these arrays take ordinary pages."""
    return torch.empty(shape, dtype=torch.float64).numpy()


def _left_right(x, left, right):
    """``left @ x @ right^T`` over the last two dims of a 4-D tensor (x: N,C,H,W; left: p,H; right: q,W)."""
    return torch.matmul(torch.matmul(left, x), right.transpose(0, 1))


def _dct2_basis(n, columns=None, rows=None):
    """The orthonormal DCT-II basis of length ``n`` as columns: ``C[i, k] = c_k cos(pi (2 i + 1) k / (2 n))``,
    ``c_0 = sqrt(1 / n)``, ``c_k = sqrt(2 / n)``; only the ``columns`` k and ``rows`` i listed, if given. Each entry is
    one cosine of a table of the 4 n angles ``pi m / (2 n)``, indexed by ``(2 i + 1) k mod 4 n`` (exact integers), so no
    angle accumulates rounding and it costs O(n^2) indexing instead of n^2 cosines."""
    k = np.arange(n) if columns is None else np.asarray(columns)
    i = np.arange(n) if rows is None else np.asarray(rows)
    table = math.sqrt(2.0 / n) * np.cos((np.pi / (2 * n)) * np.arange(4 * n))
    basis = np.take(table, np.outer(2 * i + 1, k) % (4 * n))
    basis[:, k == 0] = math.sqrt(1.0 / n)
    return basis


def _dct2_residual(gram, basis):
    """Rayleigh quotients of the columns of ``basis`` and the largest entry of ``gram @ basis - basis diag(them)``."""
    product = np.asarray(gram @ basis)
    eigvals = np.einsum('ik,ik->k', basis, product)  # c_k^T (M M^T) c_k
    product -= basis * eigvals
    return eigvals, np.abs(product).max()


def _dct2_symbol(gram, tol):
    """The eigenvalues of ``gram`` (scipy sparse, symmetric, banded) for the DCT-II basis' columns k = 0 .. n - 1, if
    that basis diagonalises it to ``tol``; else ``None``. O(n * band): the matrices the DCT-II diagonalises are exactly
    ``T[i, j] = t(|i - j|) + t(i + j + 1) + t(2 n - 1 - i - j)``, a symmetric filter t mirrored about -1/2 and n - 1/2,
    with eigenvalues ``t(0) + 2 sum_l t(l) cos(pi k l / n)``. Where the band leaves a middle row clear of both mirrors
    (n > 2 band), that row gives t, and ``gram`` is compared with T diagonal by diagonal: an entry off by at most
    ``tol`` moves ``gram C - C diag(s)`` by at most ``(2 band + 1) tol sqrt(2 / n)``. Shorter axes take the Rayleigh
    quotients of the whole basis and the largest entry of that residual."""
    n = gram.shape[0]
    band = _bandwidth(gram)
    if n <= 2 * band:
        eigvals, residual = _dct2_residual(gram, _dct2_basis(n))
        return eigvals if residual <= tol else None
    mid = n // 2
    taps = np.zeros(2 * n + 1)
    taps[:band + 1] = gram[mid, mid:mid + band + 1].toarray().ravel()
    for k in range(band + 1):
        i = np.arange(n - k)
        mirrored = taps[k] + taps[2 * i + k + 1] + taps[2 * n - 1 - 2 * i - k]  # T[i, i + k]
        if np.abs(gram.diagonal(k) - mirrored).max() > tol:
            return None
    cosines = np.cos((np.pi / n) * (np.outer(np.arange(n), np.arange(1, band + 1)) % (2 * n)))
    return taps[0] + 2 * cosines @ taps[1:band + 1]


def _dct2_pairs(gram, tol):
    """The DCT-II pairs of ``gram`` in ascending order, if that basis diagonalises it (:func:`_dct2_symbol`); else
    ``None``. The basis is written once, ``_DCT_BLOCK`` rows at a time, already in ascending order: only the returned
    matrix is memory of the basis' size (a new size's first projection touches it for the first time, which can cost
    more than the arithmetic)."""
    n = gram.shape[0]
    eigvals = _dct2_symbol(gram, tol)
    if eigvals is None:
        return None
    order = np.argsort(eigvals, kind='stable')
    vecs = _host_array((n, n))
    half = (n + 1) // 2
    for start in range(0, half, _DCT_BLOCK):  # the first half of the rows; C[n - 1 - i, k] = (-1)^k C[i, k]
        rows = np.arange(start, min(half, start + _DCT_BLOCK))
        vecs[rows] = _dct2_basis(n, order, rows)
    np.multiply(vecs[:n - half][::-1], np.where(order % 2, -1.0, 1.0), out=vecs[half:])
    return eigvals[order], vecs


def _rounding_level(gram):
    """What float64 rounding leaves in products with the symmetric ``gram`` (scipy sparse): ``64 eps_64 ||gram||_inf``,
    the bound an entry of a residual must stay under for pairs or symmetries to count as exact."""
    return 64 * _DBL_EPS * abs(gram).sum(1).max()


def _gram_eigenpairs(gram, dense_fallback=True):
    """Eigenvalues (ascending) and orthonormal eigenvectors (columns) of the symmetric banded ``M M^T``
    (a scipy sparse matrix), float64 numpy.

    A shift-invariant symmetric filter sampled with half-sample symmetric boundaries on both grids (MATLAB
    bicubic and box at an integer scale) gives ``M M^T = C diag(s) C^T`` with C the DCT-II basis
    (:func:`_dct2_basis`): then the pairs cost O(n^2) (writing the basis) instead of the O(n^3) of a dense
    eigendecomposition, which would dominate a new size's set-up at n = 1024. The DCT pairs are used when ``M M^T`` is,
    entry by entry to ``64 eps_64 ||M M^T||_inf``, the matrix that the DCT-II diagonalises (:func:`_dct2_symbol`), i.e.
    when they are eigenpairs to float64 rounding, as exact as LAPACK's (C is orthonormal to rounding by construction);
    any other operator (e.g. a Gaussian centred on a pixel, or with an offset, whose entries differ by ~1e-2) gets
    LAPACK's ``eigh`` (of two half-size matrices where ``M M^T`` is centrosymmetric), or ``None`` with
    ``dense_fallback=False``.
    """
    pairs = _dct2_pairs(gram, _rounding_level(gram))
    if pairs is not None:
        return pairs
    if not dense_fallback:
        return None
    pairs = _centrosymmetric_eigenpairs(gram)
    if pairs is not None:
        return pairs
    return _eigh(gram.toarray(out=_host_array(gram.shape)))


def _bandwidth(matrix):
    """The largest ``|i - j|`` of a nonzero of a scipy sparse matrix (0 for none)."""
    coo = matrix.tocoo()
    return int(np.abs(coo.row - coo.col).max()) if coo.nnz else 0


def _upper_banded(matrix, band):
    """LAPACK's upper banded storage ``upper[band + i - j, j] = matrix[i, j]`` of a symmetric numpy or scipy sparse
    matrix whose nonzeros lie at most ``band`` from the diagonal."""
    n = matrix.shape[0]
    upper = np.zeros((band + 1, n))
    for k in range(band + 1):
        upper[band - k, k:] = matrix.diagonal(k)
    return upper


def _eigh(matrix):
    """LAPACK's eigenvalues (ascending) and orthonormal eigenvectors (columns, in row-major memory) of a symmetric
    float64 numpy matrix, as numpy.

    torch's dense ``eigh``, also for the tridiagonal halves of the bilinear resizers: scipy's tridiagonal divide and
    conquer (``dstevd``) is faster alone, but its matrix products run on OpenBLAS' threads, which keep spinning for a
    while after it returns and slow torch's own threads in the rest of the set-up, so the set-up keeps to torch's
    LAPACK and threads.
    """
    eigvals, eigvecs = torch.linalg.eigh(torch.from_numpy(matrix))
    # LAPACK writes the vectors column by column; the host's sparse products of U^T M read U's rows, and would copy a
    # column-major U once per block of rows
    return eigvals.numpy(), eigvecs.contiguous().numpy()


def _centrosymmetric_halves(gram):
    """The two half-size symmetric matrices ``G11 + G13 J`` (bordered by the middle column where the length is odd)
    and ``G11 - G13 J`` of a symmetric centrosymmetric ``gram`` (scipy sparse; :func:`_centrosymmetric_eigenpairs`
    says what they are), and the band they share with it; ``None`` if ``gram`` is not centrosymmetric to float64
    rounding.

    Built from the band's diagonals, O(n * band) besides the zeroed halves: G11 is the band's upper-left block and
    ``G13 J`` (``G[i, n - 1 - j]``) folds only the entries within the band of the middle onto the halves' lower-right
    corner, so only that corner is symmetrised (``(P + P^T) / 2``, which removes the fold's rounding asymmetry; the
    rest is symmetric already)."""
    n = gram.shape[0]
    if n < 2:
        return None
    band = _bandwidth(gram)  # the halves' too: G13 J only folds entries near the middle onto the band
    diagonals = [gram.diagonal(k) for k in range(band + 1)]  # diagonal k holds G[i, i + k], i < n - k
    tol = _rounding_level(gram)
    # J G J = G: by symmetry, each diagonal of the upper triangle reads the same backwards
    if any(abs(d - d[::-1]).max() > tol for d in diagonals if d.size):
        return None
    h = n // 2
    g11 = _host_array((h, h))
    g11.fill(0.0)
    for k, diagonal in enumerate(diagonals[:h]):
        i = np.arange(h - k)
        g11[i, i + k] = g11[i + k, i] = diagonal[:h - k]
    # the fold's corner: G[i, n - 1 - j] lies on diagonal n - 1 - i - j of the upper triangle
    c = min(band, h)
    i, j = np.meshgrid(np.arange(h - c, h), np.arange(h - c, h), indexing='ij')
    k = n - 1 - i - j
    fold = np.zeros((c, c))
    inside = k <= band
    fold[inside] = [diagonals[kk][ii] for kk, ii in zip(k[inside], i[inside])]
    halves = []
    for sign in (1.0, -1.0):
        half = _host_array((h, h))
        half[...] = g11
        corner = g11[h - c:, h - c:] + sign * fold
        half[h - c:, h - c:] = 0.5 * (corner + corner.T)
        halves.append(half)
    plus, minus = halves
    if n % 2:
        middle = np.zeros(h)  # G[i, h], on diagonal h - i
        for k in range(1, min(band, h) + 1):
            middle[h - k] = diagonals[k][h - k]
        middle *= math.sqrt(2.0)
        bordered = _host_array((h + 1, h + 1))
        bordered[:h, :h], bordered[:h, h], bordered[h, :h], bordered[h, h] = plus, middle, middle, diagonals[0][h]
        plus = bordered
    return plus, minus, band


def _centrosymmetric_eigenpairs(gram):
    """Eigenvalues (ascending) and orthonormal eigenvectors of a symmetric matrix ``gram`` (scipy sparse) that is
    centrosymmetric (``J G J = G``, J reversing the order; to float64 rounding), from two half-size ``eigh``;
    ``None`` if it is not.

    A resizer whose filter and borders are mirror-symmetric (the same at both ends of the axis: Pillow's clipped and
    renormalised filters, torch's antialiased ones) gives such an ``M M^T``. Its eigenvectors are symmetric,
    ``[v; (sqrt(2) m); J v] / sqrt(2)``, or antisymmetric, ``[v; (0); -J v] / sqrt(2)`` (the middle entry where the
    length n is odd), with v (and m) the eigenvectors of the (n + 1) // 2 and n // 2 square matrices
    ``G11 + G13 J`` (bordered by the middle column ``sqrt(2) c`` and entry g) and ``G11 - G13 J``, G11 and G13 the
    upper-left and upper-right n // 2 blocks. The split is an orthogonal change of basis, so the pairs are as exact as
    one ``eigh``; two of half the size cost about a quarter of it (LAPACK's is O(n^3)). The vectors are written as the
    columns of U in ascending order.
    """
    halves = _centrosymmetric_halves(gram)
    if halves is None:
        return None
    plus, minus, _ = halves
    n, h = gram.shape[0], gram.shape[0] // 2
    plus_vals, plus_vecs = _eigh(plus)
    minus_vals, minus_vecs = _eigh(minus)
    vals = np.concatenate([plus_vals, minus_vals])
    order = np.argsort(vals, kind='stable')
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    plus_at, minus_at = position[:h + n % 2], position[h + n % 2:]
    root2 = math.sqrt(2.0)
    # U's columns in ascending order, scattered by torch's index_copy_ on its threads straight into U's layout (no
    # transposed copy)
    vecs = torch.empty((n, n), dtype=torch.float64)
    plus_at, minus_at = torch.from_numpy(plus_at), torch.from_numpy(minus_at)
    plus = torch.from_numpy(plus_vecs[:h]) / root2
    minus = torch.from_numpy(minus_vecs) / root2
    vecs[:h].index_copy_(1, plus_at, plus)
    vecs[n - h:].index_copy_(1, plus_at, plus.flip(0))
    vecs[:h].index_copy_(1, minus_at, minus)
    vecs[n - h:].index_copy_(1, minus_at, minus.neg().flip(0))
    if n % 2:
        vecs[h].index_copy_(0, plus_at, torch.from_numpy(plus_vecs[h]))
        vecs[h, minus_at] = 0.0
    return vals[order], vecs.numpy()


class SeparableDownsample(DownsampleOperator):
    """Base class of separable downsampling operators ``A X = M_h X M_w^T`` (per channel).

    Subclasses implement :meth:`axis_matrix` (the float64 (length / scale) x length matrix of one
    axis) or :meth:`axis_sparse` (the same as its nonzeros) and register themselves in
    ``OPERATOR_REGISTRY``; forward, adjoint, projection and all caching live here. Instances are plain
    objects (not ``nn.Module``): they hold no parameters and work on any dtype/device they are given.
    """

    #: entries kept in the per-instance cache (one entry = one axis length at one dtype/device)
    cache_size = 64

    def __init__(self, scale):
        super().__init__(scale)
        self._float64_axes = collections.OrderedDict()  # length -> dict of float64 CPU tensors
        self._cast_axes = collections.OrderedDict()  # (length, dtype, device) -> dict of tensors

    # ------------------------------------------------------------------ to override
    # A subclass implements one of the two; each default derives its result from the other.
    def axis_matrix(self, length):
        """Return the 1-D operator for an axis of ``length`` pixels: float64 array (length // scale, length).
        Default: :meth:`axis_sparse` made dense."""
        if type(self).axis_sparse is SeparableDownsample.axis_sparse:
            raise NotImplementedError(f'{type(self).__name__} implements neither axis_matrix nor axis_sparse')
        return self.axis_sparse(length).dense()

    def axis_sparse(self, length):
        """The same matrix as its nonzeros (:class:`~mcnet_basicsr.ops.matrices.AxisMatrix`), which is all the
        set-up of a new size uses. Default: found in :meth:`axis_matrix`; operators that can list their taps
        (the registered ones) implement this instead, and no dense float64 matrix is built."""
        if type(self).axis_matrix is SeparableDownsample.axis_matrix:
            raise NotImplementedError(f'{type(self).__name__} implements neither axis_matrix nor axis_sparse')
        matrix = np.asarray(self.axis_matrix(length), dtype=np.float64)
        if matrix.ndim != 2:
            raise ValueError(f'{type(self).__name__}.axis_matrix({length}) returned {matrix.ndim} dims, expected 2')
        return AxisMatrix.from_dense(matrix)

    def circular_blur(self, probe=16):
        """The :class:`~mcnet_basicsr.ops.BlurDownsample` (circular boundary, offset 0) equal to this operator away
        from the image borders, where every row of the axis matrix holds the same taps ``g`` shifted by the scale:
        the kernel ``g g^T``, placed so that the pixel each block keeps sees the taps where this operator does. A
        network told a blur kernel and upper-left decimation (USRNet, FFDNetUnfolded) is told this one for a
        resizer; within a few pixels of the borders the two operators differ.

        Args:
            probe (int): LR rows on each side of the row read (the taps must fit in ``probe * scale`` pixels).
                Default: 16.

        Returns:
            BlurDownsample: its kernel (2c + 1, 2c + 1), ``c`` the taps' largest distance from ``scale * i``.
        """
        s = self.scale
        matrix = np.asarray(self.axis_matrix(2 * probe * s), dtype=np.float64)
        taps = []
        for i in (probe - 1, probe):  # two interior rows: the taps and their offsets must agree
            cols = np.flatnonzero(np.abs(matrix[i]) > 1e-12 * np.abs(matrix[i]).max())
            taps.append((cols - s * i, matrix[i, cols]))
        if not (np.array_equal(taps[0][0], taps[1][0]) and np.allclose(taps[0][1], taps[1][1], rtol=0, atol=1e-12)):
            raise ValueError(f'{self!r} is not shift-invariant in the interior: no blur kernel equals it there')
        lags, values = taps[1]
        c = int(np.abs(lags).max())
        if c >= probe * s:
            raise ValueError(f'{self!r} has taps wider than probe={probe} LR pixels; pass a larger probe')
        g = np.zeros(2 * c + 1)
        g[c - lags] = values  # BlurDownsample convolves: tap at HR lag r sits at kernel index c - r
        return BlurDownsample(s, np.outer(g, g))

    # ------------------------------------------------------------------ cached matrices
    def _axis_float64(self, length):
        """The host entry of one axis length: ``sparse`` (the float64 nonzeros of M), plus the factors added by
        :meth:`_axis_spectrum` / :meth:`_axis_inverse`."""
        entry = self._float64_axes.get(length)
        if entry is None:
            sparse = self.axis_sparse(length)
            expected = (length // self.scale, length)
            if tuple(sparse.shape) != expected:
                raise ValueError(f'{type(self).__name__}.axis_matrix({length}) (or axis_sparse) has shape '
                                 f'{tuple(sparse.shape)}, expected {expected}')
            entry = {'sparse': sparse}
            self._float64_axes[length] = entry
            self._evict(self._float64_axes)
        else:
            self._float64_axes.move_to_end(length)
        return entry

    @staticmethod
    def _sparse_gram(entry):
        """``M M^T`` as a scipy CSR matrix, symmetrised (``(G + G^T) / 2``, which removes the product's rounding
        asymmetry): M is banded (a few taps per row), so the sparse product costs O(taps) per entry instead of the
        O(length) of a dense one."""
        sparse = entry['sparse'].scipy()
        gram = sparse @ sparse.T
        return (0.5 * (gram + gram.T)).tocsr()

    def _singular(self, length, detail):
        return ValueError(f'{type(self).__name__}: A A^T is (numerically) singular along an axis of length {length} '
                          f'({detail}); the projection needs A to have full row rank')

    def _axis_spectrum(self, length, dense_fallback=True):
        """Add (once) ``eigvals`` s and ``eigvecs`` U of ``M M^T`` to the host entry (``U^T M``: :meth:`_rotated`).
        With ``dense_fallback=False``, only the DCT pairs of :func:`_gram_eigenpairs`: ``None`` where they do not
        diagonalise ``M M^T`` (remembered, so the check runs once)."""
        entry = self._axis_float64(length)
        if 'eigvals' not in entry:
            if not dense_fallback and entry.get('dct') is False:
                return None
            pairs = _gram_eigenpairs(self._sparse_gram(entry), dense_fallback)
            if pairs is None:
                entry['dct'] = False
                return None
            eigvals, eigvecs = pairs
            if not eigvals[0] > 1e-12 * eigvals[-1]:
                raise self._singular(length, f'eigenvalues {eigvals[0]:.3g} .. {eigvals[-1]:.3g}')
            entry.update(eigvals=torch.from_numpy(eigvals), eigvecs=torch.from_numpy(eigvecs))
        return entry

    @staticmethod
    def _rotated(entry, device, gemm=None, dtype=torch.float64):
        """``U^T M`` (h x H) in ``dtype`` on ``device``, rounded once from float64, from a host entry with the
        eigenvectors; ``gemm``: by a dense product on the device (default: on accelerators) instead of sparse ones on
        the host."""
        if not (device.type != 'cpu' if gemm is None else gemm):
            # (M^T U)^T, kept as the transposed view (also after a cast, which preserves strides): a transposed copy
            # would cost more than the rest of the set-up, and the matrix products take either layout at the same
            # speed. Sparse products of row blocks of M^T, each rounded to dtype as it is computed: the float64 matrix
            # (32 MB at LR 1024 x4) is never held whole, and memory a process touches for the first time can cost
            # more than the product
            rows = entry['sparse'].scipy().T.tocsr()
            eigvecs = entry['eigvecs'].numpy()
            out = torch.empty((rows.shape[0], eigvecs.shape[1]), dtype=dtype)
            for start in range(0, rows.shape[0], _ROTATED_BLOCK):
                out[start:start + _ROTATED_BLOCK] = torch.from_numpy(rows[start:start + _ROTATED_BLOCK] @ eigvecs)
            return out.T
        # on an accelerator, one float64 matrix product there: the host would spend more filling, casting and
        # copying this (h x H) matrix (tens of MB at LR 1024) than the device spends computing it
        return (entry['eigvecs'].to(device).T @ entry['sparse'].to_tensor(torch.float64, device)).to(dtype)

    def _axis_inverse(self, length):
        """Add (once) ``gram_factor``, the banded Cholesky factor of ``M M^T`` (LAPACK's upper banded storage), to the
        float64 entry: ``(M M^T)^{-1}`` costs O(length^2 * bandwidth) from it (:meth:`_banded_inverse`), against
        O(length^3) for the eigendecomposition the eps = 0 projection does not need."""
        entry = self._axis_float64(length)
        if 'gram_factor' not in entry:
            import scipy.linalg  # see _sparse_gram
            gram = self._sparse_gram(entry)
            try:
                factor = scipy.linalg.cholesky_banded(_upper_banded(gram, _bandwidth(gram)))
            except np.linalg.LinAlgError:
                raise self._singular(length, 'not positive definite') from None
            diag = factor[-1]
            if not diag.min() ** 2 > 1e-12 * abs(gram).sum(1).max():  # pivots against ||M M^T||
                raise self._singular(length, f'smallest Cholesky pivot {diag.min():.3g}')
            entry['gram_factor'] = factor
        return entry

    def _banded_inverse(self, length, dtype):
        """``(M M^T)^{-1}`` in ``dtype`` on the host, rounded once from float64: banded Cholesky solves of
        ``_INVERSE_BLOCK`` columns of the identity at a time, each only for the rows from its first column down. It is
        exactly symmetric: its lower triangle is solved, and the upper one is its transpose.

        A column ``e_j`` of the identity has zeros above row j, and so has its forward substitution; the backward one
        needs only the rows from j down. The solve of the trailing factor ``U[j:, j:]`` (LAPACK's upper banded storage
        from column j) therefore gives those rows bit for bit as a solve of the whole column, at half the work in all;
        the float64 matrix is never held whole."""
        import scipy.linalg  # see _sparse_gram
        factor = self._axis_inverse(length)['gram_factor']
        n = factor.shape[1]
        out = torch.empty((n, n), dtype=dtype)
        for start in range(0, n, _INVERSE_BLOCK):
            width = min(n - start, _INVERSE_BLOCK)
            # rows start, start + 1, ... of columns start .. start + width - 1 of the identity
            columns = np.eye(n - start, width)
            lower = torch.from_numpy(scipy.linalg.cho_solve_banded((factor[:, start:], False), columns))
            block = lower[:width]
            out[start:start + width, start:start + width] = block.tril() + block.tril(-1).T
            out[start + width:, start:start + width] = lower[width:]
            out[start:start + width, start + width:] = lower[width:].T
        return out

    def _gram_inverse(self, length, device, gemm=None, dtype=torch.float64):
        """``(M M^T)^{-1}`` in ``dtype`` on ``device``, rounded once from float64. ``gemm`` (default: on
        accelerators): where the DCT pairs diagonalise ``M M^T``, ``(U / s) U^T`` by one float64 product on the device,
        instead of the host's banded solve for every column (:meth:`_banded_inverse`), which at LR 1024 takes about
        twice as long as the pairs and the product. The CPU keeps the banded solve
        (there the O(length^3) product is the dearer one), as does an operator without DCT pairs."""
        if device.type != 'cpu' if gemm is None else gemm:
            entry = self._axis_spectrum(length, dense_fallback=False)
            if entry is not None:
                eigvecs = entry['eigvecs'].to(device)
                return ((eigvecs / entry['eigvals'].to(device)) @ eigvecs.T).to(dtype)
        return self._banded_inverse(length, dtype).to(device)

    def _axis(self, length, dtype, device, need=None):
        """The cast entry of one axis length; ``need``: None (M), 'spectral' (the eigenpairs and ``U^T M``:
        :meth:`_axis_spectrum`; not M, which the eps > 0 projection does not use) or 'inverse' (M and
        ``(M M^T)^{-1}``: :meth:`_axis_inverse`)."""
        device = torch.device(device)
        key = (length, dtype, device)
        entry = self._cast_axes.get(key)
        marker = {None: 'matrix', 'spectral': 'eigvecs', 'inverse': 'gram_inv'}[need]
        if entry is None or marker not in entry:
            host = self._axis_spectrum(length) if need == 'spectral' else self._axis_float64(length)
            entry = dict(entry or {})  # keeps what an earlier need added
            if need != 'spectral' and 'matrix' not in entry:
                entry['matrix'] = host['sparse'].to_tensor(dtype, device)  # filled on the device from the nonzeros
                entry['matrix_t'] = entry['matrix'].T  # a view: the products take either layout at the same speed
            if need == 'spectral':
                entry.update(eigvals=host['eigvals'].to(device), eigvecs=host['eigvecs'].to(device=device, dtype=dtype),
                             rotated=self._rotated(host, device, dtype=dtype))
            elif need == 'inverse':
                entry['gram_inv'] = self._gram_inverse(length, device, dtype=dtype)
            self._cast_axes[key] = entry
            self._evict(self._cast_axes)
        else:
            self._cast_axes.move_to_end(key)
        return entry

    def _evict(self, cache):
        while len(cache) > self.cache_size:
            cache.popitem(last=False)

    def clear_cache(self):
        """Drop all cached matrices (e.g. to free GPU memory)."""
        self._float64_axes.clear()
        self._cast_axes.clear()

    # ------------------------------------------------------------------ A and A^T
    def forward(self, x):
        """``A x`` for an NCHW float tensor (H, W divisible by the scale); differentiable."""
        self._check_hr(x)
        mh = self._axis(x.shape[-2], x.dtype, x.device)
        mw = self._axis(x.shape[-1], x.dtype, x.device)
        return _left_right(x, mh['matrix'], mw['matrix'])

    def adjoint(self, y, hr_size=None):
        """``A^T y`` for an NCHW LR tensor; HR size is ``scale *`` the LR size (or ``hr_size=(H, W)``)."""
        self._check_lr(y)
        hr_h, hr_w = self._hr_size(y, hr_size)
        mh = self._axis(hr_h, y.dtype, y.device)
        mw = self._axis(hr_w, y.dtype, y.device)
        return _left_right(y, mh['matrix_t'], mw['matrix_t'])

    # ------------------------------------------------------------------ projection
    def project(self, x, b, eps=0.0):
        """Euclidean projection of ``x`` onto ``{z : ||A z - b||_2 <= eps}``, per sample.

        Args:
            x (Tensor): (N, C, H, W) float tensor.
            b (Tensor): (N, C, H / s, W / s) measurements (same dtype/device as x).
            eps (float | Tensor): radius, a python float or a per-sample tensor of shape (N,)
                (or 0-d); ``eps = 0`` gives the exact affine projection onto ``A z = b``.

        Returns:
            Tensor: the projection, same shape/dtype as ``x``. Differentiable w.r.t. ``x``, ``b``
            and a tensor ``eps``: for ``eps > 0`` the multiplier mu is solved without autograd and
            then one differentiable Newton step is taken at the root; its value is mu itself (to
            rounding) and its gradient is exactly the implicit-function-theorem gradient of mu
            (:func:`~mcnet_basicsr.ops.secular.projection_coefficients`).
        """
        b = self._check_pair(x, b)
        n = x.shape[0]
        eps_t = self._eps_tensor(eps, n, x.device)
        if not torch.is_tensor(eps) and eps == 0:  # the common exact case: no multiplier, no eigendecomposition
            # P(x) = x - A^T (A A^T)^{-1} (A x - b), with (A A^T)^{-1} = (M_h M_h^T)^{-1} kron (M_w M_w^T)^{-1}
            ah = self._axis(x.shape[-2], x.dtype, x.device, need='inverse')
            aw = self._axis(x.shape[-1], x.dtype, x.device, need='inverse')
            r = _left_right(x, ah['matrix'], aw['matrix']) - b
            correction = _left_right(r, ah['gram_inv'], aw['gram_inv'])  # both symmetric
            return x - _left_right(correction, ah['matrix_t'], aw['matrix_t'])
        ah = self._axis(x.shape[-2], x.dtype, x.device, need='spectral')
        aw = self._axis(x.shape[-1], x.dtype, x.device, need='spectral')

        # r~ = U_h^T (A x - b) U_w = (U_h^T M_h) x (U_w^T M_w)^T - U_h^T b U_w
        r_rot = _left_right(x, ah['rotated'], aw['rotated']) - _left_right(b, ah['eigvecs'].T, aw['eigvecs'].T)
        sig = ah['eigvals'][:, None] * aw['eigvals'][None, :]  # (h, w) float64
        energy = r_rot.to(torch.float64).square().sum(1).flatten(1)  # (N, h*w); channels share sig
        coef = projection_coefficients(energy, sig.flatten(), eps_t).view(n, *sig.shape).to(x.dtype)
        correction = coef[:, None] * r_rot
        return x - _left_right(correction, ah['rotated'].T, aw['rotated'].T)
