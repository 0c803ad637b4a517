"""How fast a fixed-point map contracts at its fixed point: the spectral radius of its Jacobian, by power iteration
on central-difference Jacobian-vector products (plain torch; no forward-mode autograd, so any map that backpropagates
can be measured).

Near a fixed point ``z*`` the error of plain iteration shrinks by ``rho(J)`` per step (``J = dF/dz`` at ``z*``); where
``rho(J)`` nears or passes 1 Anderson acceleration too needs many iterations or fails. The Frobenius norm that
Jacobian regularisation of deep-equilibrium models penalises (Bai, Koltun & Kolter, "Stabilizing equilibrium models
by Jacobian regularization", ICML 2021) averages over every direction and can stay flat while one direction slows the
solve (``benchmarks/layer_jacobian.py`` measures both); the rate here follows that direction.
"""
from typing import Callable, Optional, Tuple

import torch

Fn = Callable[[torch.Tensor], torch.Tensor]


def _per_sample_rms(v: torch.Tensor) -> torch.Tensor:
    return v.flatten(1).pow(2).mean(dim=1).sqrt().view(-1, *([1] * (v.dim() - 1)))


def jacobian_vector(f: Fn, z: torch.Tensor, v: torch.Tensor, delta: float = 1e-3) -> torch.Tensor:
    """``J v`` at ``z`` by central differences ``(f(z + delta v) - f(z - delta v)) / (2 delta)``; ``v`` of unit RMS
    per sample, so ``delta`` is the step per value. Exact for affine ``f``; differentiable to ``f``'s parameters."""
    return (f(z + delta * v) - f(z - delta * v)) / (2 * delta)


def spectral_rate(f: Fn, z: torch.Tensor, steps: int = 8, delta: float = 1e-3,
                  generator: Optional[torch.Generator] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(rate, v)``: per sample (dim 0), ``||J v|| / ||v||`` after ``steps`` power-iteration steps from a Gaussian
    direction, and that direction ``v`` (unit RMS). The steps run without grad; the rate's own ``J v`` is
    differentiable (with grad enabled) to what ``f`` depends on, never to ``z``. The rate approaches the spectral
    radius of ``J`` where one real eigenvalue dominates, from below."""
    if steps < 0:
        raise ValueError(f'spectral_rate: steps must be >= 0, got {steps}.')
    z = z.detach()
    v = torch.randn(z.shape, generator=generator, dtype=z.dtype).to(z.device)  # a CPU generator: any device alike
    v = v / _per_sample_rms(v)
    with torch.no_grad():
        for _ in range(steps):
            jv = jacobian_vector(f, z, v, delta)
            v = jv / _per_sample_rms(jv).clamp_min(torch.finfo(jv.dtype).tiny)
    jv = jacobian_vector(f, z, v, delta)
    return _per_sample_rms(jv).flatten(), v
