"""Baselines of the MCNet paper's tables: bicubic upsampling, PnP-ADMM and TV-TV post-processing.

All three share MCNet's pieces: the operators and their exact projection (``mcnet_basicsr.ops``);
PnP-ADMM and TV-TV inherit the layer core (``layer_core``: the measurement of a call, the colour
handling, Y from BT.601 with Cb/Cr from the backbone or from bicubic upsampling, and the final
projection), PnP-ADMM MCNet's ADMM map (with ``beta = 0``); TV-TV holds a frozen backbone as MCNet
does; and the solver statistics type (``mcnet_basicsr.deq.SolverStats``, so ``scripts/evaluate.py`` reports
iterations for them as for MCNet). None of them learns anything: BasicSR's ``SRModel`` runs them
without ``pretrain_network_g``.
"""
import torch
import torch.nn.functional as F
from torch import nn

from mcnet_basicsr.deq import SolverStats
from mcnet_basicsr.ops import imresize
from mcnet_basicsr.utils.color import rgb_to_ycbcr
from mcnet_basicsr.utils.registration import ARCH_REGISTRY
from .dncnn_arch import DnCNN, load_dncnn
from .frozen_backbone import FrozenBackbone, FrozenBackboneMixin
from .layer_core import ADMMLayer, ConsistentLayer, check_lr, eps_repr
from .layer_options import NetworkWeights
from .layer_settings import BACKBONE_DTYPES, check_backbone_dtype

_TV_KINDS = ('anisotropic', 'isotropic')


def _check_iterations(iterations):
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f'iterations must be a positive int, got {iterations!r}.')


def _stats(iterations, n, residual, trace, device):
    """SolverStats of a fixed-iteration run (every sample ran ``iterations`` steps; none 'converged')."""
    return SolverStats(iterations=torch.full((n, ), iterations, dtype=torch.long, device=device),
                       residual=residual, converged=torch.zeros(n, dtype=torch.bool, device=device), trace=trace,
                       nfe=iterations)


@ARCH_REGISTRY.register()
class Bicubic(nn.Module):
    """MATLAB bicubic upsampling (``imresize(lr, scale)``) of every channel: the paper's bicubic row.

    Args:
        scale (int): Upsampling factor.
    """

    def __init__(self, scale):
        super().__init__()
        if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
            raise ValueError(f'scale must be a positive int, got {scale!r}.')
        self.scale = scale

    def extra_repr(self):
        return f'scale={self.scale}'

    def forward(self, lr):
        check_lr('Bicubic', lr)
        return imresize(lr, self.scale)


