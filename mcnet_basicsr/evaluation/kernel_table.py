"""USRNet's Table 1 protocol (Zhang, Van Gool, Timofte, CVPR 2020: CBSD68, 12 blur kernels) for this project's
rows, and the table beside the published rows (``scripts/kernel_table.py``).

A row is a test option file (``options/test_<row>_x<s>.yml``: its network and weights) run on the protocol's LR
(:func:`mcnet_basicsr.data.degradations.usrnet_lr`): the consistent methods (MCNet, PnP, TV-TV) are told the true
kernel (``{type: blur}``, upper-left decimation), the uint8 truncation of the protocol (``b = lr + 0.5 / 255``, eps at
the uint8 level) and the noise level, and make each of R, G and B consistent (``channels: rgb``); a non-blind network
(USRNet) gets the LR as it is with the true kernel, the scale and the noise level; a backbone alone gets the LR as it
is. PSNR on RGB uint8 with a border of s^2, as the protocol's.
"""
import json
import os.path as osp
import time

import numpy as np

__all__ = ['FAMILIES', 'measure', 'render']

FAMILIES = {'x2': (2, 0.0), 'x3': (3, 0.0), 'x3_n2.55': (3, 2.55), 'x3_n7.65': (3, 7.65), 'x4': (4, 0.0)}
CONSISTENT = ('MCNetArch', 'PnPADMM', 'TVTV')


def build_row(row, scale, device, tol, max_iter, channels='rgb', tf32=False, backbone_path=None):
    """The network of ``options/test_<row>_x<scale>.yml`` with its weights, and whether it is told the measurement;
    ``(None, None)`` where that file or its trained weights do not exist. Consistent methods are made consistent on
    ``channels`` ('rgb', the kernel literature's; 'y', the tables'). Convolutions run in float32, or in TF32 with
    ``tf32`` (cuDNN's TensorFloat-32: faster on NVIDIA GPUs; matrix products, and so the separable projections, stay
    float32). ``backbone_path``: an MCNet layer's backbone checkpoint instead of the file's (e.g. an anchor in
    training)."""
    import copy

    import torch
    from basicsr.archs import build_network

    from mcnet_basicsr.ops import QUANTIZATION_EPS_RMS
    from .evaluate import load_weights, read_option

    path = osp.join('options', f'test_{row}_x{scale}.yml')
    if not osp.isfile(path):
        return None, None
    opt = read_option(path)
    weights = (opt.get('path') or {}).get('pretrain_network_g')
    if weights and not osp.isfile(weights):  # e.g. no layer ships for this backbone at this scale
        return None, None
    net_opt = copy.deepcopy(opt['network_g'])
    if tf32 and net_opt['type'] == 'MCNetArch':
        raise ValueError(f'{row}: TF32 is for rows of fixed iterations; an MCNet layer runs its solve in float32 (its '
                         'settings.allow_tf32), where TF32 would stop it short of its tolerance')
    consistent = net_opt['type'] in CONSISTENT
    if backbone_path is not None:
        if net_opt['type'] != 'MCNetArch':
            raise ValueError(f'{row}: backbone_path is for MCNet layers; this row is a {net_opt["type"]}')
        net_opt['backbone'] = dict(net_opt['backbone'], path=backbone_path)
    if consistent:
        net_opt.pop('eps', None)
        net_opt.update(channels=channels, eps_rms=QUANTIZATION_EPS_RMS)
        if net_opt['type'] == 'MCNetArch':
            net_opt.setdefault('settings', {})['solver'] = {'forward': {'tol': tol, 'max_iter': max_iter}}
    net = build_network(net_opt)
    load_weights(net, opt.get('path') or {})
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = bool(tf32), False
    return net.to(device).eval(), consistent


class RecordMismatch(ValueError):
    """A run whose cells cannot join the record it names (another device or MCNet solver setting)."""


