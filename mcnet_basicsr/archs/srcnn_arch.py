import math

import numpy as np
import torch
from torch import nn

from ..ops import imresize
from ..utils.color import rgb_to_ycbcr, ycbcr_to_rgb
from ..utils.registration import ARCH_REGISTRY

_PADDING_MODES = ('zeros', 'replicate', 'reflect', 'circular')


@ARCH_REGISTRY.register()
class SRCNN(nn.Module):
    """SRCNN: three convolutions on the bicubic-upsampled luminance.

    Paper: Image Super-Resolution Using Deep Convolutional Networks (Dong et al., TPAMI 2016).

    The network itself works at HR size: input is the bicubic-upsampled LR Y channel in [0, 1],
    output is the HR Y estimate (conv1 -> ReLU -> conv2 -> ReLU -> conv3, all with bias, every conv
    padded to keep the spatial size). With ``scale`` set, ``forward`` instead takes an LR RGB image
    and does the whole classic pipeline (Y of BT.601, MATLAB bicubic upsampling of Y and CbCr,
    SRCNN on Y, back to RGB), so BasicSR's plain ``SRModel`` can run and measure it.

    Args:
        num_feat (list[int]): Output channels of conv1 and conv2. Default: (64, 32).
        kernel_size (list[int]): Odd kernel sizes of conv1, conv2, conv3 (9-5-5, 9-3-5, 9-1-5 in
            the paper). Default: (9, 5, 5).
        padding_mode (str): How each conv pads to keep the size: 'replicate' reproduces the
            official MATLAB release (imfilter 'replicate'); 'zeros' matches PyTorch-trained models
            such as the MCNet authors'. One of 'zeros', 'replicate', 'reflect', 'circular'.
            Default: 'replicate'.
        scale (int | None): If None, forward maps (N, 1, H, W) upsampled Y to (N, 1, H, W) Y.
            If an int, forward maps LR RGB (N, 3, h, w) in [0, 1] to HR RGB
            (N, 3, scale * h, scale * w) (not clamped). Default: None.
    """

    def __init__(self, num_feat=(64, 32), kernel_size=(9, 5, 5), padding_mode='replicate', scale=None):
        super().__init__()
        num_feat, kernel_size = tuple(num_feat), tuple(kernel_size)
        if len(num_feat) != 2:
            raise ValueError(f'num_feat must give the widths of conv1 and conv2, got {num_feat}.')
        if len(kernel_size) != 3 or any(k < 1 or k % 2 == 0 for k in kernel_size):
            raise ValueError(f'kernel_size must be three odd sizes (conv1, conv2, conv3), got {kernel_size}.')
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f'Unsupported padding_mode {padding_mode!r}. Supported ones are: {_PADDING_MODES}.')
        if scale is not None and (isinstance(scale, bool) or not isinstance(scale, int) or scale < 1):
            raise ValueError(f'scale must be None or a positive int, got {scale!r}.')
        self.scale = scale
        widths = (1, ) + num_feat + (1, )
        for i, k in enumerate(kernel_size):
            conv = nn.Conv2d(widths[i], widths[i + 1], k, padding=k // 2, padding_mode=padding_mode)
            self.add_module(f'conv{i + 1}', conv)
        self.relu = nn.ReLU(inplace=True)

    def forward_y(self, y):
        """Upsampled Y (N, 1, H, W) -> HR Y estimate (N, 1, H, W)."""
        return self.conv3(self.relu(self.conv2(self.relu(self.conv1(y)))))

    def forward(self, x):
        if self.scale is None:
            return self.forward_y(x)
        if x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(f'SRCNN with scale={self.scale} expects LR RGB of shape (N, 3, h, w), '
                             f'got {tuple(x.shape)}.')
        ycbcr = imresize(rgb_to_ycbcr(x), self.scale)
        y = self.forward_y(ycbcr[:, :1])
        return ycbcr_to_rgb(torch.cat([y, ycbcr[:, 1:]], dim=1))


def convert_srcnn_mat(mat):
    """State dict for :class:`SRCNN` from the original MATLAB release (``srcnn_*.mat``).

    The release stores column-major (MATLAB) arrays: ``weights_conv1`` (k1*k1, n1),
    ``weights_conv2`` (n1, k2*k2, n2), ``weights_conv3`` (n2, k3*k3) and ``biases_conv{1,2,3}``.
    MATLAB's ``imfilter`` correlates like ``nn.Conv2d``, so only the reshapes matter:
    ``conv1.weight[o, 0] = weights_conv1[:, o]`` and ``conv2.weight[o, i] = weights_conv2[i, :, o]``
    and ``conv3.weight[0, i] = weights_conv3[i, :]``, each reshaped to (k, k) in Fortran order.
    The models were run with 'replicate' padding: build the arch with ``padding_mode='replicate'``
    and ``kernel_size`` / ``num_feat`` read off the returned shapes.

    Args:
        mat (dict[str, ndarray]): What ``scipy.io.loadmat`` returns for a release file.

    Returns:
        dict[str, Tensor]: float32 ``conv{1,2,3}.{weight,bias}``.
    """
    names = ('weights_conv1', 'weights_conv2', 'weights_conv3', 'biases_conv1', 'biases_conv2', 'biases_conv3')
    missing = [n for n in names if n not in mat]
    if missing:
        raise KeyError(f'Not an SRCNN MATLAB model: missing {missing} (expected {names}).')
    w1, w2, w3 = (np.asarray(mat[f'weights_conv{i}'], dtype=np.float64) for i in (1, 2, 3))
    if w1.ndim != 2 or w2.ndim != 3 or w3.ndim != 2:
        raise ValueError(f'Unexpected SRCNN .mat weight shapes {w1.shape}, {w2.shape}, {w3.shape}; expected '
                         '(k1*k1, n1), (n1, k2*k2, n2), (n2, k3*k3).')

    def side(taps):
        k = math.isqrt(taps)
        if k * k != taps:
            raise ValueError(f'{taps} filter taps are not a square kernel.')
        return k

    k1, k2, k3 = side(w1.shape[0]), side(w2.shape[1]), side(w3.shape[1])
    n1, n2 = w1.shape[1], w2.shape[2]
    conv1 = np.stack([w1[:, o].reshape(k1, k1, order='F') for o in range(n1)])[:, None]
    conv2 = np.stack([np.stack([w2[i, :, o].reshape(k2, k2, order='F') for i in range(n1)]) for o in range(n2)])
    conv3 = np.stack([w3[i, :].reshape(k3, k3, order='F') for i in range(n2)])[None]
    arrays = {
        'conv1.weight': conv1,
        'conv1.bias': np.ravel(mat['biases_conv1']),
        'conv2.weight': conv2,
        'conv2.bias': np.ravel(mat['biases_conv2']),
        'conv3.weight': conv3,
        'conv3.bias': np.ravel(mat['biases_conv3']),
    }
    return {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)) for k, v in arrays.items()}


def srcnn_options_from_state_dict(state_dict):
    """``num_feat`` and ``kernel_size`` of the :class:`SRCNN` that ``state_dict`` fits."""
    shapes = [state_dict[f'conv{i}.weight'].shape for i in (1, 2, 3)]
    return {'num_feat': [shapes[0][0], shapes[1][0]], 'kernel_size': [s[-1] for s in shapes]}
