"""The multiplier of the exact projection onto ``{z : ||A z - b||_2 <= eps}`` when ``A A^T`` is diagonal in a known
basis.

If ``A A^T = U diag(sig) U^*`` with U unitary (the per-axis eigenvectors of a separable operator, the Fourier
basis of a circulant blur followed by decimation), then for ``r = A x - b`` and its coefficients ``r~ = U^* r``
the projection of ``x`` is ``x - A^T U diag(c) r~`` with, per sample,

* ``c = 1 / sig`` for ``eps = 0`` (the minimum-norm correction ``A^T (A A^T)^{-1} r``);
* ``c = 0`` for ``||r|| <= eps`` (``x`` is inside);
* ``c = mu / (1 + mu sig)`` otherwise, ``mu > 0`` the root of ``sum_k |r~_k|^2 / (1 + mu sig_k)^2 = eps^2``.

:func:`solve_secular_equation` finds ``mu`` (float64 Newton iterations, no autograd) and
:func:`projection_coefficients` turns it into ``c`` with one differentiable Newton step, so that gradients with
respect to ``r`` (hence ``x`` and ``b``) and ``eps`` are the implicit-function-theorem gradients of ``mu``.
Both take the eigenvalues as ``(K,)`` (shared by the batch) or ``(N, K)`` (one spectrum per sample, e.g. a
batch blurred with one kernel per sample).
"""
import numpy as np
import torch

__all__ = ['solve_secular_equation', 'projection_coefficients']

_DBL_EPS = float(np.finfo(np.float64).eps)


@torch.no_grad()
def solve_secular_equation(energy, sig, eps, max_iter=100):
    """Per-sample multiplier ``mu`` with ``sum_k energy_k / (1 + mu sig_k)^2 = eps^2``, in float64.

    Newton's method on ``phi(mu) = 1 / sqrt(f(mu)) - 1 / eps`` with
    ``f(mu) = sum_k energy_k / (1 + mu sig_k)^2``. Writing ``f = sum_k (energy_k / sig_k^2) / (mu + 1 / sig_k)^2``
    shows it is the trust-region secular function (More & Sorensen), so ``phi`` is increasing and
    concave for ``mu > -1 / max(sig)``. Newton's iterates started left of the root therefore increase
    monotonically to it without overshooting, converging quadratically. The start is the lower
    bound ``mu_0 = (||r|| / eps - 1) / max(sig)`` (from ``f(mu) >= ||r||^2 / (1 + mu max(sig))^2``), which is
    already the root when all ``sig`` are equal (box). Iteration stops per sample once a step is
    below a few ulps of mu (typically 2-5 steps).

    The O(N K) sums run on the tensors' device; the per-sample scalar update runs on the host, so
    each iteration is a handful of kernels and one small device-to-host copy.

    Args:
        energy (Tensor): (N, K) float64, squared coefficients ``|r~_k|^2`` (summed over channels sharing sig).
        sig (Tensor): (K,) or (N, K) float64, eigenvalues of ``A A^T`` (all > 0; a component with zero energy may
            hold any positive stand-in).
        eps (Tensor): (N,) float64 radii (>= 0).
        max_iter (int): iteration cap.

    Returns:
        Tensor: (N,) float64 on energy's device; ``mu > 0`` for samples outside their set
        (``||r|| > eps > 0``), 0 for the others (inside, or ``eps = 0``, whose projection is the
        ``mu -> inf`` limit and is handled by the caller).
    """
    device = energy.device
    weighted = energy * sig
    sig_max = sig.max(-1).values.expand(energy.shape[0]) if sig.dim() == 2 else sig.max().expand(energy.shape[0])
    head = torch.stack([energy.sum(1), eps.to(torch.float64), sig_max])
    total, eps_h, sig_max = head.cpu().numpy()
    norm_r = np.sqrt(total)
    active = (eps_h > 0) & (norm_r > eps_h)
    with np.errstate(divide='ignore', invalid='ignore'):
        inv_eps = np.where(active, 1.0 / eps_h, 0.0)
        mu = np.where(active, np.maximum(norm_r * inv_eps - 1.0, 0.0) / sig_max, 0.0)
    for _ in range(max_iter):
        if not active.any():
            break
        inv = (torch.from_numpy(mu).to(device)[:, None] * sig).add_(1.0).reciprocal_()
        inv_sq = inv.square()
        sums = torch.stack([torch.linalg.vecdot(energy, inv_sq), torch.linalg.vecdot(weighted, inv_sq.mul_(inv))])
        f, f1 = sums.cpu().numpy()
        with np.errstate(divide='ignore', invalid='ignore', over='ignore'):
            inv_sqrt_f = 1.0 / np.sqrt(f)
            step = -(inv_sqrt_f - inv_eps) / (inv_sqrt_f**3 * f1)
        step = np.where(active & np.isfinite(step), np.maximum(step, 0.0), 0.0)
        mu = mu + step
        active &= step > 8.0 * _DBL_EPS * mu
    return torch.from_numpy(mu).to(device)


def projection_coefficients(energy, sig, eps):
    """Per-sample diagonal ``c`` (N, K) in float64 such that ``P(x) = x - A^T U diag(c) U^* (A x - b)``.

    ``c = 1 / sig`` for samples with ``eps = 0``, 0 for samples inside their ball, ``mu / (1 + mu sig)`` for the
    others, ``mu`` from :func:`solve_secular_equation` followed by one differentiable Newton step at the root: its
    value is mu itself (to rounding) and its gradient with respect to ``energy`` and ``eps`` is exactly the
    implicit-function-theorem gradient of mu (first derivatives; second derivatives leave out mu's curvature).

    Args:
        energy (Tensor): (N, K) float64 ``|r~_k|^2`` summed over the channels, differentiable.
        sig (Tensor): (K,) or (N, K) float64 eigenvalues of ``A A^T``, all > 0.
        eps (Tensor): (N,) float64 radii, differentiable.

    Returns:
        Tensor: (N, K) float64.
    """
    is_zero = eps.detach() == 0
    mu_root = solve_secular_equation(energy.detach(), sig, eps.detach())
    outside = mu_root > 0

    # One differentiable Newton step at the root: value mu_root (phi ~ 0 there), gradient
    # -(dphi/dtheta) / phi'(mu) for theta = r (hence x, b) and eps: the implicit-function theorem.
    # Inside / eps = 0 samples get harmless stand-in values (no 0/0 in the backward pass).
    all_outside = bool(outside.all())  # the solver has synchronised with the host already
    safe_energy = energy if all_outside else torch.where(outside[:, None], energy, torch.ones_like(energy))
    safe_eps = torch.where(outside, eps, torch.ones_like(eps))
    inv = (mu_root[:, None] * sig).add(1.0).reciprocal()
    f = torch.linalg.vecdot(safe_energy, inv.square())
    phi_root = torch.rsqrt(f) - 1.0 / safe_eps
    with torch.no_grad():
        dphi = torch.rsqrt(f).pow(3) * torch.linalg.vecdot(safe_energy, sig * inv.pow(3))
    mu = mu_root - phi_root / dphi
    mu = torch.where(outside, mu, torch.zeros_like(mu_root))[:, None]
    soft = mu / (1.0 + mu * sig)  # 0 for samples inside their set: P(x) = x
    if all_outside or not bool(is_zero.any()):
        return soft
    return torch.where(is_zero[:, None], torch.broadcast_to(1.0 / sig, energy.shape), soft)  # eps = 0: c = 1 / sig
