"""Which LAPACK solver for the eps > 0 set-up of a resizer that no DCT diagonalises: dense or banded.

Pillow's and torch's antialiasing resizers get the eigenpairs of ``M M^T`` from two half-size eigenproblems
(``mcnet_basicsr.ops.separable._centrosymmetric_eigenpairs``). Each half is banded like ``M M^T`` (bilinear:
tridiagonal, bicubic: 3 diagonals a side, Lanczos: 5); the Gaussian operator (``gaussian``, not mirror-symmetric)
gets one of the whole length. This times them at one LR length with LAPACK's dense
``eigh`` (torch, what the package runs) and with LAPACK's banded divide and conquer through scipy (``dstevd`` for a
tridiagonal matrix, ``dsbevd`` for wider bands), and checks that both give the same eigenvalues and orthonormal
eigenpairs. Each solver is timed alone here; in the package's set-up scipy's would also slow the torch work after it
(its OpenBLAS threads keep spinning), which this study does not measure:

    python benchmarks/eigensolver_study.py --lr 1024 --threads 2 --out docs/records/eigensolver_study_cpu.json
"""
import argparse
import json
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
    parser.add_argument('--lr', type=int, default=1024, help='LR axis length (the halves are half of it)')
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
            for m in mats:
                vd, ud = dense(m)
                vb, ub = banded(m, band)
                scale_m = np.abs(vd).max()
                assert np.abs(vd - vb).max() <= 1e-13 * scale_m, name
                assert np.abs(ub.T @ ub - np.eye(len(m))).max() <= 1e-12, name
                assert np.abs(m @ ub - ub * vb).max() <= 1e-13 * scale_m, name
            dense_ms = median_ms(lambda: [dense(m) for m in mats], args.repeats)
            banded_ms = median_ms(lambda: [banded(m, band) for m in mats], args.repeats)
            row = {'name': name, 'scale': scale, 'lr': args.lr, 'band': band, 'matrices': [len(m) for m in mats],
                   'dense_ms': dense_ms[0], 'dense_min_ms': dense_ms[1],
                   'banded_ms': banded_ms[0], 'banded_min_ms': banded_ms[1]}
            rows.append(row)
            print(f'{name:15s} x{scale} band {band}, {len(mats)} x {len(mats[0])}: '
                  f'dense {dense_ms[0]:6.1f} ms (min {dense_ms[1]:.1f}), '
                  f'banded {banded_ms[0]:6.1f} ms (min {banded_ms[1]:.1f})', flush=True)
    record = {'machine': f'{platform.processor() or platform.machine()}, torch {torch.__version__}, '
                         f'{torch.get_num_threads()} threads, scipy {scipy.__version__}',
              'command': 'python benchmarks/eigensolver_study.py ' + ' '.join(sys.argv[1:]), 'rows': rows}
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(record, f, indent=1)
            f.write('\n')


if __name__ == '__main__':
    main()