def join_record(record, path, device, solver, rows):
    """Make ``record`` (the JSON at ``path``, ``{}`` if new) take this run's cells on the torch ``device``: one device
    per record (named as :func:`~mcnet_basicsr.evaluation.evaluate.device_name` names it), and one MCNet
    solver setting ``solver`` (``{tol, max_iter}``) for its MCNet cells (``mcnet_*`` rows, ``row@true`` included).
    A run that would mix them raises :class:`RecordMismatch` (nothing is measured or written); rows without an MCNet
    solve leave the record's solver setting as it is."""
    from .evaluate import device_name

    def solving(keys):
        return any(key.split('|')[0].split('@')[0].startswith('mcnet_') for key in keys)

    device = device_name(device)
    cells = record.get('cells') or {}
    if cells and record.get('device', device) != device:
        raise RecordMismatch(f'{path} holds cells measured on {record["device"]}, this run is on {device}: '
                             'give another --out (one device per record)')
    if solving(rows):
        if solving(cells) and record.get('mcnet_solver', solver) != solver:
            raise RecordMismatch(f'{path} holds MCNet cells solved with {record["mcnet_solver"]}, this run asks '
                                 f'{solver}: give the same --tol and --max-iter, or another --out')
        record['mcnet_solver'] = solver
    record.setdefault('mcnet_solver', solver)
    record['device'] = device


def images_by_shape(folder, scale, limit):
    from PIL import Image

    from mcnet_basicsr.data.degradations import usrnet_mod_crop
    from mcnet_basicsr.utils.images import list_images
    paths = list_images(folder)[:limit]
    groups = {}
    for path in paths:
        hr = usrnet_mod_crop(np.asarray(Image.open(path).convert('RGB')), scale)
        groups.setdefault(hr.shape, []).append((osp.basename(path), hr))
    return groups


def protocol_lrs(groups, kernel, scale, sigma255, workers=None):
    """The protocol's LR of every image of ``groups`` (``{shape: [(name, hr), ...]}``), made in parallel processes:
    ``{name: lr}``."""
    from concurrent.futures import ProcessPoolExecutor

    from mcnet_basicsr.data.degradations import usrnet_lr
    items = [item for group in groups.values() for item in group]
    with ProcessPoolExecutor(workers) as pool:
        lrs = pool.map(usrnet_lr, [hr for _, hr in items], [kernel] * len(items), [scale] * len(items),
                       [sigma255 / 255.0] * len(items))
        return {name: lr for (name, _), lr in zip(items, lrs)}


def protocol_forward(net, consistent, lr, op, sigma, device):
    """One batch of the protocol's LR (N, H, W, 3 float) through a row's network: ``(sr, residuals, info)``, ``sr``
    the uint8 output (N, sH, sW, 3). A consistent row is told the measurement (``b = lr + 0.5 / 255``, the blur
    ``op``, noise ``sigma``), and ``residuals`` is its per-image, per-channel ``||A x_c - b_c||`` (N, 3), ``info``
    what its solve did (empty where the network keeps no statistics); a non-blind network
    (:func:`~mcnet_basicsr.archs.frozen_backbone.is_non_blind`) gets the LR as it is, ``op``'s kernel, its scale and
    ``sigma`` (:func:`~mcnet_basicsr.archs.frozen_backbone.non_blind_forward`), and a backbone alone the LR as it is
    (None, {})."""
    import torch

    from mcnet_basicsr.archs.frozen_backbone import is_non_blind, non_blind_forward
    from mcnet_basicsr.data.degradations import usrnet_measurement
    residuals, info = None, {}
    with torch.no_grad():
        if consistent:
            x = torch.from_numpy(usrnet_measurement(lr, sigma)[0]).permute(0, 3, 1, 2).to(device)
            y, info = net.run(x, operator=op, noise_sigma=sigma or None)
            residuals = (op(y.double()) - x.double()).flatten(2).norm(dim=2)
        elif is_non_blind(net):
            y = non_blind_forward(net, torch.from_numpy(lr).permute(0, 3, 1, 2).to(device), op, sigma)
        else:
            y = net(torch.from_numpy(lr).permute(0, 3, 1, 2).to(device))
    return (y.clamp(0, 1) * 255).round().byte().permute(0, 2, 3, 1).cpu().numpy(), residuals, info


def tolerance_solve(net, info):
    """The forward solve's statistics in ``info`` (a consistent row's ``run``) where ``net`` solves to a tolerance (an
    MCNet layer), else None: the fixed-iteration baselines (PnP-ADMM, TV-TV) never 'converge'."""
    return info.get('forward') if type(net).__name__ == 'MCNetArch' else None


