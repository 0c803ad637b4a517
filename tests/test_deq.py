"""Tests of mcnet_basicsr.deq (CPU, float64 where precision matters)."""
import gc
import weakref

import pytest
import torch
import torch.nn.functional as F

from mcnet_basicsr.deq import SolverConfig, SolverStats, anderson_solve, fixed_point_solve, implicit_fixed_point, solve

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
    z_out, fst, holder = implicit_fixed_point(P.f_of(W, P.U, P.x, P.c), torch.zeros(P.n, P.d, dtype=DT), cfg,
                                              SolverConfig(solver='fixed_point', tol=1e-9, max_iter=300))
    assert isinstance(fst, SolverStats) and holder.stats is None and holder.calls == 0
    assert z_out.grad_fn is not None and holder.enabled
    (z_out * P.R).sum().backward()
    assert isinstance(holder.stats, SolverStats) and holder.calls == 1
    assert bool(holder.stats.converged.all())
    s = holder.stats.summary()
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


@pytest.mark.parametrize('solver', ['anderson', 'fixed_point'])
def test_with_image_returns_f_at_the_returned_iterate(solver):
    """``with_image``: f at the returned iterate as the solver evaluated it (bit for bit what f gives there), per
    sample: one frozen early, one whose best iterate is not its last (an expansive map); no extra evaluation."""
    d = 30
    W = _sym_contraction(d, 1.0, seed=4)
    W_expansive = _scaled(torch.randn(d, d, dtype=DT, generator=_gen(2)), 3.0)
    b = torch.randn(3, d, dtype=DT, generator=_gen(5))
    calls = []

    def f(z):
        calls.append(1)
        out = torch.tanh(torch.tensor([[0.97], [0.3], [0.0]], dtype=DT) * (z @ W.T) + b)
        out[2:] = torch.tanh(z[2:] @ W_expansive.T + b[2:])
        return out

    cfg = SolverConfig(solver=solver, tol=1e-8, max_iter=30)
    z, fz, st = solve(f, torch.zeros(3, d, dtype=DT), cfg, with_image=True)
    assert len(calls) == st.nfe == 30
    assert bool(st.converged[1]) and int(st.iterations[1]) < st.nfe  # frozen early
    assert int(torch.stack(st.trace)[:, 2].argmin()) < st.nfe - 1  # best iterate before the last
    assert torch.equal(fz, f(z))
    z_plain, st_plain = solve(f, torch.zeros(3, d, dtype=DT), cfg)
    assert torch.equal(z, z_plain) and torch.equal(st.iterations, st_plain.iterations)


def test_with_image_when_no_residual_was_finite():
    """A sample whose every residual is NaN keeps z0 as its iterate; its image is then f(z0) computed after the
    solve (the iterations never kept one), the other samples' images are the solver's."""
    def f(z):
        out = 0.5 * z + 1.0
        out[0] = float('nan')
        return out

    z, fz, st = anderson_solve(f, torch.zeros(2, 4, dtype=DT), tol=1e-10, max_iter=50, with_image=True)
    assert torch.equal(z[0], torch.zeros(4, dtype=DT)) and bool(torch.isnan(fz[0]).all())
    assert bool(st.converged[1]) and torch.equal(fz[1], f(z)[1])


def test_implicit_without_grad_evaluates_f_only_in_the_solve():
    """Under no_grad the layer's output f(z*) is the solver's own evaluation at z*: nfe evaluations in all (with grad
    one more, differentiable), and the same output as one more application of f."""
    P = _Problem()
    calls = []
    base = P.f_of(P.W, P.U, P.x, P.c)

    def f(z):
        calls.append(1)
        return base(z)

    cfg = SolverConfig(solver='anderson', tol=1e-10, max_iter=100)
    with torch.no_grad():
        z_out, st, holder = implicit_fixed_point(f, torch.zeros(P.n, P.d, dtype=DT), cfg)
    assert len(calls) == st.nfe and not holder.enabled
    z_star, _ = solve(f, torch.zeros(P.n, P.d, dtype=DT), cfg)
    assert torch.equal(z_out, f(z_star))


