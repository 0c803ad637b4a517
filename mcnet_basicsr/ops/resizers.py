"""Downscaling by Pillow, OpenCV and torch at integer scales, as separable measurement operators.

Each operator's forward is the library's own float downscaling by an integer ``scale`` (output length
``length // scale`` per axis, HR sides divisible by the scale), to float rounding: the 1-D matrix of an axis is
built in float64 from the library's filter taps, sampling phase and border rule, and forward, adjoint and the exact
projection come from :class:`~mcnet_basicsr.ops.separable.SeparableDownsample`. The libraries themselves are not
imported here (``tests/test_ops_resizers.py`` compares against them).

Two resampling schemes cover the three libraries:

* :func:`clipped_window_sparse` -- antialiased resampling (Pillow's ``Image.resize``, torch's ``antialias=True``):
  output pixel ``i`` is centred at ``c = (i + 0.5) s`` in continuous coordinates (pixel ``j`` covers ``[j, j + 1)``),
  the filter is stretched by ``s`` (support ``s * support``), the taps ``j`` of the window
  ``[trunc(c - s * support + 0.5), trunc(c + s * support + 0.5))`` clipped to the image get the weights
  ``filter((j - c + 0.5) / s)``, and each row is renormalised to sum 1 (so the border is neither mirrored nor
  replicated: the clipped window's weights are rescaled).
* :func:`interpolation_sparse` -- interpolation without antialiasing (OpenCV's ``cv2.resize`` with INTER_LINEAR /
  INTER_CUBIC, torch's ``antialias=False``): output pixel ``i`` samples the source coordinate
  ``x = (i + 0.5) s - 0.5`` (pixel centres at integers) with the 2 (linear) or 4 (cubic) taps around ``floor(x)``,
  unstretched, and taps outside the image read the nearest edge pixel (replicated border).

``DEGRADATIONS`` names the supported degradations (user-facing names, lower case with hyphens) by their operator
options without the scale; :func:`build_degradation` builds one at a scale.
"""
import functools
import math
import types

import numpy as np

from ..package_data import read_degradations
from .matrices import _check_divisible, _fold_taps, cubic_kernel
from .operators import build_operator
from .registry import OPERATOR_REGISTRY
from .separable import SeparableDownsample

__all__ = [
    'PilResizeDownsample', 'OpenCVResizeDownsample', 'TorchInterpolateDownsample', 'DEGRADATIONS', 'build_degradation',
    'clipped_window_sparse', 'interpolation_sparse'
]


# ----------------------------------------------------------------------------- 1-D filters (float64, vectorised)
def _box(x):
    return ((x > -0.5) & (x <= 0.5)).astype(np.float64)  # half-open, as Pillow's box filter


def _triangle(x):
    return np.maximum(1.0 - np.abs(x), 0.0)


def _lanczos3(x):
    return np.where((x >= -3.0) & (x < 3.0), np.sinc(x) * np.sinc(x / 3.0), 0.0)  # sinc windowed by sinc(x / 3)


#: filter name -> (support radius in unstretched pixels, function of (x, cubic_a))
_FILTERS = {
    'box': (0.5, lambda x, a: _box(x)),
    'triangle': (1.0, lambda x, a: _triangle(x)),
    'cubic': (2.0, cubic_kernel),
    'lanczos3': (3.0, lambda x, a: _lanczos3(x)),
}


def _check_filter(kernel, allowed):
    if kernel not in allowed:
        raise ValueError(f'filter must be one of {sorted(allowed)}, got {kernel!r}')


@functools.lru_cache(maxsize=256)
def clipped_window_sparse(in_length, scale, kernel, cubic_a=-0.5):
    """Antialiased downscaling by an integer ``scale`` with the window clipped at the borders and renormalised.

    Pillow's resampling (``ImagingResample``'s coefficients) and torch's ``antialias=True`` interpolation, as the
    module docstring describes them, along one axis: an :class:`~mcnet_basicsr.ops.matrices.AxisMatrix` of shape
    ``(in_length // scale, in_length)``.

    Args:
        in_length (int): axis length, divisible by ``scale``.
        scale (int): downscaling factor.
        kernel (str): 'box', 'triangle', 'cubic' or 'lanczos3'.
        cubic_a (float): the cubic filter's coefficient (ignored by the others). Default: -0.5.
    """
    in_length, scale = int(in_length), int(scale)
    _check_filter(kernel, _FILTERS)
    _check_divisible(in_length, scale)
    out_length = in_length // scale
    support, fn = _FILTERS[kernel]
    support *= scale
    centre = (np.arange(out_length) + 0.5) * scale
    start = np.maximum(np.trunc(centre - support + 0.5), 0.0)
    stop = np.minimum(np.trunc(centre + support + 0.5), in_length)
    cols = start[:, None] + np.arange(2 * math.ceil(support) + 1)[None, :]
    inside = cols < stop[:, None]
    weights = np.where(inside, fn((cols - centre[:, None] + 0.5) * (1.0 / scale), cubic_a), 0.0)
    weights /= weights.sum(axis=1, keepdims=True)
    rows = np.broadcast_to(np.arange(out_length)[:, None], cols.shape)
    return _fold_taps(rows[inside], cols[inside].astype(np.int64), weights[inside], out_length, in_length)


