"""Measurement operators for MCNet: A (downsampling), its exact adjoint, and the exact projection
onto the consistency set ``{x : ||A x - b||_2 <= eps}``.

Plain torch + numpy (no basicsr import), so everything here works standalone::

    from mcnet_basicsr.ops import build_operator
    op = build_operator({'type': 'bicubic', 'scale': 4})
    lr = op(hr)                      # MATLAB imresize(hr, 1/4), batched, differentiable
    x = op.project(sr, lr, eps=0.0)  # closest image to sr whose downscaling is exactly lr

Registered types: ``bicubic`` (:class:`MatlabBicubicDownsample`), ``box`` (:class:`BoxDownsample`),
``gaussian`` (:class:`GaussianDownsample`), and the downscaling of other libraries, equal to their own float
downscaling at integer scales (:mod:`~mcnet_basicsr.ops.resizers`): ``pil_resize`` (:class:`PilResizeDownsample`,
Pillow's ``Image.resize``), ``cv2_resize`` (:class:`OpenCVResizeDownsample`, OpenCV's ``cv2.resize``) and
``torch_interpolate`` (:class:`TorchInterpolateDownsample`, torch's ``F.interpolate``). Add your own with
``@OPERATOR_REGISTRY.register('name')`` on a :class:`SeparableDownsample` subclass.

:data:`DEGRADATIONS` names the degradations a user picks (``'matlab-bicubic'``, ``'pil-bicubic'``, ``'cv2-area'``,
``'torch-bicubic'``, ...) by their operator options; :func:`build_degradation` builds one at a scale::

    op = build_degradation('pil-bicubic', 4)  # Pillow's Image.resize(..., Image.BICUBIC) at 1/4
    op = build_operator({'type': 'pil_resize', 'resample': 'bicubic', 'scale': 4})  # the same operator
"""
from .consistency import QUANTIZATION_EPS_RMS, eps_from_rms
from .imresize import imresize
from .operators import BoxDownsample, GaussianDownsample, MatlabBicubicDownsample, build_operator
from .registry import OPERATOR_REGISTRY, OperatorRegistry, UnknownOperatorError
from .resizers import (DEGRADATIONS, OpenCVResizeDownsample, PilResizeDownsample, TorchInterpolateDownsample,
                       build_degradation)
from .separable import SeparableDownsample, solve_secular_equation

__all__ = [
    'build_operator', 'OPERATOR_REGISTRY', 'OperatorRegistry', 'UnknownOperatorError', 'imresize', 'eps_from_rms',
    'QUANTIZATION_EPS_RMS', 'SeparableDownsample', 'MatlabBicubicDownsample', 'BoxDownsample', 'GaussianDownsample',
    'solve_secular_equation', 'PilResizeDownsample', 'OpenCVResizeDownsample', 'TorchInterpolateDownsample',
    'DEGRADATIONS', 'build_degradation'
]
