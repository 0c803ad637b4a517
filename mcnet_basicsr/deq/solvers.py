"""Batched fixed-point solvers for ``z = f(z)`` with per-sample stopping.

Both solvers:

* treat dim 0 as the batch; everything else is flattened per sample;
* compute residuals per sample (``SolverConfig.stop``) and freeze a sample as
  soon as its residual is ``<= tol``: later iterations do not modify it (``f``
  is still evaluated on the whole batch, since ``f`` may close over batched
  tensors, but the frozen rows are fed back unchanged);
* return the BEST iterate per sample: the iterate ``z_k`` (the input of ``f``,
  not its image ``f(z_k)``) with the lowest residual ``||f(z_k) - z_k||`` seen;
  for a converged sample this is the iterate at which it converged. With
  ``with_image`` they also return ``f(z_k)`` as they evaluated it, so that a
  caller whose result is ``f(z*)`` (an implicit layer's output) does not
  evaluate ``f`` once more;
* run under ``torch.no_grad()``; work on any device and floating dtype;
* sync with the host once per iteration (the batch-wide early exit); all
  per-sample state (masks, counts, best iterate, Anderson history) stays on the
  device;
* can replay their iterations from CUDA graphs (``cuda_graph=True``), which
  removes the per-iteration Python and launch cost that dominates on small
  images (see ``_run``);
* take an ``observer(iteration, iterate, residual)`` called after every
  evaluation of ``f`` (see :data:`Observer`; None: nothing is called).
"""
from __future__ import annotations
from typing import Callable, Optional

import torch

from .config import SolverConfig, SolverStats

_D = SolverConfig()  # the single home of the defaults

# absolute floor added to the Anderson Gram diagonal (keeps it invertible when
# the residual history is exactly zero)
_LAM_FLOOR = 1e-30
# denominator guard of the relative residual
_REL_EPS = 1e-12

Fn = Callable[[torch.Tensor], torch.Tensor]
# observer(iteration, iterate, residual), called after each evaluation of f: ``iteration`` the number of evaluations
# so far (1-based, as SolverStats.iterations counts them), ``iterate`` the z (z0's shape) f was evaluated at,
# ``residual`` its (N,) residual as SolverStats.trace[iteration - 1] records it. Both tensors are the solver's own
# buffers, valid during the call: clone what is kept. Observed solves run eagerly (a CUDA-graph replay would skip it).
Observer = Callable[[int, torch.Tensor, torch.Tensor], None]


def _check_stop(stop: str) -> None:
    if stop not in ('rel', 'abs'):
        raise ValueError(f"stop must be 'rel' or 'abs', got {stop!r}")


def fixed_point_residual(fx: torch.Tensor, x: torch.Tensor, stop: str) -> torch.Tensor:
    """Per-sample residual of flat ``(N, D)`` tensors: ``||f(x) - x||``, divided by ``||f(x)||`` for ``stop='rel'``.
    The quantity the solvers compare with ``tol`` (and record in ``SolverStats.trace``)."""
    r = torch.linalg.vector_norm(fx - x, dim=1)
    if stop == 'rel':
        r = r / (torch.linalg.vector_norm(fx, dim=1) + _REL_EPS)
    return r


class _HostFlag:
    """Deferred device -> host read of a 0-dim bool tensor.

    ``post(t)`` enqueues the copy, ``get()`` returns its value. On CUDA the copy
    goes to pinned memory behind an event, so work enqueued between ``post`` and
    ``get`` is already in the GPU queue when the host blocks: the host waits only
    for the flag (not for that work) and the GPU keeps running while the host
    launches the next kernels. Elsewhere it is a plain ``bool()``.
    """

    def __init__(self, device: torch.device):
        self._cuda = device.type == 'cuda'
        if self._cuda:
            self._buf = torch.zeros((), dtype=torch.bool, pin_memory=True)
            self._event = torch.cuda.Event()
            self._device = device
        self._t = None

    def post(self, t: torch.Tensor) -> None:
        if self._cuda:
            self._buf.copy_(t, non_blocking=True)
            self._event.record(torch.cuda.current_stream(self._device))
        else:
            self._t = t

    def get(self) -> bool:
        if self._cuda:
            self._event.synchronize()
            return bool(self._buf)
        return bool(self._t)


