"""How close each solver tolerance comes to the tables' result, for the model ``mcnet-sr`` runs.

One solve per image at the tables' setting (the ``tables`` preset: relative residual 1e-6, at most 300
iterations), observed at every iterate. A solve at a looser tolerance returns the first iterate whose residual
meets it (the solvers stop there), so one solve gives every tolerance: its iterations and its PSNR under the
tables' protocol (the output's Y rounded to uint8, against the mod-cropped HR, crop = scale) of what the layer then
returns: the map applied once more to that iterate, then the final float64 projection. Printed per set: mean
iterations and mean PSNR difference to the tables' result per tolerance; ``--out`` writes every image's numbers as
JSON. Where a learned start ships for the model (its card's ``start``, as ``mcnet-sr`` uses it) the
solves begin there, and the tables' result they are scored against is the tables' setting itself, solved from the
standard start (each row's ``reference_psnr``); ``--no-start`` sweeps the standard start.

    python benchmarks/tolerance_sweep.py --scale 2                                     # Set5 and Set14, shipped SRCNN
    python benchmarks/tolerance_sweep.py --scale 2 \
        --backbone-weights experiments/pretrained_models/srcnn_955_imagenet_x2.pth     # the tables' model
    python benchmarks/tolerance_sweep.py --scale 4 --backbone imdn \
        --backbone-weights experiments/pretrained_models/imdn_x4.pth

This is how ``mcnet-sr``'s default ``--tol`` per layer is chosen (the cards' ``tol`` in
``mcnet_basicsr/zoo/models.yml``; docs/benchmarks_cli.md, "Quality of mcnet-sr's default"). Data:
``scripts/prepare_datasets.py`` (``datasets/<set>/HR_mod<s>`` and ``datasets/<set>/LR_bicubic/X<s>``).
"""
import argparse
import json
import os.path as osp
import sys

import numpy as np
import torch
from tqdm import tqdm

from benchmarking import load_pairs
from mcnet_basicsr.metrics.y_uint8 import y_uint8_metrics
from mcnet_basicsr.utils.color import luma
from mcnet_basicsr.utils.precision import tf32
from mcnet_basicsr.zoo.pretrained import build_pretrained_mcnet, default_eps_rms
from timing import device_name

TOLS = (1e-4, 5e-5, 3e-5, 2e-5, 1.5e-5, 1e-5, 7e-6, 5e-6, 3e-6, 2e-6)


def prepared_pairs(data_root, dataset, scale, limit=None):
    """``[(file, HR uint8 BGR, LR tensor)]`` of a prepared set (:func:`benchmarking.load_pairs`); a clear
    error when the set is missing or unpaired."""
    try:
        pairs = load_pairs(data_root, None, dataset, scale, limit, quick=False)
    except (FileNotFoundError, ValueError) as err:
        raise SystemExit(f'{err} Prepare the set first (scripts/prepare_datasets.py).') from None
    return [(f, np.round(hr * 255.0).astype(np.uint8), lr) for f, hr, lr in pairs]  # HR read as uint8 / 255


@torch.no_grad()
def sweep_image(net, lr, hr_bgr, tols):
    """The tables' solve of one image, observed at every iterate; returns the tables' iterations and PSNR and, per
    tolerance, ``[iterations, psnr]`` of the output a solve at that tolerance returns.

    The solve is the layer's own (:meth:`MCNetArch.solve`, under its TF32 setting) with an observer
    (``LayerSettings.observer``) that keeps the first iterate ``z_k`` whose residual (the solver's own) meets each
    tolerance; a solve stopped there would return ``F(z_k)``'s image part through
    :meth:`MCNetArch.consistent_output`, scored here (F evaluated once more per tolerance met; not every iterate is
    kept: up to 300 image-sized tensors otherwise). With the net's ``extrapolation`` set, a stopped solve returns F
    at the extrapolated iterate instead, scored likewise; the tables' solve itself is not extrapolated.
    """
    w, _ = net.backbone_estimate(lr)
    b = luma(lr.double())
    channels = w.shape[1]
    pending = sorted(tols, reverse=True)  # the residual meets the largest tolerance first
    first = {}  # tol -> (k, z_k) at the first z_k that meets tol (k: 0-based)
    extrapolation = net.layer_settings.extrapolation

    def observe(iteration, z, residual):
        r = float(residual[0])
        while pending and r <= pending[0]:
            first[pending.pop(0)] = (iteration - 1, z.clone())

    # the tables' solve plain; ``extrapolation`` (the net's) scores the stopped solves
    out, info = net.solve(w, b, settings={'extrapolation': 0.0, 'observer': observe})
    stats, eps = info['forward'], info['eps']
    n = int(stats.iterations[0])
    scale = net.scale

    def psnr(x):
        return y_uint8_metrics(x, hr_bgr, scale)[0]

    row = {'tables_iterations': n, 'tables_psnr': psnr(out)}
    f = None
    for tol in tols:
        k, z = first.get(tol, (n, None))
        if k >= n:  # never met within the tables' solve: a solve at tol runs as long and returns the same
            row[f'{tol:g}'] = [n, row['tables_psnr']]
        else:
            f = f or net.fixed_point_map(w, b.to(w.dtype), eps)  # the solve's map (its spectral norm estimate kept)
            with tf32(net.layer_settings.allow_tf32):
                fz = f(z)
                if extrapolation:  # the output of the extrapolated iterate (LayerSettings.extrapolation): F once more
                    fz = f(net.extrapolated_iterate(z, fz))
            row[f'{tol:g}'] = [k + 1, psnr(net.consistent_output(fz[:, :channels], b, eps))]
    return row