@ARCH_REGISTRY.register()
class PnPADMM(ADMMLayer):
    """The paper's PnP baseline: MCNet's ADMM iteration with ``beta = 0`` and no backbone.

    On Y (BT.601; Cb/Cr are the MATLAB-bicubic-upsampled LR chroma, 1-channel input is Y), with
    ``b`` the LR Y and ``S = {x : ||A x - b||_2 <= eps}``, from ``x0 = P_S(bicubic(b))``, ``lam0 = 0``::

        u = R(x + lam);  x+ = P_S(u - lam);  lam+ = lam + x+ - u

    (:meth:`~.layer_core.ADMMLayer.fixed_point_map` itself, with ``beta = 0``; ``rho`` then cancels, so the
    iterates do not depend on it). With ``beta = 0`` nothing guarantees a fixed point (with the MCNet
    authors' DnCNN6, PSNR peaks after a few dozen iterations and then drifts down), so this runs a FIXED
    number of plain iterations (no Anderson, no stopping rule) and returns the last ``x``, which is in
    ``S`` exactly (up to rounding, after a final float64 projection).

    The paper's PnP used a 17-layer DnCNN with real spectral normalisation (Ryu et al. 2019). Their
    RealSN-DnCNN bounds every convolution and keeps plain BatchNorm between them (without BN 17 bounded
    layers do not train); ``options/test_pnp_x*.yml`` use ours of that kind
    (``mcnet_basicsr/weights/dncnn17_sn_sigma_0.04_0.08.pth``), ``options/test_pnp_ryu_x*.yml`` Ryu et
    al.'s plain DnCNN17 (BatchNorm, no spectral normalisation). The denoiser is frozen and always in eval
    mode (BatchNorm with running statistics), whatever ``train()`` says.

    The option files' iteration counts and Ryu et al.'s noise level were chosen on Set5 (mean Y-PSNR by
    iteration; docs/benchmarks.md, "Measurements behind implementation choices").

    :meth:`run` and :meth:`solve` return ``(x, info)``, ``info['forward']`` a :class:`~mcnet_basicsr.deq.SolverStats`
    (``iterations`` per sample, the relative change ``||F(z) - z|| / ||F(z)||`` of the last step as ``residual``)
    and ``info['eps']``, as MCNetArch's.

    Args:
        operator (dict): Measurement operator options, e.g. ``{type: bicubic, scale: 2}``.
        denoiser (dict | None): Options of :class:`DnCNN` and ``path``, its checkpoint (any layout ``load_dncnn``
            accepts). Default: DnCNN17 with BatchNorm, no spectral normalisation (the layout of Ryu et al.'s
            weights), random weights (only for tests).
        iterations (int): Number of ADMM iterations. Default: 30.
        rho (float): ADMM penalty, > 0; no effect with ``beta = 0`` (kept so that the map is
            MCNet's). Default: 1.0.
        eps (float | None): Radius of the consistency ball (Y in [0, 1], per image). Default: None.
        eps_rms (float | None): The same per LR pixel (``eps = eps_rms * sqrt(#LR pixels)``). Give at
            most one of ``eps``/``eps_rms``; neither means exact consistency (eps = 0).
        channels (str): 'y' or 'rgb' (each channel consistent, one solve per channel), as for MCNetArch.
            Default: 'y'.

    ``forward(lr, operator=None, noise_sigma=None)`` (the image) and ``run`` take the measurement of a batch as
    MCNetArch's do.
    """

    beta = 0.0  # the ADMM map of ADMMLayer with beta = 0

    def __init__(self,
                 operator,
                 denoiser=None,
                 iterations=30,
                 rho=1.0,
                 eps=None,
                 eps_rms=None,
                 channels='y'):
        super().__init__(operator, channels, eps, eps_rms, rho)
        _check_iterations(iterations)
        self.iterations = iterations
        denoiser = NetworkWeights.from_options('denoiser', denoiser)
        self.denoiser = DnCNN(**dict(dict(depth=17, batch_norm=True, spectral_norm=False), **denoiser.options))
        if denoiser.path is not None:
            load_dncnn(self.denoiser, denoiser.path)
        self.denoiser.auto_update_spectral_norm = False  # estimated once per solve, as in MCNet
        for p in self.denoiser.parameters():
            p.requires_grad_(False)
        self.denoiser.eval()

    def train(self, mode=True):
        super().train(mode)
        self.denoiser.eval()  # frozen: BatchNorm must keep its running statistics
        return self

    def extra_repr(self):
        return (f'scale={self.scale}, operator={self.operator!r}, {eps_repr(self.eps, self.eps_rms)}, '
                f'iterations={self.iterations}')

    @torch.no_grad()
    def solve(self, b, iterations=None, operator=None, noise_sigma=None):
        """PnP-ADMM on measurements ``b`` (N, C, h, w) (float64 is fine) by ``operator`` (default: this one's) with
        noise of std ``noise_sigma``: ``(x, info)``, the last iterate ``x`` (float32)."""
        iterations = self.iterations if iterations is None else iterations
        _check_iterations(iterations)
        operator = self.measurement_operator(operator)
        b64 = b.double()
        b = b.to(next(self.denoiser.parameters()).dtype)
        eps = self.consistency_radius(b, noise_sigma)
        self.denoiser.update_spectral_norm()
        x = operator.project(imresize(b, self.scale), b, eps)
        f = self.fixed_point_map(x, b, eps, operator=operator)  # w = x only sets the channel count: beta = 0
        z = torch.cat([x, torch.zeros_like(x)], dim=1)
        trace = []
        for _ in range(iterations):
            z_new = f(z)
            trace.append((z_new - z).flatten(1).norm(dim=1) / (z_new.flatten(1).norm(dim=1) + 1e-12))
            z = z_new
        info = {'forward': _stats(iterations, z.shape[0], trace[-1], trace, z.device), 'eps': eps}
        return self.consistent_output(z[:, :x.shape[1]], b64, eps, operator), info

    def solve_problem(self, w, b, operator, noise_sigma):
        return self.solve(b, operator=operator, noise_sigma=noise_sigma)  # no estimate: beta = 0

    def run(self, lr, operator=None, noise_sigma=None):
        """``(output, info)``: :meth:`forward`'s output and what its iterations did (``info`` of :meth:`solve`)."""
        check_lr('PnPADMM', lr)
        operator = self.measurement_operator(operator)
        # the bicubic upsampling as the "estimate": it gives the chroma on Y and sets the shapes; beta = 0
        estimate = imresize(rgb_to_ycbcr(lr) if lr.shape[1] == 3 else lr, self.scale)
        y, cbcr = estimate[:, :1], (estimate[:, 1:] if lr.shape[1] == 3 else None)
        return self.solve_channels(y, cbcr, lr, operator, noise_sigma)


