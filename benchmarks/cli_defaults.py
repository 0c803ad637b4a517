"""Lab: what ``mcnet-sr --kernel`` and ``mcnet-sr --degradation`` give a user, against bicubic upsampling.

Each problem is written as a user has it: an 8-bit LR PNG (rounded) made from a Set5 image by a blur kernel drawn
from :class:`~mcnet_basicsr.data.kernel_family.KernelFamily` (seeded; never the 12 kernels of Table K, never CBSD68)
with circular boundary and upper-left decimation, optionally with Gaussian noise, or by a library resizer; the kernel
as an ``.npy`` file. ``mcnet-sr`` runs in this process (its ``main``) with each of ``--variants`` (:data:`VARIANTS`:
the FFDNet layers, SRCNN's bicubic layer told the operator, the compact RCAN's layers), and the written PNG is scored
against the HR: PSNR on RGB uint8 with a border of s^2 (Table K's). Bicubic upsampling (MATLAB's) of the same LR is
the floor. Also a smooth region, where a prior that invents texture loses to bicubic upsampling: a 96 x 96 crop of
the evening sky in scikit-image's ``rocket`` photo (:data:`SMOOTH_CROP`; mean absolute difference of neighbouring
values 0.6 levels) under the first x2 kernel; with ``--smooth-set``, also the smoothest regions of a selection set
(:func:`smoothest_window` of each image, the ``--smooth-count`` smoothest of them) under the same kernel. ``--rows``
adds option-file rows as the kernel table builds them (``options/test_<row>_x<s>.yml``, e.g. USRNet-tiny, whose weights
are fetched) on the kernel cases: a non-blind network told the LR as it is, the kernel, the scale and the noise; an
MCNet layer told the LR as ``mcnet-sr`` tells it (the uint8 ball around the LR, widened by the noise).

    python benchmarks/cli_defaults.py --data datasets --out results/cli_defaults.json
"""
import argparse
import json
import os.path as osp
import sys
import tempfile
import time

import numpy as np

from timing import device_name

# (photo, top, left, size) of a smooth sky region in a scikit-image photo
SMOOTH_CROP = ('rocket', 0, 272, 96)
KERNEL_CASES = (('x2', 2, 0.0), ('x2_n2.55', 2, 2.55), ('x3_n7.65', 3, 7.65), ('x4', 4, 0.0))
RESIZERS = ('pil-bicubic', 'cv2-area')
# the models compared, by their --backbone: the FFDNet layers (FFDNetHQS's for a kernel, FFDNetPnP's for a resizer),
# SRCNN's bicubic layer told the operator, the compact RCAN's layers (for a resizer, the one its cards route it to),
# and the unfolded anchor's layer (kernel cases only: None skips a variant's resizer cases)
VARIANTS = {'ffdnet': {'kernel': ['--backbone', 'ffdnet_hqs'], 'degradation': ['--backbone', 'ffdnet_pnp']},
            'srcnn': {'kernel': ['--backbone', 'srcnn'], 'degradation': ['--backbone', 'srcnn']},
            'rcan_compact': {'kernel': ['--backbone', 'rcan_compact'], 'degradation': ['--backbone', 'rcan_compact']},
            'unfolded': {'kernel': ['--backbone', 'ffdnet_unfolded16'], 'degradation': None}}  # blur kernels only


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--data', default='datasets', help='folder with Set5/HR')
    p.add_argument('--kernels', type=int, default=2, help='family kernels per case (seeded draws)')
    p.add_argument('--variants', nargs='+', default=list(VARIANTS), choices=VARIANTS)
    p.add_argument('--resizers', nargs='+', default=list(RESIZERS), help='the resizers of the resizer cases')
    p.add_argument('--resizer-scales', type=int, nargs='+', default=[4], help='the scales of the resizer cases')
    p.add_argument('--cases', nargs='+', help='only these cases (e.g. "kernel x2", "pil-bicubic x4", "smooth")')
    p.add_argument('--smooth-set', help='also the smoothest regions of this set\'s HR images (never CBSD68)')
    p.add_argument('--smooth-images', type=int, default=0, help='the first N images of --smooth-set (0: all)')
    p.add_argument('--smooth-count', type=int, default=12, help='how many of their smoothest regions')
    p.add_argument('--rows', nargs='+', default=[], metavar='ROW',
                   help='option-file rows also scored on the kernel cases (e.g. usrnet_tiny; run from the repository '
                        'root)')
    p.add_argument('--device', default='cpu')
    p.add_argument('--out', required=True)
    return p.parse_args(argv)


def write_png(path, rgb):
    import cv2
    cv2.imwrite(path, np.ascontiguousarray(rgb[:, :, ::-1]))


