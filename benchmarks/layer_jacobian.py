"""Lab: how contractive a layer's fixed-point map is at its solution, the quantity behind its solver's iterations.

For option-file rows (``options/test_<row>_x<s>.yml``, run from the repository root as ``scripts/kernel_table.py``
runs them) on the problems of ``prior_study.py`` (Set5 under seeded family kernels, USRNet's measurement), each
layer runs (``MCNetArch.run``: its map ``F`` on ``z = (x, lam)`` solved by Anderson to a relative residual of 1e-4,
at most 60 iterations), and at the fixed point it returns (``z* = F`` of the solve's last iterate, where
``ContractionLoss`` measures in training) it measures, by central differences (step ``--delta`` per unit-RMS
direction):

- ``frobenius``: ``||J||_F^2 / d`` by Hutchinson's estimate ``E ||J v||^2 / d`` over ``--samples`` Gaussian ``v``
  (``J = dF/dz`` at ``z*``, ``d`` its size): what a Jacobian penalty in training (``train.jacobian_opt``) lowers;
- ``rate``: ``||J v_k|| / ||v_k||`` after ``--power`` steps of power iteration, the spectral radius of ``J`` where
  one eigenvalue dominates: the rate at which plain iteration converges near ``z*`` (below 1: it contracts);
- ``iterations``, ``converged``: the Anderson solve's.

    python benchmarks/layer_jacobian.py --rows mcnet_ffdnet_hqs --families x2 --device cpu --out jac.json
"""
import argparse
import json
import sys

import numpy as np
import torch

from prior_study import FAMILIES, problems
from timing import device_name


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--rows', nargs='+', required=True, metavar='ROW')
    p.add_argument('--data', default='datasets', help='folder with Set5/HR')
    p.add_argument('--kernels', type=int, default=2, help='family kernels per family (seeded draws)')
    p.add_argument('--families', nargs='+', default=['x2'], choices=FAMILIES)
    p.add_argument('--samples', type=int, default=4, help="Hutchinson's Gaussian directions")
    p.add_argument('--power', type=int, default=20, help='power-iteration steps')
    p.add_argument('--delta', type=float, default=1e-3, help='central-difference step per unit-RMS direction')
    p.add_argument('--device', default='cuda')
    p.add_argument('--out', required=True)
    p.set_defaults(table_k=False)  # prior_study.problems: Set5, never Table K
    return p.parse_args(argv)


def measure(f, z, samples, power, delta, generator):
    """``(frobenius, rate)`` of ``F``'s Jacobian at ``z`` (see the module): a rate after no power step is
    ``||J v|| / ||v||`` for a Gaussian ``v``, whose square is Hutchinson's estimate of ``||J||_F^2 / d``."""
    from mcnet_basicsr.deq import spectral_rate
    fro = [float(spectral_rate(f, z, 0, delta, generator)[0].pow(2).mean()) for _ in range(samples)]
    rate, _ = spectral_rate(f, z, power, delta, generator)
    return float(np.mean(fro)), float(rate.max())


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from mcnet_basicsr.data.degradations import usrnet_measurement
    from mcnet_basicsr.evaluation.kernel_table import build_row
    from mcnet_basicsr.ops import build_operator
    dev = torch.device(args.device)
    gen = torch.Generator().manual_seed(0)
    results = {}
    for fam in args.families:
        scale, noise255 = FAMILIES[fam]
        nets = {row: build_row(row, scale, dev, 1e-4, 60)[0] for row in args.rows}
        for kernel, _, lr in problems(args, fam):
            op = build_operator({'type': 'blur', 'scale': scale, 'kernel': kernel})
            for row, net in nets.items():
                if net is None:
                    raise SystemExit(f'options/test_{row}_x{scale}.yml or its weights are missing')
                x = torch.from_numpy(usrnet_measurement(lr[None], noise255 / 255.0)[0]).permute(0, 3, 1, 2).to(dev)
                with torch.no_grad():
                    _, info = net.run(x, operator=op, noise_sigma=noise255 / 255.0 or None)
                    fro, rate = measure(info['map'], info['fixed_point'], args.samples, args.power, args.delta, gen)
                stats = info['forward']
                e = results.setdefault(row, {}).setdefault(fam, {})
                for key, value in (('frobenius', fro), ('rate', rate), ('converged', bool(stats.converged.all())),
                                   ('iterations', float(stats.iterations.float().mean()))):
                    e.setdefault(key, []).append(value)
                print(f'{fam:>4} {row:<28} it {e["iterations"][-1]:5.1f}  ||J||_F^2/d {fro:.3f}  rate {rate:.3f}',
                      flush=True)
        with open(args.out, 'w') as fh:
            json.dump({'protocol': f'Set5, {args.kernels} KernelFamily() kernels (seed 2024), USRNet measurement; '
                       f'Anderson tol 1e-4, 60 iterations; {args.samples} Hutchinson samples, {args.power} power '
                       f'steps, central differences {args.delta}', 'device': device_name(dev), 'results': results},
                      fh, indent=1)
    for row, fams in results.items():
        for fam, e in fams.items():
            print(f'{fam:>4} {row:<28} mean it {np.mean(e["iterations"]):5.1f}  converged {np.mean(e["converged"]):.2f}'
                  f'  ||J||_F^2/d {np.mean(e["frobenius"]):.3f}  rate {np.mean(e["rate"]):.3f} '
                  f'(max {max(e["rate"]):.3f})')


if __name__ == '__main__':
    main()
