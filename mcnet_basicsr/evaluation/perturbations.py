"""Perturbed LR inputs for robustness studies: noise, JPEG, and LR images made by another operator.

Each perturbation maps the prepared uint8 LR (MATLAB bicubic of the mod-cropped HR) and that HR to a
perturbed uint8 LR; noise is drawn from the generator the caller passes, so a seeded run is repeatable.
``make_lr_set`` writes a perturbed copy of a prepared LR folder (same file names as the ground truth).
"""
import os
import os.path as osp
import zlib

import cv2
import numpy as np
import torch

from mcnet_basicsr.ops import imresize
from mcnet_basicsr.utils.color import rgb_to_ycbcr
from mcnet_basicsr.utils.images import IMG_EXT

__all__ = ['PERTURBATIONS', 'NOISE_SIGMA', 'Y_NOISE_GAIN', 'perturb', 'make_lr_set']

PERTURBATIONS = {
    'none': 'prepared LR (MATLAB bicubic of the HR, uint8)',
    'noise1': 'Gaussian noise, std 1/255 per RGB value, rounded and clipped to uint8',
    'noise2': 'Gaussian noise, std 2/255 per RGB value, rounded and clipped to uint8',
    'noise5': 'Gaussian noise, std 5/255 per RGB value, rounded and clipped to uint8',
    'jpeg90': 'JPEG quality 90 (OpenCV), decoded',
    'blur0.5': 'operator mismatch: HR blurred (Gaussian std 0.5, 5x5, replicate) before MATLAB bicubic, uint8',
    'area': 'operator mismatch: HR downscaled by OpenCV INTER_AREA (box average), uint8',
}
NOISE_SIGMA = {'noise1': 1.0, 'noise2': 2.0, 'noise5': 5.0}
# std of Y (BT.601, [0, 1]) per unit std of i.i.d. noise on R, G, B: |(65.481, 128.553, 24.966)| / 255
Y_NOISE_GAIN = float(np.linalg.norm([65.481, 128.553, 24.966]) / 255.0)


def _to_uint8(img):
    return np.clip(np.round(img), 0, 255).astype(np.uint8)


def _matlab_downscale(hr, scale):
    """MATLAB imresize(hr, 1/scale, 'bicubic') of an RGB float image on 0..255, HxWx3 -> hxwx3."""
    t = torch.from_numpy(np.ascontiguousarray(hr.transpose(2, 0, 1), dtype=np.float64))
    return imresize(t, 1 / scale).numpy().transpose(1, 2, 0)


def perturb(name, lr, hr, scale, rng):
    """Perturbed uint8 RGB LR image (HxWx3) from the prepared LR ``lr`` and the mod-cropped HR ``hr``."""
    if name == 'none':
        return lr.copy()
    if name in NOISE_SIGMA:
        return _to_uint8(lr.astype(np.float64) + rng.normal(0.0, NOISE_SIGMA[name], lr.shape))
    if name == 'jpeg90':
        ok, buf = cv2.imencode('.jpg', np.ascontiguousarray(lr[:, :, ::-1]), [cv2.IMWRITE_JPEG_QUALITY, 90])
        if not ok:
            raise RuntimeError('cv2.imencode failed to write a JPEG')
        return cv2.imdecode(buf, cv2.IMREAD_COLOR)[:, :, ::-1].copy()
    if name == 'blur0.5':
        blurred = cv2.GaussianBlur(hr.astype(np.float64), (5, 5), 0.5, borderType=cv2.BORDER_REPLICATE)
        return _to_uint8(_matlab_downscale(blurred, scale))
    if name == 'area':
        h, w = hr.shape[0] // scale, hr.shape[1] // scale
        return _to_uint8(cv2.resize(hr.astype(np.float64), (w, h), interpolation=cv2.INTER_AREA))
    raise ValueError(f'Unknown perturbation {name!r}. Supported ones are: {list(PERTURBATIONS)}.')


def _y(img):
    """Y (BT.601, [0, 1], float64) of a uint8 RGB image."""
    t = torch.from_numpy(img.transpose(2, 0, 1).astype(np.float64) / 255.0)[None]
    return rgb_to_ycbcr(t)[:, :1]


def make_lr_set(name, gt_dir, lq_dir, out_dir, scale, seed, limit=None):
    """Write the perturbed LR of the first ``limit`` images into ``out_dir``; returns mean ||b' - b||_2 (Y)."""
    os.makedirs(out_dir, exist_ok=True)
    files = sorted(f for f in os.listdir(gt_dir) if f.lower().endswith(IMG_EXT))[:limit]
    if not files:
        raise FileNotFoundError(f'no images in {gt_dir}')
    changes = []
    for f in files:
        hr = cv2.imread(osp.join(gt_dir, f), cv2.IMREAD_COLOR)
        lr = cv2.imread(osp.join(lq_dir, f), cv2.IMREAD_COLOR)
        if hr is None or lr is None:
            raise FileNotFoundError(f'cannot read {osp.join(gt_dir, f)} and {osp.join(lq_dir, f)}')
        hr, lr = hr[:, :, ::-1], lr[:, :, ::-1]
        if lr.shape[:2] != (hr.shape[0] // scale, hr.shape[1] // scale):
            raise ValueError(f'{f}: LR {lr.shape[:2]} is not HR {hr.shape[:2]} / {scale}')
        rng = np.random.default_rng([seed, zlib.crc32(f'{name}/{f}'.encode())])
        out = perturb(name, lr, hr, scale, rng)
        changes.append(float((_y(out) - _y(lr)).norm()))
        # same file name as the GT (evaluate_option pairs by name); PNG keeps the values exactly
        cv2.imwrite(osp.join(out_dir, f), np.ascontiguousarray(out[:, :, ::-1]))
    return float(np.mean(changes))
