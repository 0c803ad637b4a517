"""The solvers' CUDA-graph path (``SolverConfig.cuda_graph``).

Replaying captured iterations must give the eager loop's answer: the same per-sample stopping
iterations, the same best iterates (to rounding), the same traces. The CUDA tests skip on a machine
without a GPU; the rules that hold everywhere (ignored off CUDA, forward only, the MCNet map's
``capturable`` flag) are checked on the CPU.
"""
import pytest
import torch

from mcnet_basicsr.deq import (SolverConfig, anderson_solve, fixed_point_solve, implicit_fixed_point,
                               release_cuda_graph_memory, solve)
from test_anderson_reference import _mixed_difficulty_map

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason='needs a CUDA GPU (the CUDA-graph path only exists there)')


def _compare(z_g, st_g, z_e, st_e, rtol):
    assert st_g.iterations.tolist() == st_e.iterations.tolist()
    assert st_g.converged.tolist() == st_e.converged.tolist()
    assert st_g.nfe == st_e.nfe == len(st_g.trace) == len(st_e.trace)
    n = z_e.shape[0]
    a, b = z_g.reshape(n, -1).double(), z_e.reshape(n, -1).double()
    err = torch.linalg.vector_norm(a - b, dim=1)
    assert bool((err <= rtol * torch.linalg.vector_norm(b, dim=1) + 1e-30).all()), err
    for t_g, t_e in zip(st_g.trace, st_e.trace):
        assert torch.allclose(t_g, t_e, rtol=1e-4, atol=1e-12)


# ------------------------------------------------------------------------------------------- CPU
def test_config_field_and_validation():
    assert SolverConfig().cuda_graph is False
    assert SolverConfig.from_dict({'cuda_graph': True}).cuda_graph is True
    with pytest.raises(TypeError, match='cuda_graph'):
        SolverConfig.from_dict({'cuda_graph': 'yes'})
    c = SolverConfig(tol=1e-4, m=3, cuda_graph=True)
    b = c.for_backward()
    assert b.cuda_graph is False and b.tol == 1e-4 and b.m == 3 and c.cuda_graph is True


@pytest.mark.parametrize('solver', ['anderson', 'fixed_point'])
def test_ignored_off_cuda(solver):
    """On the CPU the flag changes nothing: bit-identical iterates and statistics."""
    f = _mixed_difficulty_map(5, 24, torch.float64, seed=3)
    z0 = torch.zeros(5, 24, dtype=torch.float64)
    z_e, st_e = solve(f, z0, SolverConfig(solver=solver, tol=1e-9, max_iter=40))
    z_g, st_g = solve(f, z0, SolverConfig(solver=solver, tol=1e-9, max_iter=40, cuda_graph=True))
    assert torch.equal(z_g, z_e) and torch.equal(st_g.iterations, st_e.iterations)
    assert st_g.cuda_graph is False and st_e.cuda_graph is False  # the stats say what was done
    assert all(torch.equal(a, b) for a, b in zip(st_g.trace, st_e.trace))


def test_backward_solve_refuses_cuda_graph_and_does_not_inherit_it():
    W = torch.randn(6, 6, dtype=torch.float64) * 0.1
    theta = torch.randn(2, 6, dtype=torch.float64, requires_grad=True)

    def f(z):
        return torch.tanh(z @ W.T + theta)

    z0 = torch.zeros(2, 6, dtype=torch.float64)
    fwd = SolverConfig(tol=1e-10, max_iter=100, cuda_graph=True)
    with pytest.raises(ValueError, match='forward solves only'):
        implicit_fixed_point(f, z0, fwd, SolverConfig(cuda_graph=True))
    z, _, holder = implicit_fixed_point(f, z0, fwd)  # backward defaults to forward, less the graphs
    z.sum().backward()
    assert holder.calls == 1 and theta.grad is not None and torch.isfinite(theta.grad).all()


