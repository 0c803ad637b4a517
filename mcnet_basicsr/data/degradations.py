"""LR images made from HR images by a known degradation, as the kernel-SR literature makes its test sets.

:func:`usrnet_lr` is the protocol of USRNet's Table 1 (Zhang, Van Gool, Timofte, CVPR 2020, ``main_test_table1.py``
of cszn/USRNet): the uint8 HR convolved circularly with the kernel by ``scipy.ndimage.convolve(..., mode='wrap')``
(whose output keeps the input's uint8 type: the blurred values are truncated towards zero), the upper-left pixel of
each s x s block kept, then ``/ 255`` to float32 and Gaussian noise of std ``sigma`` added from
``numpy.random.seed(0)`` per image. The measurement it makes is ``b = floor(255 (k * x) decimated) / 255 + n``:
``A x`` less a truncation of 0 to 1 level (half a level on average) plus the noise, which
:func:`usrnet_measurement` states as what a consistent method is told.
"""
import math

import numpy as np

from mcnet_basicsr.ops import QUANTIZATION_EPS_RMS

__all__ = ['usrnet_mod_crop', 'usrnet_lr', 'usrnet_measurement', 'psnr_rgb_uint8', 'degraded_lr_uint8']


def usrnet_mod_crop(img, scale):
    """The HR crop of the protocol: both sides cut to a multiple of lcm(scale, 8)."""
    m = math.lcm(int(scale), 8)
    h, w = img.shape[:2]
    return img[:h - h % m, :w - w % m]


def usrnet_lr(hr, kernel, scale, noise_sigma=0.0, seed=0):
    """LR of ``hr`` (HxWxC uint8) under USRNet's Table 1 protocol, HxWxC float32.

    Args:
        hr (ndarray): uint8 HR image, already cropped (:func:`usrnet_mod_crop`).
        kernel (ndarray): 2-D blur kernel (float; used in float64 as the protocol does).
        scale (int): Decimation factor.
        noise_sigma (float): Noise std on [0, 1] images (2.55 / 255 for the table's "2.55"). Default: 0.
        seed (int): ``numpy.random.seed`` before drawing the noise, per image as the protocol does. Default: 0.
    """
    from scipy import ndimage  # only the protocol's LR-making needs scipy.ndimage
    if hr.dtype != np.uint8 or hr.ndim != 3:
        raise ValueError(f'usrnet_lr takes an HxWxC uint8 image (the protocol convolves the uint8 HR), got '
                         f'{hr.dtype} of shape {hr.shape}.')
    kernel = np.asarray(kernel, dtype=np.float64)
    blurred = ndimage.convolve(hr, kernel[..., None], mode='wrap')  # uint8 out: truncated, as the protocol's
    lr = blurred[0::scale, 0::scale].astype(np.float32) / np.float32(255.0)
    np.random.seed(seed)
    lr += np.random.normal(0, noise_sigma, lr.shape)  # float64 noise added into the float32 LR, as the protocol's
    return lr


def usrnet_measurement(lr, noise_sigma=0.0):
    """What a consistent method is told of an LR image of :func:`usrnet_lr`: ``(b, eps_rms, noise_sigma)``.

    The truncation to uint8 takes 0 to 1 level off every value, uniformly: ``b = lr + 0.5 / 255`` is ``A x`` up to
    a uniform error of +-half a level (RMS :data:`~mcnet_basicsr.ops.QUANTIZATION_EPS_RMS`), plus the Gaussian noise.
    """
    return lr + np.float32(0.5 / 255.0), QUANTIZATION_EPS_RMS, float(noise_sigma)


def psnr_rgb_uint8(out, hr, border):
    """PSNR of two HxWxC uint8 images over all channels with ``border`` pixels cut from each side (USRNet's
    ``calculate_psnr``): the Table 1 metric, with ``border = scale ** 2``."""
    if out.shape != hr.shape:
        raise ValueError(f'images differ in shape: {out.shape} vs {hr.shape}')
    h, w = hr.shape[:2]
    a = out[border:h - border, border:w - border].astype(np.float64)
    b = hr[border:h - border, border:w - border].astype(np.float64)
    mse = np.mean((a - b)**2)
    return float('inf') if mse == 0 else 20 * math.log10(255.0 / math.sqrt(mse))


def degraded_lr_uint8(operator, hr):
    """The LR of a uint8 HxWx3 HR image (either channel order: the operator acts on each channel alike) under
    ``operator``, rounded half up to uint8, HxWx3. Computed on the 0..255 values (the operator is linear), so that
    ties (a box average of four integers) are exact and round up, as the libraries round them."""
    import torch
    x = torch.from_numpy(np.ascontiguousarray(hr.transpose(2, 0, 1)).astype(np.float64))[None]
    lr = (operator(x) + 0.5).floor().clamp(0, 255)[0]
    return lr.numpy().transpose(1, 2, 0).astype(np.uint8)
