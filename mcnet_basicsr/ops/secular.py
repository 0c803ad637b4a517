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

__all__ = ['solve_secular_equation', 'projection_coefficients', 'coefficients_and_inside']

_DBL_EPS = float(np.finfo(np.float64).eps)
#: relative step at which projection_coefficients stops the solver and takes its own, last Newton step
_STEP_RTOL = 1e-7
#: relative step at which the solver stops otherwise: a few ulps of mu
_ULPS = 8.0 * _DBL_EPS


@torch.no_grad()
def solve_secular_equation(energy, sig, eps, max_iter=100):
    """Per-sample multiplier ``mu`` with ``sum_k energy_k / (1 + mu sig_k)^2 = eps^2``, in float64.

    Newton's method on ``phi(mu) = 1 / sqrt(f(mu)) - 1 / eps`` with
    ``f(mu) = sum_k energy_k / (1 + mu sig_k)^2``. Writing ``f = sum_k (energy_k / sig_k^2) / (mu + 1 / sig_k)^2``
    shows it is the trust-region secular function (More & Sorensen), so ``phi`` is increasing and
    concave for ``mu > -1 / max(sig)``. Newton's iterates started left of the root therefore increase
    monotonically to it without overshooting, converging quadratically. The start is the lower bound
    ``mu_0 = (||r|| / eps - 1) / sig_bar``, ``sig_bar = sum_k energy_k sig_k / ||r||^2`` the energy-weighted mean
    eigenvalue: ``(1 + mu s)^-2`` is convex in s, so Jensen's inequality gives
    ``f(mu) >= ||r||^2 / (1 + mu sig_bar)^2``. It is the root when the energy sits on one eigenvalue (all of them
    equal: box), and closer to it than the bound with ``max(sig)`` (one Newton step fewer on USRNet's kernels and
    the resizers) when the energy sits where ``A`` is weak (a blur's high frequencies). Iteration stops per sample
    once a step is below a few ulps of mu (typically 2-5 steps).

    The O(N K) sums run on the tensors' device, the start's with the first Newton step's; the per-sample scalar
    update runs on the host, so each iteration is a handful of kernels and one small device-to-host copy.

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
    return torch.from_numpy(_newton(energy, sig, eps, _ULPS, max_iter)[0]).to(energy.device)


def _newton(energy, sig, eps, rtol, max_iter=100):
    """:func:`solve_secular_equation` on the host's side, stopping a sample once its step is at most ``rtol`` times
    its mu. Returns mu and eps as numpy (the host's copies: callers need no further synchronisation)."""
    device = energy.device
    pair = torch.stack([energy, energy * sig], -2)  # (N, 2, K): f and -f' / 2 are their sums against inv^2, inv^3
    head = torch.cat([pair.sum(-1), eps.to(torch.float64)[:, None]], 1).cpu().numpy()  # (N, 3), one transfer
    total, weighted, eps_h = head.T
    active = (eps_h > 0) & (total > eps_h**2)
    with np.errstate(divide='ignore', invalid='ignore'):
        inv_eps = np.where(active, 1.0 / eps_h, 0.0)
        bar = np.where(active, weighted / total, 1.0)  # the energy-weighted mean eigenvalue
        mu = np.where(active, np.maximum(np.sqrt(total) * inv_eps - 1.0, 0.0) / bar, 0.0)
    for _ in range(max_iter):
        if not active.any():
            break
        inv = (sig * _multiplier(mu, device)).add_(1.0).reciprocal_()  # 1 / (1 + mu sig), (K,) or (N, K)
        inv_sq = inv.square()
        f, f1 = torch.linalg.vecdot(pair, torch.stack([inv_sq, inv_sq * inv], -2)).cpu().numpy().T
        with np.errstate(divide='ignore', invalid='ignore', over='ignore'):
            inv_sqrt_f = 1.0 / np.sqrt(f)
            step = -(inv_sqrt_f - inv_eps) / (inv_sqrt_f**3 * f1)
        step = np.where(active & np.isfinite(step), np.maximum(step, 0.0), 0.0)
        mu = mu + step
        active &= step > rtol * mu
    return mu, eps_h


def _multiplier(mu, device):
    """The host's mu (N,) as a factor of (K,) or (N, K) spectra: a single sample's as a float, which reaches the
    device as a kernel argument (no copy); else an (N, 1) tensor there."""
    return float(mu[0]) if len(mu) == 1 else torch.from_numpy(mu).to(device)[:, None]


def projection_coefficients(energy, sig, eps):
    """Per-sample diagonal ``c`` (N, K) in float64 such that ``P(x) = x - A^T U diag(c) U^* (A x - b)``.

    ``c = 1 / sig`` for samples with ``eps = 0``, 0 for samples inside their ball, ``mu / (1 + mu sig)`` for the
    others. Where a gradient is needed (``energy`` or ``eps`` requires one, grad mode on), ``mu`` comes from
    :func:`solve_secular_equation` followed by one differentiable Newton step at the root: its value is mu itself
    (to rounding) and its gradient with respect to ``energy`` and ``eps`` is exactly the implicit-function-theorem
    gradient of mu (first derivatives; second derivatives leave out mu's curvature). Since that step is a Newton
    step, the solver then stops once its own step is below ``1e-7`` mu, not a few ulps: quadratic convergence
    leaves mu within ``C 1e-14`` of the root (``C``, the ratio of a step to the square of the one before, is 1e-4 to
    0.2 on the operators here), which the last step takes to rounding. Without a gradient the solver runs to a few
    ulps and ``c`` is formed from its mu directly (a Newton iteration costs fewer kernels than that step).

    Args:
        energy (Tensor): (N, K) float64 ``|r~_k|^2`` summed over the channels, differentiable.
        sig (Tensor): (K,) or (N, K) float64 eigenvalues of ``A A^T``, all > 0.
        eps (Tensor): (N,) float64 radii, differentiable.

    Returns:
        Tensor: (N, K) float64.
    """
    return coefficients_and_inside(energy, sig, eps)[0]


def coefficients_and_inside(energy, sig, eps):
    """:func:`projection_coefficients` and, as a numpy bool (N,), which samples are inside their ball (``eps > 0``,
    ``c = 0``): known on the host once the solver has run, so a caller that returns those samples unchanged needs
    no further synchronisation (and none of its work where none is inside)."""
    need_grad = torch.is_grad_enabled() and (energy.requires_grad or eps.requires_grad)
    mu_host, eps_host = _newton(energy.detach(), sig, eps.detach(), _STEP_RTOL if need_grad else _ULPS)
    inside = (eps_host > 0) & (mu_host == 0)
    all_outside = bool((mu_host > 0).all())
    if not need_grad:
        mu = _multiplier(mu_host, energy.device)
        soft = (sig * mu).add_(1.0).reciprocal_().mul_(mu)  # mu / (1 + mu sig): 0 inside their set, P(x) = x
        soft = soft.expand_as(energy)
    else:
        # One differentiable Newton step at the root: value mu_root (phi ~ 0 there), gradient
        # -(dphi/dtheta) / phi'(mu) for theta = r (hence x, b) and eps: the implicit-function theorem.
        # Inside / eps = 0 samples get harmless stand-in values (no 0/0 in the backward pass).
        mu_root = torch.from_numpy(mu_host).to(energy.device)
        outside = mu_root > 0
        safe_energy = energy if all_outside else torch.where(outside[:, None], energy, torch.ones_like(energy))
        safe_eps = torch.where(outside, eps, torch.ones_like(eps))
        inv = (mu_root[:, None] * sig).add(1.0).reciprocal()
        f = torch.linalg.vecdot(safe_energy, inv.square())
        phi_root = torch.rsqrt(f) - 1.0 / safe_eps
        with torch.no_grad():
            dphi = torch.rsqrt(f).pow(3) * torch.linalg.vecdot(safe_energy, sig * inv.pow(3))
        mu = mu_root - phi_root / dphi
        mu = torch.where(outside, mu, torch.zeros_like(mu_root))[:, None]
        soft = mu / (1.0 + mu * sig)
    if all_outside or not (eps_host == 0).any():
        return soft, inside
    is_zero = (eps.detach() == 0)[:, None]
    return torch.where(is_zero, torch.broadcast_to(1.0 / sig, energy.shape), soft), inside  # eps = 0: c = 1 / sig
