"""Image files as ``mcnet-sr`` reads and writes them: 8- or 16-bit, gray, gray+alpha, RGB or RGBA, written
whole or not at all (a temporary name in the same folder, then a rename), never over an existing file unless
asked."""
import os
import os.path as osp

import cv2
import numpy as np
import torch

IMAGE_EXTENSIONS = ('.png', '.jpg', '.jpeg', '.bmp', '.tif', '.tiff')


class ImageError(Exception):
    """A problem with one image: reported, the other images go on."""


def read_image(path):
    """(array HxW or HxWxC as stored by OpenCV: BGR/BGRA, uint8 or uint16)."""
    if not osp.isfile(path):
        raise ImageError('not a file')
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as err:
        raise ImageError(f'cannot read: {err.strerror or err}') from None
    if data.size == 0:
        raise ImageError('empty file (0 bytes)')
    img = cv2.imdecode(data, cv2.IMREAD_UNCHANGED)
    if img is None:
        raise ImageError('not a readable image (PNG/JPEG/BMP/TIFF expected)')
    if img.dtype not in (np.uint8, np.uint16):
        raise ImageError(f'unsupported sample type {img.dtype} (8- or 16-bit integer images only)')
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[:, :, 0]
    if img.ndim not in (2, 3) or (img.ndim == 3 and img.shape[2] not in (2, 3, 4)):
        raise ImageError(f'unsupported image layout {img.shape}')
    if img.shape[0] == 0 or img.shape[1] == 0:
        raise ImageError('zero-size image')
    return img


def split_image(img):
    """-> (colour float64 NCHW tensor in [0, 1] (RGB or gray), alpha float64 (1,1,h,w) or None, peak value)."""
    peak = 65535.0 if img.dtype == np.uint16 else 255.0
    arr = img.astype(np.float64) / peak
    alpha = None
    if arr.ndim == 2:
        colour = arr[None]
    elif arr.shape[2] == 2:  # gray + alpha
        colour, alpha = arr[None, :, :, 0], arr[:, :, 1]
    else:
        colour = arr[:, :, 2::-1].transpose(2, 0, 1)  # BGR(A) -> RGB
        alpha = arr[:, :, 3] if arr.shape[2] == 4 else None
    colour = torch.from_numpy(np.ascontiguousarray(colour))[None]
    if alpha is not None:
        alpha = torch.from_numpy(np.ascontiguousarray(alpha))[None, None]
    return colour, alpha, peak


def to_array(colour, alpha, peak):
    """Float NCHW (RGB or gray) [+ alpha] -> clipped, rounded HxW[xC] array in OpenCV channel order."""
    dtype = np.uint16 if peak > 255 else np.uint8
    chans = colour[0].clamp(0, 1).cpu().numpy()
    planes = [chans[0]] if chans.shape[0] == 1 else [chans[2], chans[1], chans[0]]
    if alpha is not None:
        planes.append(alpha[0, 0].clamp(0, 1).cpu().numpy())
    arr = np.stack(planes, axis=-1) if len(planes) > 1 else planes[0]
    return np.rint(arr * peak).astype(dtype)


def write_atomic(path, data, force):
    """Write bytes under a temporary name in the same folder, then rename; never clobbers without force."""
    folder, name = osp.split(path)
    tmp = osp.join(folder, f'.{name}.{os.getpid()}.tmp')
    try:
        with open(tmp, 'xb') as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if not force and osp.lexists(path):
            raise ImageError(f'{path} already exists (use --force to overwrite)')
        os.replace(tmp, path)
    finally:
        if osp.lexists(tmp):
            os.remove(tmp)


def encode_png(arr):
    ok, buf = cv2.imencode('.png', arr)
    if not ok:
        raise ImageError('PNG encoding failed')
    return buf.tobytes()


def find_gt(gt, input_path, n_inputs):
    if gt is None:
        return None
    if osp.isfile(gt):
        if n_inputs > 1:
            raise ImageError(f'--gt {gt} is a single file but several inputs were given; pass a folder')
        return gt
    cand = osp.join(gt, osp.basename(input_path))
    if osp.isfile(cand):
        return cand
    stem = osp.splitext(osp.basename(input_path))[0]
    for ext in IMAGE_EXTENSIONS:
        for e in (ext, ext.upper()):
            if osp.isfile(osp.join(gt, stem + e)):
                return osp.join(gt, stem + e)
    raise ImageError(f'no ground truth {osp.basename(input_path)} in {gt}')


def read_gt(path, out_h, out_w, scale, channels):
    """GT as uint8 HxW[x3] (BGR; alpha dropped), mod-cropped to the output size."""
    try:
        gt = read_image(path)
    except ImageError as err:
        raise ImageError(f'ground truth {path}: {err}') from None
    if gt.dtype == np.uint16:
        gt = np.rint(gt / 257.0).astype(np.uint8)
    if gt.ndim == 3:
        gt = gt[:, :, 0] if gt.shape[2] == 2 else gt[:, :, :3]
    h, w = gt.shape[:2]
    if (h, w) != (out_h, out_w):
        if h // scale * scale == out_h and w // scale * scale == out_w:
            gt = gt[:out_h, :out_w]  # BasicSR's mod_crop
        else:
            raise ImageError(f'ground truth {path} is {w}x{h}, output is {out_w}x{out_h}')
    gt_channels = 1 if gt.ndim == 2 else 3
    if gt_channels != channels:
        raise ImageError(f'ground truth {path} has {gt_channels} colour channel(s), the input {channels}')
    return np.ascontiguousarray(gt)
