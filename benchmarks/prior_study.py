"""Lab: what a colour, noise-aware prior gives the layer, on Set5 with kernels of the training family.

Every method sees USRNet's measurement (circular blur, upper-left decimation, uint8-truncated LR, Gaussian noise) of
Set5 (or ``--set``, e.g. the first ``--images`` of BSD200 as ``--crop`` centred crops) under kernels drawn from
:class:`~mcnet_basicsr.data.kernel_family.KernelFamily` with a fixed seed (never the 12 kernels of Table K, never
CBSD68), and each consistent method is told the kernel, the truncation (``b = lr + 0.5 / 255``, eps at the uint8
level) and the noise, and makes each of R, G and B consistent:

- ``usrnet_tiny``: USRNet-tiny alone (official weights);
- ``proj(usrnet_tiny)``: its output projected exactly onto the measurement ball;
- ``pnp_ffdnet_bicubic``: 24 steps ``z = FFDNet(x, sigma_i); x = P(z)`` from bicubic upsampling, sigma_i log-spaced
  from 49 / 255 down to max(s, noise) / 255 (colour FFDNet of KAIR's model zoo, untrained for this task);
- ``pnp_ffdnet_usrnet K s0``: K such steps from USRNet-tiny's output, sigma_i from ``s0`` down to max(1, noise) / 255;
- ``layer_ffdnet_bicubic beta sp`` (``--bicubic-betas``): the same map anchored at bicubic upsampling instead, what a
  layer gives with no backbone worth anchoring on;
- ``layer_ffdnet_usrnet beta sp``: the MCNet map with FFDNet(., sp) as R, anchored at ``w`` = USRNet-tiny's output,
  rho = 1, solved by Anderson to a relative residual of 1e-4 (at most 60 iterations), the output ``x*`` exactly in
  the ball; the record keeps how many solves reached the tolerance and the largest final residual.

    python benchmarks/prior_study.py --data datasets --weights experiments/pretrained_models --out study.json

``--beta-slopes`` and ``--level-gains`` add layers whose beta and level start from other functions of the noise
(``b1`` and ``exp(c)`` of :class:`FFDNetLayer`); ``--layers-only`` leaves out the PnP rows.

With ``--rows``, option-file rows instead (``options/test_<row>_x<s>.yml``, run from the repository root as
``scripts/kernel_table.py`` runs them, told the same measurement), e.g. the shipped ``ffdnet_hqs`` and
``mcnet_ffdnet_hqs`` beside ``usrnet_tiny``; the record keeps each consistent row's convergence.

PSNR on RGB uint8 with a border of s^2, as Table K's.
"""
import argparse
import itertools
import json
import math
import os.path as osp
import sys
import time

import numpy as np
import torch
from torch import nn

from timing import device_name, sync

FAMILIES = {'x2': (2, 0.0), 'x3': (3, 0.0), 'x3_n2.55': (3, 2.55), 'x3_n7.65': (3, 7.65), 'x4': (4, 0.0)}