def solve_summary(solves):
    """A cell's forward solves, ``[(stats, images)]`` (:class:`~mcnet_basicsr.deq.config.SolverStats` of a batch of
    ``images`` images, their channels the samples): the fraction of images whose every solve reached the tolerance,
    the largest final residual and the mean iterations per image, as the records name them; empty without solves (a
    backbone alone)."""
    if not solves:
        return {}
    converged, iterations = [], []
    for stats, images in solves:
        converged += stats.converged.view(images, -1).all(1).tolist()
        iterations += stats.iterations.double().view(images, -1).mean(1).tolist()
    return dict(converged=float(np.mean(converged)), residual_max=max(float(st.residual.max()) for st, _ in solves),
                iterations=float(np.mean(iterations)))


def run_cell(net, consistent, groups, lrs, kernel, scale, sigma255, device, batch):
    """Per-image PSNR (and, for consistent rows, their solves for :func:`solve_summary` and the largest
    ||A x_c - b_c||) of one cell."""
    from mcnet_basicsr.data.degradations import psnr_rgb_uint8
    from mcnet_basicsr.ops import build_operator
    op = build_operator({'type': 'blur', 'scale': scale, 'kernel': kernel})
    out = {'psnr': {}, 'solves': [], 'fidelity_max': 0.0}
    for items in groups.values():
        for i in range(0, len(items), batch):
            chunk = items[i:i + batch]
            sr, residuals, info = protocol_forward(net, consistent, np.stack([lrs[name] for name, _ in chunk]), op,
                                                   sigma255 / 255.0, device)
            if residuals is not None:
                out['fidelity_max'] = max(out['fidelity_max'], float(residuals.max()))
            stats = tolerance_solve(net, info)
            if stats is not None:
                out['solves'].append((stats, len(chunk)))
            for (name, hr), img in zip(chunk, sr):
                out['psnr'][name] = psnr_rgb_uint8(img, hr, scale**2)
    return out


def measure(args):
    """Run ``args.rows`` x ``args.families`` x ``args.kernels`` (row by row, cells already in the JSON ``args.out``
    skipped) and merge the cells into it, until ``args.time_limit`` seconds have passed (None: no limit)."""
    from mcnet_basicsr.ops.kernels import load_kernel
    from .evaluate import resolve_device
    started = time.perf_counter()
    device = resolve_device(args.device)
    record = {}
    if osp.isfile(args.out):
        with open(args.out) as f:
            record = json.load(f)
    record.setdefault('protocol', 'USRNet Table 1: CBSD68, HR mod lcm(s, 8), circular blur (uint8, truncated), '
                      'upper-left decimation, float LR + N(0, sigma) (seed 0 per image), PSNR RGB uint8 border s^2')
    join_record(record, args.out, device, {'tol': args.tol, 'max_iter': args.max_iter}, args.rows)
    kernels_path = osp.join(args.data, 'kernels', 'kernels_12.mat')
    kernels = {k: load_kernel(kernels_path, k - 1) for k in args.kernels}
    cells = record.setdefault('cells', {})
    groups, lr_cache = {}, {}
    for row in args.rows:
        for fam in args.families:
            scale, sigma255 = FAMILIES[fam]
            todo = [k for k in args.kernels if f'{row}|{fam}|k{k}' not in cells]
            if not todo:
                continue
            net, consistent = build_row(row, scale, device, args.tol, args.max_iter, tf32=args.tf32)
            if net is None:
                print(f'{row} {fam}: no options/test_{row}_x{scale}.yml or no weights it names, skipped', flush=True)
                continue
            if scale not in groups:
                groups[scale] = images_by_shape(osp.join(args.data, 'CBSD68', 'HR'), scale, args.images)
            for k in todo:
                if args.time_limit and time.perf_counter() - started > args.time_limit:
                    print(f'time limit of {args.time_limit} s reached; the rest is left for a later run', flush=True)
                    return
                if (fam, k) not in lr_cache:
                    lr_cache[fam, k] = protocol_lrs(groups[scale], kernels[k], scale, sigma255)
                start = time.perf_counter()
                cell = run_cell(net, consistent, groups[scale], lr_cache[fam, k], kernels[k], scale, sigma255, device,
                                args.batch)
                seconds = time.perf_counter() - start
                psnr = float(np.mean(list(cell['psnr'].values())))
                solve = solve_summary(cell['solves'])
                its = solve.pop('iterations', None)
                cells[f'{row}|{fam}|k{k}'] = dict(psnr=psnr, images=len(cell['psnr']), seconds=seconds,
                                                  iterations=its, fidelity_max=cell['fidelity_max'], **solve,
                                                  per_image=cell['psnr'], **({'tf32': True} if args.tf32 else {}))
                line = f'{row:>12} {fam:>9} k{k:<2} {psnr:.3f} dB  {len(cell["psnr"])} images  {seconds:.1f} s'
                if its:
                    line += f'  {its:.1f} it, {100 * solve["converged"]:.0f}% reached tol'
                if consistent:
                    line += f'  max||Ax-b|| {cell["fidelity_max"]:.2e}'
                print(line, flush=True)
                with open(args.out, 'w') as f:
                    json.dump(record, f, indent=1)