def read_png(path):
    import cv2
    return cv2.imread(path, cv2.IMREAD_COLOR)[:, :, ::-1]


def smoothest_window(img, size, stride=16):
    """``(flatness, top, left)`` of the ``size`` x ``size`` window of ``img`` (H, W, C uint8) on a ``stride`` grid
    with the least flatness: the mean absolute difference of vertically and of horizontally neighbouring values, in
    levels, averaged."""
    g = img.astype(np.float64)
    dy, dx = np.abs(np.diff(g, axis=0)).mean(axis=2), np.abs(np.diff(g, axis=1)).mean(axis=2)
    best = None
    for top in range(0, g.shape[0] - size + 1, stride):
        for left in range(0, g.shape[1] - size + 1, stride):
            flat = (dy[top:top + size - 1, left:left + size].mean()
                    + dx[top:top + size, left:left + size - 1].mean()) / 2
            if best is None or flat < best[0]:
                best = (float(flat), top, left)
    return best


def smooth_regions(args):
    """``(name, flatness, hr)`` of the ``--smooth-count`` smoothest regions of ``--smooth-set``, the smoothest
    ``SMOOTH_CROP``-sized window of each image, smoothest first."""
    from PIL import Image

    from mcnet_basicsr.utils.images import list_images
    if args.smooth_set == 'CBSD68':
        raise SystemExit('CBSD68 is the test set of Table K: take smooth regions of another set.')
    size = SMOOTH_CROP[3]
    found = []
    for path in list_images(osp.join(args.data, args.smooth_set, 'HR'))[:args.smooth_images or None]:
        img = np.asarray(Image.open(path).convert('RGB'))
        flat, top, left = smoothest_window(img, size)
        found.append((flat, osp.basename(path), img[top:top + size, left:left + size]))
    found.sort(key=lambda f: f[0])
    return [(name, flat, hr) for flat, name, hr in found[:args.smooth_count]]


def problems(args):
    """``(case, hr uint8, lr uint8, extra mcnet-sr options, scale)``: Set5 under family kernels (``--kernel``) and
    under resizers (``--degradation``), and the smooth crop under the first kernel of x2."""
    import torch
    from PIL import Image

    from mcnet_basicsr.data.degradations import degraded_lr_uint8, usrnet_mod_crop
    from mcnet_basicsr.data.kernel_family import KernelFamily
    from mcnet_basicsr.ops import build_degradation, build_operator
    from mcnet_basicsr.utils.images import list_images
    rng = np.random.default_rng(2024)
    family = KernelFamily()
    kernels = [family.draw(rng)[0] for _ in range(args.kernels)]
    photos = [np.asarray(Image.open(p).convert('RGB')) for p in list_images(osp.join(args.data, 'Set5', 'HR'))]

    def measure(op, hr, noise255, seed):
        if noise255 == 0:  # rounded half up, as the libraries round (ties are exact on 0..255 values)
            return degraded_lr_uint8(op, hr)
        x = torch.from_numpy(hr).permute(2, 0, 1)[None].double() / 255
        lr = op(x)[0].permute(1, 2, 0).numpy()
        lr = lr + np.random.default_rng(seed).normal(0, noise255 / 255, lr.shape)
        return (np.clip(lr, 0, 1) * 255).round().astype(np.uint8)

    for case, scale, noise255 in KERNEL_CASES:
        for ki, kernel in enumerate(kernels):
            op = build_operator({'type': 'blur', 'scale': scale, 'kernel': kernel})
            for i, photo in enumerate(photos):
                hr = usrnet_mod_crop(photo, scale)
                yield (f'kernel {case}', hr, measure(op, hr, noise255, i), {'kernel': kernel, 'noise': noise255},
                       scale)
    for scale in args.resizer_scales:
        for name in args.resizers:
            op = build_degradation(name, scale)
            for i, photo in enumerate(photos):
                hr = usrnet_mod_crop(photo, scale)
                yield f'{name} x{scale}', hr, measure(op, hr, 0.0, i), {'degradation': name}, scale
    from skimage import data
    photo, top, left, size = SMOOTH_CROP
    hr = getattr(data, photo)()[top:top + size, left:left + size]
    op = build_operator({'type': 'blur', 'scale': 2, 'kernel': kernels[0]})
    yield f'smooth {photo} x2', hr, measure(op, hr, 0.0, 0), {'kernel': kernels[0], 'noise': 0.0}, 2
    if args.smooth_set:
        for name, flat, hr in smooth_regions(args):
            yield (f'smooth {args.smooth_set} x2', hr, measure(op, hr, 0.0, 0),
                   {'kernel': kernels[0], 'noise': 0.0, 'region': f'{name} (flatness {flat:.2f})'}, 2)