# --------------------------------------------------------------------------- contraction rate


def test_spectral_rate_is_each_samples_dominant_eigenvalue_and_differentiable():
    """On an affine map per sample (symmetric, largest eigenvalue 0.5 and 0.95) the rate is that eigenvalue, its
    gradient to a scale of the map is the eigenvalue (rate = s * rho), and nothing flows to z."""
    from mcnet_basicsr.deq import spectral_rate
    mats = torch.stack([_sym_contraction(30, 0.5, 1), _sym_contraction(30, 0.95, 2)])
    scale = torch.tensor(1.0, dtype=DT, requires_grad=True)
    shift = torch.randn(2, 30, dtype=DT, generator=_gen(3))

    def f(z):
        return scale * torch.einsum('nij,nj->ni', mats, z) + shift

    z = torch.randn(2, 30, dtype=DT, generator=_gen(4), requires_grad=True)
    rate, v = spectral_rate(f, z, steps=400, generator=_gen(5))
    assert torch.allclose(rate, torch.tensor([0.5, 0.95], dtype=DT), atol=1e-6), rate
    assert torch.allclose(v.pow(2).mean(dim=1), torch.ones(2, dtype=DT))
    rate.sum().backward()
    assert abs(float(scale.grad) - 1.45) < 1e-5
    assert z.grad is None
    few, _ = spectral_rate(f, z, steps=2, generator=_gen(5))
    assert (few <= torch.tensor([0.5, 0.95], dtype=DT) + 1e-9).all()  # short power iteration: from below


def test_jacobian_vector_matches_autograd_on_a_nonlinear_map():
    from mcnet_basicsr.deq import jacobian_vector
    w = torch.randn(20, 20, dtype=DT, generator=_gen(6)) / 5

    def f(z):
        return torch.tanh(z @ w.T) + 0.1 * z**2

    z = torch.randn(3, 20, dtype=DT, generator=_gen(7))
    v = torch.randn(3, 20, dtype=DT, generator=_gen(8))
    _, exact = torch.autograd.functional.jvp(f, z, v)
    assert torch.allclose(jacobian_vector(f, z, v, 1e-5), exact, atol=1e-8)


def test_contraction_loss_is_zero_below_its_target_and_pulls_the_rate_down_above():
    from mcnet_basicsr.losses.contraction_loss import ContractionLoss
    q, _ = torch.linalg.qr(torch.randn(30, 30, dtype=DT, generator=_gen(9)))
    ev = torch.cat([torch.tensor([0.8], dtype=DT), 0.4 * torch.rand(29, dtype=DT, generator=_gen(11))])
    # one eigenvalue 0.8, the others at most 0.4: the loss's power iteration (from an unseeded start) finds it
    mat = (q @ torch.diag(ev) @ q.T)[None]
    scale = torch.tensor(1.0, dtype=DT, requires_grad=True)

    def f(z):
        return scale * torch.einsum('nij,nj->ni', mat, z)

    z = torch.randn(1, 30, dtype=DT, generator=_gen(10))
    loss, rate = ContractionLoss(loss_weight=2.0, target=0.9, steps=100)(f, z)
    assert float(loss.detach()) == 0 and abs(float(rate) - 0.8) < 1e-6
    loss, rate = ContractionLoss(loss_weight=2.0, target=0.5, steps=100)(f, z)
    assert abs(float(loss) - 2.0 * 0.3**2) < 1e-6
    loss.backward()
    assert abs(float(scale.grad) - 2.0 * 2 * 0.3 * 0.8) < 1e-5  # d/ds of w (s rho - t)^2 at s = 1
    with pytest.raises(ValueError, match='target'):
        ContractionLoss(target=0)
