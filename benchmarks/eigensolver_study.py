"""Which eigensolver for the eps > 0 set-up of a resizer that no DCT diagonalises: dense, banded or structured.

Pillow's and torch's antialiasing resizers get the eigenpairs of ``M M^T`` from two half-size eigenproblems
(``mcnet_basicsr.ops.separable._centrosymmetric_eigenpairs``). Each half is banded like ``M M^T`` (bilinear:
tridiagonal, bicubic: 3 diagonals a side, Lanczos: 5); the Gaussian operator (``gaussian``, not mirror-symmetric)
gets one of the whole length. This times them at one LR length with LAPACK's dense
``eigh`` (torch, what the package runs) and with LAPACK's banded divide and conquer through scipy (``dstevd`` for a
tridiagonal matrix, ``dsbevd`` for wider bands), and checks that both give the same eigenvalues and orthonormal
eigenpairs. Each solver is timed alone here; in the package's set-up scipy's would also slow the torch work after it
(its OpenBLAS threads keep spinning), which this study does not measure.

It also tries a structured route that avoids LAPACK's O(n^3) work (:func:`structured`). Each matrix is a banded
Toeplitz matrix whose boundary rows differ from one that a DCT diagonalises exactly (DCT-II where both ends are even
half-sample mirrors, DCT-IV where the middle of a centrosymmetric axis makes the last end odd): the difference is a
small symmetric block in a corner (both corners for the Gaussian) of some rank r. In that DCT basis the matrix is
``diag(d) + W S W^T`` with W n x r, whose eigenvectors are ``(diag(d) - lambda)^{-1} W c`` with c the null vector of an
r x r matrix, O(n^2 r) for all of them given the eigenvalues (LAPACK's banded ones, without vectors). Nothing makes such
vectors orthogonal: the record gives ``max |U^T U - I|`` and the residual, beside the time, for each rank. A last
column times one float64 product of two matrices of the size decomposed, the least that forming eigenvectors with one
dense product costs:

    python benchmarks/eigensolver_study.py --lr 1024 --threads 2 --out benchmarks/records/eigensolver_study_cpu.json
"""
import argparse
import json
import math
import platform
import statistics
import sys
import time

import numpy as np
import scipy.linalg
import torch

from mcnet_basicsr.ops import DEGRADATIONS, build_operator
from mcnet_basicsr.ops.separable import SeparableDownsample, _bandwidth, _centrosymmetric_halves, _eigh, _upper_banded

NAMES = ('pil-bilinear', 'torch-bilinear', 'pil-bicubic', 'torch-bicubic', 'pil-lanczos', 'gaussian')


def halves(op, lr):
    """The two half-size matrices the package decomposes for ``M M^T`` at LR length ``lr``, and its band; the whole
    ``M M^T`` alone where it is not centrosymmetric (a Gaussian keeping the first pixel of each block)."""
    gram = SeparableDownsample._sparse_gram({'sparse': op.axis_sparse(lr * op.scale)})
    split = _centrosymmetric_halves(gram)
    if split is None:
        return [gram.toarray()], _bandwidth(gram)
    return list(split[:2]), split[2]


def dense(matrix):
    return _eigh(matrix)


def banded(matrix, band):
    """LAPACK's banded divide and conquer (scipy's): ``dstevd`` for a tridiagonal matrix, ``dsbevd`` for wider bands."""
    if band <= 1 and len(matrix) > 1:
        return scipy.linalg.eigh_tridiagonal(np.diagonal(matrix).copy(), np.diagonal(matrix, 1).copy(),
                                             lapack_driver='stevd')
    return scipy.linalg.eig_banded(_upper_banded(matrix, band), check_finite=False)


