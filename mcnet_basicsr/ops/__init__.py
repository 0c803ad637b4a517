"""Measurement operators for MCNet: A (downsampling), its exact adjoint, and the exact projection
onto the consistency set ``{x : ||A x - b||_2 <= eps}``.

Plain torch + numpy (no basicsr import), so everything here works standalone::

    from mcnet_basicsr.ops import build_operator
    op = build_operator({'type': 'bicubic', 'scale': 4})
    lr = op(hr)                      # MATLAB imresize(hr, 1/4), batched, differentiable
    x = op.project(sr, lr, eps=0.0)  # closest image to sr whose downscaling is exactly lr

Registered types: ``bicubic`` (:class:`MatlabBicubicDownsample`), ``box`` (:class:`BoxDownsample`),
``gaussian`` (:class:`GaussianDownsample`), ``blur`` (:class:`BlurDownsample`: any 2-D kernel with circular
boundary, then decimation, as ``scipy.ndimage.convolve(x, k, mode='wrap')[..., offset::s, offset::s]``; the kernel
as an array or a file read by :func:`load_kernel`, e.g. ``{'type': 'blur', 'scale': 4, 'kernel': 'kernels_12.mat',
'index': 2}``), and the downscaling of other libraries, equal to their own float downscaling at integer scales
(:mod:`~mcnet_basicsr.ops.resizers`): ``pil_resize`` (:class:`PilResizeDownsample`, Pillow's ``Image.resize``),
``cv2_resize`` (:class:`OpenCVResizeDownsample`, OpenCV's ``cv2.resize``) and ``torch_interpolate``
(:class:`TorchInterpolateDownsample`, torch's ``F.interpolate``). Add your own with
``@OPERATOR_REGISTRY.register('name')`` on a :class:`SeparableDownsample` subclass (or a :class:`DownsampleOperator`
with its own ``forward`` / ``adjoint`` / ``project``).

:data:`DEGRADATIONS` names the degradations a user picks (``'matlab-bicubic'``, ``'pil-bicubic'``, ``'cv2-area'``,
``'torch-bicubic'``, ...) by their operator options; :func:`build_degradation` builds one at a scale::

    op = build_degradation('pil-bicubic', 4)  # Pillow's Image.resize(..., Image.BICUBIC) at 1/4
    op = build_operator({'type': 'pil_resize', 'resample': 'bicubic', 'scale': 4})  # the same operator

A batch whose samples were measured by different operators takes a :class:`StackedOperator`; a layer that makes
every channel consistent solves one problem per channel (:func:`fold_channels`, :func:`repeat_samples`).
"""
from .base import DownsampleOperator
from .blur import BlurDownsample, ReflectBlurDownsample, reflect_pad
from .consistency import QUANTIZATION_EPS_RMS, eps_from_rms, noisy_radius
from .imresize import imresize
from .kernels import load_kernel
from .operators import BoxDownsample, GaussianDownsample, MatlabBicubicDownsample, build_operator
from .registry import OPERATOR_REGISTRY, OperatorRegistry, UnknownOperatorError
from .resizers import (DEGRADATIONS, OpenCVResizeDownsample, PilResizeDownsample, TorchInterpolateDownsample,
                       build_degradation)
from .secular import projection_coefficients, solve_secular_equation
from .separable import SeparableDownsample
from .stacked import StackedOperator, fold_channels, repeat_samples, unfold_channels

__all__ = [
    'build_operator', 'OPERATOR_REGISTRY', 'OperatorRegistry', 'UnknownOperatorError', 'imresize', 'eps_from_rms',
    'QUANTIZATION_EPS_RMS', 'DownsampleOperator', 'SeparableDownsample', 'MatlabBicubicDownsample', 'BoxDownsample',
    'GaussianDownsample', 'BlurDownsample', 'ReflectBlurDownsample', 'reflect_pad', 'load_kernel',
    'solve_secular_equation', 'projection_coefficients',
    'noisy_radius', 'StackedOperator', 'repeat_samples', 'fold_channels', 'unfold_channels', 'PilResizeDownsample',
    'OpenCVResizeDownsample', 'TorchInterpolateDownsample', 'DEGRADATIONS', 'build_degradation'
]
