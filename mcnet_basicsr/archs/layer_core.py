"""The core that MCNetArch and the consistent baselines (PnPADMM, TVTV) share by inheritance.

:class:`ConsistentLayer` holds the measurement (the operator, the radius ``eps`` / ``eps_rms`` of the ball
``S = {x : ||A x - b||_2 <= eps}``, ``rho``) and what every consistent method does around its own solve: the operator
of a call, the radius for noisy measurements, the final float64 projection and the split of an image into the
problems ``channels`` makes consistent. :class:`ADMMLayer` adds the plug-and-play ADMM map on ``z = (x, lam)`` with a
denoiser ``R`` and a weight ``beta`` of the estimate ``w``::

    u = R(x + lam);  x+ = P_S[(beta w + rho (u - lam)) / (beta + rho)];  lam+ = lam + x+ - u

or, with the dual kept in the null space of A (``dual = 'null_space'``), ``lam+ = P_N(lam + x+ - u)``. A prior told
its level (``R(x, level)``) is given one; a colour prior denoises R, G and B together while each
channel keeps its own ball (:class:`ChannelBalls`).
"""
import torch
from torch import nn

from mcnet_basicsr.ops import build_operator, eps_from_rms, fold_channels, noisy_radius, repeat_samples, unfold_channels
from mcnet_basicsr.utils.color import luma, ycbcr_to_rgb
from mcnet_basicsr.utils.tiling import apply_tiled, denoiser_tile_overlap, needs_tiling

CHANNELS = ('y', 'rgb')
# where the ADMM dual lives: everywhere (the paper's map), or in the null space of A (ADMMLayer.dual)
DUALS = ('full', 'null_space')
# norm of the Y row of BT.601 (rgb_to_ycbcr): Gaussian noise of std sigma on each of R, G, B is noise of std
# sigma * LUMA_NOISE on Y
LUMA_NOISE = ((65.481**2 + 128.553**2 + 24.966**2)**0.5) / 255.0


def eps_repr(eps, eps_rms):
    """The radius setting as ``extra_repr`` shows it: ``eps_rms=...`` or ``eps=...`` (0 when neither is set)."""
    return f'eps_rms={eps_rms}' if eps_rms is not None else f'eps={eps or 0.0}'


def check_eps_options(eps, eps_rms):
    """Validate the consistency radius options (``eps`` or ``eps_rms``)."""
    if eps is not None and eps_rms is not None:
        raise ValueError(f'Give either eps or eps_rms, not both (got eps={eps!r}, eps_rms={eps_rms!r}).')
    for name, value in (('eps', eps), ('eps_rms', eps_rms)):
        if value is not None and value < 0:
            raise ValueError(f'{name} must be >= 0, got {value}.')


def check_lr(name, lr):
    """ValueError unless ``lr`` is a batch of LR images (N, 1 or 3, h, w)."""
    if lr.dim() != 4 or lr.shape[1] not in (1, 3):
        raise ValueError(f'{name} expects LR images (N, 1 or 3, h, w); got shape {tuple(lr.shape)}.')


class ChannelBalls:
    """The operator of a solve on images (N, C, H, W) whose every channel has its own ball ``||A x_c - b_c|| <= eps``
    (eps one per sample and channel, (N C,), or one for all): ``A`` of each channel, and the projection with the
    channels folded into the batch for it alone.

    Args:
        operator: The measurement operator of the N samples.
        channels (int): C.
    """

    def __init__(self, operator, channels):
        self.per_channel, self.channels, self.scale = repeat_samples(operator, channels), channels, operator.scale

    def __call__(self, x):
        return unfold_channels(self.per_channel(fold_channels(x)), self.channels)

    def adjoint(self, y, hr_size=None):
        return unfold_channels(self.per_channel.adjoint(fold_channels(y), hr_size), self.channels)

    def project(self, x, b, eps):
        return unfold_channels(self.per_channel.project(fold_channels(x), fold_channels(b), eps), self.channels)

    def __repr__(self):
        return f'ChannelBalls({self.per_channel!r}, channels={self.channels})'


