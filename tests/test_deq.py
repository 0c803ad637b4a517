"""Tests of mcnet_basicsr.deq (CPU, float64 where precision matters)."""
import gc
import weakref

import pytest
import torch
import torch.nn.functional as F

from mcnet_basicsr.deq import (ImplicitFixedPoint, SolverConfig, SolverStats, anderson_solve, fixed_point_solve,
                               implicit_fixed_point, solve)

DT = torch.float64


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _scaled(mat, norm):
    return mat * (norm / torch.linalg.matrix_norm(mat, 2))


def _sym_contraction(d, rho, seed):
    """Symmetric matrix with eigenvalues in [0, rho], largest = rho."""
    g = _gen(seed)
    q, _ = torch.linalg.qr(torch.randn(d, d, dtype=DT, generator=g))
    ev = torch.rand(d, dtype=DT, generator=g) * rho
    ev[0] = rho
    return q @ torch.diag(ev) @ q.T


def _true_residual(f, z, stop='rel'):
    n = z.shape[0]
    fz = f(z).reshape(n, -1)
    r = torch.linalg.vector_norm(fz - z.reshape(n, -1), dim=1)
    if stop == 'rel':
        r = r / (torch.linalg.vector_norm(fz, dim=1) + 1e-12)
    return r


# --------------------------------------------------------------------------- gradient
class _Problem:
    """f(z) = tanh(z W^T + x U^T + c), ||W|| = 0.5, batch 3 (float64)."""

    def __init__(self):
        g = _gen(0)
        self.d, self.p, self.n = 6, 4, 3
        self.W = _scaled(torch.randn(self.d, self.d, dtype=DT, generator=g), 0.5)
        self.U = torch.randn(self.d, self.p, dtype=DT, generator=g) * 0.7
        self.x = torch.randn(self.n, self.p, dtype=DT, generator=g)
        self.c = torch.randn(self.d, dtype=DT, generator=g) * 0.3  # closed over by f
        self.R = torch.randn(self.n, self.d, dtype=DT, generator=g)  # loss weights

    @staticmethod
    def f_of(W, U, x, c):
        inj = x @ U.T + c
        return lambda z: torch.tanh(z @ W.T + inj)

    def loss_implicit(self, W, x, c, cfg_f, cfg_b):
        f = self.f_of(W, self.U, x, c)
        z_out, fst, holder = implicit_fixed_point(f, torch.zeros(self.n, self.d, dtype=DT), cfg_f, cfg_b)
        return (z_out * self.R).sum(), fst, holder

    def loss_unrolled(self, W, x, c, iters=300):
        f = self.f_of(W, self.U, x, c)
        z = torch.zeros(self.n, self.d, dtype=DT)
        for _ in range(iters):
            z = f(z)
        return (z * self.R).sum()


def _rel_err(a, b):
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


@pytest.mark.parametrize('solver', ['anderson', 'fixed_point'])
def test_implicit_gradient_matches_unrolled_and_finite_differences(solver):
    P = _Problem()
    cfg = SolverConfig(solver=solver, tol=1e-13, max_iter=500, stop='abs')
    W, x, c = (t.clone().requires_grad_() for t in (P.W, P.x, P.c))
    loss, fst, holder = P.loss_implicit(W, x, c, cfg, cfg)
    assert bool(fst.converged.all())
    gW, gx, gc_ = torch.autograd.grad(loss, (W, x, c))
    assert holder.calls == 1 and holder.stats is not None and bool(holder.stats.converged.all())

    W2, x2, c2 = (t.clone().requires_grad_() for t in (P.W, P.x, P.c))
    uW, ux, uc = torch.autograd.grad(P.loss_unrolled(W2, x2, c2), (W2, x2, c2))
    for a, b in ((gW, uW), (gx, ux), (gc_, uc)):
        assert _rel_err(a, b) <= 1e-4

    # central finite differences of the implicit layer's (no-grad) forward
    eps = 1e-6

    def loss_nograd(W_, x_, c_):
        with torch.no_grad():
            return float(P.loss_implicit(W_, x_, c_, cfg, cfg)[0])

    for which, grad in ((0, gW), (1, gx), (2, gc_)):
        base = [P.W, P.x, P.c]
        fd = torch.zeros_like(base[which])
        for idx in range(base[which].numel()):
            args_p = [t.clone() for t in base]
            args_m = [t.clone() for t in base]
            args_p[which].view(-1)[idx] += eps
            args_m[which].view(-1)[idx] -= eps
            fd.view(-1)[idx] = (loss_nograd(*args_p) - loss_nograd(*args_m)) / (2 * eps)
        assert _rel_err(grad, fd) <= 1e-4


