"""1-D resampling matrices, built once in float64 numpy.

Every operator here is separable: on an image X (H x W) it acts as ``M_h @ X @ M_w.T``, where
``M`` (out_length x in_length) is the 1-D matrix of this module for that axis. Boundary handling
is folded into ``M``: a tap that falls outside the signal is added onto the mirrored in-range
pixel, so no padding is ever materialised and ``M.T`` is the exact adjoint including the border.

Each matrix is built as its nonzeros (:class:`AxisMatrix`, a few taps per row): the projection's
set-up needs only those, and a dense float64 matrix of a long axis is tens of MB to fill, copy and
scan. The ``*_sparse`` builders are ``lru_cache``d (:func:`matlab_bicubic_matrix` is the bicubic one
dense and read-only, for ``imresize``). Callers convert (and cache) per dtype/device.
"""
import functools
import math
from typing import NamedTuple

import numpy as np
import torch


def symmetric_index(index, length):
    """Map integer (0-based) indices onto ``[0, length)`` by half-sample symmetric reflection.

    ``-1 -> 0, -2 -> 1, length -> length - 1, ...`` -- the edge pixel is repeated, as in MATLAB's
    ``imresize`` (``aux = [1:n, n:-1:1]``) and in basicsr's symmetric copying. The reflection is
    periodic with period ``2 * length``, so it is valid however far outside a tap falls (basicsr
    itself would fail for images smaller than the kernel; this never does).
    """
    index = np.mod(np.asarray(index, dtype=np.int64), 2 * length)
    return np.where(index >= length, 2 * length - 1 - index, index)


class AxisMatrix(NamedTuple):
    """A 1-D operator matrix as its nonzeros in CSR layout (row-major, unique entries), float64.

    ``indptr`` (rows + 1,), ``indices`` (nnz,) column of each entry, ``data`` (nnz,) its value, ``shape``
    (rows, columns).
    """

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    shape: tuple

    @classmethod
    def from_dense(cls, matrix):
        """The nonzeros of a dense 2-D array (torch finds them 6x faster than scipy's conversion)."""
        dense = torch.from_numpy(np.array(matrix, dtype=np.float64))
        rows, cols = dense.nonzero(as_tuple=True)
        indptr = np.zeros(dense.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows.numpy(), minlength=dense.shape[0]), out=indptr[1:])
        return cls(indptr, cols.numpy(), dense[rows, cols].numpy(), tuple(dense.shape))

    def rows(self):
        """The row of every entry, (nnz,)."""
        return np.repeat(np.arange(self.shape[0]), np.diff(self.indptr))

    def dense(self):
        """The float64 numpy matrix."""
        matrix = np.zeros(self.shape, dtype=np.float64)
        matrix[self.rows(), self.indices] = self.data
        return matrix

    def to_tensor(self, dtype, device):
        """The dense matrix as a tensor of ``dtype`` on ``device``, filled there from the nonzeros: each entry is
        the float64 value rounded to ``dtype``, as a cast of the dense float64 matrix would give, without that
        matrix being built, cast or copied to the device."""
        out = torch.zeros(self.shape, dtype=dtype, device=device)
        index = torch.from_numpy(np.stack([self.rows(), self.indices]))
        out[tuple(index.to(device))] = torch.tensor(self.data, dtype=torch.float64).to(dtype).to(device)
        return out

    def scipy(self):
        """A ``scipy.sparse.csr_matrix`` view."""
        import scipy.sparse  # here: importing scipy costs ~0.2 s that only a projection's set-up needs
        return scipy.sparse.csr_matrix((self.data, self.indices, self.indptr), shape=self.shape)