class ConsistentLayer(nn.Module):
    """A method whose output lies in ``S = {x : ||A x - b||_2 <= eps}`` for the measurement ``b`` of its input.

    Subclasses define ``solve(w, b, operator=None, noise_sigma=None) -> (x, info)`` (``x`` in S for one channel
    per sample) and ``run(lr, operator=None, noise_sigma=None) -> (image, info)``; :meth:`forward` is ``run``'s image.

    Args:
        operator (dict): Measurement operator options, e.g. ``{type: bicubic, scale: 2}``.
        channels (str): 'y' (consistency of Y, BT.601) or 'rgb' (of each of R, G, B, one solve per channel).
            Default: 'y'.
        eps (float | None): Radius of the ball (values in [0, 1], per image). Default: None.
        eps_rms (float | None): The same per LR value: ``eps = eps_rms * sqrt(#LR values)``. At most one of
            ``eps``/``eps_rms``; neither means exact consistency (eps = 0).
        rho (float): ADMM penalty, > 0. Default: 1.0.
    """

    # whether ``channels: rgb`` solves R, G and B as one problem (each channel on its own ball, :class:`ChannelBalls`)
    # rather than one problem per channel
    joint_channels = False

    def __init__(self, operator, channels='y', eps=None, eps_rms=None, rho=1.0):
        super().__init__()
        check_eps_options(eps, eps_rms)
        if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not rho > 0:
            raise ValueError(f'rho must be a number > 0, got {rho!r}.')
        if channels not in CHANNELS:
            raise ValueError(f'channels must be one of {CHANNELS}, got {channels!r}.')
        self.operator = build_operator(dict(operator))
        self.scale = self.operator.scale
        self.channels, self.eps, self.eps_rms, self.rho = channels, eps, eps_rms, float(rho)

    def forward(self, lr, operator=None, noise_sigma=None):
        """The output for LR ``lr`` measured by ``operator`` (default: the layer's) with noise of std ``noise_sigma``
        per LR value: the image of :meth:`run`."""
        return self.run(lr, operator, noise_sigma)[0]

    def consistency_radius(self, b, noise_sigma=None):
        """The eps of each ball of LR measurements ``b`` (N, C, h, w), one ball per sample and channel, carrying noise
        of std ``noise_sigma`` per value (None: none; a float or an (N,) tensor, then (N C,)): ``sqrt(eps^2 + sigma^2
        m)``, m values per channel."""
        m = b[0, 0].numel()
        if torch.is_tensor(noise_sigma) and noise_sigma.dim() == 1:
            noise_sigma = noise_sigma.repeat_interleave(b.shape[1])
        eps = eps_from_rms(self.eps_rms, m) if self.eps_rms is not None else float(self.eps or 0.0)
        return noisy_radius(eps, noise_sigma, m)

    def measurement_operator(self, operator=None):
        """The operator of a call: this layer's, or ``operator`` (an operator or its options) at this layer's scale."""
        if operator is None:
            return self.operator
        if hasattr(operator, 'keys'):
            operator = build_operator(operator)
        if getattr(operator, 'scale', None) != self.scale:
            raise ValueError(f'The operator of this batch downscales by {getattr(operator, "scale", None)!r}; this '
                             f'layer is for x{self.scale}.')
        return operator

    def consistent_output(self, x, b, eps, operator=None):
        """The output from a solve's last ``x`` (in S already): ``x`` projected once more in float64.

        Float32 rounding of a projection leaves ``||Ax - b||`` at ~1e-4 on a 256x256 LR image; projecting once more
        in float64 (with ``b`` at full precision) brings it to rounding of the output itself (~1e-6). ``x`` is in S
        already, so this changes neither value nor gradient beyond rounding.
        """
        if x.dtype == torch.float64:
            return x
        return self.measurement_operator(operator).project(x.double(), b.double(), eps).to(x.dtype)

    def per_channel(self, cbcr):
        """Whether R, G and B are solved apart (``channels: rgb`` and colour input, ``cbcr`` not None)."""
        return self.channels == 'rgb' and cbcr is not None

    def measured_problem(self, w, cbcr, lr, operator, noise_sigma=None):
        """``(w, b, operator, noise_sigma)`` of the solve that ``channels`` asks for on LR ``lr``.

        ``w``, ``cbcr``: an estimate at HR size (Y and chroma, or one channel and None). Per channel: one problem per
        channel of the RGB estimate, the operator's samples repeated for the channels (:attr:`joint_channels`: one
        problem of the RGB estimate, each channel on its own ball); else on Y (the noise of Y being
        ``sigma * 0.574`` for noise ``sigma`` on each of R, G, B). ``b`` is float64.
        """
        if self.per_channel(cbcr):
            c = lr.shape[1]
            if self.joint_channels:
                return self._image(w, cbcr), lr.double(), ChannelBalls(operator, c), noise_sigma
            if torch.is_tensor(noise_sigma) and noise_sigma.dim() == 1:
                noise_sigma = noise_sigma.repeat_interleave(c)
            return fold_channels(self._image(w, cbcr)), fold_channels(lr.double()), repeat_samples(operator, c), \
                noise_sigma
        if noise_sigma is not None and lr.shape[1] == 3:
            noise_sigma = noise_sigma * LUMA_NOISE
        return w, luma(lr.double()), operator, noise_sigma

    def measured_image(self, x, cbcr, lr):
        """The image like ``lr`` from the solution ``x`` of :meth:`measured_problem`."""
        if self.per_channel(cbcr):
            return (x if self.joint_channels else unfold_channels(x, lr.shape[1])).to(lr.dtype)
        return self._image(x.to(lr.dtype), cbcr)

    def solve_channels(self, w, cbcr, lr, operator, noise_sigma=None):
        """``(image, info)``: the solve of :meth:`measured_problem` (``info`` of :meth:`solve`), as an image like
        ``lr``."""
        w, b, operator, noise_sigma = self.measured_problem(w, cbcr, lr, operator, noise_sigma)
        x, info = self.solve_problem(w, b, operator, noise_sigma)
        return self.measured_image(x, cbcr, lr), info

    def solve_problem(self, w, b, operator, noise_sigma):
        """The solve :meth:`solve_channels` runs: ``self.solve`` on the estimate ``w`` and measurements ``b``."""
        return self.solve(w, b, operator=operator, noise_sigma=noise_sigma)

    @staticmethod
    def _image(x, cbcr):
        """The output from its Y ``x`` and the chroma ``cbcr`` (None for one-channel input)."""
        if cbcr is None:
            return x
        return ycbcr_to_rgb(torch.cat([x, cbcr], dim=1))


