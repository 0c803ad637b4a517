"""Offline demo: bicubic vs our SRCNN and compact RCAN, each alone and with its MCNet layer, on photos that ship
with scikit-image.

    python -m mcnet_basicsr.demo [--scale 2] [--size 192] [--out results/demo] [--device auto]

No dataset or network access: the HR photos come with scikit-image, LR is made by MATLAB bicubic
downscaling (uint8), and the models are the weights this project ships. Prints PSNR/SSIM (Y,
crop = scale, uint8 outputs, BasicSR's metrics), the data fidelity ||A x - b||_2 (Y, [0, 1]) and
the time per image, and writes one comparison figure per photo: every method and the ground truth with
its PSNR and ||A x - b||, above a zoomed crop of the most detailed region (as ``mcnet-sr --compare``
draws them). MCNet+SRCNN is consistent to float precision
(eps = 0); MCNet+RCAN-c keeps ||A x - b|| within the uint8 quantisation level it was trained with.
"""
import argparse
import os
import os.path as osp
import sys
import time

import cv2
import numpy as np
import torch
from tqdm import tqdm

from mcnet_basicsr.ops import build_operator, imresize
from mcnet_basicsr.utils.color import rgb_to_ycbcr
from mcnet_basicsr.utils.figure import compose_figure, to_u8_bgr
from mcnet_basicsr.utils.pipeline import default_root_path
from mcnet_basicsr.zoo.pretrained import build_pretrained_backbone, build_pretrained_mcnet, default_eps_rms

PHOTOS = ('astronaut', 'coffee', 'chelsea')


def sample_hr(name, size, scale):
    from skimage import data
    img = getattr(data, name)()[:, :, :3]
    h, w = img.shape[:2]
    size = min(size, h, w) // scale * scale
    top, left = (h - size) // 2, (w - size) // 2
    return np.ascontiguousarray(img[top:top + size, left:left + size])


def to_tensor(rgb_uint8):
    return torch.from_numpy(rgb_uint8.astype(np.float32) / 255.).permute(2, 0, 1)[None]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--scale', type=int, default=2, choices=[2, 3, 4])
    parser.add_argument('--size', type=int, default=192, help='HR crop size of each photo (default 192)')
    parser.add_argument('--photos', nargs='+', default=list(PHOTOS))
    parser.add_argument('--out', default=None, help='figure folder (default: <root>/results/demo)')
    parser.add_argument('--device', default='auto', choices=['auto', 'cpu', 'cuda'])
    args = parser.parse_args(argv)
    from basicsr.metrics import calculate_psnr, calculate_ssim

    device = torch.device('cuda' if args.device == 'auto' and torch.cuda.is_available() else
                          ('cpu' if args.device == 'auto' else args.device))
    out_dir = args.out or osp.join(default_root_path(), 'results', 'demo')
    os.makedirs(out_dir, exist_ok=True)
    s = args.scale
    op = build_operator({'type': 'bicubic', 'scale': s})
    methods = {
        'bicubic': lambda lr: imresize(lr, s),
        'SRCNN (ours)': build_pretrained_backbone('srcnn', s, device),
        'MCNet+SRCNN': build_pretrained_mcnet(s, device),
        # our compact RCAN and its layer (eps_rms at the uint8 quantisation level, as trained)
        'RCAN-c (ours)': build_pretrained_backbone('rcan_compact', s, device),
        'MCNet+RCAN-c': build_pretrained_mcnet(s, device, backbone='rcan_compact',
                                               eps_rms=default_eps_rms('rcan_compact')),
    }
    rows = []
    for name in tqdm(args.photos, desc=f'demo x{s}', unit='photo'):
        hr = sample_hr(name, args.size, s)
        lr = torch.floor(op(to_tensor(hr).double()).clamp(0, 1) * 255. + 0.5).float() / 255.  # MATLAB bicubic, uint8
        lr = lr.to(device)
        b = rgb_to_ycbcr(lr.double())[:, :1]
        panels = []
        for method, fn in methods.items():
            t0 = time.perf_counter()
            with torch.no_grad():
                sr = fn(lr)
            if device.type == 'cuda':
                torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
            fidelity = float(op.residual_norm(rgb_to_ycbcr(sr.double())[:, :1], b)[0])
            bgr, _ = to_u8_bgr(sr.detach())
            gt_bgr = np.ascontiguousarray(hr[:, :, ::-1])
            psnr = calculate_psnr(bgr, gt_bgr, crop_border=s, test_y_channel=True)
            ssim = calculate_ssim(bgr, gt_bgr, crop_border=s, test_y_channel=True)
            rows.append((name, method, psnr, ssim, fidelity, seconds))
            panels.append((f'{method} {psnr:.2f} dB\n||Ax-b|| {fidelity:.1e}', bgr))
        # the ground truth is not exactly consistent with the LR image either: b was rounded to uint8
        gt_fidelity = float(op.residual_norm(rgb_to_ycbcr(to_tensor(hr).double().to(device))[:, :1], b)[0])
        panels.append((f'ground truth\n||Ax-b|| {gt_fidelity:.1e}', gt_bgr))
        figure = compose_figure(panels, s)
        path = osp.join(out_dir, f'{name}_x{s}.png')
        cv2.imwrite(path + '.tmp.png', figure)
        os.replace(path + '.tmp.png', path)

    print(f'\nMCNet demo, x{s}, {len(args.photos)} scikit-image photos ({args.size}px HR crops), device {device}')
    print(f'{"photo":10s} {"method":13s} {"PSNR(Y)":>8s} {"SSIM(Y)":>8s} {"||Ax-b||":>9s} {"seconds":>8s}')
    for name, method, psnr, ssim, fidelity, seconds in rows:
        print(f'{name:10s} {method:13s} {psnr:8.2f} {ssim:8.4f} {fidelity:9.2e} {seconds:8.2f}')
    for method in methods:
        sel = [r for r in rows if r[1] == method]
        print(f'{"mean/max":10s} {method:13s} {np.mean([r[2] for r in sel]):8.2f} {np.mean([r[3] for r in sel]):8.4f} '
              f'{max(r[4] for r in sel):9.2e} {np.mean([r[5] for r in sel]):8.2f}')
    print(f'figures: {out_dir}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