def _fold_taps(rows, cols, weights, out_length, in_length):
    """``weights`` summed at ``(rows, symmetric(cols))``: an :class:`AxisMatrix`. Taps that fold onto the same
    pixel are added in their order, as ``np.add.at`` into a dense matrix would."""
    key = rows.astype(np.int64) * in_length + symmetric_index(cols, in_length)
    unique, inverse = np.unique(key, return_inverse=True)
    data = np.bincount(inverse, weights=weights, minlength=len(unique))
    keep = data != 0  # a fold can cancel a tap exactly; a dense matrix would not list it
    unique, data = unique[keep], data[keep]
    indptr = np.zeros(out_length + 1, dtype=np.int64)
    np.cumsum(np.bincount(unique // in_length, minlength=out_length), out=indptr[1:])
    for array in (unique, data, indptr):
        array.flags.writeable = False
    return AxisMatrix(indptr, unique % in_length, data, (out_length, in_length))


def cubic_kernel(x, a=-0.5):
    """Keys cubic convolution kernel with coefficient ``a``: ``(a + 2)|x|^3 - (a + 3)|x|^2 + 1`` on ``|x| <= 1``,
    ``a (|x|^3 - 5|x|^2 + 8|x| - 4)`` on ``1 < |x| <= 2``, 0 beyond (continuous, so which side of 1 and 2 each
    interval takes does not matter). Default: -0.5, MATLAB's and basicsr's ``cubic`` (and Pillow's); OpenCV's is -0.75.
    """
    absx = np.abs(x)
    absx2 = absx * absx
    absx3 = absx2 * absx
    inner = ((a + 2.0) * absx3 - (a + 3.0) * absx2 + 1.0) * (absx <= 1)
    outer = (a * absx3 - 5.0 * a * absx2 + 8.0 * a * absx - 4.0 * a) * ((absx > 1) & (absx <= 2))
    return inner + outer


@functools.lru_cache(maxsize=256)
def matlab_bicubic_matrix(in_length, out_length, scale, antialiasing=True):
    """:func:`matlab_bicubic_sparse` as a dense, read-only float64 array (for :func:`~mcnet_basicsr.ops.imresize`)."""
    matrix = matlab_bicubic_sparse(in_length, out_length, scale, antialiasing).dense()
    matrix.flags.writeable = False
    return matrix


@functools.lru_cache(maxsize=256)
def matlab_bicubic_sparse(in_length, out_length, scale, antialiasing=True):
    """Matrix of MATLAB ``imresize(..., 'bicubic')`` along one axis: shape (out_length, in_length).

    Follows MATLAB's ``contributions`` (and basicsr's ``calculate_weights_indices``) step by step:
    output pixel ``k`` (1-based) maps to input coordinate ``u = k / scale + (1 - 1 / scale) / 2``;
    when downscaling with antialiasing the kernel is stretched to width ``4 / scale`` and becomes
    ``scale * cubic(scale * d)``; the ``ceil(width) + 2`` taps starting at ``floor(u - width / 2)``
    are weighted, each row is normalised to sum 1, and out-of-range taps are mirrored
    symmetrically. MATLAB/basicsr drop all-zero leading/trailing weight columns only to shorten
    their padding; the same is done here, although with the mirror folded into the matrix it
    cannot change a single entry. Everything is float64 (basicsr computes the weights in
    float32, hence differences of order 1e-7 against it).

    Args:
        in_length, out_length (int): axis lengths.
        scale (float): output/input scale, e.g. ``1 / 3`` to downscale by 3, ``2`` to upscale.
        antialiasing (bool): widen the kernel when ``scale < 1`` (MATLAB's default).
    """
    in_length, out_length, scale = int(in_length), int(out_length), float(scale)
    if in_length < 1 or out_length < 1 or not scale > 0:
        raise ValueError(f'bad resize: in_length={in_length}, out_length={out_length}, scale={scale}')
    stretch = scale < 1 and antialiasing
    kernel_width = 4.0 / scale if stretch else 4.0

    x = np.arange(1, out_length + 1, dtype=np.float64)
    u = x / scale + 0.5 * (1.0 - 1.0 / scale)
    left = np.floor(u - kernel_width / 2.0)
    taps = math.ceil(kernel_width) + 2
    indices = left[:, None] + np.arange(taps, dtype=np.float64)[None, :]  # 1-based
    distance = u[:, None] - indices
    if stretch:
        weights = scale * cubic_kernel(distance * scale)
    else:
        weights = cubic_kernel(distance)
    weights = weights / weights.sum(axis=1, keepdims=True)

    # Drop all-zero first/last weight columns (MATLAB: ``kill = find(~any(weights, 1))`` on the ends).
    keep = np.ones(taps, dtype=bool)
    if not weights[:, 0].any():
        keep[0] = False
    if not weights[:, -1].any():
        keep[-1] = False
    weights, indices = weights[:, keep], indices[:, keep]

    rows = np.repeat(np.arange(out_length), weights.shape[1])
    cols = indices.astype(np.int64).ravel() - 1  # to 0-based
    return _fold_taps(rows, cols, weights.ravel(), out_length, in_length)


def _check_divisible(length, scale):
    if length % scale:
        raise ValueError(f'axis length {length} is not divisible by scale {scale} '
                         '(callers mod-crop to a multiple of the scale)')


@functools.lru_cache(maxsize=256)
def box_sparse(in_length, scale):
    """Block averaging by an integer ``scale``: row i averages input pixels ``[i*s, (i+1)*s)``."""
    in_length, scale = int(in_length), int(scale)
    _check_divisible(in_length, scale)
    out_length = in_length // scale
    rows = np.repeat(np.arange(out_length), scale)
    cols = np.arange(in_length)
    return _fold_taps(rows, cols, np.full(in_length, 1.0 / scale), out_length, in_length)


def gaussian_taps(sigma, kernel_size):
    """Normalised, truncated 1-D Gaussian taps (odd ``kernel_size``), centred at index ``kernel_size // 2``."""
    offsets = np.arange(kernel_size, dtype=np.float64) - kernel_size // 2
    taps = np.exp(-0.5 * (offsets / sigma) ** 2)
    return taps / taps.sum()


@functools.lru_cache(maxsize=256)
def gaussian_sparse(in_length, scale, sigma, kernel_size, offset=0):
    """Gaussian blur (symmetric boundary) followed by keeping every ``scale``-th pixel.

    Output pixel ``i`` is the blurred input at pixel ``i * scale + offset`` (0-based), i.e.
    ``offset=0`` keeps the top-left pixel of every ``scale x scale`` block, like
    ``blurred[..., offset::scale, offset::scale]``.
    """
    in_length, scale, kernel_size, offset = int(in_length), int(scale), int(kernel_size), int(offset)
    _check_divisible(in_length, scale)
    out_length = in_length // scale
    taps = gaussian_taps(float(sigma), kernel_size)
    centres = np.arange(out_length) * scale + offset
    cols = centres[:, None] + (np.arange(kernel_size) - kernel_size // 2)[None, :]
    rows = np.repeat(np.arange(out_length), kernel_size)
    return _fold_taps(rows, cols.ravel(), np.tile(taps, out_length), out_length, in_length)
