"""Jacobian regularisation of a fixed-point map (plain torch).

Bai, Koltun and Kolter (2021), "Stabilizing Equilibrium Models by Jacobian Regularization": the
number of iterations a solver needs for ``z = f(z)`` grows as the Jacobian ``J = df/dz`` at the
fixed point grows (plain iteration converges at the rate of ``J``'s spectral radius, Anderson's
rate degrades with it too). Adding ``gamma * ||J(z*)||_F^2 / d`` to the training loss keeps ``J``
small where it matters; on their models this kept the solves short and stable at little cost in
accuracy. The Frobenius norm bounds the spectral radius only loosely (``rho(J) <= ||J||_2 <= ||J||_F``),
so what it does to a given layer's iterations and accuracy is to be measured.
``||J||_F^2`` is never formed: Hutchinson's estimator gives it from vector-Jacobian products,
``E_v ||v^T J||^2 = tr(J J^T) = ||J||_F^2`` for ``v ~ N(0, I)``.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

Fn = Callable[[torch.Tensor], torch.Tensor]


def jacobian_frobenius_penalty(f: Fn, z: torch.Tensor, samples: int = 1,
                               generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Hutchinson estimate of ``||J_f(z)||_F^2 / d``, ``d = z[0].numel()``, averaged over the batch.

    For a map ``f`` that acts on every sample of the batch separately (its Jacobian is block-
    diagonal, one ``d x d`` block ``J_i`` per sample), this is an unbiased estimate of
    ``mean_i ||J_i||_F^2 / d``: ``sum_i ||v_i^T J_i||^2 / (N d)`` with ``v ~ N(0, I)``, averaged
    over ``samples`` independent draws of ``v``. (For a map that mixes samples it estimates
    ``||J||_F^2 / (N d)`` of the whole Jacobian.) Dividing by ``d`` makes the value independent of
    the image size: 1 for the identity map.

    The result is differentiable with respect to whatever ``f`` depends on other than ``z``
    (its parameters, closed-over tensors): the vector-Jacobian products are taken with
    ``create_graph=True``, so backpropagating the penalty costs a double backward through one
    application of ``f``. No gradient flows to ``z`` (it is detached: the point where ``J`` is
    evaluated, e.g. a fixed point found without a graph).

    Args:
        f: the map, ``f(z)`` of the same shape as ``z``.
        z: the point where the Jacobian is taken, (N, ...).
        samples: number of Hutchinson probes ``v`` (>= 1); the variance falls as ``1 / samples``.
        generator: draws ``v`` (on the generator's device, then moved to ``z``'s); default: torch's
            global generator of ``z``'s device.

    Returns:
        A 0-d tensor of ``z``'s dtype.
    """
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f'samples must be an int >= 1, got {samples!r}.')
    z = z.detach().requires_grad_()
    with torch.enable_grad():
        fz = f(z)
        if fz.shape != z.shape:
            raise ValueError(f'f(z) must have the shape of z {tuple(z.shape)}, got {tuple(fz.shape)}.')
        total = None
        for _ in range(samples):
            if generator is None:
                v = torch.randn(fz.shape, dtype=fz.dtype, device=fz.device)
            else:
                v = torch.randn(fz.shape, dtype=fz.dtype, device=generator.device, generator=generator).to(fz.device)
            (vjp, ) = torch.autograd.grad(fz, z, v, create_graph=True)
            term = vjp.square().sum()
            total = term if total is None else total + term
    return total / (samples * z.numel())