def dct_pairs(length, taps, odd_end):
    """Eigenvalues (unsorted) and orthonormal eigenvectors (columns) of the symmetric Toeplitz-plus-Hankel matrix
    ``T[i, j] = t(|i - j|) + t(i + j + 1) +- t(2 length - 1 - i - j)`` of a banded filter with diagonals ``taps``
    (t(0) .. t(b)): the filter mirrored about -1/2, and about length - 1/2 evenly (+: the DCT-II basis) or oddly (-: the
    DCT-IV basis); the eigenvalues are the filter's symbol at the basis' frequencies."""
    if odd_end:
        freq = np.pi * (2 * np.arange(length) + 1) / (2 * length)
    else:
        freq = np.pi * np.arange(length) / length
    basis = math.sqrt(2.0 / length) * np.cos(np.outer(np.arange(length) + 0.5, freq))
    if not odd_end:
        basis[:, 0] = math.sqrt(1.0 / length)
    return taps[0] + 2 * np.cos(np.outer(freq, np.arange(1, len(taps)))) @ taps[1:], basis


def reference(length, taps, odd_end, rows=None):
    """The matrix T of :func:`dct_pairs`, dense, or its ``rows`` x ``rows`` block."""
    padded = np.zeros(2 * length + 1)
    padded[:len(taps)] = taps
    index = np.arange(length) if rows is None else rows
    i, j = np.meshgrid(index, index, indexing='ij')
    return padded[abs(i - j)] + padded[i + j + 1] + (-1 if odd_end else 1) * padded[2 * length - 1 - i - j]


