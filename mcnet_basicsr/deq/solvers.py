"""Batched fixed-point solvers for ``z = f(z)`` with per-sample stopping.

Both solvers:

* treat dim 0 as the batch; everything else is flattened per sample;
* compute residuals per sample (``SolverConfig.stop``) and freeze a sample as
  soon as its residual is ``<= tol``: later iterations do not modify it (``f``
  is still evaluated on the whole batch, since ``f`` may close over batched
  tensors, but the frozen rows are fed back unchanged);
* return the BEST iterate per sample: the iterate ``z_k`` (the input of ``f``,
  not its image ``f(z_k)``) with the lowest residual ``||f(z_k) - z_k||`` seen;
  for a converged sample this is the iterate at which it converged;
* run under ``torch.no_grad()``; work on any device and floating dtype;
* sync with the host once per iteration (the batch-wide early exit); all
  per-sample state (masks, counts, best iterate, Anderson history) stays on the
  device.
"""
from __future__ import annotations

from typing import Callable, Optional, Tuple

import torch

from .config import SolverConfig, SolverStats

_D = SolverConfig()  # the single home of the defaults

# absolute floor added to the Anderson Gram diagonal (keeps it invertible when
# the residual history is exactly zero)
_LAM_FLOOR = 1e-30
# denominator guard of the relative residual
_REL_EPS = 1e-12

Fn = Callable[[torch.Tensor], torch.Tensor]


def _check_stop(stop: str) -> None:
    if stop not in ('rel', 'abs'):
        raise ValueError(f"stop must be 'rel' or 'abs', got {stop!r}")


def _residual(fx: torch.Tensor, x: torch.Tensor, stop: str) -> torch.Tensor:
    """Per-sample residual of flat ``(N, D)`` tensors."""
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


def _run(f: Fn, z0: torch.Tensor, tol: float, max_iter: int, stop: str, step) -> Tuple[torch.Tensor, SolverStats]:
    """Shared loop. ``step(k, x, fx) -> x_new`` proposes the next iterate
    (flat ``(N, D)``); rows of frozen samples are discarded afterwards.

    One host sync per iteration (the batch-wide "all converged" exit, needed to
    know whether to evaluate ``f`` again); the per-sample masks stay on the
    device. The step is enqueued before that sync (it only touches solver state,
    so running it once more after the last iteration changes nothing)."""
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
    best_res = torch.full((n,), float('inf'), dtype=x.dtype, device=dev)
    converged = torch.zeros(n, dtype=torch.bool, device=dev)
    iterations = torch.full((n,), max_iter, dtype=torch.long, device=dev)
    all_done = _HostFlag(dev)
    trace = []
    nfe = 0
    for k in range(max_iter):
        fx = f(x.reshape(shape)).reshape(n, -1)
        nfe += 1
        if fx.shape != x.shape:
            raise ValueError(f'f changed the shape: {tuple(shape)} -> {tuple(fx.shape)}')
        res = _residual(fx, x, stop)
        active = ~converged
        improve = active & (res < best_res)  # NaN residuals never improve
        best_x = torch.where(improve[:, None], x, best_x)
        best_res = torch.where(improve, res, best_res)
        newly = active & (res <= tol)
        converged = converged | newly
        iterations = iterations.masked_fill(newly, k + 1)
        # frozen samples repeat their final residual
        trace.append(torch.where(active, res, best_res))
        if k == max_iter - 1:
            break
        all_done.post(converged.all())
        x = torch.where(converged[:, None], x, step(k, x, fx))
        if all_done.get():
            break
    stats = SolverStats(iterations=iterations, residual=best_res, converged=converged, trace=trace, nfe=nfe)
    return best_x.reshape(shape), stats


@torch.no_grad()
def fixed_point_solve(f: Fn, z0: torch.Tensor, tol: float = _D.tol, max_iter: int = _D.max_iter,
                      stop: str = _D.stop) -> Tuple[torch.Tensor, SolverStats]:
    """Plain iteration ``z <- f(z)`` with per-sample stopping.

    Returns ``(z, stats)``: ``z`` has ``z0``'s shape and holds, per sample, the
    iterate with the lowest residual (see module docstring).
    """
    return _run(f, z0, tol, max_iter, stop, lambda k, x, fx: fx)


