"""Image files under the project's protocol: HR mod-cropped to the scale, LR = MATLAB bicubic then uint8."""
import os
import os.path as osp

import cv2
import numpy as np
from basicsr.utils.matlab_functions import imresize

IMG_EXT = ('.png', '.bmp', '.jpg', '.jpeg', '.tif', '.tiff')


def list_images(folder):
    """Sorted paths of the images in ``folder``; an error naming the folder when there are none."""
    if not osp.isdir(folder):
        raise FileNotFoundError(f'No HR folder {folder!r}: expected <src>/<Name>/HR with images.')
    names = sorted(f for f in os.listdir(folder) if f.lower().endswith(IMG_EXT))
    if not names:
        raise FileNotFoundError(f'No images ({", ".join(IMG_EXT)}) in {folder!r}.')
    return [osp.join(folder, f) for f in names]


def read_hr(path):
    """uint8 HxWx3 (BGR, as cv2 and BasicSR use); gray is replicated, alpha dropped."""
    img = cv2.imread(path, cv2.IMREAD_UNCHANGED)
    if img is None:
        raise ValueError(f'Cannot read image {path!r}.')
    if img.dtype != np.uint8:
        raise ValueError(f'{path!r} is {img.dtype}; HR training/evaluation images must be 8-bit.')
    if img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    elif img.shape[2] == 4:
        img = img[:, :, :3]
    return img


def read_rgb(path):
    """HxWx3 float32 in [0, 1], BGR (as BasicSR's datasets read images)."""
    img = cv2.imread(path, cv2.IMREAD_COLOR)
    if img is None:
        raise ValueError(f'cannot read {path}')
    return img.astype(np.float32) / 255.0


def mod_crop(img, scale):
    h, w = img.shape[:2]
    return img[:h - h % scale, :w - w % scale]


def bicubic_lr(hr, scale):
    """MATLAB ``imresize(hr, 1/scale)`` on [0, 1] floats, then ``im2uint8`` (round half up)."""
    lr = imresize(hr.astype(np.float64) / 255., 1 / scale)
    return np.clip(np.floor(lr * 255. + 0.5), 0, 255).astype(np.uint8)