@functools.lru_cache(maxsize=256)
def interpolation_sparse(in_length, scale, kernel, cubic_a=-0.75):
    """Downscaling by an integer ``scale`` by interpolation (no antialiasing), replicated border.

    Output pixel ``i`` is the ``kernel`` interpolation at source coordinate ``x = (i + 0.5) scale - 0.5``: taps
    ``floor(x) + k`` for ``k = 0, 1`` (triangle) or ``k = -1 .. 2`` (cubic) with weights ``kernel(x - floor(x) - k)``,
    indices clamped to ``[0, in_length)`` (OpenCV's INTER_LINEAR / INTER_CUBIC and torch's ``antialias=False``). At
    an integer scale ``x - floor(x)`` is 0 (odd scale: the operator keeps pixel ``i s + (s - 1) / 2``) or 0.5 (even),
    so every weight is a dyadic fraction, exact in float32 as well; and ``x >= 0``, so the clamp of a negative source
    coordinate that both libraries apply to linear interpolation does not arise.

    Args:
        in_length (int): axis length, divisible by ``scale``.
        scale (int): downscaling factor.
        kernel (str): 'triangle' or 'cubic'.
        cubic_a (float): the cubic filter's coefficient. Default: -0.75.
    """
    in_length, scale = int(in_length), int(scale)
    _check_filter(kernel, ('triangle', 'cubic'))
    _check_divisible(in_length, scale)
    out_length = in_length // scale
    support, fn = _FILTERS[kernel]
    source = (np.arange(out_length) + 0.5) * scale - 0.5
    base = np.floor(source)
    offsets = np.arange(1 - int(support), int(support) + 1)
    weights = fn((source - base)[:, None] - offsets[None, :], cubic_a)
    cols = np.clip(base[:, None] + offsets[None, :], 0, in_length - 1).astype(np.int64)
    rows = np.repeat(np.arange(out_length), len(offsets))
    return _fold_taps(rows, cols.ravel(), weights.ravel(), out_length, in_length)


# ----------------------------------------------------------------------------- operators
@OPERATOR_REGISTRY.register('pil_resize')
class PilResizeDownsample(SeparableDownsample):
    """Pillow's ``Image.resize((w // scale, h // scale), resample)`` of float ("F" mode) images as an operator.

    Pillow resamples with the filter stretched by the scale, the window clipped at the borders and renormalised
    (:func:`clipped_window_sparse`); with ``reducing_gap=None`` (``resize``'s default) there is no ``reduce()`` step.
    Pillow rounds the intermediate (one pass per axis) to float32, this operator does not.

    Args:
        scale (int): downscaling factor.
        resample (str): the filter, 'bicubic' (a = -0.5), 'bilinear' (triangle), 'lanczos' (3 lobes) or 'box'
            (``Image.Resampling.BICUBIC`` etc.). Default: 'bicubic', ``resize``'s.
    """

    #: name -> (filter of :func:`clipped_window_sparse`, cubic coefficient)
    resamples = types.MappingProxyType({
        'bicubic': ('cubic', -0.5),
        'bilinear': ('triangle', None),
        'lanczos': ('lanczos3', None),
        'box': ('box', None)
    })

    def __init__(self, scale, resample='bicubic'):
        super().__init__(scale)
        if resample not in self.resamples:
            raise ValueError(f'PilResizeDownsample: resample must be one of {list(self.resamples)}, got {resample!r}')
        self.resample = resample

    def axis_sparse(self, length):
        return clipped_window_sparse(length, self.scale, *self.resamples[self.resample])

    def __repr__(self):
        return f'{type(self).__name__}(scale={self.scale}, resample={self.resample!r})'


