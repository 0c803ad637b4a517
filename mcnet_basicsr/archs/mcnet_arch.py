"""MCNetArch: the network of MCNet. Its parts live beside it: the measurement and the ADMM map in ``layer_core``,
the frozen backbone in ``frozen_backbone``, the checkpoint record in ``layer_records``, how it runs in
``layer_settings``, beta and the prior's level per solve in ``layer_hyper`` and its grouped options in
``layer_options`` and ``learned_start_arch``."""
import math

import torch
from torch import nn

from mcnet_basicsr.deq import BackwardStatsHolder, implicit_fixed_point, solve
from mcnet_basicsr.utils.precision import tf32
from mcnet_basicsr.utils.registration import ARCH_REGISTRY
from mcnet_basicsr.utils.tiling import apply_tiled, needs_tiling
from .frozen_backbone import FrozenBackbone, FrozenBackboneMixin
from .layer_core import ADMMLayer, check_lr, eps_repr
from .layer_hyper import LayerHyper, SolveWeightsMixin
from .layer_options import BetaOptions, DenoiserOptions
from .layer_prior import PriorMixin, build_prior
from .layer_records import LayerRecordMixin, keep_own
from .layer_settings import LayerSettings, SettingsMixin
from .learned_start_arch import StartOptions, build_start_network, load_start_network