@torch.no_grad()
def anderson_solve(f: Fn, z0: torch.Tensor, m: int = _D.m, lam: float = _D.lam, mixing: float = _D.mixing,
                   tol: float = _D.tol, max_iter: int = _D.max_iter,
                   stop: str = _D.stop) -> Tuple[torch.Tensor, SolverStats]:
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
    syncs with the host.

    Returns ``(z, stats)``: ``z`` has ``z0``'s shape and holds, per sample, the
    iterate ``z_k`` with the lowest residual (not its image ``f(z_k)``).
    """
    if m < 1:
        raise ValueError(f'm must be >= 1, got {m}')
    if lam < 0:
        raise ValueError(f'lam must be >= 0, got {lam}')
    if not 0 < mixing <= 1:
        raise ValueError(f'mixing must be in (0, 1], got {mixing}')
    state = {}

    def step(k, x, fx):
        if not state:
            n, d = x.shape
            state['X'] = x.new_zeros((n, m, d))                  # iterates
            state['F'] = x.new_zeros((n, m, d))                  # their images
            state['G'] = x.new_zeros((n, m, d), dtype=torch.float64)  # residuals, float64
            state['gram'] = x.new_zeros((n, m, m), dtype=torch.float64)
            state['ones'] = x.new_ones((n, m, 1), dtype=torch.float64)
        X, F, G, gram = state['X'], state['F'], state['G'], state['gram']
        slot = k % m  # ring buffer; the weights do not depend on the order
        X[:, slot] = x
        F[:, slot] = fx
        g = G[:, slot]
        torch.sub(fx, x, out=g)  # computed in x.dtype (as fx - x), stored widened to float64
        # new row/column of the Gram matrix (unused slots are zero rows -> zero entries)
        row = torch.bmm(G, g.unsqueeze(2)).squeeze(2)               # (N, m)
        gram[:, slot, :] = row
        gram[:, :, slot] = row
        h = min(k + 1, m)
        if h == 1:
            return fx if mixing == 1.0 else mixing * fx + (1.0 - mixing) * x
        A = gram[:, :h, :h].clone()
        diag = A.diagonal(dim1=1, dim2=2)                           # view: ||g_i||^2
        reg = lam * diag.sum(dim=1, keepdim=True) + _LAM_FLOOR      # (N, 1) = lam ||G||_F^2 + floor
        diag.add_(reg)
        w, info = torch.linalg.solve_ex(A, state['ones'][:, :h])    # no error check, no sync
        alpha = (w / w.sum(dim=1, keepdim=True)).transpose(1, 2).to(x.dtype)  # (N, 1, h)
        new = torch.bmm(alpha, F[:, :h]).squeeze(1)
        if mixing != 1.0:
            new = mixing * new + (1.0 - mixing) * torch.bmm(alpha, X[:, :h]).squeeze(1)
        # a singular / non-finite LS solve must not poison a sample: fall back to plain step
        bad = (info != 0) | ~torch.isfinite(new).all(dim=1)
        return torch.where(bad[:, None], fx, new)

    return _run(f, z0, tol, max_iter, stop, step)


def solve(f: Fn, z0: torch.Tensor, config: Optional[SolverConfig] = None) -> Tuple[torch.Tensor, SolverStats]:
    """Dispatch on ``config.solver`` (default config when ``None``)."""
    c = SolverConfig() if config is None else config
    if c.solver == 'anderson':
        return anderson_solve(f, z0, m=c.m, lam=c.lam, mixing=c.mixing, tol=c.tol, max_iter=c.max_iter, stop=c.stop)
    if c.solver == 'fixed_point':
        return fixed_point_solve(f, z0, tol=c.tol, max_iter=c.max_iter, stop=c.stop)
    raise ValueError(f"unknown solver {c.solver!r}; expected 'anderson' or 'fixed_point'")