def summarise(rows, tols):
    """Mean iterations and mean PSNR difference to the tables' result per tolerance: to the tables' setting's
    ``reference_psnr`` where the rows have one (a learned start's own tables solve may end elsewhere by its
    last iterations), else to the row's own tables solve."""
    def ref(r):
        return r.get('reference_psnr', r['tables_psnr'])

    out = {'tables_psnr': float(np.mean([r['tables_psnr'] for r in rows.values()])),
           'tables_iterations': float(np.mean([r['tables_iterations'] for r in rows.values()]))}
    if all('reference_psnr' in r for r in rows.values()):
        out['reference_psnr'] = float(np.mean([r['reference_psnr'] for r in rows.values()]))
    for tol in tols:
        key = f'{tol:g}'
        out[key] = {'iterations': float(np.mean([r[key][0] for r in rows.values()])),
                    'iterations_max': int(max(r[key][0] for r in rows.values())),
                    'dpsnr': float(np.mean([r[key][1] - ref(r) for r in rows.values()]))}
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog='tolerance_sweep.py', description=__doc__.split('\n')[0])
    parser.add_argument('--scale', type=int, required=True)
    parser.add_argument('--backbone', default='srcnn', help='as mcnet-sr --backbone (default srcnn)')
    parser.add_argument('--backbone-weights', default=None, help='default: the shipped backbone, as mcnet-sr')
    parser.add_argument('--no-start', action='store_true',
                        help='begin at P_S(w), not at the shipped learned start (where one ships for the model)')
    parser.add_argument('--extrapolation', type=float, default=0.0,
                        help="score the layer's output with this extrapolation (MCNetArch's option; one more "
                             'application of the map than the iterations reported)')
    parser.add_argument('--datasets', nargs='+', default=['Set5', 'Set14'])
    parser.add_argument('--data-root', default='datasets')
    parser.add_argument('--tols', nargs='+', type=float, default=list(TOLS))
    parser.add_argument('--limit', type=int, default=None, help='first N images per set (quick runs)')
    parser.add_argument('--device', default='cpu', choices=('cpu', 'cuda'))
    parser.add_argument('--out', default=None, help='write the per-image numbers and the summaries here (JSON)')
    args = parser.parse_args(argv)
    if any(not t > 0 for t in args.tols):
        parser.error('--tols must be positive')
    if not args.extrapolation >= 0:
        parser.error('--extrapolation must be >= 0')
    tols = sorted(set(args.tols), reverse=True)
    device = torch.device(args.device)
    eps_rms = None if args.backbone == 'srcnn' else default_eps_rms(args.backbone)
    net = build_pretrained_mcnet(args.scale, device=device, backbone_path=args.backbone_weights, eps_rms=eps_rms,
                                 solver={'preset': 'tables'}, backbone=args.backbone, start=not args.no_start)
    # the tables' setting begins at P_S(w): with a learned start, its result is the reference the rows are scored by
    reference = None if net.start is None else build_pretrained_mcnet(
        args.scale, device=device, eps_rms=eps_rms, solver={'preset': 'tables'}, backbone=args.backbone, start=False)
    record = {'scale': args.scale, 'backbone': args.backbone, 'backbone_weights': args.backbone_weights or 'shipped',
              'learned_start': net.start is not None, 'extrapolation': args.extrapolation,
              'solver': net.layer_settings.forward_solver.to_dict(), 'device': device_name(device),
              'torch': torch.__version__, 'sets': {}}
    for dataset in args.datasets:
        rows = {}
        for file, hr_bgr, lr in tqdm(prepared_pairs(args.data_root, dataset, args.scale, args.limit),
                                     desc=f'{dataset} x{args.scale}', file=sys.stderr):
            lr = lr.to(device)
            with net.settings(extrapolation=args.extrapolation):
                row = rows[osp.splitext(file)[0]] = sweep_image(net, lr, hr_bgr, tols)
            if reference is not None:  # the same solve from the standard start, observed at no tolerance
                row['reference_psnr'] = sweep_image(reference, lr, hr_bgr, ())['tables_psnr']
        summary = summarise(rows, tols)
        record['sets'][dataset] = {'images': rows, 'summary': summary}
        print(f'{dataset} x{args.scale}: tables {summary["tables_psnr"]:.4f} dB in {summary["tables_iterations"]:.1f} '
              'iterations' + (f' (from the standard start {summary["reference_psnr"]:.4f} dB, the reference below)'
                              if 'reference_psnr' in summary else ''))
        for tol in tols:
            s = summary[f'{tol:g}']
            print(f'  tol {tol:g}: {s["iterations"]:.1f} iterations (max {s["iterations_max"]}), '
                  f'dPSNR {s["dpsnr"]:+.4f}')
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(record, f, indent=1)
    return record


if __name__ == '__main__':
    main()
