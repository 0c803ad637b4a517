"""Anderson acceleration against a straightforward reference implementation (CPU, float64 and float32)."""
import pytest
import torch

from mcnet_basicsr.deq import SolverStats, anderson_solve

DT = torch.float64


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _scaled(mat, norm):
    return mat * (norm / torch.linalg.matrix_norm(mat, 2))


def _anderson_solve_reference(f, z0, m=5, lam=1e-4, mixing=1.0, tol=1e-5, max_iter=100, stop='rel'):
    """The straightforward Anderson solver (the solver's earlier form): Gram matrix and a float64
    copy of the history rebuilt every step, host syncs every iteration, and here one
    ``torch.linalg.solve`` per sample (a singular or non-finite one falls back to the plain step
    ``f(x)`` for that sample; the batched solve of old raised for the whole batch instead).
    Returns ``(z, stats, inputs)`` with the iterates ``f`` was called on."""
    with torch.no_grad():
        shape, n = z0.shape, z0.shape[0]
        x = z0.reshape(n, -1).clone()
        best_x = x.clone()
        best_res = torch.full((n,), float('inf'), dtype=x.dtype)
        converged = torch.zeros(n, dtype=torch.bool)
        iterations = torch.full((n,), max_iter, dtype=torch.long)
        X = x.new_zeros((n, m, x.shape[1]))
        Fh_ = x.new_zeros((n, m, x.shape[1]))
        trace, inputs = [], []
        for k in range(max_iter):
            inputs.append(x.reshape(shape).clone())
            fx = f(x.reshape(shape)).reshape(n, -1)
            res = torch.linalg.vector_norm(fx - x, dim=1)
            if stop == 'rel':
                res = res / (torch.linalg.vector_norm(fx, dim=1) + 1e-12)
            active = ~converged
            improve = active & (res < best_res)
            best_x = torch.where(improve[:, None], x, best_x)
            best_res = torch.where(improve, res, best_res)
            newly = active & (res <= tol)
            converged = converged | newly
            iterations = torch.where(newly, torch.full_like(iterations, k + 1), iterations)
            trace.append(torch.where(active, res, best_res))
            if k == max_iter - 1 or bool(converged.all()):
                break
            slot = k % m
            X[:, slot] = x
            Fh_[:, slot] = fx
            h = min(k + 1, m)
            if h == 1:
                new = fx if mixing == 1.0 else mixing * fx + (1.0 - mixing) * x
            else:
                Xh, Fh = X[:, :h], Fh_[:, :h]
                G = (Fh - Xh).double()
                A = G @ G.transpose(1, 2)
                reg = lam * G.square().sum(dim=(1, 2)) + 1e-30
                A = A + reg[:, None, None] * torch.eye(h, dtype=DT)
                new = fx.clone()
                for i in range(n):  # one small solve per sample; a failed one keeps the plain step
                    try:
                        w = torch.linalg.solve(A[i], torch.ones(h, 1, dtype=DT))
                    except RuntimeError:  # singular
                        continue
                    alpha = (w / w.sum()).T.to(x.dtype)  # (1, h)
                    step = (alpha @ Fh[i]).squeeze(0)
                    if mixing != 1.0:
                        step = mixing * step + (1.0 - mixing) * (alpha @ Xh[i]).squeeze(0)
                    if bool(torch.isfinite(step).all()):
                        new[i] = step
            x = torch.where(converged[:, None], x, new)
        stats = SolverStats(iterations=iterations, residual=best_res, converged=converged, trace=trace,
                            nfe=len(inputs))
        return best_x.reshape(shape), stats, inputs


def _mixed_difficulty_map(n, d, dtype, seed, device='cpu'):
    """f(z) = tanh(s_i * z W^T + b_i) per sample i (n <= 5), with scales for an easy, a hard, a
    non-contractive, a constant (converges at step 2) and a medium sample; sample 0 has b = 0, so
    z0 = 0 is already its fixed point (residual exactly 0 at step 1). n = 1: the hard sample. In float64 the
    non-contractive sample oscillates (does not converge); in float32 it is milder (s = 1.6, converges), since an
    oscillating map amplifies float32 rounding until iteration counts may differ."""
    g = _gen(seed)
    W = _scaled(torch.randn(d, d, dtype=DT, generator=g), 1.0)
    pattern = [0.3, 0.97, 3.0 if dtype == torch.float64 else 1.6, 0.0, 0.6]
    scale = torch.tensor(pattern[:n] if n > 1 else [0.97], dtype=DT)[:, None]
    b = torch.randn(n, d, dtype=DT, generator=g)
    if n > 1:
        b[0] = 0.0
    W, scale, b = (t.to(device=device, dtype=dtype) for t in (W, scale, b))
    return lambda z: torch.tanh(scale * (z @ W.T) + b)


