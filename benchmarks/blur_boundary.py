"""What the circular blur model costs on photos whose blur did not wrap around, and what padding the LR buys.

The ``blur`` operator is circular (USRNet's protocol). A photo's blur sees the scene beyond its borders; here that is
modelled by a symmetric boundary (``scipy.ndimage.convolve(mode='reflect')``) before the same decimation, rounded to
uint8. Three ways to super-resolve it at x4 with the same kernel, on Set5:

- ``imdn``: the backbone alone;
- ``circular``: MCNet (the IMDN x4 kernel layer, R, G, B each consistent) told the circular operator on the LR as it is;
- ``padded``: the same on the LR padded by reflection (``ReflectBlurDownsample.lr_padding`` LR pixels a side, USRNet's
  approach for real images), the output cropped back: what ``mcnet-sr --kernel K --boundary reflect`` does.

For each: PSNR (RGB uint8, border s) over the image, over the band within ``2 r`` HR pixels of the edges (r the
kernel's radius) and inside it, and the residual against the *true* (symmetric-boundary) operator, RMS per LR value in
uint8 levels, inside and in the LR band of ``ceil(2 r / s)`` pixels:

    python benchmarks/blur_boundary.py --kernels 4 9 --out benchmarks/records/blur_boundary_set5_x4_cpu.json
"""
import argparse
import json
import math
import os.path as osp
import sys

import mcnet_basicsr  # noqa: F401  (first: the torchvision alias basicsr 1.4.2 needs)

# isort: split

import numpy as np
import torch

from mcnet_basicsr.data.degradations import psnr_rgb_uint8
from mcnet_basicsr.evaluation.kernel_table import build_row
from mcnet_basicsr.ops import ReflectBlurDownsample, build_operator, reflect_pad
from mcnet_basicsr.ops.kernels import load_kernel
from mcnet_basicsr.utils.images import list_images

SCALE = 4


def reflect_lr(hr, true_op):
    """HxWx3 float64 LR of a uint8 HR under ``true_op`` (a :class:`ReflectBlurDownsample`), rounded to uint8."""
    x = torch.from_numpy(hr.astype(np.float64)).permute(2, 0, 1)[None]
    lr = true_op(x)[0].permute(1, 2, 0).numpy()
    return np.clip(np.floor(lr + 0.5), 0, 255) / 255.0


def band_mask(h, w, width):
    m = np.zeros((h, w), bool)
    m[:width], m[-width:], m[:, :width], m[:, -width:] = True, True, True, True
    return m


def psnr_masked(sr, hr, mask):
    err = (sr.astype(np.float64) - hr.astype(np.float64))**2
    return float(10 * np.log10(255.0**2 / err[mask].mean()))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--kernels', type=int, nargs='+', default=[4, 9], help="USRNet's kernels (1-based)")
    p.add_argument('--data', default='datasets')
    p.add_argument('--out')
    args = p.parse_args(argv)
    device = torch.device('cpu')
    imdn, _ = build_row('imdn', SCALE, device, 1e-4, 200)
    mcnet, _ = build_row('mcnet_imdn_kernels', SCALE, device, 1e-4, 200)
    if imdn is None or mcnet is None:
        sys.exit('needs options/test_imdn_x4.yml, test_mcnet_imdn_kernels_x4.yml and their weights '
                 '(python scripts/fetch_assets.py imdn Set5 usrnet_kernels)')
    rows = []
    for k in args.kernels:
        kernel = load_kernel(osp.join(args.data, 'kernels', 'kernels_12.mat'), k - 1)
        true_op = ReflectBlurDownsample(SCALE, kernel)
        op = build_operator({'type': 'blur', 'scale': SCALE, 'kernel': kernel})
        r = max(kernel.shape) // 2
        pad = true_op.lr_padding
        lr_band = math.ceil(2 * r / SCALE)
        for path in list_images(osp.join(args.data, 'Set5', 'HR')):
            from PIL import Image
            hr = np.asarray(Image.open(path).convert('RGB'))
            hr = hr[:hr.shape[0] - hr.shape[0] % 8, :hr.shape[1] - hr.shape[1] % 8]
            lr = reflect_lr(hr, true_op)
            b = torch.from_numpy(lr).permute(2, 0, 1)[None]
            b_true = (b + 0.5 / 255).float()  # the uint8 rounding's centre, as the protocol tells the layers
            outs = {}
            with torch.no_grad():
                outs['imdn'] = imdn(b.float())
                outs['circular'] = mcnet(b_true, operator=op)
                s = pad * SCALE
                outs['padded'] = mcnet(reflect_pad(b_true, pad, pad, pad, pad), operator=op)[..., s:-s, s:-s]
            h, w = hr.shape[:2]
            mask = band_mask(h, w, 2 * r)
            lr_mask = band_mask(*lr.shape[:2], lr_band)
            for name, out in outs.items():
                sr = (out.clamp(0, 1) * 255).round().byte()[0].permute(1, 2, 0).numpy()
                res = (true_op(out.double()) * 255)[0].permute(1, 2, 0).numpy() - lr * 255 - 0.5
                row = dict(kernel=k, image=osp.basename(path), method=name, pad=pad if name == 'padded' else 0,
                           psnr=psnr_rgb_uint8(sr, hr, SCALE), psnr_band=psnr_masked(sr, hr, mask),
                           psnr_inside=psnr_masked(sr, hr, ~mask),
                           residual_rms_inside=float(np.sqrt((res[~lr_mask]**2).mean())),
                           residual_rms_band=float(np.sqrt((res[lr_mask]**2).mean())))
                rows.append(row)
                print(f"k{k} {row['image']:>14} {name:>9}: {row['psnr']:.2f} dB (band {row['psnr_band']:.2f}, inside "
                      f"{row['psnr_inside']:.2f}); true-model residual rms {row['residual_rms_inside']:.3f} inside, "
                      f"{row['residual_rms_band']:.3f} in the band (levels)", flush=True)
    summary = {}
    for k in args.kernels:
        for name in ('imdn', 'circular', 'padded'):
            sel = [r for r in rows if r['kernel'] == k and r['method'] == name]
            summary[f'k{k}|{name}'] = {key: float(np.mean([r[key] for r in sel])) for key in
                                       ('psnr', 'psnr_band', 'psnr_inside', 'residual_rms_inside', 'residual_rms_band')}
            print(f'k{k} {name:>9} mean: ' + ', '.join(f'{a} {v:.3f}' for a, v in summary[f'k{k}|{name}'].items()))
    if args.out:
        with open(args.out, 'w') as f:
            json.dump({'command': ' '.join(sys.argv), 'device': 'cpu', 'scale': SCALE, 'summary': summary,
                       'rows': rows}, f, indent=1)


if __name__ == '__main__':
    main()