def corner_update(matrix, band, odd_end, both_corners, check=False):
    """``(d, Q, W, S)`` with ``matrix = Q (diag(d) + W diag(S) W^T) Q^T``: Q and d from :func:`dct_pairs` with the
    Toeplitz diagonals of the matrix' middle row, and the corner difference ``matrix - T`` (rows and columns within
    ``2 band + 2`` of the first end, and of the last one with ``both_corners``) as its nonzero eigenpairs. ``check``:
    assert that the difference vanishes outside the corners (O(n^2), outside the timed set-up)."""
    n = len(matrix)
    taps = matrix[n // 2, n // 2:n // 2 + band + 1]
    d, q = dct_pairs(n, taps, odd_end)
    width = min(2 * band + 2, n // 2)
    rows = np.r_[np.arange(width), np.arange(n - width, n)] if both_corners else np.arange(width)
    tol = 64 * np.finfo(np.float64).eps * np.abs(matrix).sum(1).max()
    if check:
        diff = matrix - reference(n, taps, odd_end)
        diff[np.ix_(rows, rows)] = 0.0
        assert np.abs(diff).max() <= tol, 'the matrix differs from its Toeplitz part outside the corners'
    vals, vecs = np.linalg.eigh(matrix[np.ix_(rows, rows)] - reference(n, taps, odd_end, rows))
    keep = np.abs(vals) > tol
    return d, q, q[rows].T @ vecs[:, keep], vals[keep]


def structured(matrix, band, odd_end, both_corners):
    """Eigenvalues (ascending, LAPACK's banded ones without vectors) and eigenvectors ``Q (diag(d) - lambda)^{-1} W c``
    of :func:`corner_update`'s form, normalised; and the rank r of the corners."""
    d, q, w, s = corner_update(matrix, band, odd_end, both_corners)
    vals = scipy.linalg.eig_banded(_upper_banded(matrix, band), eigvals_only=True, check_finite=False)
    inverse = 1.0 / (d[:, None] - vals[None, :])
    r = len(s)
    outer = (w[:, :, None] * w[:, None, :]).reshape(len(d), r * r)
    secular = (inverse.T @ outer).reshape(len(vals), r, r) + np.diag(1.0 / s)  # singular at each eigenvalue
    small, null = np.linalg.eigh(secular)
    c = null[np.arange(len(vals)), :, np.abs(small).argmin(1)]
    vecs = (w @ c.T) * inverse
    vecs /= np.linalg.norm(vecs, axis=0)
    return vals, q @ vecs, r


def quality(matrix, vals, vecs):
    """``max |U^T U - I|`` and ``max |A U - U diag(vals)| / ||A||_inf``."""
    orthogonality = np.abs(vecs.T @ vecs - np.eye(len(vals))).max()
    return orthogonality, np.abs(matrix @ vecs - vecs * vals).max() / np.abs(matrix).sum(1).max()


def median_ms(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times), min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--lr', type=int, default=1024, help='LR axis length, even (the halves are half of it)')
    parser.add_argument('--scales', type=int, nargs='+', default=[2, 4])
    parser.add_argument('--names', nargs='+', default=list(NAMES))
    parser.add_argument('--repeats', type=int, default=7)
    parser.add_argument('--threads', type=int, default=None)
    parser.add_argument('--out', default=None, help='write the rows as JSON here')
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    for name in args.names:
        for scale in args.scales:
            op = build_operator(dict(DEGRADATIONS.get(name, {'type': name}), scale=scale))
            mats, band = halves(op, args.lr)
            # the centrosymmetric halves: G11 + G13 J is even about the middle, G11 - G13 J odd; one whole axis is
            # the DCT-II's at both ends
            kinds = [(False, len(mats) == 1), (True, False)][:len(mats)]
            worst = {'dense': [0.0, 0.0], 'banded': [0.0, 0.0], 'structured': [0.0, 0.0]}
            ranks = []
            for m, (odd_end, both) in zip(mats, kinds):
                vd, ud = dense(m)
                vb, ub = banded(m, band)
                corner_update(m, band, odd_end, both, check=True)
                vs, us, rank = structured(m, band, odd_end, both)
                ranks.append(rank)
                scale_m = np.abs(vd).max()
                assert np.abs(vd - vb).max() <= 1e-13 * scale_m and np.abs(vd - vs).max() <= 1e-13 * scale_m, name
                for key, (v, u) in {'dense': (vd, ud), 'banded': (vb, ub), 'structured': (vs, us)}.items():
                    worst[key] = [max(a, b) for a, b in zip(worst[key], quality(m, v, u))]
            dense_ms = median_ms(lambda: [dense(m) for m in mats], args.repeats)
            banded_ms = median_ms(lambda: [banded(m, band) for m in mats], args.repeats)
            structured_ms = median_ms(lambda: [structured(m, band, *kind) for m, kind in zip(mats, kinds)],
                                      args.repeats)
            left, right = (torch.from_numpy(m) for m in (mats[0], mats[-1]))
            product_ms = median_ms(lambda: [left @ right for _ in mats], args.repeats)
            row = {'name': name, 'scale': scale, 'lr': args.lr, 'band': band, 'matrices': [len(m) for m in mats],
                   'dense_ms': dense_ms[0], 'dense_min_ms': dense_ms[1],
                   'banded_ms': banded_ms[0], 'banded_min_ms': banded_ms[1],
                   'structured_ms': structured_ms[0], 'structured_min_ms': structured_ms[1], 'corner_ranks': ranks,
                   'product_ms': product_ms[0], 'product_min_ms': product_ms[1]}
            for key, (orthogonality, residual) in worst.items():
                row[f'{key}_orthogonality'], row[f'{key}_residual'] = orthogonality, residual
            print(f'{name:15s} x{scale} band {band}, {len(mats)} x {len(mats[0])}: '
                  f'dense {dense_ms[0]:6.1f} ms (orth. {worst["dense"][0]:.0e}), '
                  f'banded {banded_ms[0]:6.1f} ms (orth. {worst["banded"][0]:.0e}), '
                  f'structured rank {ranks} {structured_ms[0]:6.1f} ms (orth. {worst["structured"][0]:.0e}, '
                  f'residual {worst["structured"][1]:.0e}), one product {product_ms[1]:5.1f} ms (min)', flush=True)
            rows.append(row)
    record = {'machine': f'{platform.processor() or platform.machine()}, torch {torch.__version__}, '
                         f'{torch.get_num_threads()} threads, scipy {scipy.__version__}',
              'command': 'python benchmarks/eigensolver_study.py ' + ' '.join(sys.argv[1:]), 'rows': rows}
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(record, f, indent=1)
            f.write('\n')


if __name__ == '__main__':
    main()