def add_problem_args(p, kernels, families):
    """The options of :func:`problems` (the selection set, its kernels and families) and of the weights' folder, on
    the parser ``p``, with ``kernels`` family kernels and the ``families`` by default."""
    p.add_argument('--data', default='datasets', help='folder with <--set>/HR')
    p.add_argument('--set', default='Set5', help='the selection set (never CBSD68: Table K tests on it)')
    p.add_argument('--images', type=int, default=0, help='the first N images of --set (sorted; 0: all)')
    p.add_argument('--crop', type=int, default=0, help='a centred S x S crop of each image (0: the whole image)')
    p.add_argument('--weights', default='experiments/pretrained_models',
                   help='folder with usrnet_tiny.pth and ffdnet_color.pth')
    p.add_argument('--kernels', type=int, default=kernels, help='family kernels per family (seeded draws)')
    p.add_argument('--families', nargs='+', default=families, choices=FAMILIES)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    add_problem_args(p, 4, list(FAMILIES))
    p.add_argument('--betas', type=float, nargs='+', default=[0.3, 1.0, 3.0])
    p.add_argument('--bicubic-betas', type=float, nargs='*', default=[],
                   help='also layers anchored at bicubic upsampling, with these betas')
    p.add_argument('--prior', help='the colour FFDNet weights (default: ffdnet_color.pth of --weights)')
    p.add_argument('--prior-sigmas', type=float, nargs='+', default=[3.0, 7.0], help="the layer's FFDNet level (/255)")
    p.add_argument('--beta-slopes', type=float, nargs='+', default=[0.0],
                   help='g of beta(sigma) = beta exp(g 255 sigma) for the USRNet-anchored layers')
    p.add_argument('--level-gains', type=float, nargs='+', default=[1.0],
                   help='k of level(sigma) = sqrt(sp^2 + k^2 sigma^2) for the USRNet-anchored layers (0: the LR '
                   'noise does not reach the level)')
    p.add_argument('--table-k', action='store_true',
                   help="Table K's protocol instead (CBSD68, the 12 kernels): USRNet-tiny and the layers only, never "
                   'to select or tune')
    p.add_argument('--layers-only', action='store_true', help='USRNet-tiny, its projection and the layers: no PnP rows')
    p.add_argument('--self-ensemble', action='store_true',
                   help='also each USRNet-anchored layer with its FFDNet averaged over the 8 flips and rotations of '
                   'its input (a stronger denoiser at 8 times the cost)')
    p.add_argument('--rows', nargs='+', metavar='ROW', help='option-file rows instead of the study\'s methods')
    p.add_argument('--tol', type=float, default=1e-4, help="with --rows: the layers' forward tolerance (Table K's)")
    p.add_argument('--max-iter', type=int, default=60, help="with --rows: the layers' iteration cap (Table K's 60)")
    p.add_argument('--layer', help='also a layer trained by train_prior_probe.py (its state file)')
    p.add_argument('--device', default='cuda')
    p.add_argument('--out', required=True)
    return p.parse_args(argv)


def family_kernels(count, seed=2024):
    from mcnet_basicsr.data.kernel_family import KernelFamily
    rng = np.random.default_rng(seed)
    family = KernelFamily()
    return [family.draw(rng) for _ in range(count)]


def measurement_radius(b, sigma):
    """Per-sample, per-channel radius (N C,) of LR measurements ``b`` (N, C, h, w) truncated to uint8 (``b = lr + 0.5 /
    255``) with Gaussian noise of std ``sigma`` (a float, or an (N,) tensor) per value."""
    from mcnet_basicsr.ops import QUANTIZATION_EPS_RMS, noisy_radius
    n, c, h, w = b.shape
    sigma = torch.as_tensor(sigma, dtype=torch.float64).reshape(-1).expand(n).repeat_interleave(c).to(b.device)
    return noisy_radius(QUANTIZATION_EPS_RMS * math.sqrt(h * w), sigma, h * w)


def project_rgb(op, x, b, eps):
    """Each of R, G, B of ``x`` (N, 3, H, W) projected onto its ball ``||A x_c - b_c|| <= eps`` (in float64)."""
    from mcnet_basicsr.archs.layer_core import ChannelBalls
    return ChannelBalls(op, x.shape[1]).project(x.double(), b.double(), eps).to(x.dtype)


