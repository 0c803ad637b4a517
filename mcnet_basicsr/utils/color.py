"""BT.601 ('studio swing') colour conversions on NCHW torch tensors in [0, 1].

``rgb_to_ycbcr`` computes exactly what basicsr's ``rgb2ycbcr_pt`` does, bit for bit (the MATLAB ``rgb2ycbcr``
convention every SR paper measures Y-PSNR with; tests/test_startup.py compares them), without importing basicsr;
``ycbcr_to_rgb`` is its exact inverse, computed from the inverted 3x3 matrix
in float64, so ``ycbcr_to_rgb(rgb_to_ycbcr(x)) == x`` up to float rounding. Neither clamps: values
outside [0, 1] pass through linearly.
"""
import torch

# ycbcr * 255 = rgb @ _RGB_TO_YCBCR + _OFFSET (rgb in [0, 1]). As in basicsr's rgb2ycbcr_pt, the coefficients
# are float32 numbers cast to the input's dtype, so the float32-rounded coefficients are the ones to invert
# (the round trip is then exact to float64 precision for float64 inputs too).
_RGB_TO_YCBCR_F32 = torch.tensor([[65.481, -37.797, 112.0], [128.553, -74.203, -93.786], [24.966, 112.0, -18.214]],
                                 dtype=torch.float32)
_Y_F32 = _RGB_TO_YCBCR_F32[:, :1].contiguous()  # the Y column alone, a (3, 1) matrix
_RGB_TO_YCBCR = _RGB_TO_YCBCR_F32.double()
_OFFSET = torch.tensor([16.0, 128.0, 128.0], dtype=torch.float64)
_YCBCR_TO_RGB = torch.linalg.inv(_RGB_TO_YCBCR)


def _check_rgb_like(x, name):
    if x.ndim != 4 or x.shape[1] != 3:
        raise ValueError(f'{name} expects a (N, 3, H, W) tensor, got shape {tuple(x.shape)}.')


def rgb_to_ycbcr(x, y_only=False):
    """RGB -> YCbCr (BT.601, MATLAB convention), both in [0, 1].

    Args:
        x (Tensor): RGB images, shape (N, 3, H, W), range [0, 1].
        y_only (bool): Return only the Y channel, shape (N, 1, H, W). Default: False.

    Returns:
        Tensor: YCbCr (or Y) images with the dtype and device of ``x``.
    """
    _check_rgb_like(x, 'rgb_to_ycbcr')
    # the same operations in the same order as basicsr's rgb2ycbcr_pt, so the rounding is the same
    pixels = x.permute(0, 2, 3, 1)
    if y_only:
        out = torch.matmul(pixels, _Y_F32.to(x)).permute(0, 3, 1, 2) + 16.0
    else:
        out = torch.matmul(pixels, _RGB_TO_YCBCR_F32.to(x)).permute(0, 3, 1, 2) + _OFFSET.view(1, 3, 1, 1).to(x)
    return out / 255.0


def ycbcr_to_rgb(x):
    """YCbCr -> RGB, the exact inverse of :func:`rgb_to_ycbcr` (no clamping).

    Args:
        x (Tensor): YCbCr images, shape (N, 3, H, W), range [0, 1].

    Returns:
        Tensor: RGB images with the dtype and device of ``x``.
    """
    _check_rgb_like(x, 'ycbcr_to_rgb')
    matrix = (_YCBCR_TO_RGB * 255.0).to(x)
    offset = (_OFFSET / 255.0).view(1, 3, 1, 1).to(x)
    return torch.matmul((x - offset).permute(0, 2, 3, 1), matrix).permute(0, 3, 1, 2)


def luma(x):
    """The Y channel (BT.601) of RGB images, or one-channel images as they are: (N, 1, H, W), ``x``'s dtype.

    The one definition of "the Y a metric or a measurement uses" (MCNetArch's ``b``, the data fidelity, the tables).
    """
    return rgb_to_ycbcr(x)[:, :1] if x.shape[1] == 3 else x