def read_published(path):
    rows = {}
    with open(path) as f:
        lines = [line.rstrip('\n').split('\t') for line in f if line.strip() and not line.startswith('#')]
    header = lines[0]
    for parts in lines[1:]:
        method, scale, noise = parts[0], int(parts[1]), float(parts[2])
        fam = f'x{scale}' + (f'_n{noise:g}' if noise else '')
        rows[(method, fam)] = [float(v) for v in parts[3:]]
    return header, rows


def render(record_paths, published_path):
    """The markdown table of the records' cells (later records' cells replace earlier ones) beside the published rows
    of ``published_path``, per family."""
    _, published = read_published(published_path)
    ours = {}
    for record_path in record_paths:
        with open(record_path) as f:
            record = json.load(f)
        for key, cell in record['cells'].items():
            row, fam, k = key.split('|')
            ours.setdefault((row, fam), {})[int(k[1:])] = cell['psnr']
    lines = []
    for fam in FAMILIES:
        entries = [(f'{m} (published)', v) for (m, f_), v in published.items() if f_ == fam]
        entries += [(row, [cells.get(k) for k in range(1, 13)]) for (row, f_), cells in sorted(ours.items())
                    if f_ == fam]
        if not entries:
            continue
        scale, sigma = FAMILIES[fam]
        lines += [f'\n**x{scale}, noise {sigma:g}**\n', '| method | ' + ' | '.join(f'k{k}' for k in range(1, 13))
                  + ' | mean |', '|---' * 14 + '|']
        for name, values in entries:
            got = [v for v in values if v is not None]
            mean = f'{np.mean(got):.2f}' if len(got) == 12 else '-'
            lines.append(f'| {name} | ' + ' | '.join('-' if v is None else f'{v:.2f}' for v in values)
                         + f' | {mean} |')
    return '\n'.join(lines)


_COLOURS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75),
            (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207)]  # RGB


