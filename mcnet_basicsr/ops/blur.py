"""Any 2-D blur kernel followed by decimation, circular boundary: an exact linear operator computed with FFTs.

``A x = D_s(k (*) x)`` per channel, where ``k (*) x`` is the circular convolution of
``scipy.ndimage.convolve(x, k, mode='wrap')`` (a true convolution, kernel origin at index ``k.shape // 2``, odd and
even kernel sizes) and ``D_s`` keeps pixel ``(offset, offset)`` of every ``s x s`` block (``offset = 0``:
``blurred[..., 0::s, 0::s]``, the classical degradation of USRNet's Table 1, Zhang, Van Gool & Timofte, CVPR 2020).

Polyphase form. Split x into its ``s^2`` polyphase components ``x_pq[i, j] = x[s i + p, s j + q]`` (LR-sized). The
circular kernel splits likewise into ``s^2`` LR kernels ``g_pq`` (offset included), and ``A x = sum_pq g_pq (*) x_pq``,
circular on the LR grid. In the LR Fourier basis (unnormalised DFT, ``^``):

* ``(A x)^ = sum_pq G_pq X_pq``, and ``A^T y`` has components ``conj(G_pq) Y``;
* ``A A^T`` is diagonal with eigenvalues ``d(v) = sum_pq |G_pq(v)|^2``, the mean over the ``s x s`` aliases of
  ``|K|^2`` on the HR grid (Zhao et al., "Fast single image super-resolution using a new analytical solution for
  l2-l2 problems", IEEE TIP 2016); the offset is a circular shift and leaves d unchanged;
* so the projection onto ``{z : ||A z - b||_2 <= eps}`` is, with ``R = (A x - b)^``,
  ``P(x)_pq^ = X_pq - conj(G_pq) c R``, ``c = 1 / d`` for ``eps = 0`` and ``c = mu / (1 + mu d)`` on the ball
  (``mu`` from :func:`~mcnet_basicsr.ops.secular.projection_coefficients`, the same secular solve as the separable
  operators'; Parseval: a component's energy is ``|R(v)|^2 / (h w)``).

One real FFT of x's components, one inverse and LR-sized products in between: the projection is exact to
floating-point rounding, nothing iterates in the image space. Real FFTs throughout (x, b and the kernels are real):
each spectrum keeps its ``w // 2 + 1`` non-redundant columns, and the energies count the others twice.

Near-zero aliased spectrum: a wide kernel at a small scale (or a motion blur) can have ``d(v)`` many orders of
magnitude below ``max(d)``, and a kernel whose spectrum vanishes on all ``s x s`` aliases of a frequency (a box of
width 2 s, say) has ``d(v) = 0`` there, which floating point gives as rounding noise: a correction ``R / d`` would be
that noise amplified. Components with ``d(v) <= floor * max(d)`` (per kernel) are treated as outside the range of A:
the projection does not correct them (the pseudo-inverse of ``A A^T`` drops them), so ``A P(x) = b`` holds exactly
on every other component and the residual left is the (tiny) part of ``A x - b`` on those. With ``eps > 0`` the ball
constrains the residual on the kept components: ``P(x) = x`` when that part is within ``eps``. The default was chosen
from the aliased spectra of USRNet's 12 kernels at x2-x4 (their min d / max d and float32 feasibility).

Cached per (HR size, dtype, device), in a small LRU on the instance: the polyphase spectra ``G_pq`` (products of the
taps' phase tables, in the input's dtype on its device: no FFT of a padded kernel) and ``d`` (float64, the LR DFT of
the kernel's autocorrelation at lags that are multiples of s).
"""
import collections
import math
import os

import numpy as np
import torch

from .base import DownsampleOperator
from .kernels import check_kernel, load_kernel
from .registry import OPERATOR_REGISTRY
from .secular import coefficients_and_inside

__all__ = ['BlurDownsample', 'DEFAULT_FLOOR', 'ReflectBlurDownsample', 'pad_kernel', 'reflect_pad']

#: relative floor on the aliased power spectrum ``d`` below which components count as outside the range of A
DEFAULT_FLOOR = 1e-12


def _phase_table(length, exponents, dtype, device):
    """``exp(-2 pi i e / length)`` for an integer array ``e``, reduced exactly mod ``length`` first (no angle
    accumulates rounding), in float64 and then cast to ``dtype`` (complex) on ``device``."""
    angle = (2.0 * math.pi / length) * np.mod(exponents, length)
    table = torch.from_numpy(np.cos(angle) - 1j * np.sin(angle))
    return table.to(device=device, dtype=dtype)