class FFDNetLayer(nn.Module):
    """The MCNet map with a colour FFDNet as R, told its level: ``u = R(x + lam, level)``, ``x+ = P_S[(beta w + rho
    (u - lam)) / (beta + rho)]``, ``lam+ = lam + x+ - u`` with rho = 1, ``beta = exp(b0 + b1 255 sigma)`` and
    ``level = sqrt(sp^2 + exp(2 c) sigma^2)`` for LR noise ``sigma`` per sample (``b1 = slope``, ``c = log(gain)`` at
    the start; 0 and 0 by default)."""

    def __init__(self, prior, beta, sp, slope=0.0, gain=1.0):
        super().__init__()
        self.prior = prior
        self.log_beta = nn.Parameter(torch.tensor([math.log(beta), slope]))
        self.log_level = nn.Parameter(torch.tensor([math.log(sp), math.log(gain) if gain > 0 else -math.inf]))

    def parameters_of(self, sigma, n, device):
        """``(beta (N, 1, 1, 1), level (N,))`` for LR noise ``sigma`` (a float or (N,))."""
        sigma = torch.as_tensor(sigma, dtype=torch.float32, device=device).reshape(-1).expand(n)
        beta = (self.log_beta[0] + self.log_beta[1] * 255 * sigma).exp().view(-1, 1, 1, 1)
        level = ((2 * self.log_level[0]).exp() + (2 * self.log_level[1]).exp() * sigma**2).sqrt()
        return beta, level

    def fixed_point_map(self, w, b, op, eps, sigma):
        beta, level = self.parameters_of(sigma, w.shape[0], w.device)

        def f(z):
            x, lam = z[:, :3], z[:, 3:]
            u = self.prior(x + lam, level)
            x_new = project_rgb(op, (beta * w + (u - lam)) / (beta + 1.0), b, eps)
            return torch.cat([x_new, lam + x_new - u], dim=1)

        return f

    def solve(self, w, b, op, eps, sigma, tol=1e-4, max_iter=60, backward_tol=None):
        """``(x*, stats)``: the fixed point's image (differentiable by the implicit function theorem)."""
        from mcnet_basicsr.deq import SolverConfig, implicit_fixed_point
        f = self.fixed_point_map(w, b, op, eps, sigma)
        z0 = torch.cat([project_rgb(op, w, b, eps), torch.zeros_like(w)], dim=1)
        fwd = SolverConfig(tol=tol, max_iter=max_iter)
        bwd = SolverConfig(tol=backward_tol or tol, max_iter=max_iter)
        z, stats, _ = implicit_fixed_point(f, z0, fwd, bwd)
        return z[:, :3], {'iterations': int(stats.iterations.max()), 'converged': bool(stats.converged.all()),
                          'residual': float(stats.residual.max())}