def test_naive_one_step_gradient_differs():
    """Sanity: the implicit gradient is not the one-application (Jacobian-free) gradient,
    so the comparison above can fail."""
    P = _Problem()
    cfg = SolverConfig(tol=1e-13, max_iter=500, stop='abs')
    W = P.W.clone().requires_grad_()
    f = P.f_of(W, P.U, P.x, P.c)
    with torch.no_grad():
        z_star, _ = solve(f, torch.zeros(P.n, P.d, dtype=DT), cfg)
    naive = torch.autograd.grad((f(z_star) * P.R).sum(), W)[0]
    W2 = P.W.clone().requires_grad_()
    ref = torch.autograd.grad(P.loss_unrolled(W2, P.x, P.c), W2)[0]
    assert _rel_err(naive, ref) > 1e-2


def test_backward_stats_and_no_grad_path():
    P = _Problem()
    cfg = SolverConfig(tol=1e-10, max_iter=200)
    W = P.W.clone().requires_grad_()
    layer = ImplicitFixedPoint(cfg, SolverConfig(solver='fixed_point', tol=1e-9, max_iter=300))
    z_out, fst, holder = layer(P.f_of(W, P.U, P.x, P.c), torch.zeros(P.n, P.d, dtype=DT))
    assert layer.last_forward_stats is fst and layer.last_backward_stats is None
    assert z_out.grad_fn is not None and holder.enabled
    (z_out * P.R).sum().backward()
    assert isinstance(layer.last_backward_stats, SolverStats)
    assert bool(layer.last_backward_stats.converged.all())
    s = layer.last_backward_stats.summary()
    assert set(s) >= {'iter_mean', 'iter_max', 'residual_max'} and all(isinstance(v, float) for v in s.values())

    # no_grad: f(z*) without graph, equal to the grad-mode value
    with torch.no_grad():
        z_ng, _, h_ng = implicit_fixed_point(P.f_of(W, P.U, P.x, P.c), torch.zeros(P.n, P.d, dtype=DT), cfg)
    assert z_ng.grad_fn is None and not z_ng.requires_grad and not h_ng.enabled
    assert torch.allclose(z_ng, z_out.detach(), atol=1e-12)
    # the returned value is f(z*), a fixed point up to tol
    assert float(_true_residual(P.f_of(P.W, P.U, P.x, P.c), z_ng).max()) < 1e-9

    # grad enabled but nothing requires grad: no hook, no graph
    z_nr, _, h_nr = implicit_fixed_point(P.f_of(P.W, P.U, P.x, P.c), torch.zeros(P.n, P.d, dtype=DT), cfg)
    assert z_nr.grad_fn is None and not h_nr.enabled


def test_hook_guarded_and_not_leaking():
    P = _Problem()
    cfg = SolverConfig(tol=1e-10, max_iter=200)
    W = P.W.clone().requires_grad_()
    z_out, _, holder = implicit_fixed_point(P.f_of(W, P.U, P.x, P.c), torch.zeros(P.n, P.d, dtype=DT), cfg)
    loss = (z_out * P.R).sum()
    g1 = torch.autograd.grad(loss, W, retain_graph=True)[0]
    assert holder.calls == 1
    with pytest.raises(RuntimeError, match='already'):
        torch.autograd.grad(loss, W)
    # a fresh call gives a fresh graph and the same gradient
    z2, _, h2 = implicit_fixed_point(P.f_of(W, P.U, P.x, P.c), torch.zeros(P.n, P.d, dtype=DT), cfg)
    g2 = torch.autograd.grad((z2 * P.R).sum(), W)[0]
    assert h2.calls == 1 and torch.allclose(g1, g2, rtol=1e-8, atol=1e-12)
    # after backward, nothing keeps z_out alive (no hook <-> graph reference cycle)
    ref = weakref.ref(z2)
    del z2
    gc.disable()
    try:
        assert ref() is None
    finally:
        gc.enable()