@OPERATOR_REGISTRY.register('cv2_resize')
class OpenCVResizeDownsample(SeparableDownsample):
    """OpenCV's ``cv2.resize(img, (w // scale, h // scale), interpolation=...)`` of float images as an operator.

    'area' (INTER_AREA) is the average of each ``scale x scale`` block at an integer scale; 'linear' and 'cubic'
    (INTER_LINEAR, INTER_CUBIC with a = -0.75) interpolate without antialiasing, replicated border
    (:func:`interpolation_sparse`).

    Args:
        scale (int): downscaling factor.
        interpolation (str): 'area', 'linear' or 'cubic'. Default: 'linear', ``cv2.resize``'s.
    """

    #: name -> (scheme, filter, cubic coefficient)
    interpolations = types.MappingProxyType({
        'area': ('window', 'box', None),
        'linear': ('interpolation', 'triangle', None),
        'cubic': ('interpolation', 'cubic', -0.75)
    })

    def __init__(self, scale, interpolation='linear'):
        super().__init__(scale)
        if interpolation not in self.interpolations:
            raise ValueError(f'OpenCVResizeDownsample: interpolation must be one of {list(self.interpolations)}, '
                             f'got {interpolation!r}')
        self.interpolation = interpolation

    def axis_sparse(self, length):
        scheme, kernel, cubic_a = self.interpolations[self.interpolation]
        if scheme == 'window':  # the block average: the box window never reaches past a border at an integer scale
            return clipped_window_sparse(length, self.scale, kernel)
        return interpolation_sparse(length, self.scale, kernel, cubic_a)

    def __repr__(self):
        return f'{type(self).__name__}(scale={self.scale}, interpolation={self.interpolation!r})'


@OPERATOR_REGISTRY.register('torch_interpolate')
class TorchInterpolateDownsample(SeparableDownsample):
    """torch's ``F.interpolate(x, size=(h // scale, w // scale), mode=mode, align_corners=False,
    antialias=antialias)`` as an operator.

    With ``antialias=True`` torch resamples as Pillow does (:func:`clipped_window_sparse`, cubic a = -0.5); without,
    it interpolates as OpenCV does (:func:`interpolation_sparse`, cubic a = -0.75, replicated border).

    Args:
        scale (int): downscaling factor.
        mode (str): 'bicubic' or 'bilinear'.
        antialias (bool): torch's flag. Default: False, ``F.interpolate``'s.
    """

    #: (mode, antialias) -> (scheme, filter, cubic coefficient)
    modes = types.MappingProxyType({
        ('bicubic', True): ('window', 'cubic', -0.5),
        ('bilinear', True): ('window', 'triangle', None),
        ('bicubic', False): ('interpolation', 'cubic', -0.75),
        ('bilinear', False): ('interpolation', 'triangle', None)
    })

    def __init__(self, scale, mode, antialias=False):
        super().__init__(scale)
        if mode not in ('bicubic', 'bilinear'):
            raise ValueError(f"TorchInterpolateDownsample: mode must be one of ['bicubic', 'bilinear'], got {mode!r}")
        if not isinstance(antialias, bool):
            raise ValueError(f'TorchInterpolateDownsample: antialias must be True or False, got {antialias!r}')
        self.mode, self.antialias = mode, antialias

    def axis_sparse(self, length):
        scheme, kernel, cubic_a = self.modes[self.mode, self.antialias]
        if scheme == 'window':
            return clipped_window_sparse(length, self.scale, kernel, cubic_a)
        return interpolation_sparse(length, self.scale, kernel, cubic_a)

    def __repr__(self):
        return f'{type(self).__name__}(scale={self.scale}, mode={self.mode!r}, antialias={self.antialias})'


# ----------------------------------------------------------------------------- user-facing names
def _frozen(options):
    return types.MappingProxyType(dict(options))


#: user-facing degradation name -> operator options without the scale (read-only; ``degradations.yml``)
DEGRADATIONS = types.MappingProxyType({name: _frozen(opts) for name, opts in read_degradations().items()})


def build_degradation(name, scale):
    """The operator of a degradation named in :data:`DEGRADATIONS` (e.g. ``'pil-bicubic'``) at an integer scale."""
    if not isinstance(name, str) or name not in DEGRADATIONS:
        raise ValueError(f'unknown degradation {name!r}; allowed: {", ".join(DEGRADATIONS)}')
    return build_operator(dict(DEGRADATIONS[name], scale=scale))
