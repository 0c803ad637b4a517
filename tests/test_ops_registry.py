"""Measurement operators: bad sizes, the operator registry and the per-size eigendecomposition cache."""
import numpy as np
import pytest
import scipy.linalg
import torch
import torch.nn.functional as F

from mcnet_basicsr.ops import OPERATOR_REGISTRY, SeparableDownsample, build_operator, separable

TYPES = ('bicubic', 'box', 'gaussian')


def _random_problem(op, n, c, h, w, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, c, h, w, generator=gen, dtype=torch.float64)
    b = op(torch.rand(n, c, h, w, generator=gen, dtype=torch.float64))
    return x, b


# ----------------------------------------------------------------------------- errors, registry, cache
@pytest.mark.parametrize('op_type', TYPES)
def test_bad_sizes_raise_with_size_and_scale(op_type):
    op = build_operator({'type': op_type, 'scale': 3})
    with pytest.raises(ValueError, match=r'97x96.*scale 3'):
        op(torch.zeros(1, 1, 97, 96))
    with pytest.raises(ValueError, match=r'96x98.*scale 3'):
        op.project(torch.zeros(1, 1, 96, 98), torch.zeros(1, 1, 32, 32), 0.0)
    with pytest.raises(ValueError, match='mod-crop'):
        op.lr_size(12, 13)
    assert op.lr_size(12, 15) == (4, 5)
    with pytest.raises(ValueError, match='NCHW'):
        op(torch.zeros(96, 96))


def test_unknown_operator_type_lists_known_types():
    with pytest.raises((KeyError, ValueError)) as info:
        build_operator({'type': 'no_such_operator', 'scale': 2})
    message = str(info.value)
    assert 'no_such_operator' in message
    for name in TYPES:
        assert name in message


def test_build_operator_does_not_mutate_options_and_reads_them():
    opt = {'type': 'gaussian', 'scale': 3, 'sigma': 1.2, 'kernel_size': 5}
    op = build_operator(opt)
    assert opt == {'type': 'gaussian', 'scale': 3, 'sigma': 1.2, 'kernel_size': 5}
    assert (op.scale, op.sigma, op.kernel_size) == (3, 1.2, 5)
    assert type(op).__name__ == 'GaussianDownsample' and not isinstance(op, torch.nn.Module)
    assert type(build_operator({'type': 'bicubic', 'scale': 2})).__name__ == 'MatlabBicubicDownsample'
    assert type(build_operator({'type': 'box', 'scale': 2})).__name__ == 'BoxDownsample'
    with pytest.raises(ValueError, match='scale'):
        build_operator({'type': 'bicubic', 'scale': 2.5})