class _Step:
    """The plain fixed-point step ``x <- f(x)``, and the interface of every step: how the next iterate
    is proposed from ``x`` and ``fx = f(x)`` (flat ``(N, D)``).

    ``setup(x)`` allocates the solver state once; ``__call__(k, h, x, fx)`` returns the proposal,
    where ``k`` is the 0-based iteration number as a 0-dim long device tensor (so that one captured
    CUDA graph serves every iteration) and ``h`` the python-int history length of this iteration.
    ``steady_from`` is the first iteration from which ``h`` no longer changes.
    """

    steady_from = 0

    def setup(self, x: torch.Tensor) -> None:
        pass

    def history(self, k: int) -> int:
        return 1

    def __call__(self, k: torch.Tensor, h: int, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        return fx


class _CaptureResources:
    """What every CUDA-graph capture on one device shares: one side stream and one private memory pool.

    A capture allocates from a private pool that only the graphs recorded into it can use, and PyTorch
    gives a pool's memory back only once all of its graphs are gone *and* the cache is emptied. A new pool
    per solve therefore kept every finished solve's memory reserved: training with graphs grew with every
    step until a capture ran out of memory. A new side stream per capture
    added a cuBLAS workspace each time (allocated inside the capture, cached per stream for the life of
    the process).

    Sharing one pool is safe here because the solves on a device run one after another and a solve's
    graphs are never replayed once it returns (PyTorch's condition for sharing: graphs are replayed in
    the order they were captured, never concurrently). The latest solve's graphs are kept because a pool
    whose graphs are all gone cannot be captured into again; :func:`release_cuda_graph_memory` drops
    them, so that ``torch.cuda.empty_cache()`` can return the pool.
    """

    def __init__(self, stream: torch.cuda.Stream):
        self.stream = stream
        self.pool = torch.cuda.graph_pool_handle()
        self.graphs = []  # the latest solve's graphs: they keep the pool alive between solves


_CAPTURE_RESOURCES = {}  # CUDA device index -> _CaptureResources
_CAPTURE_STREAMS = {}  # CUDA device index -> side stream, kept when the pool is released (its workspace stays)


def _cuda_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _capture_resources(device: torch.device) -> _CaptureResources:
    index = _cuda_index(device)
    res = _CAPTURE_RESOURCES.get(index)
    if res is None:
        stream = _CAPTURE_STREAMS.get(index)
        if stream is None:
            stream = _CAPTURE_STREAMS[index] = torch.cuda.Stream(torch.device('cuda', index))
        res = _CAPTURE_RESOURCES[index] = _CaptureResources(stream)
    return res


def release_cuda_graph_memory(device: Optional[torch.device] = None) -> None:
    """Let ``torch.cuda.empty_cache()`` return the memory that the solvers' CUDA graphs hold.

    Solves with ``cuda_graph`` share one memory pool per device, which stays reserved between solves
    (and is reused by the next one, whatever its size). Call this, then ``torch.cuda.empty_cache()``,
    to give that memory back: after an out-of-memory error, or before other GPU work that needs it.
    ``device``: one CUDA device (default: every device). The next solve with graphs starts a new pool.
    Not while a solve is running.
    """
    if device is None:
        _CAPTURE_RESOURCES.clear()
        return
    device = torch.device(device)
    if device.type == 'cuda':
        _CAPTURE_RESOURCES.pop(_cuda_index(device), None)


def _capture(fn, res: _CaptureResources):
    """Record ``fn()`` into a CUDA graph (not executed); returns ``(graph, fn's result)``.

    The low-level API instead of ``torch.cuda.graph``: that context runs ``gc.collect()`` and
    empties the allocator cache on entry, which would cost more than the graph saves on a small
    image. The capture goes on the device's side stream (``res``), which first waits for the
    current one.
    """
    graph = torch.cuda.CUDAGraph()
    side = res.stream
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        graph.capture_begin(pool=res.pool)
        try:
            out = fn()
        except Exception as err:
            try:
                graph.capture_end()
            except Exception:  # the capture was invalidated by the same failure
                pass
            raise RuntimeError(
                'CUDA-graph capture of the fixed-point iteration failed (see the error above): the map f must '
                'not synchronise with the host (.item(), float(tensor), .cpu(), data-dependent Python '
                "branches). Solve with cuda_graph: false, or mark the map with f.capturable = False.") from err
        graph.capture_end()
    torch.cuda.current_stream().wait_stream(side)
    return graph, out


def _run(f: Fn, z0: torch.Tensor, tol: float, max_iter: int, stop: str, step: _Step,
         cuda_graph: bool = False, with_image: bool = False, observer: Optional[Observer] = None):
    """Shared loop: evaluate ``f``, book-keep per sample, propose the next iterate with ``step``.

    Every piece of state lives in a tensor allocated up front and is updated in place, so the two
    halves of an iteration (evaluate + book-keeping; step) are the same code whether they run
    eagerly or are replayed from CUDA graphs. With ``cuda_graph`` (CUDA tensors only; ignored
    elsewhere), the first iteration runs eagerly (it warms up lazy work inside ``f``: caches,
    spectral-norm estimates, library handles, cuDNN plans for a new image size), every later
    evaluation of ``f`` replays one captured graph, and the step is replayed from a second graph
    once its history length stops changing (``step.steady_from``; eager before). Both are captured
    once per solve, into the device's shared memory pool (:class:`_CaptureResources`); this removes the
    Python and kernel-launch cost of every later iteration (the evaluation is most of it: on a small
    image the eager warm-up iterations cost about half of a whole solve when the evaluation was
    replayed only from ``steady_from`` on). ``f`` must then be
    capturable: no host synchronisation, no new tensors it closes over between calls. A function can
    opt out with the attribute ``f.capturable = False``.

    One host sync per iteration (the batch-wide "all converged" exit, needed to know whether to
    evaluate ``f`` again); the per-sample masks stay on the device. The flag is posted before the
    step is enqueued, so the GPU runs the step while the host waits for the flag.

    Returns ``(z, stats)``, or ``(z, f(z), stats)`` with ``with_image``: ``f(z)`` is kept with the best
    iterate during the iterations (one more copy per iteration instead of one more evaluation of ``f``)."""
    _check_stop(stop)
    if max_iter < 1:
        raise ValueError(f'max_iter must be >= 1, got {max_iter}')
    if not tol > 0:
        raise ValueError(f'tol must be > 0, got {tol}')
    shape = z0.shape
    n = shape[0]
    x = z0.detach().reshape(n, -1).clone()
    dev = x.device
    best_x = x.clone()
    best_fx = x.clone() if with_image else None  # f(best_x), from the evaluation that made it the best
    best_res = torch.full((n,), float('inf'), dtype=x.dtype, device=dev)
    converged = torch.zeros(n, dtype=torch.bool, device=dev)
    iterations = torch.full((n,), max_iter, dtype=torch.long, device=dev)
    trace = torch.empty((max_iter, n), dtype=x.dtype, device=dev)
    k_dev = torch.zeros((), dtype=torch.long, device=dev)  # the iteration number, on the device
    step.setup(x)
    all_done = _HostFlag(dev)

    def evaluate() -> torch.Tensor:
        fx = f(x.view(shape)).reshape(n, -1)
        if fx.shape != x.shape:
            raise ValueError(f'f changed the shape: {tuple(shape)} -> {tuple(fx.shape)}')
        res = fixed_point_residual(fx, x, stop)
        active = ~converged
        improve = active & (res < best_res)  # NaN residuals never improve
        best_x.copy_(torch.where(improve[:, None], x, best_x))
        if best_fx is not None:
            best_fx.copy_(torch.where(improve[:, None], fx, best_fx))
        best_res.copy_(torch.where(improve, res, best_res))
        newly = active & (res <= tol)
        converged.logical_or_(newly)
        iterations.copy_(torch.where(newly, k_dev + 1, iterations))
        # frozen samples repeat their final residual
        trace.index_copy_(0, k_dev.view(1), torch.where(active, res, best_res)[None])
        return fx

    def advance(h: int, fx: torch.Tensor) -> None:
        x.copy_(torch.where(converged[:, None], x, step(k_dev, h, x, fx)))
        k_dev.add_(1)

    g_eval = g_step = fx_static = res = None
    warmup = max(1, step.steady_from)  # the step is replayed from here on (its history length is fixed)
    use_graphs = (cuda_graph and observer is None and dev.type == 'cuda' and getattr(f, 'capturable', True)
                  and max_iter > warmup)
    nfe = 0
    for k in range(max_iter):
        h = step.history(k)
        if use_graphs and k >= 1:
            if g_eval is None:
                res = _capture_resources(dev)
                g_eval, fx_static = _capture(evaluate, res)
                res.graphs = [g_eval]  # the previous solve's graphs go only now: the pool stays alive
            g_eval.replay()
            fx = fx_static
        else:
            fx = evaluate()
        nfe += 1
        if observer is not None:
            observer(nfe, x.view(shape), trace[k])
        if k == max_iter - 1:
            break
        all_done.post(converged.all())
        if use_graphs and k >= warmup:
            if g_step is None:
                g_step, _ = _capture(lambda: advance(h, fx_static), res)
                res.graphs.append(g_step)
            g_step.replay()
        else:
            advance(h, fx)
        if all_done.get():
            break
    stats = SolverStats(iterations=iterations, residual=best_res, converged=converged,
                        trace=list(trace[:nfe].unbind(0)), nfe=nfe, cuda_graph=g_eval is not None)
    if best_fx is None:
        return best_x.reshape(shape), stats
    never = ~torch.isfinite(best_res)  # every residual NaN: best_x is z0, whose image was never kept
    if bool(never.any()):
        best_fx = torch.where(never[:, None], f(best_x.view(shape)).reshape(n, -1), best_fx)
    return best_x.reshape(shape), best_fx.reshape(shape), stats


@torch.no_grad()
def fixed_point_solve(f: Fn, z0: torch.Tensor, tol: float = _D.tol, max_iter: int = _D.max_iter,
                      stop: str = _D.stop, cuda_graph: bool = _D.cuda_graph, with_image: bool = False,
                      observer: Optional[Observer] = None):
    """Plain iteration ``z <- f(z)`` with per-sample stopping.

    Returns ``(z, stats)``: ``z`` has ``z0``'s shape and holds, per sample, the
    iterate with the lowest residual (see module docstring); with ``with_image``
    ``(z, f(z), stats)``. ``cuda_graph``: see
    :class:`~mcnet_basicsr.deq.config.SolverConfig`.
    """
    return _run(f, z0, tol, max_iter, stop, _Step(), cuda_graph, with_image, observer)


class _AndersonStep(_Step):
    """Anderson type II step over a ring buffer of the last ``m`` iterates (see :func:`anderson_solve`)."""

    def __init__(self, m: int, lam: float, mixing: float):
        self.m, self.lam, self.mixing = m, lam, mixing
        self.steady_from = m - 1  # from then on the history is full: h = m

    def history(self, k: int) -> int:
        return min(k + 1, self.m)

    def setup(self, x: torch.Tensor) -> None:
        n, d = x.shape
        m = self.m
        self.X = x.new_zeros((n, m, d))                          # iterates
        self.F = x.new_zeros((n, m, d))                          # their images
        self.G = x.new_zeros((n, m, d), dtype=torch.float64)     # residuals, float64
        self.gram = x.new_zeros((n, m, m), dtype=torch.float64)  # G G^T, kept up to date
        self.ones = x.new_ones((n, m, 1), dtype=torch.float64)

    def __call__(self, k: torch.Tensor, h: int, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        X, F, G, gram, mixing = self.X, self.F, self.G, self.gram, self.mixing
        slot = torch.remainder(k, self.m).view(1)  # ring buffer; the weights do not depend on the order
        X.index_copy_(1, slot, x[:, None])
        F.index_copy_(1, slot, fx[:, None])
        g = (fx - x).to(torch.float64)  # computed in x.dtype, stored widened to float64
        G.index_copy_(1, slot, g[:, None])
        # new row/column of the Gram matrix (unused slots are zero rows -> zero entries)
        row = torch.bmm(G, g.unsqueeze(2))                          # (N, m, 1)
        gram.index_copy_(1, slot, row.transpose(1, 2))
        gram.index_copy_(2, slot, row)
        if h == 1:
            return fx if mixing == 1.0 else mixing * fx + (1.0 - mixing) * x
        # while the history fills up (h < m), slots 0..h-1 are the filled ones
        A = gram[:, :h, :h].clone()
        diag = A.diagonal(dim1=1, dim2=2)                           # view: ||g_i||^2
        reg = self.lam * diag.sum(dim=1, keepdim=True) + _LAM_FLOOR  # (N, 1) = lam ||G||_F^2 + floor
        diag.add_(reg)
        w, info = torch.linalg.solve_ex(A, self.ones[:, :h])       # no error check, no sync
        alpha = (w / w.sum(dim=1, keepdim=True)).transpose(1, 2).to(x.dtype)  # (N, 1, h)
        new = torch.bmm(alpha, F[:, :h]).squeeze(1)
        if mixing != 1.0:
            new = mixing * new + (1.0 - mixing) * torch.bmm(alpha, X[:, :h]).squeeze(1)
        # a singular / non-finite LS solve must not poison a sample: fall back to plain step
        bad = (info != 0) | ~torch.isfinite(new).all(dim=1)
        return torch.where(bad[:, None], fx, new)


@torch.no_grad()
def anderson_solve(f: Fn, z0: torch.Tensor, m: int = _D.m, lam: float = _D.lam, mixing: float = _D.mixing,
                   tol: float = _D.tol, max_iter: int = _D.max_iter, stop: str = _D.stop,
                   cuda_graph: bool = _D.cuda_graph, with_image: bool = False, observer: Optional[Observer] = None):
    """Anderson acceleration (type II) for ``z = f(z)``, per-sample.

    With the last ``n = min(k+1, m)`` iterates ``x_i`` and images ``f(x_i)``,
    residuals ``g_i = f(x_i) - x_i`` (rows of ``G``), each sample solves in
    float64 ``min_a ||G^T a||^2 + reg ||a||^2`` s.t. ``sum(a) = 1`` with
    ``reg = lam * ||G||_F^2 + 1e-30`` (i.e. ``a ∝ (G G^T + reg I)^{-1} 1``) and
    moves to ``x = mixing * sum a_i f(x_i) + (1 - mixing) * sum a_i x_i``.
    A sample whose small solve fails (singular / non-finite) takes the plain
    step ``f(x)`` instead.

    The float64 Gram matrix ``G G^T`` is cached and only the new residual's
    row/column is computed each iteration (``||G||_F^2`` is its trace); the
    small solves are one batched ``linalg.solve_ex`` and nothing in the step
    syncs with the host. The ring-buffer slot is computed on the device, so with
    ``cuda_graph`` one captured graph serves every iteration once the history is
    full (see :class:`~mcnet_basicsr.deq.config.SolverConfig`).

    Returns ``(z, stats)``: ``z`` has ``z0``'s shape and holds, per sample, the
    iterate ``z_k`` with the lowest residual (not its image ``f(z_k)``); with
    ``with_image``, ``(z, f(z), stats)``.
    """
    if m < 1:
        raise ValueError(f'm must be >= 1, got {m}')
    if lam < 0:
        raise ValueError(f'lam must be >= 0, got {lam}')
    if not 0 < mixing <= 1:
        raise ValueError(f'mixing must be in (0, 1], got {mixing}')
    return _run(f, z0, tol, max_iter, stop, _AndersonStep(m, lam, mixing), cuda_graph, with_image, observer)


def solve(f: Fn, z0: torch.Tensor, config: Optional[SolverConfig] = None, with_image: bool = False,
          observer: Optional[Observer] = None):
    """Dispatch on ``config.solver`` (default config when ``None``): ``(z, stats)``, or ``(z, f(z), stats)`` with
    ``with_image``; ``observer`` (:data:`Observer`) sees every iteration."""
    c = SolverConfig() if config is None else config
    if c.solver == 'anderson':
        return anderson_solve(f, z0, m=c.m, lam=c.lam, mixing=c.mixing, tol=c.tol, max_iter=c.max_iter, stop=c.stop,
                              cuda_graph=c.cuda_graph, with_image=with_image, observer=observer)
    if c.solver == 'fixed_point':
        return fixed_point_solve(f, z0, tol=c.tol, max_iter=c.max_iter, stop=c.stop, cuda_graph=c.cuda_graph,
                                 with_image=with_image, observer=observer)
    raise ValueError(f"unknown solver {c.solver!r}; expected 'anderson' or 'fixed_point'")