def score_row(row, built, lr, extra, scale, device):
    """The uint8 output (H, W, 3) of the option-file row ``row`` (``built``: ``build_row``'s ``(net, consistent)``)
    on the uint8 ``lr`` made by ``extra``'s kernel and noise: an MCNet layer told the LR itself (the uint8 ball around
    it, widened by the noise, as ``mcnet-sr`` tells it), another row as the kernel table runs it."""
    import torch

    from mcnet_basicsr.evaluation.kernel_table import protocol_forward
    from mcnet_basicsr.ops import build_operator
    net, consistent = built
    if net is None:
        raise SystemExit(f'--rows {row}: options/test_{row}_x{scale}.yml or its weights are missing (run from the '
                         'repository root; scripts/fetch_assets.py fetches third-party weights).')
    op = build_operator({'type': 'blur', 'scale': scale, 'kernel': extra['kernel']})
    sigma = extra['noise'] / 255.0
    x = np.ascontiguousarray(lr, dtype=np.float32)[None] / 255
    if not consistent:
        return protocol_forward(net, False, x, op, sigma, torch.device(device))[0][0]
    with torch.no_grad():
        y, _ = net.run(torch.from_numpy(x).permute(0, 3, 1, 2).to(device), operator=op, noise_sigma=sigma or None)
    return (y.clamp(0, 1) * 255).round().byte()[0].permute(1, 2, 0).cpu().numpy()


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch

    from mcnet_basicsr.cli.main import main as mcnet_sr
    from mcnet_basicsr.data.degradations import psnr_rgb_uint8
    from mcnet_basicsr.evaluation.kernel_table import build_row
    from mcnet_basicsr.ops import imresize
    results, models, rows = {}, {}, {}
    tmp = tempfile.mkdtemp(prefix='cli_defaults_')
    for n, (case, hr, lr, extra, scale) in enumerate(problems(args)):
        if args.cases and not any(case.startswith(c) for c in args.cases):
            continue
        lr_path = osp.join(tmp, f'p{n}.png')
        write_png(lr_path, lr)
        cmd = [lr_path, '--scale', str(scale), '--device', args.device, '--force']
        if 'kernel' in extra:
            np.save(osp.join(tmp, f'k{n}.npy'), extra['kernel'])
            cmd += ['--kernel', osp.join(tmp, f'k{n}.npy'), '--noise', str(extra['noise'])]
        else:
            cmd += ['--degradation', extra['degradation']]
        entry = results.setdefault(case, {})
        lr_t = torch.from_numpy(lr).permute(2, 0, 1)[None].double() / 255
        bic = (imresize(lr_t, scale).clamp(0, 1) * 255).round().byte()[0].permute(1, 2, 0).numpy()
        entry.setdefault('bicubic', []).append(psnr_rgb_uint8(bic, hr, scale**2))
        for variant in args.variants:
            out = osp.join(tmp, variant)
            t0 = time.perf_counter()
            extra_args = VARIANTS[variant]['kernel' if 'kernel' in extra else 'degradation']
            if extra_args is None:
                continue
            status = mcnet_sr(cmd + ['-o', out] + extra_args, models=models)
            if status:
                raise RuntimeError(f'mcnet-sr {" ".join(cmd + extra_args)} exited with {status}')
            sr = read_png(osp.join(out, f'p{n}_x{scale}.png'))
            entry.setdefault(variant, []).append(psnr_rgb_uint8(sr, hr, scale**2))
            entry.setdefault(f'{variant} seconds', []).append(time.perf_counter() - t0)
        if 'kernel' in extra:
            for row in args.rows:
                if (row, scale) not in rows:
                    rows[row, scale] = build_row(row, scale, torch.device(args.device), 1e-4, 60)
                entry.setdefault(row, []).append(psnr_rgb_uint8(score_row(row, rows[row, scale], lr, extra, scale,
                                                                          args.device), hr, scale**2))
        if 'region' in extra:
            entry.setdefault('regions', []).append(extra['region'])
        line = '  '.join(f'{k} {np.mean(v):.2f}' for k, v in entry.items() if k != 'regions' and 'seconds' not in k)
        print(f'{case:>20} ({len(entry["bicubic"])} images)  {line}', flush=True)
        resizer_scales = ', '.join(f'x{s}' for s in args.resizer_scales)
        smooth = f' and the smoothest regions of {args.smooth_set}' if args.smooth_set else ''
        record = {'protocol': f'Set5 (family kernels, seed 2024; resizers {resizer_scales}) and a smooth crop{smooth}, '
                              '8-bit LR PNG, mcnet-sr in process, PSNR RGB uint8 border s^2',
                  'device': device_name(torch.device(args.device)), 'results': results}
        with open(args.out, 'w') as f:
            json.dump(record, f, indent=1)


if __name__ == '__main__':
    main()