# ---------------------------------------------------------------------------------------- TV-TV
def _grad(x):
    """Forward differences with Neumann boundary (last difference 0): (N, C, H, W) -> (N, 2C, H, W) [rows; cols]."""
    dv = F.pad(x[..., 1:, :] - x[..., :-1, :], (0, 0, 0, 1))
    dh = F.pad(x[..., :, 1:] - x[..., :, :-1], (0, 1, 0, 0))
    return torch.cat([dv, dh], dim=1)


def _grad_adjoint(d):
    """Exact adjoint of :func:`_grad`."""
    c = d.shape[1] // 2
    dv, dh = d[:, :c], d[:, c:]
    dv_in, dh_in = dv[..., :-1, :], dh[..., :, :-1]
    adj_v = F.pad(dv_in, (0, 0, 1, 0)) - F.pad(dv_in, (0, 0, 0, 1))
    return adj_v + F.pad(dh_in, (1, 0, 0, 0)) - F.pad(dh_in, (0, 1, 0, 0))


def _shrink(v, t, kind):
    """Prox of ``t * ||.||_1`` (anisotropic) or of ``t * sum_pixels ||(dv, dh)||_2`` (isotropic)."""
    if kind == 'anisotropic':
        return torch.sign(v) * (v.abs() - t).clamp_min(0)
    c = v.shape[1] // 2
    mag = (v[:, :c].square() + v[:, c:].square()).sqrt().repeat(1, 2, 1, 1)
    return v * (1 - t / mag.clamp_min(1e-30)).clamp_min(0)


def _tv(x, kind):
    d = _grad(x)
    if kind == 'anisotropic':
        return d.abs().flatten(1).sum(1)
    c = d.shape[1] // 2
    return (d[:, :c].square() + d[:, c:].square()).sqrt().flatten(1).sum(1)


