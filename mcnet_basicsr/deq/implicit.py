"""Implicit (deep-equilibrium) fixed-point layer with an implicit backward pass.

Design: a function ``implicit_fixed_point(f, z0, forward, backward)`` returning
``(z_out, forward_stats, backward_holder)``; the holder receives the backward
solve's statistics when the backward runs.

Forward: ``z* = solve(f, z0)`` under ``no_grad`` (no graph through the solve,
so memory does not depend on the number of iterations), then ONE
differentiable application ``z_out = f(z*)`` with ``z*`` a fresh detached
leaf. Returning ``f(z*)`` (not ``z*``) lets the last operation of the layer be
``f``'s own last operation (e.g. a projection). Without grad there is nothing
to differentiate: ``f(z*)`` is then the solver's own evaluation at ``z*``
(``solve(..., with_image=True)``), not one more.

Backward: a hook on ``z_out`` receives ``g = dl/dz_out`` and solves
``s = J^T s + g`` (``J = df/dz`` at ``z*``) with the backward solver, using
vector-Jacobian products ``autograd.grad(z_out, z*, s, retain_graph=True)``
on the single-application graph; ``s`` then flows on through ``f(z*)`` to
``f``'s parameters and to every tensor ``f`` closes over, which gives exactly
the implicit-function-theorem gradient ``g^T (I - J)^{-1} df/dtheta``.
No gradient flows to ``z0`` (the fixed point does not depend on it).

Hook guards: the vjp calls inside the solve re-enter the hook (it sits on the
root of those calls) and are passed through unchanged; the hook computes the
implicit gradient once and then drops its references to ``z_out`` / ``z*``
(breaking the reference cycle hook -> z_out -> graph -> hook). A second
backward through the same ``z_out`` (``retain_graph=True``) raises a
``RuntimeError`` instead of silently returning a wrong gradient. Higher-order
gradients (``create_graph=True``) through the layer are not supported.
"""
from __future__ import annotations
from typing import Callable, Optional, Tuple

import torch

from .config import SolverConfig, SolverStats
from .solvers import Observer, solve

Fn = Callable[[torch.Tensor], torch.Tensor]


class BackwardStatsHolder:
    """Filled in when the backward hook runs.

    Attributes:
        stats: ``SolverStats`` of the backward solve, ``None`` until backward ran.
        calls: number of backward solves done (0 or 1).
        enabled: whether a backward hook was registered at all (False in
            no-grad mode or when nothing but ``z*`` requires grad).
    """

    def __init__(self) -> None:
        self.stats: Optional[SolverStats] = None
        self.calls: int = 0
        self.enabled: bool = False

    def __repr__(self) -> str:
        return f'BackwardStatsHolder(enabled={self.enabled}, calls={self.calls}, stats={self.stats})'


def _needs_grad_beyond(out: torch.Tensor, leaf: torch.Tensor) -> bool:
    """Does ``out``'s graph reach any grad-requiring leaf other than ``leaf``?"""
    if out.grad_fn is None:
        return False
    stack, seen = [out.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        var = getattr(node, 'variable', None)  # AccumulateGrad nodes
        if var is not None:
            if var is not leaf:
                return True
            continue
        stack.extend(nxt for nxt, _ in node.next_functions)
    return False


def implicit_fixed_point(f: Fn, z0: torch.Tensor, forward: Optional[SolverConfig] = None,
                         backward: Optional[SolverConfig] = None, observer: Optional[Observer] = None
                         ) -> Tuple[torch.Tensor, SolverStats, BackwardStatsHolder]:
    """Solve ``z = f(z)`` from ``z0`` and return ``(z_out, fwd_stats, bwd_holder)``.

    ``z_out = f(z*)``. With grad enabled and some tensor other than ``z*``
    requiring grad in ``f(z*)`` (parameters, closed-over inputs), ``z_out``
    carries the implicit backward described in the module docstring and
    ``bwd_holder.stats`` is set when it runs. Otherwise (eval / ``no_grad`` /
    nothing requires grad) ``z_out = f(z*)`` without a graph and the holder
    stays empty; under ``no_grad`` it is the solver's own evaluation at ``z*``,
    so the solve costs no evaluation of ``f`` beyond its iterations.
    ``backward`` defaults to ``forward`` (without ``cuda_graph``, which a
    backward solve must not set); ``forward`` to ``SolverConfig()``. ``observer`` (:data:`~.solvers.Observer`)
    sees every iteration of the forward solve.
    """
    fwd = SolverConfig() if forward is None else forward
    if backward is None:
        bwd = fwd.for_backward()
    elif backward.cuda_graph:
        raise ValueError('implicit_fixed_point: cuda_graph is for forward solves only; the backward solve '
                         'calls autograd at every iteration, which a CUDA graph capture cannot record. '
                         'Set cuda_graph: false in the backward solver settings.')
    else:
        bwd = backward
    holder = BackwardStatsHolder()
    if not torch.is_grad_enabled():
        _, z_out, fwd_stats = solve(f, z0.detach(), fwd, with_image=True, observer=observer)
        return z_out, fwd_stats, holder
    with torch.no_grad():
        z_star, fwd_stats = solve(f, z0.detach(), fwd, observer=observer)

    z_star = z_star.detach().requires_grad_()
    z_out = f(z_star)
    if not _needs_grad_beyond(z_out, z_star):
        return z_out.detach(), fwd_stats, holder

    holder.enabled = True
    state = {'z_out': z_out, 'z_star': z_star, 'in_solve': False, 'fired': False}

    def hook(g: torch.Tensor):
        if state['in_solve']:
            return None  # re-entry from our own vjp calls: pass through
        if state['fired']:
            raise RuntimeError(
                'implicit_fixed_point: backward through this output was already done; the implicit '
                'backward runs once per forward (call implicit_fixed_point again for a new graph)')
        state['fired'] = True
        zo, zs = state['z_out'], state['z_star']
        g = g.detach()

        def vjp_map(s: torch.Tensor) -> torch.Tensor:
            (jt,) = torch.autograd.grad(zo, zs, s, retain_graph=True, allow_unused=True)
            return g if jt is None else jt + g

        state['in_solve'] = True
        try:
            s, bstats = solve(vjp_map, g, bwd)
        finally:
            state['in_solve'] = False
            state['z_out'] = state['z_star'] = None  # break the hook <-> graph cycle
        holder.stats = bstats
        holder.calls += 1
        return s.to(g.dtype)

    z_out.register_hook(hook)
    return z_out, fwd_stats, holder
