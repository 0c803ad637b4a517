import math

import torch
import torch.nn.functional as F
from torch import nn

from mcnet_basicsr.utils.checkpoint import read_checkpoint, strip_key_prefix
from mcnet_basicsr.utils.precision import num_threads
from mcnet_basicsr.utils.registration import ARCH_REGISTRY


# The exact spectral-norm estimate is hundreds of tiny (64 x 64) eigenproblems: threading them gains nothing, and
# where several trainings share a host, each process's default of one thread per core oversubscribes it so badly that
# the estimates stall training (docs/benchmarks.md, "Measurements behind implementation choices"). It runs on one
# thread, restored afterwards.
def _one_cpu_thread():
    return num_threads(1)


# Transfer functions of a (cout, cin, kh, kw) cross-correlation kernel on the n x n DFT grid, for the frequencies
# (fy, fx), fy < n, fx <= n // 2 (conjugate frequencies share singular values, so half the grid suffices). Tap
# (a, b) of F.conv2d acts at offset (a - kh // 2, b - kw // 2), so H(f) = sum_d W_d e^{+i 2 pi f.d / n}. Both are
# built from the taps directly: a 3x3 kernel has 9 of them, so this is cheaper than the FFT of a zero-padded
# n x n kernel, and the Gram matrix H^H H = sum_e C_e e^{+i 2 pi f.e / n} needs only the 25 products
# C_e = sum_{d' - d = e} W_d^T W_d' instead of a matrix product per frequency.
def _phases(n, offsets_y, offsets_x):
    fy = torch.arange(n, dtype=torch.float64)[:, None, None]
    fx = torch.arange(n // 2 + 1, dtype=torch.float64)[None, :, None]
    return (2 * math.pi / n) * (fy * offsets_y + fx * offsets_x)  # (n, n // 2 + 1, offsets)


def _gram_transfer(w, n):
    """``H(f)^H H(f)`` (``cin x cin``, complex128) on the half grid, from the kernel's autocorrelation."""
    cout, cin, kh, kw = w.shape
    taps = w.permute(2, 3, 0, 1).reshape(kh * kw, cout, cin)
    products = torch.einsum('doi,eoj->deij', taps, taps)  # W_d^T W_e for every pair of taps
    ay, ax = torch.arange(kh).repeat_interleave(kw), torch.arange(kw).repeat(kh)
    span_y, span_x = 2 * kh - 1, 2 * kw - 1  # offsets e = d' - d in [-(k-1), k-1]
    pair_offset = ((ay[None, :] - ay[:, None] + kh - 1) * span_x + (ax[None, :] - ax[:, None] + kw - 1)).flatten()
    corr = torch.zeros(span_y * span_x, cin * cin, dtype=w.dtype)
    corr.index_add_(0, pair_offset, products.reshape(-1, cin * cin))
    offsets = torch.arange(span_y * span_x)
    angle = _phases(n, offsets // span_x - (kh - 1), offsets % span_x - (kw - 1)).reshape(-1, span_y * span_x)
    gram = torch.complex(angle.cos() @ corr, angle.sin() @ corr)
    return gram.reshape(n, n // 2 + 1, cin, cin)


def _transfer_at(w, n, fy, fx):
    """``H(f)`` (``cout x cin``, complex128) at the one frequency (fy, fx)."""
    cout, cin, kh, kw = w.shape
    dy, dx = torch.meshgrid(torch.arange(kh) - kh // 2, torch.arange(kw) - kw // 2, indexing='ij')
    angle = (2 * math.pi / n) * (fy * dy + fx * dx).double()
    return torch.einsum('oiab,ab->oi', w.to(torch.complex128), torch.polar(torch.ones_like(angle), angle))


class _SpectralNormConv2d(nn.Conv2d):
    """3x3 (odd-size) convolution whose operator norm is bounded by ``bound`` on any input size.

    The norm is that of the *convolution operator*, not of the reshaped kernel matrix: power
    iteration runs on the convolution itself (forward: circular conv on an ``n x n`` grid;
    adjoint: circular correlation with the channel-transposed, flipped kernel). The norm of the
    circular convolution on n x n is the largest singular value of the kernel's transfer function
    over the n x n frequency grid; a zero-padded convolution on any image size is a compression
    of the infinite-domain operator, whose norm is the supremum over all frequencies, which that
    grid samples. ``sn_grid`` (default 32) makes the gap negligible.

    The effective kernel is ``weight * min(1, bound / sigma)``: weights already within the bound
    are used as trained. ``sigma = <u, K v>`` is differentiable in ``weight`` (u, v fixed), as in
    ``torch.nn.utils.spectral_norm``. The vectors only change in :meth:`power_iteration`, which
    the owner calls explicitly, so the operator stays fixed during a fixed-point solve.
    """

    def __init__(self, in_ch, out_ch, kernel_size, bias, bound, sn_grid=32):
        super().__init__(in_ch, out_ch, kernel_size, padding=kernel_size // 2, bias=bias)
        self.bound = bound
        # Power-iteration state is not saved: it is cheap to re-estimate and would triple the size
        # of a checkpoint. sn_sigma = 0 means "not estimated": the first use computes it exactly (exact_estimate).
        self.register_buffer('sn_v', torch.zeros(1, in_ch, sn_grid, sn_grid), persistent=False)
        self.register_buffer('sn_u', torch.zeros(1, out_ch, sn_grid, sn_grid), persistent=False)
        self.register_buffer('sn_sigma', torch.zeros(()), persistent=False)
        self.reset_power_iteration()

    @torch.no_grad()
    def reset_power_iteration(self):
        """Forget the estimate (sigma 0 = not estimated): the next one is :meth:`exact_estimate`,
        a function of the weights alone, not of this instance's history."""
        self.sn_v.zero_()
        self.sn_u.zero_()
        self.sn_sigma.zero_()

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        # new weights: the old estimate no longer applies, and its vectors must not seed the new one
        # (a loaded checkpoint would otherwise give outputs that depend on what this instance ran before)
        self.reset_power_iteration()

    def _circular(self, x, kernel):
        p = kernel.shape[-1] // 2
        return F.conv2d(F.pad(x, (p, p, p, p), mode='circular'), kernel)

    def _apply_op(self, v, weight):
        return self._circular(v, weight)

    def _apply_adjoint(self, u, weight):
        return self._circular(u, weight.transpose(0, 1).flip(2, 3))

    def _apply(self, fn, *args, **kwargs):
        # .to(device) / .cuda() / .cpu() give new storage with the same values: an exact estimate still describes
        # them (a dtype change rounds the weights, so there it is dropped), so a model estimated on the CPU and then
        # moved to the GPU is not estimated again
        exact, dtype = self.estimate_is_exact(), self.weight.dtype
        out = super()._apply(fn, *args, **kwargs)
        if exact and self.weight.dtype == dtype:
            self._exact_key = self._weight_key()
        return out

    def _weight_key(self):
        """Identity of the current weights and stored norm: any in-place change of either (or new
        storage) changes it, so an estimate keyed on it is known to describe them."""
        w, s = self.weight, self.sn_sigma
        return (w._version, w.data_ptr(), w.dtype, w.device, s._version, s.data_ptr())

    @torch.no_grad()
    def exact_estimate(self):
        """Set (u, v, sigma) to the exact top singular triple of the circular convolution on the grid.

        The 2-D DFT block-diagonalises a circular convolution: its singular values are those of the
        ``out x in`` transfer matrices at the grid frequencies (conjugate frequencies share them, so
        half the grid suffices). Power iteration is no substitute for a fresh estimate: the top
        singular values cluster, so it stalls short of the top one even once its relative change is tiny,
        and the bound is then that much too loose.
        """
        w = self.weight.detach()
        n = self.sn_v.shape[-1]
        # on the CPU: batched small (complex) eigen-solvers are far slower on a GPU
        with _one_cpu_thread():
            taps = w.double().cpu()
            # largest eigenvalue of the Gram matrix per frequency (Hermitian: cheaper than an SVD) -- of the
            # smaller one: H^H H (in x in) has the nonzero spectrum of H H^H (out x out), which is H^H H of the
            # adjoint, whose kernel is the channel-transposed, flipped one
            gram = _gram_transfer(taps if taps.shape[1] <= taps.shape[0] else taps.transpose(0, 1).flip(2, 3), n)
            top = torch.linalg.eigvalsh(gram)[..., -1]
            fy, fx = divmod(int(top.argmax()), top.shape[1])
            # then the top singular pair of the one transfer matrix that attains the maximum
            _, sv, vh = torch.linalg.svd(_transfer_at(taps, n, fy, fx))
            vhat = vh[0].conj()  # top right singular vector of H(f)
            vhat = vhat * (vhat[vhat.abs().argmax()].conj() / vhat.abs().max())  # phase: largest entry real
            grid = torch.arange(n, dtype=torch.float64)
            phase = torch.exp(1j * 2 * math.pi * (fy * grid[:, None] + fx * grid[None, :]) / n)
            v = (vhat[:, None, None] * phase).real[None]  # a real input on which K has gain sigma
        v = (v / v.norm()).to(device=w.device, dtype=self.sn_v.dtype)
        u = self._apply_op(v.to(w.dtype), w)
        self.sn_u.copy_(u / u.norm().clamp_min(1e-12))
        self.sn_v.copy_(v)
        self.sn_sigma.copy_(sv[0])
        self._exact_key = self._weight_key()
        return self.sn_sigma.clone()

    @torch.no_grad()
    def project_into_bound(self):
        """Scale the weights into the bound by the stored estimate; returns the factor (<= 1).

        The singular vectors do not change and sigma scales with the weights, so an exact estimate
        stays exact: the next eval-mode forward does not estimate this layer again."""
        was_exact = getattr(self, '_exact_key', None) == self._weight_key()
        factor = torch.clamp(self.bound / self.sn_sigma, max=1.0)
        self.weight.mul_(factor.to(self.weight.dtype))
        self.sn_sigma.mul_(factor)
        if was_exact:
            self._exact_key = self._weight_key()
        return factor

    def estimate_is_exact(self):
        """True when (u, v, sigma) came from :meth:`exact_estimate` on the current weights and sigma
        was not changed since (other than by :meth:`project_into_bound`, which keeps it exact)."""
        return self.is_estimated() and getattr(self, '_exact_key', None) == self._weight_key()

    def is_estimated(self):
        """``sn_sigma > 0``. The value is read from the device only when the buffer changed since
        the last read (its in-place version counter or storage), so a forward pass on unchanged
        weights never waits for the GPU: that is what lets a fixed-point solve be captured in a CUDA
        graph, and it saves six host syncs per DnCNN6 call besides."""
        key = (self.sn_sigma._version, self.sn_sigma.data_ptr())
        cached = getattr(self, '_sigma_read', None)
        if cached is None or cached[0] != key:
            cached = self._sigma_read = (key, float(self.sn_sigma) > 0)
        return cached[1]

    @torch.no_grad()
    def power_iteration(self, max_iter=1, tol=None):
        """Refine (u, v) in place; stop early when sigma changes by less than ``tol`` (relative).
        A layer never estimated (fresh weights) gets :meth:`exact_estimate` instead."""
        if not self.is_estimated():
            return self.exact_estimate()
        w = self.weight.detach()
        v = self.sn_v.to(w.dtype)
        sigma_old = None
        for _ in range(max_iter):
            u = self._apply_op(v, w)
            u = u / u.norm().clamp_min(1e-12)
            v = self._apply_adjoint(u, w)
            sigma = v.norm()
            v = v / sigma.clamp_min(1e-12)
            if tol is not None and sigma_old is not None and abs(sigma - sigma_old) <= tol * sigma:
                break
            sigma_old = sigma
        self.sn_u.copy_(u)
        self.sn_v.copy_(v)
        self.sn_sigma.copy_(sigma)
        return sigma

    def sigma(self):
        """Differentiable estimate <u, K v> of the operator norm."""
        return (self.sn_u.to(self.weight.dtype) * self._apply_op(self.sn_v.to(self.weight.dtype), self.weight)).sum()

    def normalized_weight(self):
        if torch.is_grad_enabled() and self.weight.requires_grad:
            sigma = self.sigma()  # gradient flows through the normalisation
        else:  # no graph needed (e.g. inside a fixed-point solve): the stored estimate, no extra conv
            if not self.is_estimated():
                raise RuntimeError('spectral norm not estimated yet: call power_iteration() '
                                   '(DnCNN does it in forward).')
            sigma = self.sn_sigma.to(self.weight.dtype)
        return self.weight * torch.clamp(self.bound / sigma, max=1.0)

    def forward(self, x):
        return F.conv2d(x, self.normalized_weight(), self.bias, padding=self.padding)


@ARCH_REGISTRY.register()
class DnCNN(nn.Module):
    """DnCNN denoiser (Zhang et al. 2017), optionally spectrally normalised (Ryu et al. 2019).

    ``depth`` convolutions: conv-ReLU, (depth-2) x conv[-BN]-ReLU, conv. With ``residual`` the
    output is ``x - net(x)`` (the network predicts the noise). With ``spectral_norm`` every
    convolution is bounded by ``lipschitz ** (1 / depth)`` as an operator, so the noise branch
    ``net`` is ``lipschitz``-Lipschitz (ReLU is 1-Lipschitz); this is what makes MCNet's
    fixed-point map well behaved. ``spectral_norm`` together with ``batch_norm`` is Ryu et al.'s
    RealSN-DnCNN (bounded convolutions, plain BatchNorm between them): the per-channel BN scale
    ``gamma / sqrt(running_var)`` is not bounded, so that network has no Lipschitz guarantee
    (``lipschitz_bounded`` is False; MCNetArch refuses it) -- it is the paper's PnP baseline
    denoiser, whose BN is what lets 17 bounded layers train at all (without it the signal dies
    out through 16 ReLUs and the network stays the identity). Layer indices in ``self.dncnn`` follow the common DnCNN
    layout, so state dicts of the MCNet authors' DnCNN6 and of Ryu et al.'s DnCNN17 map by name
    (see :func:`convert_dncnn_state_dict`).

    Args:
        num_in_ch (int): Input (= output) channels. Default: 1.
        num_feat (int): Channel number of intermediate features. Default: 64.
        depth (int): Number of convolutions. Default: 6 (MCNet's DnCNN6; 17 for classic DnCNN).
        bias (bool): Convolutions with bias. Default: False.
        batch_norm (bool): BatchNorm after the middle convolutions. Default: False.
        residual (bool): Output ``x - net(x)``. Default: True.
        spectral_norm (bool): Bound each convolution's operator norm. Default: True.
        lipschitz (float): Bound on the Lipschitz constant of the noise branch. Default: 0.9.
        sn_grid (int): Grid size of the power iteration. Default: 32.
        sn_iters_train (int): Power iterations per forward in training mode. Default: 1.
            A layer never estimated before (fresh weights), and in eval mode any layer whose
            weights changed, is estimated exactly from the DFT of its kernel instead.
    """

    def __init__(self,
                 num_in_ch=1,
                 num_feat=64,
                 depth=6,
                 bias=False,
                 batch_norm=False,
                 residual=True,
                 spectral_norm=True,
                 lipschitz=0.9,
                 sn_grid=32,
                 sn_iters_train=1):
        super().__init__()
        if depth < 2:
            raise ValueError(f'DnCNN depth must be >= 2, got {depth}.')
        if spectral_norm and not 0 < lipschitz:
            raise ValueError(f'lipschitz must be positive, got {lipschitz}.')
        self.residual = residual
        self.spectral_norm = spectral_norm
        self.lipschitz_bounded = spectral_norm and not batch_norm
        self.lipschitz = lipschitz
        self.sn_iters_train = sn_iters_train
        # When False, the owner (e.g. MCNetArch) calls update_spectral_norm() itself, once per
        # solve, so that the operator does not change between fixed-point iterations.
        self.auto_update_spectral_norm = True
        per_layer = lipschitz**(1.0 / depth)

        def conv(cin, cout):
            if spectral_norm:
                return _SpectralNormConv2d(cin, cout, 3, bias, per_layer, sn_grid)
            return nn.Conv2d(cin, cout, 3, padding=1, bias=bias)

        layers = [conv(num_in_ch, num_feat), nn.ReLU(inplace=True)]
        for _ in range(depth - 2):
            layers.append(conv(num_feat, num_feat))
            if batch_norm:
                layers.append(nn.BatchNorm2d(num_feat))
            layers.append(nn.ReLU(inplace=True))
        layers.append(conv(num_feat, num_in_ch))
        self.dncnn = nn.Sequential(*layers)
        for m in self.dncnn:
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, nonlinearity='relu')
                m.weight.data.mul_(0.5)  # start inside the bound rather than on it
        if spectral_norm and batch_norm:
            # Start near the identity (noise estimate ~0). A kernel clipped to its bound is invariant
            # to its own scale, so the gradient cannot shrink it, and BN hands the last conv unit-scale
            # features: from the bound the noise estimate stays far too large for hundreds of steps
            # (docs/benchmarks.md, "Measurements behind implementation choices"). Without BN (DnCNN6) this
            # slowed learning slightly, so it is not done there.
            self.dncnn[-1].weight.data.mul_(0.05)

    def sn_convs(self):
        return [m for m in self.dncnn if isinstance(m, _SpectralNormConv2d)]

    def sn_convs_with_bn(self):
        """``(conv, bn)`` per spectrally normalised convolution; ``bn`` is the BatchNorm right after
        it, or None."""
        layers = list(self.dncnn)
        return [(m, layers[i + 1] if i + 1 < len(layers) and isinstance(layers[i + 1], nn.BatchNorm2d) else None)
                for i, m in enumerate(layers) if isinstance(m, _SpectralNormConv2d)]

    @torch.no_grad()
    def update_spectral_norm(self, max_iter=None, tol=None):
        """Power iteration on every convolution (warm-started from the stored vectors).

        In eval mode (``max_iter`` not given), a layer whose weights changed since its last exact
        estimate gets a new one (:meth:`_SpectralNormConv2d.exact_estimate`) and the others are left
        as they are: in training the vectors only track the weights (one step per iteration) and can
        sit on the wrong singular value."""
        if max_iter is None:
            if not self.training:  # exact already: power iteration could only add float32 rounding
                return [m.sn_sigma.clone() if m.estimate_is_exact() else m.exact_estimate() for m in self.sn_convs()]
            max_iter, tol = self.sn_iters_train, None
        return [m.power_iteration(max_iter, tol) for m in self.sn_convs()]

    def layer_bounds(self):
        """Per-convolution (estimated operator norm, effective norm after the bound)."""
        out = []
        for m in self.sn_convs():
            s = float(m.sn_sigma)
            out.append((s, min(s, m.bound)))
        return out

    def noise(self, x):
        return self.dncnn(x)

    def forward(self, x):
        if self.spectral_norm and self.auto_update_spectral_norm:
            self.update_spectral_norm()
        n = self.dncnn(x)
        return x - n if self.residual else n


def convert_dncnn_state_dict(state_dict):
    """Map DnCNN checkpoints of other layouts onto :class:`DnCNN`'s keys.

    Accepts our own (``dncnn.<i>.weight``), BasicSR checkpoints (``params`` / ``params_ema``),
    the MCNet authors' DnCNN6 (``dncnn.<i>.{weight_orig, weight, weight_u}``, ``weight`` being
    the already-normalised kernel, optionally under ``f.dncnn.`` in their trained layers) and
    Ryu et al.'s DnCNN17 (``module.dncnn.<i>.*`` with BatchNorm). Returns a plain state dict with
    ``dncnn.*`` keys (power-iteration buffers are recomputed by the arch).
    """
    for key in ('params_ema', 'params', 'state_dict', 'model'):
        if isinstance(state_dict.get(key), dict):
            state_dict = state_dict[key]
            break
    out = {}
    for k, v in strip_key_prefix(state_dict, 'module.').items():
        if not torch.is_tensor(v):
            continue
        idx = k.find('dncnn.')
        if idx < 0:
            continue
        k = k[idx:]
        while k.startswith('dncnn.dncnn.'):
            k = k[len('dncnn.'):]
        if k.endswith(('.weight_orig', '.weight_u', '.weight_v')) or '.sn_' in k:
            continue
        out[k] = v
    if not out:
        raise KeyError(f'No DnCNN weights (keys containing "dncnn.") in this checkpoint; '
                       f'keys: {list(state_dict)[:8]}...')
    return out


def load_dncnn(net, path):
    """Load a DnCNN checkpoint of any layout :func:`convert_dncnn_state_dict` knows, strictly."""
    sd = convert_dncnn_state_dict(read_checkpoint(path))
    # Check names and shapes first: a different depth moves the last conv to another index, and
    # load_state_dict would stop at that size mismatch with a RuntimeError that names neither depth.
    own = net.state_dict()
    missing = [k for k in own if k not in sd]
    unexpected = [k for k in sd if k not in own]
    mismatched = [f'{k}: {tuple(sd[k].shape)} vs {tuple(own[k].shape)}' for k in sd
                  if k in own and sd[k].shape != own[k].shape]
    if missing or unexpected or mismatched:
        ckpt_depth = sum(1 for k, v in sd.items() if k.endswith('.weight') and v.dim() == 4)
        raise KeyError(f'{path}: checkpoint (DnCNN with {ckpt_depth} convolutions) does not fit '
                       f'DnCNN(depth={sum(isinstance(m, nn.Conv2d) for m in net.dncnn)}): missing {missing}, '
                       f'unexpected {unexpected}, shape mismatch (checkpoint vs model) {mismatched}.')
    net.load_state_dict(sd, strict=True)
    return net


def jacobian_spectral_norm(fn, x, iters=30, seed=0):
    """Largest singular value of the Jacobian of ``fn`` at ``x`` (power iteration on J^T J).

    A local Lipschitz estimate for a denoiser or a fixed-point map; uses forward- and
    reverse-mode products from ``torch.func`` so no Jacobian is formed.
    """
    g = torch.Generator(device='cpu').manual_seed(seed)
    v = torch.randn(x.shape, generator=g).to(x)
    v = v / v.norm()
    _, vjp_fn = torch.func.vjp(fn, x)
    sigma = torch.zeros((), dtype=x.dtype, device=x.device)
    for _ in range(iters):
        _, jv = torch.func.jvp(fn, (x, ), (v, ))
        (jtjv, ) = vjp_fn(jv)
        sigma = jv.norm()
        v = jtjv / jtjv.norm().clamp_min(1e-30)
    return float(sigma.detach())
