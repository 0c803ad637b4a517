"""Table R: LR made by the resizers people use (Pillow, OpenCV, torch; MATLAB bicubic for reference), each rounded to
uint8, super-resolved by a backbone alone, by MCNet assuming MATLAB bicubic (what a shipped layer does unless told)
and by MCNet told the true operator (``scripts/resizer_table.py``).

Protocol: the tables' (HR mod-cropped to the scale, Y of the output rounded to uint8, PSNR / SSIM on Y with crop =
scale, :func:`mcnet_basicsr.metrics.y_uint8.y_uint8_metrics`), with the LR made by the resizer's exact operator
(:data:`mcnet_basicsr.ops.DEGRADATIONS`, equal to the library's float output) then rounded half up to uint8. A row is
a test option file (``options/test_<row>_x<s>.yml``); ``<row>@true`` is that file's network told the resizer. A layer
is made consistent on Y, or on each of R, G and B where its prior denoises them together (a colour FFDNet); a
non-blind network (FFDNetPnP) is told the resizer with ``@true``, MATLAB bicubic without.
"""
import json
import os.path as osp
import time

import numpy as np

__all__ = ['measure']


def row_channels(row, scale):
    """The channels a row's layer is made consistent on: ``'rgb'`` where its prior denoises R, G and B together
    (``options/test_<row>_x<scale>.yml`` names a colour denoiser), else ``'y'`` (the tables' protocol)."""
    from mcnet_basicsr.utils.registration import ARCH_REGISTRY
    from .evaluate import read_option
    path = osp.join('options', f'test_{row}_x{scale}.yml')
    if not osp.isfile(path):
        return 'y'
    arch = (read_option(path)['network_g'].get('denoiser') or {}).get('arch', 'DnCNN')
    colour = arch != 'DnCNN' and getattr(ARCH_REGISTRY.get(arch), 'colour', False)
    return 'rgb' if colour else 'y'


def measure(args):
    """``args.rows`` x ``args.degradations`` x ``args.sets`` at ``args.scale``, merged into the JSON ``args.out``."""
    import torch

    from mcnet_basicsr.archs.frozen_backbone import is_non_blind, non_blind_forward
    from mcnet_basicsr.data.degradations import degraded_lr_uint8
    from mcnet_basicsr.metrics.y_uint8 import y_uint8_metrics
    from mcnet_basicsr.ops import build_degradation
    from mcnet_basicsr.utils.color import luma
    from mcnet_basicsr.utils.images import list_images, mod_crop, read_hr
    from .evaluate import resolve_device
    from .kernel_table import build_row, join_record, solve_summary, tolerance_solve
    device = resolve_device(args.device)
    record = {}
    if osp.isfile(args.out):
        with open(args.out) as f:
            record = json.load(f)
    record['protocol'] = 'HR mod s; LR = resizer (exact operator) rounded to uint8; Y rounded to uint8, crop s'
    join_record(record, args.out, device, {'tol': args.tol, 'max_iter': args.max_iter}, args.rows)
    cells = record.setdefault('cells', {})
    s = args.scale
    for row in args.rows:
        base, told = row.split('@')[0], row.endswith('@true')
        net, consistent = build_row(base, s, device, args.tol, args.max_iter, channels=row_channels(base, s))
        if net is None:
            print(f'{row}: no options/test_{base}_x{s}.yml or no weights it names, skipped', flush=True)
            continue
        for name in args.degradations:
            op = build_degradation(name, s)
            for set_name in args.sets:
                key = f'{row}|x{s}|{name}|{set_name}'
                if key in cells:
                    continue
                start, psnrs, ssims, solves = time.perf_counter(), {}, {}, []
                for path in list_images(osp.join(args.data, set_name, 'HR')):
                    hr = mod_crop(read_hr(path), s)
                    lr_rgb = degraded_lr_uint8(op, hr)[..., ::-1].transpose(2, 0, 1).astype(np.float32) / 255
                    lr = torch.from_numpy(np.ascontiguousarray(lr_rgb))[None].to(device)
                    with torch.no_grad():
                        if is_non_blind(net):
                            out = non_blind_forward(net, lr, op if told else build_degradation('matlab-bicubic', s))
                        elif consistent:
                            out, info = net.run(lr, operator=op if told else None)
                            stats = tolerance_solve(net, info)
                            solves += [(stats, 1)] if stats is not None else []
                        else:
                            out = net(lr)
                    y = luma(out.double().cpu())
                    psnrs[osp.basename(path)], ssims[osp.basename(path)] = y_uint8_metrics(y, hr, s)
                cells[key] = dict(psnr=float(np.mean(list(psnrs.values()))), ssim=float(np.mean(list(ssims.values()))),
                                  per_image=psnrs, seconds=time.perf_counter() - start, **solve_summary(solves))
                solved = (f', {100 * cells[key]["converged"]:.0f}% reached tol, largest residual '
                          f'{cells[key]["residual_max"]:.1e}') if solves else ''
                print(f'{row:>16} x{s} {name:>18} {set_name:>6} {cells[key]["psnr"]:.3f} dB '
                      f'({cells[key]["seconds"]:.0f} s{solved})', flush=True)
                with open(args.out, 'w') as f:
                    json.dump(record, f, indent=1)