@ARCH_REGISTRY.register()
class MCNetArch(SettingsMixin, FrozenBackboneMixin, LayerRecordMixin, SolveWeightsMixin, PriorMixin, ADMMLayer):
    """MCNet: a frozen SR backbone followed by a measurement-consistent implicit layer.

    Given LR ``b`` and the backbone's estimate ``w`` (Y channel), the layer returns the fixed
    point of PnP-ADMM for ``min_x f(x) + beta/2 ||x - w||^2  s.t.  ||A x - b||_2 <= eps`` with
    ``prox_f`` replaced by a denoiser R. On ``z = (x, lam)``, with ``rho > 0``::

        u = R(x + lam);  x+ = P_S[(beta w + rho (u - lam)) / (beta + rho)];  lam+ = lam + x+ - u

    (``dual: null_space``: ``lam+ = P_N(lam + x+ - u)``) from ``x0 = P_S(w)``, ``lam0 = 0``. The output ``x*`` comes
    from one final application of the map, so it ends with the exact projection ``P_S``: ``||A x* - b|| <= eps`` holds
    up to rounding whatever the solver did. Forward solve: Anderson without graph; backward: implicit function theorem
    (``mcnet_basicsr.deq``). Learned: the denoiser and ``beta > 0`` (stored as ``log_beta``).

    RGB input, ``channels: y`` (the paper's): the layer works on Y (BT.601, as BasicSR's metrics), Cb/Cr come from
    the backbone (RGB backbones) or from the MATLAB-bicubic-upsampled LR (Y backbones such as SRCNN). ``channels:
    rgb``: R, G and B are each made consistent, ``||A x_c - b_c|| <= eps`` for every channel c, by one solve per
    channel (the same denoiser on each; the backbone's RGB estimate is w). One-channel input is treated as Y
    throughout and the output is Y.

    R is a DnCNN (one noise level) or a prior told its level (``R(x, level)``, e.g. FFDNet;
    :mod:`~mcnet_basicsr.archs.layer_prior`): ``level(sigma) = sqrt(exp(2 a) + exp(2 c) sigma^2)`` for each sample's
    LR noise (a, c learned). A colour prior (``channels: rgb`` only) denoises R, G and B together, each channel
    projected onto its own ball. A non-blind backbone (``forward(lr, kernel, scale, sigma)``, e.g. USRNet) is told the
    kernel of the call's operator, its scale and ``noise_sigma``.

    ``forward(lr, operator=None, noise_sigma=None)`` returns the image (what BasicSR calls);
    ``run(lr, operator=None, noise_sigma=None, settings=None)`` returns ``(image, info)``, ``info`` holding ``forward``
    (:class:`~mcnet_basicsr.deq.SolverStats`), ``backward`` (:class:`~mcnet_basicsr.deq.BackwardStatsHolder`, filled
    when the implicit backward runs) and ``eps`` (the radius used). Both take the measurement of this batch where it
    differs from the constructor's: ``operator`` an operator object or options (same scale; e.g. the blur kernel that
    made this LR, one kernel per sample, or a :class:`~mcnet_basicsr.ops.StackedOperator`), ``noise_sigma`` the
    standard deviation of Gaussian noise on each LR value (a float or a per-sample (N,) tensor, images in [0, 1]),
    which widens the ball to ``sqrt(eps^2 + sigma^2 m)`` (:func:`~mcnet_basicsr.ops.noisy_radius`; m values per
    channel, and on Y the noise of Y, ``sigma * 0.574``).

    How the layer runs (tiles, precision, extrapolation, solvers, an observer) is a
    :class:`~mcnet_basicsr.archs.layer_settings.LayerSettings`: the ``settings`` option, changed for one call
    (``run(..., settings={...})``, ``solve(..., settings={...})``) or for a block (``with net.settings(tile=256):``,
    restored on exit); :attr:`layer_settings` is the one in force.

    Args:
        backbone (str | dict): The frozen SR network and how it is fed: ``{net, path, param_key, input, channels}``
            (:class:`~mcnet_basicsr.archs.frozen_backbone.BackboneOptions`); a preset name ('srcnn', 'imdn', ...,
            built at the operator's scale) or network options alone stand for ``{net: ...}``.
        operator (dict): Measurement operator options, e.g. ``{type: bicubic, scale: 2}``.
        channels (str): 'y' (consistency of Y, the paper's) or 'rgb' (of each of R, G, B). Default: 'y'.
        eps (float | None): Radius of the consistency ball ``||A x - b||_2 <= eps`` (Y in [0,1],
            per image). Default: None.
        eps_rms (float | None): The same per LR pixel: ``eps = eps_rms * sqrt(#LR pixels)``.
            Give at most one of ``eps``/``eps_rms``; neither means exact consistency (eps = 0).
        rho (float): ADMM penalty, > 0. Default: 1.0.
        dual (str): 'full' (default) or 'null_space' (a map with its own fixed point; :class:`~.layer_core.ADMMLayer`).
        beta (float | dict | BetaOptions | None): The initial beta, or ``{init, learn, noise, slope}``
            (:class:`~mcnet_basicsr.archs.layer_options.BetaOptions`: 0.01, learned, independent of noise). Default:
            None (the defaults).
        denoiser (dict | DenoiserOptions | None): The prior R, ``{arch, level, <its options>, path}``
            (:class:`~mcnet_basicsr.archs.layer_options.DenoiserOptions`): options of DnCNN and ``path``, its
            checkpoint (any layout ``load_dncnn`` accepts), or ``arch: FFDNet`` with its initial ``level`` (a prior
            told its level). Default: DnCNN6 (64 ch, no bias, no BN, residual, spectrally normalised), random
            weights.
        start (dict | StartOptions | None): A learned start ``{depth, num_feat, path}``
            (:class:`~mcnet_basicsr.archs.learned_start_arch.StartOptions`): the solve starts from
            ``x0 = P_S(g(P_S(w)))``, ``lam0 = 0``. The map and its fixed point are the same; a start nearer the fixed
            point needs fewer iterations (fitted by :class:`~mcnet_basicsr.models.MCNetStartModel`; not trained with
            the layer). A layer checkpoint without ``start.*`` entries loads strictly and keeps this start. Default:
            None (``x0 = P_S(w)``).
        hyper (dict | None): A hyper-network ``{hidden}``
            (:class:`~mcnet_basicsr.archs.layer_hyper.LayerHyper`) that multiplies beta and the prior's level of each
            sample by ``exp`` of a function of its noise level, the scale and its operator's aliased spectrum, learned
            with the layer; it starts at zero (the same layer). A layer checkpoint without ``hyper.*`` entries loads
            strictly and starts it there. Default: None (beta and the level depend on the noise alone).
        settings (dict | LayerSettings | None): How the layer runs
            (:class:`~mcnet_basicsr.archs.layer_settings.LayerSettings`: ``tile``, ``allow_tf32``,
            ``backbone_dtype``, ``extrapolation``, ``solver: {forward: {...}, backward: {...}}``). Default: None
            (the defaults: whole images, float32, no extrapolation, ``SolverConfig()`` both ways).
    """

    def __init__(self,
                 backbone,
                 operator,
                 channels='y',
                 eps=None,
                 eps_rms=None,
                 rho=1.0,
                 beta=None,
                 denoiser=None,
                 start=None,
                 hyper=None,
                 settings=None,
                 dual='full'):
        super().__init__(operator, channels, eps, eps_rms, rho, dual)
        beta = BetaOptions.from_options(beta)
        denoiser = DenoiserOptions.from_options('denoiser', denoiser)
        start = None if start is None else StartOptions.from_options(start)
        self._settings = LayerSettings.from_options(settings)
        self.frozen = FrozenBackbone.from_options(backbone, self.scale, owner='MCNetArch')
        self.log_beta = nn.Parameter(torch.tensor(math.log(beta.init)), requires_grad=beta.learn)
        self.log_beta_slope = nn.Parameter(torch.tensor(beta.slope), requires_grad=beta.learn) if beta.noise else None

        self.denoiser, self.prior_level = build_prior(denoiser)
        if getattr(self.denoiser, 'colour', False) and channels != 'rgb':
            raise ValueError(f'The colour prior {denoiser.arch} denoises R, G and B together: it needs channels: rgb, '
                             f'got {channels!r}.')
        self.start = None if start is None else build_start_network(start)
        if start is not None and start.path is not None:
            load_start_network(self.start, start.path)
        if self.start is not None:
            self.register_load_state_dict_post_hook(keep_own('start'))
        if hyper is not None and (not isinstance(hyper, dict) or set(hyper) - {'hidden'}):
            raise ValueError(f'hyper must be a dict of {{hidden}} or None, got {hyper!r}.')
        self.hyper = None if hyper is None else LayerHyper(**hyper)
        if self.hyper is not None:
            self.register_load_state_dict_post_hook(keep_own('hyper'))

    def extra_repr(self):
        return (f'scale={self.scale}, operator={self.operator!r}, channels={self.channels!r}, '
                f'{eps_repr(self.eps, self.eps_rms)}, rho={self.rho}, dual={self.dual!r}, '
                f'backbone={type(self.backbone).__name__} (frozen, not in state_dict)')

    def backbone_estimate(self, lr, settings=None, operator=None, noise_sigma=None):
        """:meth:`run_backbone` under the settings in force (or this call's ``settings``, as :meth:`run` takes them):
        on ``tile`` x ``tile`` LR tiles when the image is larger, under ``allow_tf32``. A non-blind backbone is told
        ``operator`` (default: the layer's) and ``noise_sigma``."""
        with self._call_settings(settings) as s, tf32(s.allow_tf32):
            return self.frozen.estimate(lr, s.autocast_dtype, s.tile, self.measurement_operator(operator), noise_sigma)

    def start_guess(self, x0, tile=None):
        """The learned start's guess of the fixed point from ``x0 = P_S(w)`` (HR; before projection), on tiles of
        ``tile`` LR pixels when ``x0`` is larger."""
        s = self.scale
        if tile is None or not needs_tiling(x0, tile * s):
            return self.start(x0)
        return apply_tiled(self.start, x0, tile * s, (math.ceil(len(self.start.dncnn) / s) + 1) * s)

    def start_point(self, x0, b, eps, tile=None, operator=None):
        """The learned start's guess from ``x0 = P_S(w)``, projected onto S: where a solve begins."""
        return self.measurement_operator(operator).project(self.start_guess(x0, tile), b, eps)

    def fixed_point_problem(self, w, b, tile=None, x0=None, operator=None, noise_sigma=None):
        """(F, z0, eps) of one solve: the map on ``z = (x, lam)``, its start ``(x0, 0)`` and the radius.

        ``x0`` (an image in S) defaults to ``P_S(w)``, or to the learned start's projected guess from it. Refreshes
        the denoiser's spectral-norm estimate first, once per solve, so that F does not change while it is solved.
        """
        operator = self.measurement_operator(operator)
        eps = self.consistency_radius(b, noise_sigma)
        self.refresh_prior()
        if x0 is None:
            with torch.no_grad():
                x0 = operator.project(w, b, eps)
                if self.start is not None:
                    x0 = self.start_point(x0, b, eps, tile, operator)
        z0 = torch.cat([x0, torch.zeros_like(x0)], dim=1)
        beta, level = self.solve_weights(w, operator, noise_sigma)
        f = self.fixed_point_map(w, b, eps, tile, operator=operator, beta=beta, level=level)
        return f, z0, eps

    def solve(self, w, b, operator=None, noise_sigma=None, settings=None):
        """The implicit layer alone: ``(x*, info)`` from the backbone estimate w and LR measurements b (Y, or one
        channel per sample), measured by ``operator`` (default: the layer's) with noise of std ``noise_sigma`` per LR
        value, under the settings in force or this call's ``settings`` (changes as a dict, or a LayerSettings).
        ``info``: ``forward`` (SolverStats of the forward solve), ``backward`` (BackwardStatsHolder), ``eps``, and
        ``map`` and ``fixed_point``: the solve's map F on ``z = (x, lam)`` and where the solve ended (detached).

        ``b`` may be float64 (as :meth:`run` passes it): the iterations run in ``w``'s dtype and the final projection
        uses ``b`` at full precision, so the output's consistency is not limited by float32 rounding of ``b``.
        Runs under ``allow_tf32`` itself, as :meth:`backbone_estimate` does: callers that compose the pieces get the
        arch's precision, not the process default (TF32 keeps this solve from reaching a tight tolerance).
        """
        with self._call_settings(settings) as s, tf32(s.allow_tf32):
            return self._solve(w, b, self.measurement_operator(operator), noise_sigma, s)

    def _solve(self, w, b, operator, noise_sigma, s):
        b_exact, b = b, b.to(w.dtype)
        f, z0, eps = self.fixed_point_problem(w, b, s.tile, operator=operator, noise_sigma=noise_sigma)
        if s.extrapolation and not torch.is_grad_enabled():
            z_k, fz_k, fwd_stats = solve(f, z0, s.forward_solver, with_image=True, observer=s.observer)
            beta = self.solve_weights(w, operator, noise_sigma)[0]
            z, bwd = f(self.extrapolated_iterate(z_k, fz_k, beta)), BackwardStatsHolder()
        else:
            z, fwd_stats, bwd = implicit_fixed_point(f, z0, s.forward_solver, s.backward_solver, observer=s.observer)
        # map and fixed_point: what a Jacobian penalty in training measures (ContractionLoss)
        info = {'forward': fwd_stats, 'backward': bwd, 'eps': eps, 'map': f, 'fixed_point': z.detach()}
        return self.consistent_output(z[:, :w.shape[1]], b_exact, eps, operator), info

    def extrapolated_iterate(self, z, fz, beta=None):
        """``z + t (beta + rho) / beta (F(z) - z)``, ``t`` the settings' ``extrapolation``: where the output comes
        from when a solve stops at ``z`` (``fz = F(z)``; ``beta`` the solve's, default the layer's without noise)."""
        beta = (self.beta if beta is None else beta).detach()
        return torch.lerp(z, fz, (self._settings.extrapolation * (beta + self.rho) / beta).to(z))

    def run(self, lr, operator=None, noise_sigma=None, settings=None):
        """``(output, info)``: the layer's output and what its solve did (``info`` as :meth:`solve` returns
        it), under the settings in force or this call's ``settings`` (changes as a dict, or a LayerSettings)."""
        check_lr('MCNetArch', lr)
        operator = self.measurement_operator(operator)
        with self._call_settings(settings):
            w, cbcr = self.backbone_estimate(lr, operator=operator, noise_sigma=noise_sigma)
            return self.solve_channels(w, cbcr, lr, operator, noise_sigma)
