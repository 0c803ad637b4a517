"""The registered downsampling operators and :func:`build_operator`.

Each class only says how to build the float64 matrix of one axis, as its nonzeros (``axis_sparse``); the
dense matrix, forward, adjoint, projection and caching come from
:class:`~mcnet_basicsr.ops.separable.SeparableDownsample`.
"""
import math

from .matrices import box_sparse, gaussian_sparse, matlab_bicubic_sparse
from .registry import OPERATOR_REGISTRY
from .separable import SeparableDownsample

__all__ = ['MatlabBicubicDownsample', 'BoxDownsample', 'GaussianDownsample', 'build_operator']


@OPERATOR_REGISTRY.register('bicubic')
class MatlabBicubicDownsample(SeparableDownsample):
    """MATLAB ``imresize(x, 1/scale)`` (antialiased bicubic, symmetric boundary) as a linear operator.

    Matches ``basicsr.utils.matlab_functions.imresize(img, 1 / scale)`` -- the LR images of every
    BasicSR benchmark -- up to basicsr's float32 weight rounding (~1e-7).
    """

    def axis_sparse(self, length):
        return matlab_bicubic_sparse(length, length // self.scale, 1.0 / self.scale, True)


@OPERATOR_REGISTRY.register('box')
class BoxDownsample(SeparableDownsample):
    """Average of each ``scale x scale`` block (``A A^T = I / scale^2``)."""

    def axis_sparse(self, length):
        return box_sparse(length, self.scale)


@OPERATOR_REGISTRY.register('gaussian')
class GaussianDownsample(SeparableDownsample):
    """Gaussian blur with symmetric (half-sample mirror) boundary, then decimation by ``scale``.

    Args:
        scale (int): decimation factor.
        sigma (float): standard deviation of the Gaussian in HR pixels (default 1.6, the classic
            "BD" degradation of RDN/SRMD at x3).
        kernel_size (int | None): odd number of taps; default ``2 * ceil(3 * sigma) + 1``.
        offset (int): which pixel of each ``scale x scale`` block is kept, ``0 <= offset < scale``.
            Default 0: the top-left one, ``blurred[..., ::scale, ::scale]`` as in the BD setting.
    """

    def __init__(self, scale, sigma=1.6, kernel_size=None, offset=0):
        super().__init__(scale)
        sigma = float(sigma)
        if not sigma > 0:
            raise ValueError(f'sigma must be > 0, got {sigma}')
        if kernel_size is None:
            kernel_size = 2 * math.ceil(3 * sigma) + 1
        if int(kernel_size) != kernel_size or kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f'kernel_size must be a positive odd integer, got {kernel_size!r}')
        if int(offset) != offset or not 0 <= offset < self.scale:
            raise ValueError(f'offset must be an integer in [0, {self.scale}), got {offset!r}')
        self.sigma, self.kernel_size, self.offset = sigma, int(kernel_size), int(offset)

    def axis_sparse(self, length):
        return gaussian_sparse(length, self.scale, self.sigma, self.kernel_size, self.offset)

    def __repr__(self):
        return (f'{type(self).__name__}(scale={self.scale}, sigma={self.sigma}, '
                f'kernel_size={self.kernel_size}, offset={self.offset})')


def build_operator(opt):
    """Build an operator from an option dict such as ``{'type': 'bicubic', 'scale': 2}``.

    ``type`` names a class in ``OPERATOR_REGISTRY``; the remaining keys are its constructor
    arguments. The dict passed in is not modified.
    """
    if not hasattr(opt, 'keys'):
        raise TypeError(f'operator options must be a dict, got {type(opt).__name__}')
    opt = dict(opt)
    if 'type' not in opt:
        raise ValueError(f"operator options need a 'type' key; registered types: {OPERATOR_REGISTRY.keys()}")
    cls = OPERATOR_REGISTRY.get(opt.pop('type'))
    return cls(**opt)