def test_mcnet_map_capturable_only_for_exact_consistency():
    from mcnet_basicsr.archs.mcnet_arch import MCNetArch

    def build(**kw):
        return MCNetArch(backbone={'net': {'type': 'SRCNN'}, 'input': 'upsampled', 'channels': 1},
                         operator={'type': 'bicubic', 'scale': 2}, **kw)

    w, b = torch.rand(1, 1, 16, 16), torch.rand(1, 1, 8, 8)
    assert build().fixed_point_problem(w, b)[0].capturable is True
    assert build(eps_rms=0.01).fixed_point_problem(w, b)[0].capturable is False
    with pytest.raises(ValueError, match='forward solve only'):
        build(settings={'solver': {'forward': {'cuda_graph': True}, 'backward': {'cuda_graph': True}}})
    settings = build(settings={'solver': {'forward': {'cuda_graph': True, 'tol': 1e-4}}}).layer_settings
    assert settings.forward_solver.cuda_graph and not settings.backward_solver.cuda_graph
    assert settings.backward_solver.tol == 1e-4  # the rest is inherited


# ------------------------------------------------------------------------------------------ CUDA
@needs_cuda
@pytest.mark.parametrize('n', [1, 5])
@pytest.mark.parametrize('m', [1, 2, 5])
@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
def test_anderson_graph_matches_eager(n, m, dtype):
    """Mixed stopping times in one batch (converged at step 1, hard, oscillating in float64)."""
    d = 24
    fc = _mixed_difficulty_map(n, d, dtype, seed=10 * n + m, device='cuda')
    tol = 1e-9 if dtype == torch.float64 else 1e-5
    kw = dict(m=m, lam=1e-4, tol=tol, max_iter=40)
    z0 = torch.zeros(n, d, dtype=dtype, device='cuda')
    z_e, st_e = anderson_solve(fc, z0, **kw)
    z_g, st_g = anderson_solve(fc, z0, cuda_graph=True, **kw)
    _compare(z_g, st_g, z_e, st_e, rtol=1e-9 if dtype == torch.float64 else 1e-5)
    assert st_g.cuda_graph is (st_e.nfe > max(1, m - 1)) and st_e.cuda_graph is False


@needs_cuda
@pytest.mark.parametrize('solver', [anderson_solve, fixed_point_solve])
def test_graph_keeps_the_image_of_the_returned_iterate(solver):
    """``with_image`` with replayed iterations: the image kept inside the graphs is f at the returned iterate, and
    it is the eager loop's."""
    f = _mixed_difficulty_map(5, 24, torch.float64, seed=3, device='cuda')
    z0 = torch.zeros(5, 24, dtype=torch.float64, device='cuda')
    z_g, fz_g, st_g = solver(f, z0, tol=1e-9, max_iter=40, cuda_graph=True, with_image=True)
    z_e, fz_e, st_e = solver(f, z0, tol=1e-9, max_iter=40, with_image=True)
    assert st_g.cuda_graph
    _compare(z_g, st_g, z_e, st_e, rtol=1e-9)
    assert torch.allclose(fz_g, f(z_g), rtol=1e-12, atol=1e-14)
    assert torch.allclose(fz_g, fz_e, rtol=1e-9, atol=1e-14)


@needs_cuda
def test_graph_with_convolutions_and_fixed_point():
    """A DnCNN map on an image batch, Anderson and plain iteration."""
    from mcnet_basicsr.archs.dncnn_arch import DnCNN

    torch.manual_seed(0)
    net = DnCNN(depth=6).cuda().eval()
    y = torch.rand(3, 1, 40, 48, device='cuda')

    def f(z):
        return 0.5 * (net(z) + y)

    z0 = torch.zeros_like(y)
    for solver in (anderson_solve, fixed_point_solve):
        with torch.no_grad():
            z_e, st_e = solver(f, z0, tol=1e-5, max_iter=60)
            z_g, st_g = solver(f, z0, tol=1e-5, max_iter=60, cuda_graph=True)
        _compare(z_g, st_g, z_e, st_e, rtol=1e-5)
        assert bool(st_g.converged.all())


