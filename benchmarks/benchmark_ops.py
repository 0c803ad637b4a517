"""Time the measurement operators (A, A^T, exact projection) against basicsr's MATLAB imresize.

For each device (CPU, and CUDA when available), input shape and scale, prints one markdown table
row with median wall-clock times over ``--repeats`` runs (after warm-up, so the per-size
factorisations are cached; their one-off cost is in the "first project" columns, each the first call
on a new size of a fresh operator):

    python benchmarks/benchmark_ops.py                       # defaults: 1x1x1024x1024 and 16x1x96x96, x2 and x4
    python benchmarks/benchmark_ops.py --devices cpu --out docs/benchmarks_ops.md
    python benchmarks/benchmark_ops.py --types bicubic pil-bicubic cv2-area --shapes 1x3x512x512 --scales 3 \
        --dtype float64

basicsr's ``imresize`` (a Python loop over output rows/columns, float32, one image at a time) is
timed on the same downscale, on CPU, looping over the batch as a data pipeline would.

``--denoiser`` adds one DnCNN6 forward (64 channels, what each iteration of the layer runs beside one projection) on
the same HR input, each of its N x C channels as an image, and the projections' times as a share of it: the
per-iteration cost of the projection. ``--kernel FILE`` makes ``--types blur`` the blur by the file's first kernel:

    python benchmarks/benchmark_ops.py --devices cuda --denoiser --shapes 1x1x1024x1024 --scales 2 3 4 \
        --types matlab-bicubic pil-bicubic cv2-area blur --kernel datasets/kernels/kernels_12.mat --no-basicsr

``--blur KERNEL_FILE [PHOTO_FOLDER]`` measures the ``blur`` operator instead (CPU, float32; ``--out``: its JSON record;
what it holds: ``blur_benchmark.blur_record``):

    python scripts/benchmark_ops.py --blur kernels_12.mat CBSD68/HR --scales 2 3 4 \
        --out benchmarks/records/blur_ops_cpu.json
"""
import argparse
import json
import os.path as osp
import platform
import statistics
import sys

import numpy as np
import torch

import mcnet_basicsr  # noqa: F401  (first: the torchvision alias basicsr 1.4.2 needs)
from blur_benchmark import blur_record
from mcnet_basicsr.archs.dncnn_arch import DnCNN
from mcnet_basicsr.ops import DEGRADATIONS, QUANTIZATION_EPS_RMS, build_operator, eps_from_rms
from mcnet_basicsr.ops.kernels import load_kernel
from mcnet_basicsr.utils.precision import tf32
from timing import call_ms, median_ms


def parse_shape(text):
    parts = [int(p) for p in text.lower().split('x')]
    if len(parts) != 4:
        raise argparse.ArgumentTypeError(f'shape must be NxCxHxW, got {text!r}')
    return tuple(parts)