def test_memory_independent_of_forward_iterations():
    P = _Problem()
    W = P.W.clone().requires_grad_()
    calls = {'grad': 0, 'nograd': 0}

    def make_f():
        base = P.f_of(W, P.U, P.x, P.c)

        def f(z):
            calls['grad' if torch.is_grad_enabled() else 'nograd'] += 1
            return base(z)
        return f

    def count_graph(t):
        nodes, saved, stack = set(), 0, [t.grad_fn]
        while stack:
            n = stack.pop()
            if n is None or n in nodes:
                continue
            nodes.add(n)
            saved += sum(1 for a in dir(n) if a.startswith('_saved_'))
            stack.extend(m for m, _ in n.next_functions)
        return len(nodes), saved

    results, nfes = [], []
    # 5 and 20 iterations: the map contracts by <= 0.5 per step, so 20 steps leave a residual ~1e-6, far from the
    # exact float64 fixed point that a long run can hit (one CPU reached it after 30 steps), and tol 1e-300
    # cannot stop either run early
    for iters in (5, 20):
        calls.update(grad=0, nograd=0)
        cfg = SolverConfig(solver='fixed_point', tol=1e-300, max_iter=iters)
        z_out, fst, _ = implicit_fixed_point(make_f(), torch.zeros(P.n, P.d, dtype=DT), cfg, cfg)
        assert calls['nograd'] == fst.nfe
        nfes.append(fst.nfe)
        assert calls['grad'] == 1  # a single differentiable application
        # the application's input is a detached leaf: no history of the solve
        leaves = [n.variable for n in _walk(z_out.grad_fn) if hasattr(n, 'variable')]
        z_leaf = [v for v in leaves if v.shape == (P.n, P.d)]
        assert len(z_leaf) == 1 and z_leaf[0].grad_fn is None
        results.append(count_graph(z_out))
    assert nfes == [5, 20]
    assert results[0] == results[1]


def _walk(root):
    seen, stack = [], [root]
    while stack:
        n = stack.pop()
        if n is None or n in seen:
            continue
        seen.append(n)
        stack.extend(m for m, _ in n.next_functions)
    return seen


# --------------------------------------------------------------------------- solvers
def test_anderson_faster_than_plain_dense():
    d = 50
    W = _sym_contraction(d, 0.95, seed=1)
    b = torch.randn(4, d, dtype=DT, generator=_gen(2))

    def f(z):
        return z @ W.T + b

    z0 = torch.zeros(4, d, dtype=DT)
    za, sa = anderson_solve(f, z0, tol=1e-6, max_iter=1000)
    zp, sp = fixed_point_solve(f, z0, tol=1e-6, max_iter=1000)
    assert bool(sa.converged.all()) and bool(sp.converged.all())
    assert int(sa.iterations.max()) * 2 < int(sp.iterations.min())
    assert float(_true_residual(f, za).max()) <= 1e-6
    assert torch.equal(sa.residual, torch.stack(sa.trace)[sa.iterations - 1, torch.arange(4)])


def _conv_problem():
    """f(z) = tanh(0.95 * S z / ||S|| + x) with S = C^T C (C: 3x3 conv), on a 1x1x16x16 image."""
    g = _gen(3)
    k = torch.randn(1, 1, 3, 3, dtype=DT, generator=g)

    def S(z):
        return F.conv_transpose2d(F.conv2d(z, k, padding=1), k, padding=1)

    v = torch.randn(1, 1, 16, 16, dtype=DT, generator=g)
    for _ in range(300):  # power iteration (S is symmetric PSD)
        v = S(v)
        v = v / v.norm()
    L = float((v * S(v)).sum())
    x = torch.randn(1, 1, 16, 16, dtype=DT, generator=g) * 0.5

    def f(z):
        return torch.tanh(0.95 / L * S(z) + x)
    return f


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
def test_anderson_faster_than_plain_conv(dtype):
    f64 = _conv_problem()

    def f(z):
        return f64(z.double()).to(dtype)

    z0 = torch.zeros(1, 1, 16, 16, dtype=dtype)
    tol = 1e-8 if dtype == torch.float64 else 1e-5
    za, sa = anderson_solve(f, z0, tol=tol, max_iter=1000)
    zp, sp = fixed_point_solve(f, z0, tol=tol, max_iter=1000)
    assert za.dtype == dtype and za.shape == z0.shape
    assert bool(sa.converged.all()) and bool(sp.converged.all())
    assert int(sa.iterations.max()) * 2 < int(sp.iterations.min())
    assert float(_true_residual(f, za).max()) <= tol


