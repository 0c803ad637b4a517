"""Measuring the ``blur`` operator (:class:`~mcnet_basicsr.ops.BlurDownsample`) on the CPU
(``benchmarks/benchmark_ops.py --blur`` runs it): the speed of its projection on a new size and later, and, per
kernel of a kernel file, how spread its aliased spectrum is and how feasible float32 projections are.
"""
import math
import os
import os.path as osp

import numpy as np
import torch

from mcnet_basicsr.ops import QUANTIZATION_EPS_RMS, BlurDownsample, eps_from_rms, load_kernel
from mcnet_basicsr.ops.blur import DEFAULT_FLOOR
from mcnet_basicsr.utils.images import list_images, mod_crop, read_hr
from timing import call_ms, device_name

CPU = torch.device('cpu')


def kernel_stack(path):
    """Every kernel of a kernel file: all of a ``.mat`` cell array, else the file's one kernel."""
    if path.lower().endswith('.mat'):
        import scipy.io
        values = [v for k, v in scipy.io.loadmat(path).items() if not k.startswith('__')]
        if len(values) == 1 and values[0].dtype == object:
            return [load_kernel(path, i) for i in range(values[0].size)]
    return [load_kernel(path)]


def timing_rows(kernel, scales, lr, repeats, threads):
    """Per scale and radius (0, the quantisation ball), float32, 1 x 1 x (lr s) x (lr s): the first projection on a
    new size (a fresh operator each time), the next one, and the set-up of the size alone (the spectra, what the first
    call adds), in ms. The repeats go round all the cases in turn, so that a burst of load on shared cores hits one
    sample of each case rather than every sample of one; the rows give every sample and the minimum."""
    torch.set_num_threads(threads)
    cases = []
    for scale in scales:
        gen = torch.Generator().manual_seed(0)
        x = torch.rand(1, 1, lr * scale, lr * scale, generator=gen)
        b = torch.rand(1, 1, lr, lr, generator=gen)
        for name, eps in (('0', 0.0), ('quantisation', eps_from_rms(QUANTIZATION_EPS_RMS, lr * lr))):
            row = {'threads': threads, 'scale': scale, 'lr': [lr, lr], 'hr': [lr * scale] * 2, 'eps': name}
            cases.append((row, x, b, eps, {'first': [], 'later': [], 'setup': []}))
    for _ in range(repeats):
        for row, x, b, eps, times in cases:
            fresh = BlurDownsample(row['scale'], kernel)
            times['setup'].append(call_ms(lambda: fresh._entry(*x.shape[-2:], 1, x.dtype, CPU), CPU))
            op = BlurDownsample(row['scale'], kernel)
            times['first'].append(call_ms(lambda: op.project(x, b, eps), CPU))
            times['later'].append(call_ms(lambda: op.project(x, b, eps), CPU))
    for row, _, _, _, times in cases:
        for key, values in times.items():
            row[f'{key}_ms_min'] = round(min(values), 1)
            row[f'{key}_ms'] = [round(t, 1) for t in values]
        print(f'threads {threads} x{row["scale"]} LR {lr} eps {row["eps"]}: first {row["first_ms_min"]} ms, later '
              f'{row["later_ms_min"]} ms, set-up of the size {row["setup_ms_min"]} ms', flush=True)
    return [case[0] for case in cases]


def photo(path, multiple):
    """(1, 3, H, W) float64 in [0, 1], portrait (481 x 321 for BSD68), mod-cropped to ``multiple``."""
    img = read_hr(path).astype(np.float64) / 255.0
    img = mod_crop(img if img.shape[0] >= img.shape[1] else img.transpose(1, 0, 2), multiple)
    return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))[None]