class _NeumannSolver:
    """``(I + k D^T D)^{-1}`` for the Neumann-boundary gradient D, exactly, by FFT.

    ``D^T D`` is the Neumann Laplacian, which the DCT-II diagonalises. Equivalently: the periodic
    Laplacian of the half-sample mirror extension (2H x 2W) of an image equals the Neumann Laplacian
    on the image, and the periodic system maps mirror-symmetric right-hand sides to mirror-symmetric
    solutions; so the solve is one rfft2/irfft2 pair on the extension.
    """

    def __init__(self, h, w, k, dtype, device):
        fy = torch.arange(2 * h, dtype=torch.float64, device=device)
        fx = torch.arange(w + 1, dtype=torch.float64, device=device)
        lap = (2 - 2 * torch.cos(torch.pi * fy / h))[:, None] + (2 - 2 * torch.cos(torch.pi * fx / w))[None, :]
        self.inv = (1.0 / (1.0 + k * lap)).to(dtype)
        self.h, self.w = h, w

    def __call__(self, r):
        ext = torch.cat([r, r.flip(-2)], dim=-2)
        ext = torch.cat([ext, ext.flip(-1)], dim=-1)
        sol = torch.fft.irfft2(torch.fft.rfft2(ext) * self.inv, s=ext.shape[-2:])
        return sol[..., :self.h, :self.w]