def test_per_sample_stopping_and_freezing():
    d = 30
    W = _sym_contraction(d, 1.0, seed=4)
    b = torch.randn(2, d, dtype=DT, generator=_gen(5))
    scale = torch.tensor([[0.97], [0.3]], dtype=DT)  # sample 0 hard, sample 1 easy
    inputs = []

    def f_batch(z):
        inputs.append(z.clone())
        return torch.tanh(scale * (z @ W.T) + b)

    def f_easy(z):
        return torch.tanh(scale[1:] * (z @ W.T) + b[1:])

    tol = 1e-8
    for solver in ('anderson', 'fixed_point'):
        inputs.clear()
        cfg = SolverConfig(solver=solver, tol=tol, max_iter=2000)
        z, st = solve(f_batch, torch.zeros(2, d, dtype=DT), cfg)
        hard, easy = st.iterations.tolist()
        assert bool(st.converged.all()) and easy < hard
        assert st.nfe == hard == len(inputs)
        assert float(st.residual.max()) <= tol
        assert float(_true_residual(f_batch, z).max()) <= tol
        # the easy sample is frozen after it converged: every later input row is identical
        frozen = inputs[easy - 1][1]
        for later in inputs[easy:]:
            assert torch.equal(later[1], frozen)
        assert torch.equal(z[1], frozen)
        # and it equals the solo solve of the easy sample
        z_solo, st_solo = solve(f_easy, torch.zeros(1, d, dtype=DT), cfg)
        assert int(st_solo.iterations[0]) == easy
        assert torch.allclose(z_solo[0], z[1], rtol=0, atol=1e-12)
        # the trace of a frozen sample stays at its final residual
        tr = torch.stack(st.trace)
        assert torch.all(tr[easy - 1:, 1] == st.residual[1])


@pytest.mark.parametrize('solver', ['anderson', 'fixed_point'])
def test_best_iterate_scripted(solver):
    """f(z) = z + s_k r_k with a scripted residual scale per call: the residual of
    iterate k is s_k whatever the solver does, so the best iterate is known."""
    scales = [3.0, 2.0, 0.5, 1.0, 4.0, 2.0, 1.5, 0.9]
    d = 8
    dirs = torch.randn(len(scales), 2, d, dtype=DT, generator=_gen(6))
    dirs = dirs / dirs.norm(dim=-1, keepdim=True)
    inputs = []

    def f(z):
        k = len(inputs)
        inputs.append(z.clone())
        return z + scales[k] * dirs[k]

    cfg = SolverConfig(solver=solver, tol=1e-3, max_iter=len(scales), stop='abs')
    z, st = solve(f, torch.zeros(2, d, dtype=DT), cfg)
    assert not bool(st.converged.any()) and st.nfe == len(scales)
    tr = torch.stack(st.trace)
    assert torch.allclose(tr[:, 0], torch.tensor(scales, dtype=DT))
    assert torch.equal(st.residual, tr.min(0).values)
    assert torch.equal(z, inputs[2])  # the iterate (input of f) at the best call
    assert st.iterations.tolist() == [len(scales)] * 2


