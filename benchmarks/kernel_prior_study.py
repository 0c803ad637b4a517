"""What limits the kernel layers on blurred LR: their beta, or their prior? A study on the validation set.

On USRNet's 12-kernel table (``docs/degradations_kernels.md``, Table K) PnP-ADMM with the 17-layer RealSN-DnCNN and no
backbone (beta = 0) is above PAN's kernel layers (a DnCNN6 prior held near PAN's output by a learned beta) on the
Gaussian kernels. Is it the prior or beta? Here, on the set the kernel recipes select on (Set5, LR made by the
recipes' own kernel family, one seeded kernel and noise level per image: ``val`` of
``options/train_mcnet_pan_kernels_x<s>.yml``), never CBSD68 or the 12 test kernels, each row is told the true kernel
and noise:

- ``pan``: PAN alone;
- ``layer``: MCNet + PAN with its kernel layer as shipped (learned beta);
- ``layer_beta*F``: the same layer with its beta multiplied by F (``--beta-factors``; 1e-6 makes the layer PnP-ADMM
  with its own DnCNN6, the backbone's output all but ignored);
- ``pnp``: PnP-ADMM with RealSN-DnCNN17 (``options/test_pnp_x<s>.yml``).

Y-PSNR with Y rounded to uint8, crop = scale (the recipes' validation), and the solver's mean iterations:

    python benchmarks/kernel_prior_study.py --scales 2 3 4 --out benchmarks/records/kernel_prior_study_set5_h200.json
"""
import argparse
import json
import math
import time

import mcnet_basicsr  # noqa: F401  (first: the torchvision alias basicsr 1.4.2 needs)

# isort: split

import numpy as np
import torch

from mcnet_basicsr.evaluation.evaluate import device_name, read_option, resolve_device
from mcnet_basicsr.evaluation.kernel_table import build_row
from mcnet_basicsr.metrics.y_uint8 import y_uint8_metrics
from mcnet_basicsr.ops import build_operator
from mcnet_basicsr.utils.color import luma


def validation_set(scale, data_root):
    """The Set5 validation set of the PAN kernel recipe at ``scale`` (seeded kernels and noise, one per image)."""
    from basicsr.data import build_dataset
    opt = dict(read_option(f'options/train_mcnet_pan_kernels_x{scale}.yml')['datasets']['val'], phase='val',
               scale=scale)
    opt['dataroot_gt'] = opt['dataroot_gt'].replace('datasets', data_root, 1)
    return build_dataset(opt)


def rows(scale, device, tol, factors):
    """``{name: (network, told the measurement)}`` of the study at ``scale``."""
    out = {'pan': build_row('pan', scale, device, tol, 200), 'layer': build_row('mcnet_pan_kernels', scale, device,
                                                                                tol, 200)}
    for factor in factors:
        net, consistent = build_row('mcnet_pan_kernels', scale, device, tol, 200)
        with torch.no_grad():
            net.log_beta.add_(math.log(factor))
        out[f'layer_beta*{factor:g}'] = net, consistent
    out['pnp'] = build_row('pnp', scale, device, tol, 200)
    return {name: row for name, row in out.items() if row[0] is not None}


def measure(scale, device, tol, factors, data_root, images=None):
    dataset = validation_set(scale, data_root)
    samples = []  # each image degraded once, the same for every row
    for i in range(len(dataset) if images is None else min(images, len(dataset))):
        data = dataset[i]
        samples.append((data['lq'][None].to(device),
                        (data['gt'].permute(1, 2, 0).numpy()[..., ::-1] * 255).round().astype(np.uint8),
                        float(data['noise_sigma']),
                        build_operator({'type': 'blur', 'scale': scale, 'kernel': data['kernel'].double()})))
    results = {}
    for name, (net, consistent) in rows(scale, device, tol, factors).items():
        start, psnrs, iterations = time.perf_counter(), [], []
        for lq, gt, sigma, op in samples:
            with torch.no_grad():
                out, info = net.run(lq, operator=op, noise_sigma=sigma or None) if consistent else (net(lq), {})
            if 'forward' in info and type(net).__name__ == 'MCNetArch':
                iterations.append(float(info['forward'].iterations.float().mean()))
            psnrs.append(y_uint8_metrics(luma(out.clamp(0, 1).double().cpu()), gt, scale)[0])
        results[name] = dict(psnr=float(np.mean(psnrs)), per_image=psnrs, seconds=time.perf_counter() - start,
                             iterations=float(np.mean(iterations)) if iterations else None)
        if name.startswith('layer'):
            beta = float(net.log_beta.detach().exp())
            results[name]['beta_at_noise_0'] = beta
        its = results[name]['iterations']
        print(f'x{scale} {name:>18} {results[name]["psnr"]:.3f} dB' + (f'  {its:.1f} it' if its else '')
              + f'  ({results[name]["seconds"]:.1f} s)', flush=True)
    return results


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--scales', type=int, nargs='+', default=[2, 3, 4])
    p.add_argument('--beta-factors', type=float, nargs='+', default=[1e-6, 0.1, 10.0])
    p.add_argument('--tol', type=float, default=1e-4, help="MCNet's forward tolerance")
    p.add_argument('--images', type=int, help='first N images only (quick checks)')
    p.add_argument('--data', default='datasets', help='folder with Set5/HR')
    p.add_argument('--device', default='auto')
    p.add_argument('--out', help='JSON record')
    args = p.parse_args(argv)
    device = resolve_device(args.device)
    record = {'protocol': 'Set5, LR by the PAN kernel recipes\' val (seeded family kernel and noise per image), '
                          'Y-PSNR with Y rounded to uint8, crop s; each row told the true kernel and noise',
              'device': device_name(device),
              'mcnet_solver': {'tol': args.tol, 'max_iter': 200}, 'scales': {}}
    for scale in args.scales:
        record['scales'][f'x{scale}'] = measure(scale, device, args.tol, args.beta_factors, args.data, args.images)
        if args.out:
            with open(args.out, 'w') as f:
                json.dump(record, f, indent=1)


if __name__ == '__main__':
    main()