class SelfEnsemble(nn.Module):
    """A denoiser told its level, averaged over the 8 flips and rotations of its input (each undone on its output)."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x, level):
        outs = []
        for turns in range(4):
            for flip in (False, True):
                y = torch.rot90(x, turns, (2, 3))
                y = self.net(y.flip(3) if flip else y, level)
                outs.append(torch.rot90(y.flip(3) if flip else y, -turns, (2, 3)))
        return torch.stack(outs).mean(0)


def load_networks(folder, prior=None):
    """USRNet-tiny and the colour FFDNet (eval mode) from ``usrnet_tiny.pth`` and ``ffdnet_color.pth`` of ``folder``
    (what ``scripts/fetch_assets.py usrnet_tiny ffdnet_color`` writes, or the original files), the FFDNet from
    ``prior`` where given (a BasicSR checkpoint: its ``params_ema`` where it has them)."""
    from mcnet_basicsr.archs.ffdnet_arch import FFDNet
    from mcnet_basicsr.archs.usrnet_arch import USRNet
    nets = []
    for net, path in ((USRNet(), osp.join(folder, 'usrnet_tiny.pth')),
                      (FFDNet(), prior or osp.join(folder, 'ffdnet_color.pth'))):
        state = torch.load(path, map_location='cpu', weights_only=False)
        state = state.get('params_ema', state)
        net.load_state_dict(state.get('params', state))
        nets.append(net.eval())
    return nets


def problems(args, fam):
    """``(kernel, hr, lr)`` of one family: ``--set`` under seeded family kernels, or with ``--table-k`` Table K's CBSD68
    under its 12 kernels (the LR made in parallel processes, as ``scripts/kernel_table.py`` makes it)."""
    from PIL import Image

    from mcnet_basicsr.data.degradations import usrnet_lr, usrnet_mod_crop
    from mcnet_basicsr.utils.images import list_images
    scale, noise255 = FAMILIES[fam]
    if args.table_k:
        from mcnet_basicsr.evaluation.kernel_table import images_by_shape, protocol_lrs
        from mcnet_basicsr.ops.kernels import load_kernel
        groups = images_by_shape(osp.join(args.data, 'CBSD68', 'HR'), scale, None)
        for k in range(12):
            kernel = load_kernel(osp.join(args.data, 'kernels', 'kernels_12.mat'), k)
            lrs = protocol_lrs(groups, kernel, scale, noise255)
            for items in groups.values():
                for name, hr in items:
                    yield kernel, hr, lrs[name]
        return
    if args.set == 'CBSD68':
        raise SystemExit('CBSD68 is the test set of Table K: select on another set (--table-k measures on it).')
    paths = list_images(osp.join(args.data, args.set, 'HR'))[:args.images or None]
    for kernel, _ in family_kernels(args.kernels):
        for path in paths:
            hr = centre_crop(np.asarray(Image.open(path).convert('RGB')), args.crop)
            hr = usrnet_mod_crop(hr, scale)
            yield kernel, hr, usrnet_lr(hr, kernel, scale, noise255 / 255.0)


def centre_crop(img, size):
    """The centred ``size`` x ``size`` crop of ``img`` (H, W, C); ``img`` itself for 0 or a smaller image."""
    h, w = img.shape[:2]
    if not size or h < size or w < size:
        return img
    top, left = (h - size) // 2, (w - size) // 2
    return img[top:top + size, left:left + size]


def write_record(args, results):
    """The record of what is measured so far (written after each family)."""
    images = f'the first {args.images} of ' if args.images else ''
    crop = f', centred {args.crop} x {args.crop} crops' if args.crop else ''
    protocol = ('Table K: CBSD68, the 12 kernels' if args.table_k else
                f'{images}{args.set}{crop}, {args.kernels} KernelFamily() kernels (seed 2024)')
    device = device_name(torch.device(args.device))
    record = {'protocol': f'{protocol}, USRNet measurement, PSNR RGB uint8 border s^2', 'device': device,
              'results': results}
    if args.rows:
        record['solver'] = {'tol': args.tol, 'max_iter': args.max_iter}
    with open(args.out, 'w') as f:
        json.dump(record, f, indent=1)


def print_family(results, fam):
    """One line per method of ``results`` measured in family ``fam``: its mean PSNR, its time and, for a solve, its
    convergence."""
    for name, fams in results.items():
        if fam in fams:
            e = fams[fam]
            line = f'{fam:>9} {name:<40} {np.mean(e["psnr"]):.3f} dB  {e["seconds"]:.1f} s'
            if 'converged' in e:
                line += f'  converged {np.mean(e["converged"]):.2f}  max res {max(e["residual"]):.1e}' \
                    f'  mean it {np.mean(e["iterations"]):.1f}'
            print(line, flush=True)


def score_rows(args):
    """The option-file rows ``args.rows`` on the study's problems, each as the kernel table runs it (float32, Anderson
    to a relative residual of ``args.tol``, at most ``args.max_iter`` iterations; Table K's 1e-4 and 60 by default):
    the record of :func:`write_record`."""
    from mcnet_basicsr.data.degradations import psnr_rgb_uint8
    from mcnet_basicsr.evaluation.kernel_table import build_row, protocol_forward
    from mcnet_basicsr.ops import build_operator
    dev = torch.device(args.device)
    results = {}
    for fam in args.families:
        scale, noise255 = FAMILIES[fam]
        nets = {row: build_row(row, scale, dev, args.tol, args.max_iter) for row in args.rows}
        missing = [row for row, (net, _) in nets.items() if net is None]
        if len(missing) == len(nets):
            raise SystemExit(f'No row to run at x{scale}: options/test_<row>_x{scale}.yml of {missing} or its weights '
                             'are missing (run from the repository root).')
        for row in missing:
            print(f'{fam:>9} {row:<40} skipped: options/test_{row}_x{scale}.yml or its weights missing', flush=True)
        for kernel, hr, lr in problems(args, fam):
            op = build_operator({'type': 'blur', 'scale': scale, 'kernel': kernel})
            for row, (net, consistent) in nets.items():
                if net is None:
                    continue
                sync(dev)
                t0 = time.perf_counter()
                sr, _, info = protocol_forward(net, consistent, lr[None], op, noise255 / 255.0, dev)
                sync(dev)
                entry = results.setdefault(row, {}).setdefault(fam, {'psnr': [], 'seconds': 0.0})
                entry['psnr'].append(psnr_rgb_uint8(sr[0], hr, scale**2))
                entry['seconds'] += time.perf_counter() - t0
                if 'forward' in info:
                    stats = info['forward']
                    entry.setdefault('converged', []).append(bool(stats.converged.all()))
                    entry.setdefault('residual', []).append(float(stats.residual.max()))
                    entry.setdefault('iterations', []).append(float(stats.iterations.float().mean()))
        print_family(results, fam)
        write_record(args, results)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.rows:
        return score_rows(args)
    from mcnet_basicsr.archs.ffdnet_arch import FFDNet
    from mcnet_basicsr.data.degradations import psnr_rgb_uint8, usrnet_measurement
    from mcnet_basicsr.ops import build_operator, imresize

    dev = torch.device(args.device)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    usrnet, ffdnet = load_networks(args.weights, args.prior)
    usrnet, ffdnet = usrnet.to(dev), ffdnet.to(dev)
    if args.layer:
        trained = FFDNetLayer(FFDNet(), 1.0, 5 / 255.0)
        state = torch.load(args.layer, map_location='cpu')
        trained.load_state_dict(state.get('layer', state))
        trained = trained.to(dev).eval()
    results = {}

    def add(name, fam, value, extra=None):
        entry = results.setdefault(name, {}).setdefault(fam, {'psnr': [], 'seconds': 0.0})
        entry['psnr'].append(value)
        for key, v in (extra or {}).items():
            entry.setdefault(key, []).append(v)

    for fam in args.families:
        scale, noise255 = FAMILIES[fam]
        sigma = noise255 / 255.0
        for kernel, hr, lr in problems(args, fam):
            op = build_operator({'type': 'blur', 'scale': scale, 'kernel': kernel})
            k_t = torch.from_numpy(kernel).float()[None, None].to(dev)
            b_np, _, _ = usrnet_measurement(lr[None], sigma)
            lr_t = torch.from_numpy(np.ascontiguousarray(lr)).permute(2, 0, 1)[None].to(dev)
            b = torch.from_numpy(np.ascontiguousarray(b_np)).permute(0, 3, 1, 2).to(dev)
            eps = measurement_radius(b, sigma)

            def project(x):
                return project_rgb(op, x, b, eps)

            def score(x):
                sr = (x.clamp(0, 1) * 255).round().byte()[0].permute(1, 2, 0).cpu().numpy()
                return psnr_rgb_uint8(sr, hr, scale**2)

            def timed(name, fn):
                sync(dev)
                t0 = time.perf_counter()
                out = fn()
                sync(dev)
                x, extra = out if isinstance(out, tuple) else (out, None)
                add(name, fam, score(x), extra)
                results[name][fam]['seconds'] += time.perf_counter() - t0
                return x

            with torch.no_grad():
                w = timed('usrnet_tiny', lambda: usrnet(lr_t, k_t, scale, sigma))
                timed('proj(usrnet_tiny)', lambda: project(w))

                def pnp(x, steps, s_hi, s_lo):
                    for s_i in np.geomspace(s_hi, s_lo, steps):
                        x = project(ffdnet(x, float(s_i)))
                    return x

                bicubic = project(imresize(lr_t.clamp(0, 1), scale))
                if not (args.table_k or args.layers_only):
                    timed('pnp_ffdnet_bicubic', lambda: pnp(bicubic, 24, 49 / 255, max(scale, noise255) / 255.0))
                    lo = max(1.0, noise255) / 255.0
                    for steps, s0 in ((4, 5.0), (8, 10.0)):
                        timed(f'pnp_ffdnet_usrnet {steps} {s0:g}',
                              lambda: pnp(project(w), steps, max(s0 / 255, lo), lo))
                priors = [('', ffdnet)] + ([(' x8', SelfEnsemble(ffdnet))] if args.self_ensemble else [])
                for (suffix, prior), beta, sp, slope, gain in itertools.product(
                        priors, args.betas, args.prior_sigmas, args.beta_slopes, args.level_gains):
                    layer = FFDNetLayer(prior, beta, sp / 255.0, slope, gain).to(dev)
                    name = f'layer_ffdnet_usrnet beta={beta:g} sp={sp:g}'
                    name += f' slope={slope:g}' if slope else ''
                    name += f' gain={gain:g}' if gain != 1 else ''
                    timed(name + suffix, lambda: layer.solve(w, b, op, eps, sigma))
                for beta in args.bicubic_betas:
                    for sp in args.prior_sigmas:
                        layer = FFDNetLayer(ffdnet, beta, sp / 255.0).to(dev)
                        timed(f'layer_ffdnet_bicubic beta={beta:g} sp={sp:g}',
                              lambda: layer.solve(bicubic, b, op, eps, sigma, max_iter=100))
                if args.layer:
                    timed('layer_trained', lambda: trained.solve(w, b, op, eps, sigma))
        print_family(results, fam)
        write_record(args, results)


if __name__ == '__main__':
    main()