@ARCH_REGISTRY.register()
class TVTV(FrozenBackboneMixin, ConsistentLayer):
    """TV-TV post-processing of a frozen SR backbone (Vella & Mota), with our exact projection.

    On Y (colour exactly as :class:`MCNetArch`: Cb/Cr from the backbone or from the bicubic-upsampled
    LR, 1-channel input is Y), with the backbone's estimate ``w`` and the LR Y ``b``::

        minimise  TV(x) + beta TV(x - w)   subject to  ||A x - b||_2 <= eps   (eps = 0: A x = b)

    TV is anisotropic (``||D x||_1``) or isotropic, D = forward differences with Neumann boundary.
    Solved by ADMM on the splitting ``z = x`` (z in S), ``d1 = D x``, ``d2 = D x - D w``, one penalty
    ``rho`` for all three, scaled duals ``(u0, u1, u2)``; every step is closed form::

        x  = (I + 2 D^T D)^{-1} [z - u0 + D^T (d1 - u1) + D^T (d2 + D w - u2)]     (exact, by FFT)
        z  = P_S(x + u0)                                   (the exact projection of mcnet_basicsr.ops)
        d1 = shrink(D x + u1, 1 / rho);  d2 = shrink(D x - D w + u2, beta / rho)
        u0 += x - z;  u1 += D x - d1;  u2 += D x - D w - d2

    started from ``x = z = P_S(w)``, ``d1 = D x``, ``d2 = D(x - w)``, zero duals. It runs a fixed
    number of iterations and returns the last ``z``, which is in ``S`` exactly (up to rounding, after a
    final float64 projection). :meth:`run` and :meth:`solve` return ``(x, info)``, ``info['forward']`` a
    :class:`~mcnet_basicsr.deq.SolverStats` with ``residual`` = the relative primal residual ``||x - z|| / ||z||``
    of the last iteration, and ``info['eps']``.

    Args:
        backbone (str | dict): The frozen SR network and how it is fed, as for :class:`MCNetArch`
            (``{net, path, param_key, input, channels}``, or a preset name / network options alone).
        operator (dict): Measurement operator options, e.g. ``{type: bicubic, scale: 2}``.
        backbone_dtype (str | None): Autocast dtype for the backbone on CUDA ('bf16'/'fp16'), as MCNetArch's
            setting. Default: None (float32).
        beta (float): Weight of ``TV(x - w)``, >= 0. Default: 1.0.
        rho (float): ADMM penalty, > 0 (Y in [0, 1]). Default: 300.0.
        iterations (int): Number of ADMM iterations. Default: 100 (with rho = 300 converged to PSNR and
            objective on Set5 x2; rho = 100 and 1000 converge more slowly; docs/benchmarks.md,
            "Measurements behind implementation choices").
        tv (str): 'anisotropic' or 'isotropic'. Default: 'anisotropic' (our reading of Vella & Mota's
            ``||D x||_1``; the two give about the same PSNR).
        eps (float | None): Radius of the consistency ball (Y in [0, 1], per image). Default: None.
        eps_rms (float | None): The same per LR pixel. At most one of ``eps``/``eps_rms``; neither
            means exact consistency (eps = 0).
        channels (str): 'y' or 'rgb' (each channel consistent, one solve per channel), as for MCNetArch.
            Default: 'y'.

    ``forward(lr, operator=None, noise_sigma=None)`` (the image) and ``run`` take the measurement of a batch as
    MCNetArch's do.
    """

    def __init__(self,
                 backbone,
                 operator,
                 backbone_dtype=None,
                 beta=1.0,
                 rho=300.0,
                 iterations=100,
                 tv='anisotropic',
                 eps=None,
                 eps_rms=None,
                 channels='y'):
        super().__init__(operator, channels, eps, eps_rms, rho)
        _check_iterations(iterations)
        if tv not in _TV_KINDS:
            raise ValueError(f'Unsupported tv {tv!r}. Supported ones are: {_TV_KINDS}.')
        if not beta >= 0:
            raise ValueError(f'beta must be >= 0, got {beta}.')
        check_backbone_dtype(backbone_dtype)
        self.frozen = FrozenBackbone.from_options(backbone, self.scale, owner='TVTV')
        self.backbone_dtype = BACKBONE_DTYPES[backbone_dtype]
        self.beta, self.iterations, self.tv = float(beta), iterations, tv

    def extra_repr(self):
        return (f'scale={self.scale}, operator={self.operator!r}, {eps_repr(self.eps, self.eps_rms)}, '
                f'beta={self.beta}, rho={self.rho}, '
                f'iterations={self.iterations}, tv={self.tv!r}, backbone={type(self.backbone).__name__} (frozen)')

    def objective(self, x, w):
        """Per-sample ``TV(x) + beta TV(x - w)``."""
        return _tv(x, self.tv) + self.beta * _tv(x - w, self.tv)

    @torch.no_grad()
    def solve(self, w, b, iterations=None, operator=None, noise_sigma=None):
        """TV-TV ADMM from the estimate ``w`` (N, C, H, W) and measurements ``b`` by ``operator`` (default: this
        one's) with noise of std ``noise_sigma``: ``(z, info)``, the last ``z``, in S."""
        iterations = self.iterations if iterations is None else iterations
        _check_iterations(iterations)
        operator = self.measurement_operator(operator)
        b64, b = b, b.to(w.dtype)
        eps = self.consistency_radius(b, noise_sigma)
        solve_x = _NeumannSolver(w.shape[-2], w.shape[-1], 2.0, w.dtype, w.device)
        dw = _grad(w)
        z = operator.project(w, b, eps)
        x = z
        dx = _grad(x)
        d1, d2 = dx, dx - dw
        u0, u1, u2 = torch.zeros_like(x), torch.zeros_like(dx), torch.zeros_like(dx)
        trace = []
        for _ in range(iterations):
            x = solve_x(z - u0 + _grad_adjoint(d1 - u1 + d2 + dw - u2))
            dx = _grad(x)
            z = operator.project(x + u0, b, eps)
            d1 = _shrink(dx + u1, 1.0 / self.rho, self.tv)
            d2 = _shrink(dx - dw + u2, self.beta / self.rho, self.tv)
            u0 = u0 + x - z
            u1 = u1 + dx - d1
            u2 = u2 + dx - dw - d2
            trace.append((x - z).flatten(1).norm(dim=1) / (z.flatten(1).norm(dim=1) + 1e-12))
        info = {'forward': _stats(iterations, z.shape[0], trace[-1], trace, z.device), 'eps': eps}
        return self.consistent_output(z, b64, eps, operator), info

    def run(self, lr, operator=None, noise_sigma=None):
        """``(output, info)``: :meth:`forward`'s output and what its iterations did (``info`` of :meth:`solve`)."""
        check_lr('TVTV', lr)
        operator = self.measurement_operator(operator)
        w, cbcr = self.run_backbone(lr)
        return self.solve_channels(w, cbcr, lr, operator, noise_sigma)