def plot_family(record_paths, published_path, family, rows=None, size=(900, 520)):
    """A line chart (uint8 HxWx3 BGR) of PSNR per kernel (k1..k12) of ``family`` for the records' rows and the
    published ones (dashed), ``rows`` (names as in the table) or all."""
    import cv2
    _, published = read_published(published_path)
    lines = {f'{m} (published)': v for (m, f), v in published.items() if f == family}
    for record_path in record_paths:
        with open(record_path) as f:
            for key, cell in json.load(f)['cells'].items():
                row, fam, k = key.split('|')
                if fam == family:
                    lines.setdefault(row, [None] * 12)[int(k[1:]) - 1] = cell['psnr']
    lines = {n: v for n, v in lines.items() if (rows is None or n.split(' (')[0] in rows) and any(x for x in v)}
    if not lines:
        raise ValueError(f'no rows of family {family!r} in {record_paths}')
    values = [x for v in lines.values() for x in v if x is not None]
    lo, hi = np.floor(min(values)) - 0.5, np.ceil(max(values)) + 0.5
    w, h = size
    left, right, top, bottom = 60, 220, 40, 50
    img = np.full((h, w, 3), 255, np.uint8)
    font = cv2.FONT_HERSHEY_SIMPLEX

    def xy(i, v):
        return (int(left + i * (w - left - right) / 11), int(top + (hi - v) * (h - top - bottom) / (hi - lo)))

    for t in range(int(lo), int(hi) + 1):
        y = xy(0, t)[1]
        cv2.line(img, (left, y), (w - right, y), (225, 225, 225), 1)
        cv2.putText(img, f'{t}', (left - 30, y + 5), font, 0.45, (0, 0, 0), 1, cv2.LINE_AA)
    for i in range(12):
        x = xy(i, lo)[0]
        cv2.putText(img, f'k{i + 1}', (x - 10, h - bottom + 20), font, 0.45, (0, 0, 0), 1, cv2.LINE_AA)
    scale, sigma = FAMILIES[family]
    cv2.putText(img, f'CBSD68, x{scale}, noise {sigma:g}: PSNR (dB, RGB) per kernel', (left, 25), font, 0.55,
                (0, 0, 0), 1, cv2.LINE_AA)
    for n, (name, vals) in enumerate(lines.items()):
        colour = _COLOURS[n % len(_COLOURS)][::-1]
        dashed = name.endswith('(published)')
        pts = [xy(i, v) for i, v in enumerate(vals) if v is not None]
        for a, b in zip(pts, pts[1:]):
            if dashed:
                for s in range(0, 10, 2):
                    p0 = tuple(int(a[j] + (b[j] - a[j]) * s / 10) for j in range(2))
                    p1 = tuple(int(a[j] + (b[j] - a[j]) * (s + 1) / 10) for j in range(2))
                    cv2.line(img, p0, p1, colour, 2, cv2.LINE_AA)
            else:
                cv2.line(img, a, b, colour, 2, cv2.LINE_AA)
        for p in pts:
            cv2.circle(img, p, 3, colour, -1, cv2.LINE_AA)
        y = top + 10 + 22 * n
        cv2.line(img, (w - right + 15, y), (w - right + 45, y), colour, 2, cv2.LINE_AA)
        cv2.putText(img, name, (w - right + 50, y + 5), font, 0.42, (0, 0, 0), 1, cv2.LINE_AA)
    return img


def crops_figure(rows, image, kernel_index, family, device='cpu', data='datasets', tol=1e-4):
    """The figure of crops (uint8 BGR; :func:`mcnet_basicsr.utils.figure.compose_figure`) of one CBSD68 image under the
    protocol: the LR, then each row's output (``rows``: option-file rows, the second one's output picks the crop),
    then the ground truth, each titled with its PSNR and, for consistent rows, ``||Ax - b||``."""
    import cv2
    import torch
    from PIL import Image

    from mcnet_basicsr.data.degradations import psnr_rgb_uint8, usrnet_lr, usrnet_mod_crop
    from mcnet_basicsr.ops import build_operator
    from mcnet_basicsr.ops.kernels import load_kernel
    from mcnet_basicsr.utils.figure import compose_figure
    scale, sigma255 = FAMILIES[family]
    kernel = load_kernel(osp.join(data, 'kernels', 'kernels_12.mat'), kernel_index - 1)
    hr = usrnet_mod_crop(np.asarray(Image.open(osp.join(data, 'CBSD68', 'HR', image)).convert('RGB')), scale)
    lr = usrnet_lr(hr, kernel, scale, sigma255 / 255.0)
    op = build_operator({'type': 'blur', 'scale': scale, 'kernel': kernel})
    bgr = lambda rgb: np.ascontiguousarray(rgb[..., ::-1])  # noqa: E731
    lr_u8 = (np.clip(lr, 0, 1) * 255).round().astype(np.uint8)
    panels = [(f'LR (k{kernel_index}, x{scale})',
               bgr(cv2.resize(lr_u8, (hr.shape[1], hr.shape[0]), interpolation=cv2.INTER_NEAREST)))]
    for row in rows:
        net, consistent = build_row(row, scale, torch.device(device), tol, 200)
        if net is None:
            raise ValueError(f'row {row!r}: no options/test_{row}_x{scale}.yml or no weights it names')
        sr, residuals, _ = protocol_forward(net, consistent, lr[None], op, sigma255 / 255.0, device)
        sr = sr[0]
        title = f'{row}\n{psnr_rgb_uint8(sr, hr, scale**2):.2f} dB' + \
            (f', ||Ax-b|| {float(residuals.max()):.3f}' if consistent else '')
        panels.append((title, bgr(sr)))
    panels.append(('ground truth', bgr(hr)))
    return compose_figure(panels, scale)