@pytest.mark.parametrize('n', [1, 3, 5])
@pytest.mark.parametrize('m', [1, 2, 5])
@pytest.mark.parametrize('lam', [0.0, 1e-4, 1e-2])
@pytest.mark.parametrize('mixing,stop,dtype', [(1.0, 'rel', torch.float64), (0.6, 'abs', torch.float64),
                                               (1.0, 'abs', torch.float32)])
def test_anderson_matches_reference(n, m, lam, mixing, stop, dtype):
    d = 24
    f = _mixed_difficulty_map(n, d, dtype, seed=10 * n + m)
    inputs = []

    def f_logged(z):
        inputs.append(z.clone())
        return f(z)

    tol = 1e-9 if dtype == torch.float64 else 1e-5
    kw = dict(m=m, lam=lam, mixing=mixing, tol=tol, max_iter=40, stop=stop)
    z0 = torch.zeros(n, d, dtype=dtype)
    z_ref, s_ref, in_ref = _anderson_solve_reference(f, z0, **kw)
    z, st = anderson_solve(f_logged, z0, **kw)
    assert z.dtype == dtype and z.shape == z0.shape
    assert st.iterations.tolist() == s_ref.iterations.tolist()
    assert st.converged.tolist() == s_ref.converged.tolist()
    assert st.nfe == s_ref.nfe == len(inputs) == len(st.trace) == len(s_ref.trace)
    rtol = 1e-6 if dtype == torch.float32 else 1e-9

    def close(a, b):  # per-sample relative error
        a, b = a.reshape(n, -1).double(), b.reshape(n, -1).double()
        err = torch.linalg.vector_norm(a - b, dim=1)
        return bool((err <= rtol * torch.linalg.vector_norm(b, dim=1) + 1e-30).all())

    for a, b in zip(inputs, in_ref):  # the same iterates, call by call
        assert close(a, b)
    assert close(z, z_ref)
    # residuals ||f(z) - z|| (cancellation: absolute error ~ rounding of the iterates, |z| <= 5)
    atol = 1e-6 if dtype == torch.float32 else 1e-12
    for a, b in zip(st.trace + [st.residual], s_ref.trace + [s_ref.residual]):
        assert torch.allclose(a, b, rtol=1e-5, atol=atol)
    # preconditions of the comparison: the batch mixes stopping times, with a sample converged at
    # step 1 (zero residual history) and, in float64, one that never converges
    if n == 5:
        assert len(set(st.iterations.tolist())) >= 3 and int(st.iterations[0]) == 1
        if dtype == torch.float64:
            assert not bool(st.converged.all())


def test_anderson_singular_solve_falls_back_without_raising():
    """lam = 0 and a constant residual g: every Gram matrix is ||g||^2 * ones (+1e-30, lost in
    rounding), exactly singular (c is integer, so every residual is exactly c). The solve fails per
    sample (no exception, no host sync) and those samples take the plain step, z_k = k * c."""
    c = torch.randint(-3, 4, (2, 8), generator=_gen(11)).to(DT)
    c[:, 0] = 1.0
    inputs = []

    def f(z):
        inputs.append(z.clone())
        return z + c

    z, st = anderson_solve(f, torch.zeros(2, 8, dtype=DT), m=3, lam=0.0, tol=1e-3, max_iter=6, stop='abs')
    assert st.nfe == 6 and not bool(st.converged.any())
    for k, zk in enumerate(inputs):
        assert torch.allclose(zk, k * c, rtol=1e-12, atol=1e-12)
    assert torch.equal(z, inputs[0])  # all residuals equal ||c||: the first iterate stays the best