def test_best_iterate_oscillating_anderson():
    """Non-converging (expansive, oscillating) map hitting max_iter: the returned iterate is the
    lowest-residual one, which here is not the last."""
    d = 50
    g = _gen(2)
    W = _scaled(torch.randn(d, d, dtype=DT, generator=g), 3.0)
    b = torch.randn(2, d, dtype=DT, generator=g)

    def f(z):
        return torch.tanh(z @ W.T + b)

    z, st = anderson_solve(f, torch.zeros(2, d, dtype=DT), tol=1e-8, max_iter=20)
    tr = torch.stack(st.trace)
    assert not bool(st.converged.any())
    assert bool((tr.argmin(0) != len(st.trace) - 1).any())  # precondition: best != last for some sample
    assert torch.equal(st.residual, tr.min(0).values)
    assert torch.allclose(_true_residual(f, z), st.residual, rtol=1e-12, atol=0)


def test_stop_modes_and_dispatch():
    d = 20
    W = _sym_contraction(d, 0.8, seed=7)
    b = 100.0 * torch.randn(3, d, dtype=DT, generator=_gen(8))  # large scale: rel and abs differ

    def f(z):
        return z @ W.T + b

    z0 = torch.zeros(3, d, dtype=DT)
    _, s_rel = solve(f, z0, SolverConfig(solver='fixed_point', stop='rel', tol=1e-6, max_iter=1000))
    _, s_abs = solve(f, z0, SolverConfig(solver='fixed_point', stop='abs', tol=1e-6, max_iter=1000))
    assert bool((s_rel.iterations < s_abs.iterations).all())
    z_a, s_a = solve(f, z0, SolverConfig(solver='anderson', stop='abs', tol=1e-6, max_iter=1000))
    assert float(_true_residual(f, z_a, 'abs').max()) <= 1e-6
    assert bool((s_a.iterations < s_abs.iterations).all())


# --------------------------------------------------------------------------- config
def test_config_defaults_and_from_dict():
    c = SolverConfig()
    assert (c.solver, c.m, c.lam, c.mixing, c.tol, c.max_iter, c.stop) == ('anderson', 5, 1e-4, 1.0, 1e-5, 100, 'rel')
    assert SolverConfig.from_dict(None) == c
    c2 = SolverConfig.from_dict({'solver': 'fixed_point', 'tol': 1e-3, 'max_iter': 7})
    assert c2.solver == 'fixed_point' and c2.tol == 1e-3 and c2.max_iter == 7 and c2.m == 5
    assert SolverConfig.from_dict(c2.to_dict()) == c2


def test_config_rejects_unknown_keys():
    with pytest.raises(KeyError) as ei:
        SolverConfig.from_dict({'max_iters': 10})
    msg = str(ei.value)
    assert 'max_iters' in msg
    for k in ('solver', 'm', 'lam', 'mixing', 'tol', 'max_iter', 'stop'):
        assert repr(k) in msg


def test_config_accepts_yaml11_exponent_strings():
    # YAML 1.1 (BasicSR's loader) reads `tol: 1e-5` (no dot) as the string '1e-5'
    assert SolverConfig.from_dict({'tol': '1e-5', 'lam': '1e-4'}).tol == 1e-5


@pytest.mark.parametrize('bad,field', [
    ({'m': 0}, 'm'),
    ({'tol': 0.0}, 'tol'),
    ({'tol': -1e-3}, 'tol'),
    ({'max_iter': 0}, 'max_iter'),
    ({'solver': 'broyden'}, 'solver'),
    ({'stop': 'relative'}, 'stop'),
    ({'lam': -1.0}, 'lam'),
    ({'mixing': 0.0}, 'mixing'),
    ({'m': 2.5}, 'm'),
    ({'tol': 'small'}, 'tol'),
])
def test_config_rejects_bad_values(bad, field):
    with pytest.raises((ValueError, TypeError), match=field):
        SolverConfig.from_dict(bad)


# --------------------------------------------------------------------------- Anderson vs. reference
def _anderson_solve_reference(f, z0, m=5, lam=1e-4, mixing=1.0, tol=1e-5, max_iter=100, stop='rel'):
    """The straightforward Anderson solver (as shipped before issue #8): Gram matrix and a float64
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
    z0 = 0 is already its fixed point (residual exactly 0 at step 1). n = 1: the hard sample. In float64 the non-contractive sample
    oscillates (does not converge); in float32 it is milder (s = 1.6, converges), since an
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
