"""Per-iteration cost of the exact projection against the denoiser the iteration also runs.

One iteration of the layer runs the denoiser (DnCNN6, 64 channels) once and the projection P_S once on the same HR
image. For every operator (MATLAB bicubic, each resizer of ``mcnet_basicsr.ops.DEGRADATIONS``, blur by a kernel)
this times, on one device, ``project(x, b, eps)`` with eps = 0 and eps > 0 (the uint8 level) after the first call on
the size (whose one-off set-up cost is ``benchmark_ops.py``'s), beside one DnCNN6 forward on the same x, and writes
their ratio:

    python benchmarks/projection_vs_denoiser.py --kernel datasets/kernels/kernels_12.mat --out record.json
"""
import argparse
import json
import sys

import mcnet_basicsr  # noqa: F401  (first: the torchvision alias basicsr 1.4.2 needs)

# isort: split

import torch

from mcnet_basicsr.archs.dncnn_arch import DnCNN
from mcnet_basicsr.ops import DEGRADATIONS, QUANTIZATION_EPS_RMS, build_operator, eps_from_rms
from mcnet_basicsr.ops.kernels import load_kernel
from timing import device_name, median_ms


def operators(scale, kernel_path):
    ops = {name: build_operator(dict(DEGRADATIONS[name], scale=scale)) for name in DEGRADATIONS}
    if kernel_path:
        kernel = load_kernel(kernel_path, 0)
        ops['blur (USRNet k1)'] = build_operator({'type': 'blur', 'scale': scale, 'kernel': kernel})
    return ops


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--hr', type=int, nargs='+', default=[1024], help='HR sizes (square)')
    p.add_argument('--scales', type=int, nargs='+', default=[2, 3, 4])
    p.add_argument('--channels', type=int, default=1, help='images per call (3: an RGB solve)')
    p.add_argument('--kernel', help='a kernel file for the blur operator (.mat/.npy/.png; the first kernel)')
    p.add_argument('--repeats', type=int, default=20)
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--out')
    args = p.parse_args(argv)
    device = torch.device(args.device)
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    dncnn = DnCNN(depth=6, num_feat=64).to(device).eval()
    dncnn.update_spectral_norm()  # once, as a solve does
    dncnn.auto_update_spectral_norm = False
    rows = []
    for size in args.hr:
        for scale in args.scales:
            hr = size - size % scale
            x = torch.rand(args.channels, 1, hr, hr, device=device)
            with torch.no_grad():
                t_den = median_ms(lambda: dncnn(x), device, args.repeats, warmup=3)
                for name, op in operators(scale, args.kernel).items():
                    op = op.to(device) if hasattr(op, 'to') else op
                    b = op(x.double()).to(x.dtype)
                    b = b + 0.001 * torch.randn(b.shape, device=device)
                    eps = eps_from_rms(QUANTIZATION_EPS_RMS, b[0].numel())
                    row = {'operator': name, 'hr': hr, 'scale': scale, 'batch': args.channels, 'dncnn6_ms': t_den}
                    for label, e in (('eps0', 0.0), ('eps_uint8', eps)):
                        ms = median_ms(lambda: op.project(x, b, e), device, args.repeats, warmup=2)
                        row[f'project_{label}_ms'] = ms
                        row[f'project_{label}_ratio'] = ms / t_den
                    rows.append(row)
                    print(f"{name:>22} HR {hr} x{scale}: DnCNN6 {t_den:.2f} ms, project eps=0 "
                          f"{row['project_eps0_ms']:.2f} ms ({row['project_eps0_ratio']:.0%}), eps>0 "
                          f"{row['project_eps_uint8_ms']:.2f} ms ({row['project_eps_uint8_ratio']:.0%})", flush=True)
    record = {'device': device_name(device), 'torch': torch.__version__, 'command': ' '.join(sys.argv), 'rows': rows}
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(record, f, indent=1)


if __name__ == '__main__':
    main()