def bench_basicsr(shape, scale, repeats):
    from basicsr.utils.matlab_functions import imresize as basicsr_imresize
    n, c, h, w = shape
    imgs = np.random.default_rng(0).random((n, h, w, c))

    def run():
        for img in imgs:
            basicsr_imresize(img, 1 / scale)

    return median_ms(run, torch.device('cpu'), max(1, repeats // 4), warmup=1)


def bench_dncnn6(shape, device, dtype, repeats):
    """One forward of the layers' denoiser (DnCNN6, 64 channels, spectral norms fixed, as in a solve) on an input of
    ``shape``, each of its N x C channels an image, with TF32 off as the layer runs it by default."""
    dncnn = DnCNN(depth=6, num_feat=64).to(device=device, dtype=dtype).eval()
    dncnn.update_spectral_norm()
    dncnn.auto_update_spectral_norm = False
    n, c, h, w = shape
    x = torch.rand(n * c, 1, h, w, device=device, dtype=dtype)
    with torch.no_grad(), tf32(False):
        return median_ms(lambda: dncnn(x), device, repeats, warmup=3)


def bench(op_type, shape, scale, device, dtype, repeats, with_basicsr, kernel=None):
    opt = dict(DEGRADATIONS.get(op_type, {'type': op_type}), scale=scale)  # a type or a name
    if op_type == 'blur':
        opt['kernel'] = kernel
    op = build_operator(opt)
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(shape, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)
    b = op(torch.rand(shape, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype))
    eps = eps_from_rms(QUANTIZATION_EPS_RMS, b[0].numel())

    def first_project_ms(e):  # a new size's set-up on fresh operators, median of several: one call is noisy
        fresh = lambda: build_operator(opt).project(x, b, e)  # noqa: E731
        return statistics.median(call_ms(fresh, device) for _ in range(max(1, min(repeats, 5))))
    row = {'first_project': first_project_ms(0.0), 'first_project_eps': first_project_ms(eps)}
    row['forward'] = median_ms(lambda: op(x), device, repeats, warmup=2)
    row['adjoint'] = median_ms(lambda: op.adjoint(b), device, repeats, warmup=2)
    row['project0'] = median_ms(lambda: op.project(x, b, 0.0), device, repeats, warmup=2)
    row['project_eps'] = median_ms(lambda: op.project(x, b, eps), device, repeats, warmup=2)
    row['basicsr'] = bench_basicsr(shape, scale, repeats) if with_basicsr else None
    return row


def fmt(ms):
    if ms is None:
        return '-'
    return f'{ms:.3g}' if ms < 100 else f'{ms:.0f}'


def machine_note(devices):
    cpu = platform.processor() or platform.machine()
    note = [f'torch {torch.__version__}, {torch.get_num_threads()} CPU threads ({cpu})']
    for device in devices:
        if device.type == 'cuda':
            note.append(torch.cuda.get_device_name(device))
    return '; '.join(note)


def process_first_calls(devices, dtype):
    """The first eps = 0 and eps > 0 projections of the process on each device (one-off library loading)."""
    def ms(device, eps):
        x, b = (torch.rand(1, 1, n, n, dtype=dtype, device=device) for n in (64, 32))
        return fmt(call_ms(lambda: build_operator({'type': 'bicubic', 'scale': 2}).project(x, b, eps), device))
    return ', '.join(f'{d.type} {ms(d, 0.0)} / {ms(d, 1e-3)}' for d in devices)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--shapes', nargs='+', type=parse_shape, default=[(1, 1, 1024, 1024), (16, 1, 96, 96)])
    parser.add_argument('--scales', nargs='+', type=int, default=[2, 4])
    parser.add_argument('--types', nargs='+', default=['bicubic'], help='operator types or DEGRADATIONS names')
    parser.add_argument('--devices', nargs='+', default=None, help='default: cpu, plus cuda if available')
    parser.add_argument('--dtype', default='float32', choices=['float32', 'float64'])
    parser.add_argument('--repeats', type=int, default=20)
    parser.add_argument('--threads', type=int, default=None, help='torch CPU threads (default: torch default)')
    parser.add_argument('--no-basicsr', action='store_true', help='skip the basicsr imresize column')
    parser.add_argument('--note', default='', help='free text appended to the machine line')
    parser.add_argument('--out', default=None, help='append the table to this markdown file (created if missing)')
    parser.add_argument('--overwrite', action='store_true', help='with --out: replace the file instead of appending')
    parser.add_argument('--blur', nargs='+', metavar='PATH', help='KERNEL_FILE [PHOTO_FOLDER]: see above')
    parser.add_argument('--denoiser', action='store_true',
                        help='also time one DnCNN6 forward on the same input and each projection as a share of it')
    parser.add_argument('--kernel', metavar='FILE', help="--types blur: the file's first kernel (.mat/.npy/.png)")
    args = parser.parse_args()
    if 'blur' in args.types and not args.kernel:
        parser.error('--types blur needs --kernel FILE')
    kernel = load_kernel(args.kernel, 0) if args.kernel else None
    if args.blur:
        record = blur_record(*args.blur, scales=args.scales, repeats=args.repeats, argv=sys.argv)
        if not args.out:
            return print(json.dumps(record, indent=1))
        with open(args.out, 'w') as f:
            f.write(json.dumps(record, indent=1) + '\n')
        return print(f'wrote {args.out}', file=sys.stderr)

    if args.threads:
        torch.set_num_threads(args.threads)
    devices = [torch.device(d) for d in (args.devices or (['cpu', 'cuda'] if torch.cuda.is_available() else ['cpu']))]
    dtype = getattr(torch, args.dtype)

    once = process_first_calls(devices, dtype)
    lines = [
        f'Machine: {machine_note(devices)}{"; " + args.note if args.note else ""}. '
        f'{args.dtype}, median of {args.repeats} runs, milliseconds. "first project" is the first call on a new '
        f'size of a fresh operator (median of {max(1, min(args.repeats, 5))}), which includes building the '
        'matrices and their per-axis factorisations (cached afterwards). The first projections of the process '
        f'also load libraries: {once} ms (eps = 0 / eps > 0, 1x1x64x64 x2, before the table). eps > 0 uses '
        'eps_from_rms(QUANTIZATION_EPS_RMS). basicsr = `basicsr.utils.matlab_functions.imresize` '
        '(CPU, float32, looped over the batch).',
        '',
        '| device | type | input (NxCxHxW) | scale | A x | A^T y | project eps=0 | project eps>0 '
        '| first project eps=0 | first project eps>0 | basicsr imresize |' + (
            ' DnCNN6 | eps=0 / DnCNN6 | eps>0 / DnCNN6 |' if args.denoiser else ''),
        '|---|---|---|---|---|---|---|---|---|---|---|' + ('---|---|---|' if args.denoiser else ''),
    ]
    if args.denoiser:
        lines[0] += (' DnCNN6 = one forward of the layers\' denoiser (64 channels, 6 layers, FP32 with TF32 off as the '
                     'layer runs it) on the same input, each of its N x C channels an image.')
    denoiser_ms = {}
    print('\n'.join(lines), flush=True)
    for device in devices:
        for op_type in args.types:
            for shape in args.shapes:
                for scale in args.scales:
                    if shape[2] % scale or shape[3] % scale:
                        print(f'skipping {shape} at scale {scale} (not divisible)', file=sys.stderr)
                        continue
                    with_basicsr = (not args.no_basicsr and device.type == 'cpu' and op_type == 'bicubic')
                    r = bench(op_type, shape, scale, device, dtype, args.repeats, with_basicsr, kernel)
                    line = (f'| {device.type} | {op_type} | {"x".join(map(str, shape))} | x{scale} | '
                            f'{fmt(r["forward"])} | {fmt(r["adjoint"])} | {fmt(r["project0"])} | '
                            f'{fmt(r["project_eps"])} | {fmt(r["first_project"])} | {fmt(r["first_project_eps"])} | '
                            f'{fmt(r["basicsr"])} |')
                    if args.denoiser:
                        key = (device, shape)
                        if key not in denoiser_ms:
                            denoiser_ms[key] = bench_dncnn6(shape, device, dtype, args.repeats)
                        t = denoiser_ms[key]
                        line += f' {fmt(t)} | {r["project0"] / t:.1%} | {r["project_eps"] / t:.1%} |'
                    print(line, flush=True)
                    lines.append(line)

    if args.out:
        mode = 'w' if args.overwrite or not osp.exists(args.out) else 'a'
        with open(args.out, mode) as f:
            f.write(('\n' if mode == 'a' else '') + '\n'.join(lines) + '\n')
        print(f'{"wrote" if mode == "w" else "appended to"} {args.out}', file=sys.stderr)


if __name__ == '__main__':
    main()