def spectrum_rows(kernels, scales, photo_path=None):
    """Per kernel and scale: ``min d / max d`` on BSD68 sizes (481 x 321 and 321 x 481, mod-cropped to lcm(s, 8)) and
    how many components fall under the floor; with a photo, ``||A P(x) - b|| / ||b||`` of eps = 0 projections in
    float32 and float64 from the photo plus Gaussian noise (std 0.05), b = A of the photo (exact, and rounded to
    1/255), and the float32 quantisation ball's relative radius error."""
    spectra, feasibility = [], []
    gen = torch.Generator().manual_seed(0)
    for scale in scales:
        multiple = math.lcm(scale, 8)
        sizes = [(481 - 481 % multiple, 321 - 321 % multiple), (321 - 321 % multiple, 481 - 481 % multiple)]
        truth = photo(photo_path, multiple) if photo_path else None
        for index, kernel in enumerate(kernels):
            op = BlurDownsample(scale, kernel)
            powers = [op.aliased_power(*size) for size in sizes]
            ratio = min(float(d.min() / d.max()) for d in powers)
            spectra.append({'kernel': index, 'scale': scale, 'hr_sizes': [list(size) for size in sizes],
                            'd_min_over_d_max': ratio,
                            'components_below_floor': sum(int((d <= op.floor * d.max()).sum()) for d in powers)})
            if truth is None:
                continue
            start = truth + 0.05 * torch.randn(truth.shape, generator=gen, dtype=torch.float64)
            exact = op(truth)
            row = {'kernel': index, 'scale': scale, 'hr': list(truth.shape[-2:]), 'photo': osp.basename(photo_path)}
            for name, b in (('exact', exact), ('uint8', torch.round(exact * 255) / 255)):
                for dtype in (torch.float32, torch.float64):
                    p = op.project(start.to(dtype), b.to(dtype), 0.0).double()
                    row[f'eps0_{name}_b_{str(dtype)[6:]}'] = float(op.residual_norm(p, b) / b.norm())
            b = torch.round(exact * 255) / 255
            eps = eps_from_rms(QUANTIZATION_EPS_RMS, b[0].numel())
            p = op.project(start.float(), b.float(), eps).double()
            row['ball_uint8_b_float32_relative_radius_error'] = float(abs(op.residual_norm(p, b) / eps - 1))
            feasibility.append(row)
            print(f'x{scale} kernel {index}: min d / max d {ratio:.3g}, float32 ||A P(x) - b|| / ||b|| '
                  f'{row["eps0_exact_b_float32"]:.2g} (exact b), {row["eps0_uint8_b_float32"]:.2g} (uint8 b)',
                  flush=True)
    return spectra, feasibility


def _tail(path):
    """The last two components of a path (``usrnet/kernels_12.mat``): records name the data, not where it lies."""
    return '/'.join(osp.normpath(path).split(os.sep)[-2:])


def blur_record(kernel_file, photo_folder=None, scales=(2, 3, 4), lr=1024, repeats=15, threads=(1, 2), index=0,
                argv=None):
    """Everything above as one JSON-ready dict: timings of kernel ``index`` per thread count, spectra of every kernel
    of ``kernel_file``, feasibility on the first photo of ``photo_folder`` (when given); ``argv``, the command line
    that asked for it, is recorded with those two paths cut to their last two components."""
    kernels = kernel_stack(kernel_file)
    paths = {kernel_file, photo_folder}
    command = None if argv is None else ' '.join(['python'] + [_tail(a) if a in paths else a for a in argv])
    # the process's first projection loads FFT libraries: not part of any row
    BlurDownsample(2, kernels[0]).project(torch.rand(1, 1, 64, 64), torch.rand(1, 1, 32, 32), 0.1)
    record = {'command': command, 'machine': device_name(CPU), 'cpu_count': os.cpu_count(),
              'torch': torch.__version__, 'dtype': 'float32', 'repeats': repeats,
              'kernel_file': _tail(kernel_file), 'kernels': len(kernels), 'timed_kernel': index,
              'timed_kernel_shape': list(kernels[index].shape), 'floor': DEFAULT_FLOOR, 'timing': []}
    for count in threads:
        record['timing'] += timing_rows(kernels[index], scales, lr, repeats, count)
    photo_path = list_images(photo_folder)[0] if photo_folder else None
    record['spectrum'], record['feasibility'] = spectrum_rows(kernels, scales, photo_path)
    return record