@needs_cuda
def test_uncapturable_map_runs_eagerly():
    """``f.capturable = False`` (a host sync inside f) must not be captured, and gives the eager answer."""
    y = torch.rand(2, 64, device='cuda', dtype=torch.float64)

    def f(z):
        float(z.sum())  # host sync: would break a capture
        return 0.5 * torch.tanh(z) + y

    f.capturable = False
    z_e, st_e = anderson_solve(f, torch.zeros_like(y), tol=1e-10, max_iter=50)
    z_g, st_g = anderson_solve(f, torch.zeros_like(y), tol=1e-10, max_iter=50, cuda_graph=True)
    _compare(z_g, st_g, z_e, st_e, rtol=1e-12)
    assert st_g.cuda_graph is False


@needs_cuda
def test_mcnet_forward_with_graphs_matches_eager():
    from mcnet_basicsr.archs.mcnet_arch import MCNetArch

    torch.manual_seed(0)
    net = MCNetArch(backbone={'net': {'type': 'SRCNN'}, 'input': 'upsampled', 'channels': 1},
                    operator={'type': 'bicubic', 'scale': 2}).cuda().eval()
    lr = torch.rand(2, 3, 24, 20, device='cuda')
    with torch.no_grad():
        out_e, info_e = net.run(lr, settings={'solver': {'forward': {'tol': 1e-5, 'max_iter': 80}}})
        out_g, info_g = net.run(lr, settings={'solver': {'forward': {'tol': 1e-5, 'max_iter': 80, 'cuda_graph': True}}})
    st_e, st_g = info_e['forward'], info_g['forward']
    # the graphs ran once the Anderson history is full (m = 5: from the fifth evaluation on)
    assert st_g.cuda_graph is (st_e.nfe > 4) and st_e.cuda_graph is False
    assert st_g.iterations.tolist() == st_e.iterations.tolist()
    assert torch.allclose(out_g, out_e, rtol=0, atol=1e-5)


def test_release_cuda_graph_memory_is_harmless_without_graphs():
    release_cuda_graph_memory()
    release_cuda_graph_memory(torch.device('cpu'))
    release_cuda_graph_memory('cpu')


@needs_cuda
def test_solves_with_graphs_reuse_one_memory_pool():
    """Solves one after another capture into one pool per device: the reserved memory stops growing
    after the first solve of a size (a pool per solve kept every finished solve's memory), and it is
    given back once released."""
    from mcnet_basicsr.archs.dncnn_arch import DnCNN

    torch.manual_seed(0)
    net = DnCNN(depth=6).cuda().eval()

    def run(side, seed):
        y = torch.rand(4, 1, side, side, device='cuda', generator=torch.Generator('cuda').manual_seed(seed))
        with torch.no_grad():
            z, st = anderson_solve(lambda z: 0.5 * (net(z) + y), torch.zeros_like(y), tol=1e-5, max_iter=40,
                                   cuda_graph=True)
        assert st.cuda_graph
        return z

    release_cuda_graph_memory()
    torch.cuda.empty_cache()
    idle = torch.cuda.memory_reserved()
    run(96, 0), run(64, 1)
    torch.cuda.synchronize()
    after_first = torch.cuda.memory_reserved()
    assert after_first > idle
    for seed in range(2, 12):  # the same sizes again, and a smaller one: all served by the pool
        run((96, 64, 48)[seed % 3], seed)
    torch.cuda.synchronize()
    assert torch.cuda.memory_reserved() == after_first
    release_cuda_graph_memory('cuda')
    torch.cuda.empty_cache()
    released = torch.cuda.memory_reserved()
    assert released < after_first
    run(96, 12)  # a new pool serves the next solves, and no more than the first one took
    run(96, 13)
    torch.cuda.synchronize()
    assert torch.cuda.memory_reserved() - released <= after_first - idle