def _axis_taps(size, origin, scale, lr_length):
    """Which taps of a kernel axis of ``size`` taps fall in each polyphase component, and at which LR lag.

    Tap ``j`` sits at HR index ``m = j - origin`` of the circular kernel (offset folded into ``origin``); it belongs to
    component ``p = -m mod s`` at LR lag ``a = ((m + p) / s) mod lr_length``. Returns ``(taps, lags)``, both (s, t)
    integer arrays, ``t`` the most taps of a component; padding entries point at tap ``size`` (a zero row/column the
    caller appends) with lag 0.
    """
    m = np.arange(size) - origin
    phase = np.mod(-m, scale)
    lag = np.mod((m + phase) // scale, lr_length)
    width = max(1, max(int((phase == p).sum()) for p in range(scale)))
    taps = np.full((scale, width), size, dtype=np.int64)
    lags = np.zeros((scale, width), dtype=np.int64)
    for p in range(scale):
        members = np.flatnonzero(phase == p)
        taps[p, :len(members)], lags[p, :len(members)] = members, lag[members]
    return taps, lags


def pad_kernel(kernel, size):
    """``kernel`` (kh, kw) zero-padded to ``size`` x ``size`` with its origin (index ``shape // 2``) moved to
    ``size // 2``: the same blur. ValueError if it does not fit."""
    kh, kw = kernel.shape
    before = (size // 2 - kh // 2, size // 2 - kw // 2)
    after = (size - kh - before[0], size - kw - before[1])
    if min(before + after) < 0:
        raise ValueError(f'a {kh} x {kw} kernel does not fit a {size} x {size} one with its origin at the centre')
    return np.pad(kernel, ((before[0], after[0]), (before[1], after[1])))


@OPERATOR_REGISTRY.register('blur')
class BlurDownsample(DownsampleOperator):
    """Circular blur by any 2-D kernel, then decimation by ``scale`` (see the module docstring).

    Matches ``scipy.ndimage.convolve(x, kernel, mode='wrap')[offset::scale, offset::scale]`` per channel.

    Args:
        scale (int): decimation factor; HR sizes must be divisible by it.
        kernel (array-like | Tensor | str | PathLike): the blur kernel as given (not normalised; finite, sum > 0):
            (kh, kw) for every sample, or (N, kh, kw), one per sample of a batch of N images (a batch of another size
            is refused). A path is a kernel file read by :func:`~mcnet_basicsr.ops.kernels.load_kernel` (``.npy``,
            grayscale ``.png`` normalised to sum 1, ``.mat``).
        offset (int): which pixel of each ``scale x scale`` block is kept, ``0 <= offset < scale``. Default 0, the
            top-left one.
        floor (float): components of the aliased power spectrum with ``d <= floor * max(d)`` count as outside the
            range of A and are not corrected by :meth:`project`, ``0 <= floor < 1``. Default: ``DEFAULT_FLOOR``.
        index (int | None): with a ``.mat`` path, which kernel of its cell array (0-based). Default: None.
    """

    #: entries kept in the per-instance cache (one entry = the spectra of one HR size at one dtype/device)
    cache_size = 8
    #: on the CPU, batches of at most this many LR values per polyphase component take one FFT call for all components
    batched_numel = 2**16

    def __init__(self, scale, kernel, offset=0, floor=DEFAULT_FLOOR, index=None):
        super().__init__(scale)
        self.source = None
        if isinstance(kernel, (str, os.PathLike)):
            self.source = os.fspath(kernel)
            kernel = load_kernel(kernel, index)
        elif index is not None:
            raise ValueError(f'index={index!r} picks a kernel of a .mat file; it needs kernel to be a path, '
                             f'got {type(kernel).__name__}')
        self.kernel = check_kernel(kernel)
        self.index = index
        if isinstance(offset, bool) or int(offset) != offset or not 0 <= offset < self.scale:
            raise ValueError(f'offset must be an integer in [0, {self.scale}), got {offset!r}')
        self.offset = int(offset)
        floor = float(floor)
        if not 0 <= floor < 1:
            raise ValueError(f'floor must be in [0, 1), got {floor!r}')
        self.floor = floor
        self._power = collections.OrderedDict()  # (H, W) -> float64 numpy d, (Nk, h, w // 2 + 1)
        self._spectra = collections.OrderedDict()  # (H, W, dtype, device) -> dict of tensors

    @property
    def per_sample(self):
        """Whether the kernel is a stack (N, kh, kw), one per sample."""
        return self.kernel.ndim == 3

    def repeat_samples(self, repeats):
        """The operator of a batch in which each sample stands ``repeats`` times in a row (one per channel, for a
        layer that makes every channel consistent): itself for one kernel, the kernels repeated for a stack."""
        if not self.per_sample:
            return self
        return BlurDownsample(self.scale, np.repeat(self.kernel, repeats, axis=0), self.offset, self.floor)

    def circular_blur(self):
        """This operator with offset 0: itself, or for an offset ``o`` the kernel padded by ``2 o`` rows and columns
        after it (the kept pixel of each block then sees it where pixel ``(o, o)`` did): the form a network told a
        blur kernel and upper-left decimation takes (USRNet, FFDNetUnfolded)."""
        if self.offset == 0:
            return self
        pad = [(0, 0)] * (self.kernel.ndim - 2) + [(0, 2 * self.offset)] * 2
        return BlurDownsample(self.scale, np.pad(self.kernel, pad), 0, self.floor)

    # ------------------------------------------------------------------ spectra
    def _stack(self):
        return self.kernel.reshape(-1, *self.kernel.shape[-2:])

    def _check_size(self, hr_h, hr_w, n=None):
        """ValueError for an image smaller than the kernel, or (``n``) a batch without one kernel per image."""
        kh, kw = self.kernel.shape[-2:]
        if kh > hr_h or kw > hr_w:
            raise ValueError(f'kernel of size {kh}x{kw} is larger than the image {hr_h}x{hr_w}')
        if self.per_sample and n is not None and n != self.kernel.shape[0]:
            raise ValueError(f'{self.kernel.shape[0]} kernels (one per sample) for a batch of {n} images; a batch '
                             'needs one kernel per image (or build the operator with one (kh, kw) kernel)')

    def aliased_power(self, hr_h, hr_w):
        """``d``, the eigenvalues of ``A A^T`` on the half LR spectrum: float64 (Nk, h, w // 2 + 1), ``Nk = 1`` for
        one kernel. ``d(v) = sum_{i, j} a[s i, s j] exp(-2 pi i (v_h i / h + v_w j / w))`` with ``a`` the kernel's
        (linear) autocorrelation; real, since ``a`` is symmetric."""
        key = (int(hr_h), int(hr_w))
        power = self._power.get(key)
        if power is None:
            self._check_size(hr_h, hr_w)
            s = self.scale
            h, w = self.lr_size(hr_h, hr_w)
            kernels = self._stack()
            kh, kw = kernels.shape[-2:]
            shape = (2 * kh - 1, 2 * kw - 1)  # no wrap-around: the circular autocorrelation is the linear one
            spectrum = np.fft.rfft2(kernels, s=shape)
            auto = np.fft.irfft2(spectrum.real**2 + spectrum.imag**2, s=shape)
            lag_h = np.arange(-((kh - 1) // s), (kh - 1) // s + 1)
            lag_w = np.arange(-((kw - 1) // s), (kw - 1) // s + 1)
            sampled = auto[:, np.mod(s * lag_h, shape[0])][:, :, np.mod(s * lag_w, shape[1])]
            ang_h = (2 * np.pi / h) * np.mod(np.outer(np.arange(h), lag_h), h)
            ang_w = (2 * np.pi / w) * np.mod(np.outer(np.arange(w // 2 + 1), lag_w), w)
            power = (np.cos(ang_h) @ sampled @ np.cos(ang_w).T - np.sin(ang_h) @ sampled @ np.sin(ang_w).T)
            power.setflags(write=False)
            self._power[key] = power
            while len(self._power) > self.cache_size:
                self._power.popitem(last=False)
        else:
            self._power.move_to_end(key)
        return power

    def _polyphase_spectra(self, hr_h, hr_w, dtype, device):
        """``G_pq`` on the half LR spectrum, complex ``dtype`` on ``device``: (Nk, s * s, h, w // 2 + 1), component
        ``(p, q)`` at index ``p s + q``."""
        s = self.scale
        h, w = hr_h // s, hr_w // s
        kernels = self._stack()
        kh, kw = kernels.shape[-2:]
        taps_h, lags_h = _axis_taps(kh, kh // 2 + self.offset, s, h)
        taps_w, lags_w = _axis_taps(kw, kw // 2 + self.offset, s, w)
        padded = np.zeros((len(kernels), kh + 1, kw + 1))
        padded[:, :kh, :kw] = kernels
        sub = padded[:, taps_h[:, None, :, None], taps_w[None, :, None, :]]  # (Nk, s, s, t_h, t_w)
        sub = torch.from_numpy(sub).to(device=device, dtype=dtype)
        phase_h = _phase_table(h, lags_h[:, None, :] * np.arange(h)[None, :, None], dtype, device)  # (s, h, t_h)
        phase_w = _phase_table(w, lags_w[:, :, None] * np.arange(w // 2 + 1)[None, None, :], dtype, device)
        spectra = phase_h[:, None] @ (sub @ phase_w)  # (s, 1, h, t_h) @ (Nk, s, s, t_h, w // 2 + 1)
        return spectra.flatten(1, 2)

    def _entry(self, hr_h, hr_w, n, dtype, device):
        """The cached spectra of one HR size for a batch of ``n`` in ``dtype`` (float32 / float64) on ``device``."""
        self._check_size(hr_h, hr_w, n)
        key = (int(hr_h), int(hr_w), dtype, torch.device(device))
        entry = self._spectra.get(key)
        if entry is not None:
            self._spectra.move_to_end(key)
            return entry
        h, w = self.lr_size(hr_h, hr_w)
        complex_dtype = torch.complex128 if dtype == torch.float64 else torch.complex64
        spectra = self._polyphase_spectra(hr_h, hr_w, complex_dtype, device)
        power = torch.from_numpy(self.aliased_power(hr_h, hr_w).copy()).to(device)  # (Nk, h, wc) float64
        top = power.flatten(1).max(1).values[:, None, None]
        keep = power > self.floor * top
        stand_in = torch.where(keep, power, top)  # any positive value: those components get no energy
        weights = torch.full((w // 2 + 1, ), 2.0, dtype=torch.float64, device=device)
        weights[0] = 1.0
        if w % 2 == 0:
            weights[-1] = 1.0
        inv_power = torch.where(keep, 1.0 / stand_in, 0.0).to(dtype)
        energy_weights = keep * (weights / (h * w))  # Parseval, conjugate pairs, and no energy where dropped
        if self.per_sample:
            spectra, inv_power = spectra[:, None], inv_power[:, None]  # a channel axis to broadcast over
        else:  # one kernel for every sample: no kernel axis
            spectra, inv_power, keep = spectra[0], inv_power[0], keep[0]
            stand_in, energy_weights = stand_in[0], energy_weights[0]
        entry = {'spectra': spectra, 'inv_power': inv_power, 'sig': stand_in.flatten(-2),
                 'keep': None if bool(keep.all()) else keep.flatten(-2).to(torch.float64),
                 'energy_weights': energy_weights.flatten(-2)}
        self._spectra[key] = entry
        while len(self._spectra) > self.cache_size:
            self._spectra.popitem(last=False)
        return entry

    def clear_cache(self):
        """Drop all cached spectra (e.g. to free GPU memory)."""
        self._power.clear()
        self._spectra.clear()

    # ------------------------------------------------------------------ polyphase components
    def _chunk(self, device, numel):
        """How many polyphase components one FFT call takes, for ``numel`` values per component: all of them on an
        accelerator, where these calls are bound by kernel launches (one call launches each kernel once instead of
        ``s^2`` times), and for a small batch on the CPU; one on the CPU for a large image (there an FFT over a batch
        much larger than the caches is several times slower than a loop)."""
        return self.scale**2 if device.type != 'cpu' or numel <= self.batched_numel else 1

    def _split(self, x):
        """Half spectra of the polyphase components of x (N, C, H, W): a list of (N, C, chunk, h, w // 2 + 1), ``chunk``
        from :meth:`_chunk`."""
        n, c, hr_h, hr_w = x.shape
        s = self.scale
        chunk = self._chunk(x.device, x.numel() // s**2)
        parts = x.reshape(n, c, hr_h // s, s, hr_w // s, s).permute(0, 1, 3, 5, 2, 4)
        parts = parts.reshape(n, c, s * s, hr_h // s, hr_w // s)
        return [torch.fft.rfft2(part) for part in parts.split(chunk, dim=2)]

    def _merge(self, chunks, lr_w):
        """Inverse of :meth:`_split`: the (N, C, H, W) image whose components have the half spectra ``chunks``."""
        parts = [torch.fft.irfft2(chunk, s=(chunk.shape[-2], lr_w)) for chunk in chunks]
        parts = parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)
        n, c, _, h, w = parts.shape
        s = self.scale
        return parts.view(n, c, s, s, h, w).permute(0, 1, 4, 2, 5, 3).reshape(n, c, h * s, w * s)

    @staticmethod
    def _blurred(spectra, chunks):
        """``sum_pq G_pq X_pq`` (N, C, h, w // 2 + 1) from the components' half spectra ``chunks``."""
        total = None
        for g, part in zip(spectra.split(chunks[0].shape[2], dim=-3), chunks):
            if part.shape[2] == 1:
                g, part = g.squeeze(-3), part.squeeze(2)
                total = g * part if total is None else torch.addcmul(total, g, part)
            else:
                total = (g * part).sum(2) if total is None else total + (g * part).sum(2)
        return total

    @staticmethod
    def _work_dtype(t):
        return t.dtype if t.dtype in (torch.float32, torch.float64) else torch.float32

    # ------------------------------------------------------------------ A and A^T
    def forward(self, x):
        """``A x`` for an NCHW float tensor (H, W divisible by the scale); differentiable."""
        h, w = self._check_hr(x)
        dtype = self._work_dtype(x)
        entry = self._entry(x.shape[-2], x.shape[-1], x.shape[0], dtype, x.device)
        chunks = self._split(x.to(dtype))
        return torch.fft.irfft2(self._blurred(entry['spectra'], chunks), s=(h, w)).to(x.dtype)

    def adjoint(self, y, hr_size=None):
        """``A^T y`` for an NCHW LR tensor; HR size is ``scale *`` the LR size (or ``hr_size=(H, W)``)."""
        self._check_lr(y)
        hr_h, hr_w = self._hr_size(y, hr_size)
        dtype = self._work_dtype(y)
        entry = self._entry(hr_h, hr_w, y.shape[0], dtype, y.device)
        spectrum = torch.fft.rfft2(y.to(dtype))[:, :, None]
        chunk = self._chunk(y.device, y.numel())
        chunks = [g.conj() * spectrum for g in entry['spectra'].split(chunk, dim=-3)]
        return self._merge(chunks, y.shape[-1]).to(y.dtype)

    # ------------------------------------------------------------------ projection
    def project(self, x, b, eps=0.0):
        """Euclidean projection of ``x`` onto ``{z : ||A z - b||_2 <= eps}``, per sample.

        Components of the aliased spectrum below the floor are left uncorrected (module docstring): there the
        residual of the output is that of ``x``, and the ball constrains the residual on the other components.

        Args:
            x (Tensor): (N, C, H, W) float tensor.
            b (Tensor): (N, C, H / s, W / s) measurements (same dtype/device as x).
            eps (float | Tensor): radius, a python float or a per-sample tensor of shape (N,)
                (or 0-d); ``eps = 0`` gives the exact affine projection onto ``A z = b``.

        Returns:
            Tensor: the projection, same shape/dtype as ``x``. Differentiable w.r.t. ``x``, ``b`` and a tensor
            ``eps`` (for ``eps > 0`` through one differentiable Newton step for the multiplier at its root:
            :func:`~mcnet_basicsr.ops.secular.projection_coefficients`).
        """
        b = self._check_pair(x, b)
        n, h, w = x.shape[0], b.shape[-2], b.shape[-1]
        eps_t = self._eps_tensor(eps, n, x.device)
        dtype = self._work_dtype(x)
        entry = self._entry(x.shape[-2], x.shape[-1], n, dtype, x.device)
        spectra = entry['spectra']
        chunks = self._split(x.to(dtype))
        residual = self._blurred(spectra, chunks) - torch.fft.rfft2(b.to(dtype))  # (N, C, h, w // 2 + 1)
        inside = None
        if not torch.is_tensor(eps) and eps == 0:  # the common exact case: no multiplier
            coef = entry['inv_power']
        else:
            energy = torch.view_as_real(residual).to(torch.float64).square().sum((1, -1))  # (N, h, w // 2 + 1)
            energy = energy.flatten(1) * entry['energy_weights']
            coef, inside = coefficients_and_inside(energy, entry['sig'], eps_t)
            if entry['keep'] is not None:
                coef = coef * entry['keep']
            coef = coef.view(n, 1, h, -1).to(dtype)
        step = (coef * residual)[:, :, None]  # (N, C, 1, h, w // 2 + 1)
        size = chunks[0].shape[2]
        # in place: autograd keeps no component spectrum (the kernel's spectra are constants), and a large image
        # spares a copy of them all
        corrected = [part.addcmul_(g.conj(), step, value=-1) for g, part in zip(spectra.split(size, -3), chunks)]
        out = self._merge(corrected, w).to(x.dtype)
        if inside is None or not inside.any():
            return out
        # samples inside their ball (the solver's own test) return x itself, not its FFT round trip
        return torch.where(torch.from_numpy(inside).to(x.device)[:, None, None, None], x, out)

    def __repr__(self):
        if self.source is not None:
            kernel = repr(self.source) + ('' if self.index is None else f', index={self.index}')
        else:
            kernel = 'x'.join(map(str, self.kernel.shape)) + (' (per sample)' if self.per_sample else '')
            kernel = f'<{kernel}>'
        return (f'{type(self).__name__}(scale={self.scale}, kernel={kernel}, offset={self.offset}, '
                f'floor={self.floor:g})')


def reflect_pad(x, top, bottom, left, right):
    """``x`` (..., H, W) extended by mirroring with the edge pixel repeated (``scipy.ndimage`` 'reflect', OpenCV's
    BORDER_REFLECT, numpy's 'symmetric'), each pad at most the size of its axis."""
    h, w = x.shape[-2:]
    if max(top, bottom) > h or max(left, right) > w:
        raise ValueError(f'reflect_pad: pads ({top}, {bottom}, {left}, {right}) exceed the {h}x{w} image')
    rows = torch.from_numpy(np.pad(np.arange(h), (top, bottom), mode='symmetric')).to(x.device)
    cols = torch.from_numpy(np.pad(np.arange(w), (left, right), mode='symmetric')).to(x.device)
    return x.index_select(-2, rows).index_select(-1, cols)


class ReflectBlurDownsample:
    """``y = D_s(k * x)`` with the scene mirrored at the borders instead of wrapped around: blur as
    ``scipy.ndimage.convolve(x, kernel, mode='reflect')``, then pixel ``(offset, offset)`` of each ``s x s`` block (as
    :class:`BlurDownsample`). A measurement model only (forward and residual, no projection): what a photo's blur
    is closer to than the circular one, used to report consistency against it.

    Args:
        scale (int): Decimation factor.
        kernel (ndarray | Tensor): one 2-D kernel (any size), or a file :func:`load_kernel` reads.
        offset (int): which pixel of each block is kept. Default: 0.
    """

    def __init__(self, scale, kernel, offset=0):
        self.circular = BlurDownsample(scale, kernel, offset)  # validates scale, kernel and offset
        if self.circular.kernel.ndim != 2:
            raise ValueError('ReflectBlurDownsample takes one 2-D kernel')
        self.scale, self.offset = self.circular.scale, self.circular.offset
        self.kernel = self.circular.kernel

    def forward(self, x):
        kh, kw = self.kernel.shape
        # scipy's convolve: out[i] = sum_j x[i + kh // 2 - j] k[j] (odd and even sizes), i.e. a valid correlation
        # with the flipped kernel of x padded by kh - 1 - kh // 2 before and kh // 2 after
        xp = reflect_pad(x, kh - 1 - kh // 2, kh // 2, kw - 1 - kw // 2, kw // 2)
        weight = torch.from_numpy(np.ascontiguousarray(self.kernel[::-1, ::-1])).to(x)[None, None]
        n, c = x.shape[:2]
        y = torch.nn.functional.conv2d(xp.reshape(n * c, 1, *xp.shape[-2:]), weight).reshape(n, c, *x.shape[-2:])
        s, o = self.scale, self.offset
        return y[..., o::s, o::s]

    __call__ = forward

    def residual_norm(self, x, b):
        """Per-sample ``||A x - b||_2``: shape (N,)."""
        return (self.forward(x) - b).flatten(1).norm(dim=1)

    def circular_blur(self):
        """The circular operator of the same kernel, offset 0 (:meth:`BlurDownsample.circular_blur`): equal to this
        one away from the borders."""
        return self.circular.circular_blur()

    @property
    def lr_padding(self):
        """LR pixels a side by which an LR is padded (:func:`reflect_pad`) to be solved with the circular model: the
        kernel's radius in LR pixels, plus two."""
        return math.ceil(max(self.kernel.shape) // 2 / self.scale) + 2

    def __repr__(self):
        return f'{type(self).__name__}(scale={self.scale}, kernel={self.kernel.shape[0]}x{self.kernel.shape[1]}, ' \
               f'offset={self.offset})'