def check_dual(dual):
    """``dual`` if it is one of :data:`DUALS`, else ValueError."""
    if dual not in DUALS:
        raise ValueError(f'dual must be one of {DUALS}, got {dual!r}.')
    return dual


class ADMMLayer(ConsistentLayer):
    """A :class:`ConsistentLayer` iterating the plug-and-play ADMM map (see the module) with ``self.denoiser`` and
    ``self.beta`` (set by the subclass) and its dual in the space ``self.dual`` names.

    ``dual = 'null_space'`` keeps ``lam`` in the null space of A, ``P_N v`` being the projection of ``v`` onto
    ``{x : A x = 0}``. The part of ``lam`` that A sees changes no ``x+`` when eps = 0 (``P_S`` removes it); it only
    shifts the denoiser's input until ``R(x + lam)`` agrees with ``x`` there too. A denoiser that removes a measured
    component of every input keeps it growing, and the iterates drift with it (un-antialiased resizers with our
    FFDNet: docs/degradations.md). With the dual in the null space the fixed point is (eps = 0)
    ``x = x_b + P_N R(x + (beta / rho) P_N (w - x))``, ``x_b`` the least-norm solution of ``A x = b``: the prior
    decides what A does not see, the measurement what it sees (the split of null-space networks, Schwab et al.,
    Inverse Problems 2019).

    Args: those of :class:`ConsistentLayer`, and ``dual`` (str): 'full' or 'null_space'. Default: 'full'.
    """

    def __init__(self, operator, channels='y', eps=None, eps_rms=None, rho=1.0, dual='full'):
        super().__init__(operator, channels, eps, eps_rms, rho)
        self.dual = check_dual(dual)

    def denoise(self, x, tile=None, level=None):
        """The denoiser on ``x`` (HR), told ``level`` where not None (a prior told its level), on tiles of ``tile`` LR
        pixels when ``x`` is larger."""
        s = self.scale
        denoiser = self.denoiser if level is None else lambda t: self.denoiser(t, level)
        if tile is None or not needs_tiling(x, tile * s):
            return denoiser(x)
        if level is not None:
            raise ValueError(f'The denoiser {type(self.denoiser).__name__} runs on whole images; tiles of {tile} LR '
                             'pixels are for DnCNN priors.')
        return apply_tiled(denoiser, x, tile * s, denoiser_tile_overlap(s, self.denoiser) * s)

    def fixed_point_map(self, w, b, eps, tile=None, operator=None, beta=None, level=None):
        """F(z) for z = (x, lam) stacked on channels; closes over w, b, the parameters, the operator (default: the
        layer's), ``beta`` (a scalar or one per sample; default: the layer's) and the denoiser's ``level`` (for a prior
        told its level; None for one that is not)."""
        beta, rho, c = self.beta if beta is None else beta, self.rho, w.shape[1]
        project = self.measurement_operator(operator).project
        unmeasured = torch.zeros_like(b) if self.dual == 'null_space' else None  # P_N v = project(v, 0, 0)

        def f(z):
            x, lam = z[:, :c], z[:, c:]
            u = self.denoise(x + lam, tile, level)
            x_new = project((beta * w + rho * (u - lam)) / (beta + rho), b, eps)
            lam_new = lam + x_new - u
            if unmeasured is not None:
                lam_new = project(lam_new, unmeasured, 0.0)
            return torch.cat([x_new, lam_new], dim=1)

        # eps > 0: the projection finds its multiplier with host-side Newton steps, which a CUDA
        # graph cannot capture; eps = 0 (a python 0) is pure device work.
        f.capturable = not torch.is_tensor(eps) and eps == 0
        return f
