"""Lab: does the default kernel layer's PnP-ADMM reach a fixed point, told a resizer or a blur kernel?

The layer of ``mcnet-sr --kernel`` (``ffdnet_unfolded16``: the untrained colour layer around the unfolded anchor,
``options/test_mcnet_ffdnet_unfolded16_x<s>.yml``) or another option-file row (``--row``, e.g.
``mcnet_ffdnet_unfolded16_resizers``: the same layer with its dual in the null space of A) is built as its file gives
it, its anchor optionally replaced (``--anchor``, e.g. a stage-3 EMA file), and told each
Set5 image's operator: a resizer (``--degradation``, LR = the exact operator rounded to uint8) or an anisotropic
Gaussian kernel (``--gaussian``, circular blur and decimation, uint8). From the solver's start ``(P_S(w), 0)`` the
ADMM map is iterated plainly (no Anderson, no stop) and every ``--every`` iterations the record takes the PSNR of x
(Y rounded to uint8, crop s), ``||lam|| / ||x||`` and the relative step ``||F(z) - z|| / ||F(z)||``. For comparison
the same prior in half-quadratic splitting, ``x <- P_S[(beta w + rho R(x)) / (beta + rho)]`` (no dual), from P_S(w).

    python benchmarks/admm_drift.py --scale 2 --degradation cv2-cubic --data datasets \
        --out results/admm_drift_x2_cv2_cubic.json
"""
import argparse
import json
import os.path as osp
import sys

import numpy as np
import torch

from timing import device_name


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--scale', type=int, required=True, choices=(2, 3, 4))
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument('--degradation', help='resizer that makes the LR (mcnet_basicsr.ops.DEGRADATIONS)')
    how.add_argument('--gaussian', type=float, nargs=3, metavar=('SIGMA1', 'SIGMA2', 'THETA'),
                     help='anisotropic Gaussian kernel (15 x 15) that makes the LR')
    p.add_argument('--row', default='mcnet_ffdnet_unfolded16',
                   help='options/test_<row>_x<s>.yml (default: %(default)s)')
    p.add_argument('--anchor', help="anchor weights instead of the row's")
    p.add_argument('--images', nargs='+', help='Set5 file stems (default: all five)')
    p.add_argument('--iters', type=int, default=300)
    p.add_argument('--every', type=int, default=25)
    p.add_argument('--data', default='datasets', help='folder with Set5/HR')
    p.add_argument('--out', required=True, help='JSON record to write')
    return p.parse_args(argv)


def build_operator(args):
    from mcnet_basicsr.ops import build_degradation
    from mcnet_basicsr.ops.blur import BlurDownsample
    if args.degradation:
        return build_degradation(args.degradation, args.scale)
    from mcnet_basicsr.data.kernel_family import gaussian_kernel
    return BlurDownsample(args.scale, torch.as_tensor(gaussian_kernel(15, *args.gaussian), dtype=torch.float64))


def trace(net, lr, gt, operator, args):
    """The record of one image: the anchor alone, P_S(w), the ADMM and HQS iterations."""
    from mcnet_basicsr.metrics.y_uint8 import y_uint8_metrics
    from mcnet_basicsr.utils.color import luma
    c = lr.shape[1]

    def psnr(x):  # the tables' protocol: the output's Y rounded to uint8
        return float(y_uint8_metrics(luma(x.double()), gt, args.scale)[0])

    w, cbcr = net.backbone_estimate(lr, operator=operator)
    w, b, op, _ = net.measured_problem(w, cbcr, lr, operator)
    b = b.to(w.dtype)
    f, z, eps = net.fixed_point_problem(w, b, operator=op)
    beta, level = net.solve_weights(w, op, None)
    out = {'anchor': psnr(w), 'projected': psnr(z[:, :c]), 'admm': {}, 'hqs': {}}
    x = z[:, :c]
    for k in range(1, args.iters + 1):
        fz = f(z)
        xh = op.project((beta * w + net.rho * net.denoise(x, None, level)) / (beta + net.rho), b, eps)
        if k == 1 or k % args.every == 0:
            lam = fz[:, c:]
            out['admm'][k] = {'psnr': psnr(fz[:, :c]), 'lam': float(lam.norm() / fz[:, :c].norm()),
                              'step': float((fz - z).norm() / fz.norm())}
            out['hqs'][k] = {'psnr': psnr(xh), 'step': float((xh - x).norm() / xh.norm())}
        z, x = fz, xh
    return out


@torch.no_grad()
def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from mcnet_basicsr.data.degradations import degraded_lr_uint8
    from mcnet_basicsr.evaluation.evaluate import read_option
    from mcnet_basicsr.evaluation.kernel_table import build_row
    from mcnet_basicsr.utils.images import list_images, mod_crop, read_hr
    net, _ = build_row(args.row, args.scale, torch.device('cpu'), 1e-4, 100, backbone_path=args.anchor)
    if net is None:
        raise SystemExit(f'No options/test_{args.row}_x{args.scale}.yml or no weights it names.')
    operator = build_operator(args)
    paths = [p for p in list_images(osp.join(args.data, 'Set5', 'HR'))
             if not args.images or osp.splitext(osp.basename(p))[0] in args.images]
    if not paths:
        raise SystemExit(f'No Set5 images under {args.data}.')
    results = {}
    for path in paths:
        gt = mod_crop(read_hr(path), args.scale)
        lr = torch.from_numpy(degraded_lr_uint8(operator, gt)[:, :, ::-1].astype(np.float32) / 255)
        r = results[osp.basename(path)] = trace(net, lr.permute(2, 0, 1)[None].contiguous(), gt, operator, args)
        last = r['admm'][max(r['admm'])]
        print(f"{osp.basename(path)}: anchor {r['anchor']:.3f}, P_S(w) {r['projected']:.3f}, ADMM "
              f"{r['admm'][1]['psnr']:.3f} -> {last['psnr']:.3f} (||lam||/||x|| {last['lam']:.2f}), HQS "
              f"{r['hqs'][max(r['hqs'])]['psnr']:.3f}", flush=True)
    made = args.degradation or 'circular Gaussian blur {} {} {} and decimation'.format(*args.gaussian)
    record = {'protocol': f'Set5 x{args.scale}, LR made by {made} (uint8); Y-PSNR (uint8, crop s) of x after k '
                          'plain iterations of the ADMM map from (P_S(w), 0), and of the HQS map from P_S(w)',
              'row': args.row, 'dual': net.dual,
              'anchor': args.anchor or 'shipped ' + osp.basename(read_option(
                  f'options/test_{args.row}_x{args.scale}.yml')['network_g']['backbone']['path']),
              'device': device_name(torch.device('cpu')), 'results': results}
    with open(args.out, 'w') as f:
        json.dump(record, f, indent=1)


if __name__ == '__main__':
    main()