def test_registry_round_trip_with_custom_operator():
    name = 'test_decimate_first_pixel'

    @OPERATOR_REGISTRY.register(name)
    class DecimateFirstPixel(SeparableDownsample):
        """Keep pixel 0 of every block (no blur)."""

        def axis_matrix(self, length):
            m = np.zeros((length // self.scale, length))
            m[np.arange(length // self.scale), np.arange(0, length, self.scale)] = 1.0
            return m

    try:
        assert name in OPERATOR_REGISTRY
        op = build_operator({'type': name, 'scale': 3})
        assert isinstance(op, DecimateFirstPixel)
        x = torch.rand(2, 3, 12, 9, dtype=torch.float64)
        assert torch.equal(op(x), x[..., ::3, ::3])
        b = torch.rand(2, 3, 4, 3, dtype=torch.float64)
        p = op.project(x, b, 0.0)
        expected = x.clone()
        expected[..., ::3, ::3] = b  # projection onto {z: z[::3, ::3] = b} overwrites those pixels only
        assert torch.allclose(p, expected, atol=1e-14)
        with pytest.raises(ValueError, match='already registered'):
            OPERATOR_REGISTRY.register(name)(type('Other', (SeparableDownsample, ), {}))
    finally:
        OPERATOR_REGISTRY.unregister(name)
    assert name not in OPERATOR_REGISTRY


@pytest.mark.parametrize('matrix', [lambda n, s: np.ones((n // s + 1, n)), lambda n, s: np.ones(n)],
                         ids=['rows', 'dims'])
def test_custom_operator_with_a_wrong_matrix_is_refused(matrix):
    class WrongShape(SeparableDownsample):
        def axis_matrix(self, length):
            return matrix(length, self.scale)

    with pytest.raises(ValueError, match=r'WrongShape\.axis_matrix\(6\)'):
        WrongShape(2)(torch.rand(1, 1, 6, 6))


def test_operator_without_a_matrix_says_so():
    """axis_matrix and axis_sparse each default to the other; a subclass with neither is told, not sent in circles."""
    class NoMatrix(SeparableDownsample):
        pass

    for call in (lambda op: op(torch.rand(1, 1, 4, 4)), lambda op: op.axis_matrix(4), lambda op: op.axis_sparse(4)):
        with pytest.raises(NotImplementedError, match='NoMatrix implements neither axis_matrix nor axis_sparse'):
            call(NoMatrix(2))


def test_registry_default_name_is_class_name():

    @OPERATOR_REGISTRY.register()
    class TestBoxTwice(SeparableDownsample):

        def axis_matrix(self, length):
            return 2.0 * OPERATOR_REGISTRY.get('box')(self.scale).axis_matrix(length)

    try:
        op = build_operator({'type': 'TestBoxTwice', 'scale': 2})
        x = torch.rand(1, 2, 8, 6, dtype=torch.float64)
        assert torch.allclose(op(x), 4.0 * F.avg_pool2d(x, 2), atol=1e-14)
        b = op(x) + 1.0
        assert op.residual_norm(op.project(x, b, 0.0), b).item() <= 1e-12
    finally:
        OPERATOR_REGISTRY.unregister('TestBoxTwice')


def test_factorisations_are_cached_per_size(monkeypatch):
    op = build_operator({'type': 'bicubic', 'scale': 2})
    eig_calls, cholesky_calls = [], []
    real_eig, real_cholesky = separable._gram_eigenpairs, scipy.linalg.cholesky_banded

    def counting_eig(gram, *args):
        eig_calls.append(gram.shape)
        return real_eig(gram, *args)

    def counting_cholesky(*args, **kwargs):
        cholesky_calls.append(args[0].shape[1])  # banded storage: (bands, n)
        return real_cholesky(*args, **kwargs)

    monkeypatch.setattr(separable, '_gram_eigenpairs', counting_eig)
    monkeypatch.setattr(scipy.linalg, 'cholesky_banded', counting_cholesky)
    x, b = _random_problem(op, 2, 1, 16, 24)
    op.project(x, b, 0.0)  # eps = 0: one banded Cholesky per axis length, no eigendecomposition
    assert sorted(cholesky_calls) == [8, 12] and eig_calls == []
    op.project(x, b, 0.1)  # eps > 0: one eigendecomposition per axis length
    assert sorted(eig_calls) == [(8, 8), (12, 12)]
    for dtype in (torch.float32, torch.float64):  # a new dtype casts the cached float64 factors
        for eps in (0.0, 0.1):
            op.project(x.to(dtype), b.to(dtype), eps)
    op.project(*_random_problem(op, 1, 1, 16, 16), 0.0)  # H = 16 and W = 16 share one axis entry
    op.project(*_random_problem(op, 1, 1, 16, 16), 0.1)
    assert len(eig_calls) == 2 and len(cholesky_calls) == 2


@pytest.mark.parametrize('op_type,dense', [('bicubic', False), ('box', False), ('gaussian', True)])
def test_dense_eigendecomposition_only_where_the_dct_does_not_diagonalise(monkeypatch, op_type, dense):
    """Bicubic and box get their eigenpairs from the DCT-II basis (no O(n^3) eigendecomposition); the Gaussian,
    centred on a pixel, is not DCT-diagonal and gets LAPACK's."""
    calls = []
    real_eigh = separable._eigh

    def counting_eigh(*args, **kwargs):
        calls.append(tuple(args[0].shape))
        return real_eigh(*args, **kwargs)

    monkeypatch.setattr(separable, '_eigh', counting_eigh)
    for scale in (2, 3, 4):
        op = build_operator({'type': op_type, 'scale': scale})
        op.project(*_random_problem(op, 1, 1, 10 * scale, 7 * scale), 0.1)
    assert (len(calls) == 6) if dense else (calls == [])
