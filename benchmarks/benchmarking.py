"""Measuring MCNet on one device: the solver configurations compared against the paper's setting, one
configuration applied to an arch and restored, and one timed pass over a set (``benchmarks/benchmark.py`` runs them).

Every configuration runs the arch itself (``MCNetArch.forward``); what a configuration changes (solver, backbone
dtype, memory format, TF32, cuDNN autotuning) is set on entry and restored on exit.
"""
import logging
import os.path as osp
import time

import numpy as np
import torch
from basicsr.metrics import calculate_psnr
from basicsr.utils import img2tensor, tensor2img

from mcnet_basicsr.deq import SolverConfig
from mcnet_basicsr.ops import build_operator
from mcnet_basicsr.utils.color import rgb_to_ycbcr
from mcnet_basicsr.utils.images import bicubic_lr, list_images, mod_crop, read_hr, read_rgb
from mcnet_basicsr.utils.precision import cudnn_autotune
from timing import peak_mb, reset_peak, sync

LOG = logging.getLogger(__name__)
# SolverConfig requires tol > 0; no relative residual gets this low, so all max_iter iterations run
FORCED_TOL = 1e-30
PAPER = {k: v for k, v in SolverConfig.preset('paper').to_dict().items() if k != 'cuda_graph'}
PAPER_BACKWARD = dict(PAPER, max_iter=80)
REFERENCE = 'paper_200'
CONFIGS = {
    'paper_200': {'label': 'paper: Anderson, 200 it. (forced), fp32', 'solver': dict(PAPER, tol=FORCED_TOL)},
    'paper_tol1e-5': {'label': 'paper stop: tol 1e-5 / max 200, fp32', 'solver': dict(PAPER)},
    'tol1e-6': {'label': 'tol 1e-6 / max 300, fp32', 'solver': dict(PAPER, tol=1e-6, max_iter=300)},
    'tol1e-4': {'label': 'tol 1e-4 / max 100, fp32', 'solver': dict(PAPER, tol=1e-4, max_iter=100)},
    'fast_bf16': {'label': 'tol 1e-4, backbone bf16, channels_last', 'solver': dict(PAPER, tol=1e-4, max_iter=100),
                  'backbone_dtype': torch.bfloat16, 'channels_last': True},
    'fast_bf16_tf32': {'label': 'tol 1e-4, backbone bf16, TF32, channels_last',
                       'solver': dict(PAPER, tol=1e-4, max_iter=100), 'backbone_dtype': torch.bfloat16,
                       'channels_last': True, 'tf32': True},
    'fast5_bf16': {'label': 'tol 1e-5 / max 200, backbone bf16, channels_last', 'solver': dict(PAPER),
                   'backbone_dtype': torch.bfloat16, 'channels_last': True},
    # CUDA graphs (SolverConfig.cuda_graph): the same iterations without per-iteration Python / launch cost;
    # used where the map is capturable (eps = 0, the SRCNN layers), eager otherwise (see the row's note)
    'paper_200_graph': {'label': 'paper: Anderson, 200 it. (forced), fp32, CUDA graphs',
                        'solver': dict(PAPER, tol=FORCED_TOL, cuda_graph=True)},
    'graph_tol1e-5': {'label': 'paper stop: tol 1e-5 / max 200, fp32, CUDA graphs',
                      'solver': dict(PAPER, cuda_graph=True)},
    'graph_tol1e-4': {'label': 'tol 1e-4 / max 100, fp32, CUDA graphs',
                      'solver': dict(PAPER, tol=1e-4, max_iter=100, cuda_graph=True)},
    # layers with a small beta (the shipped x2 layer) converge slowly to 1e-5 but lose little at 2e-5
    'graph_tol2e-5': {'label': 'tol 2e-5 / max 200, fp32, CUDA graphs',
                      'solver': dict(PAPER, tol=2e-5, cuda_graph=True)},
    # from a learned start (network_g.start) the solve begins nearer the fixed point, so a looser stop can keep the PSNR
    'graph_tol3e-5': {'label': 'tol 3e-5 / max 200, fp32, CUDA graphs',
                      'solver': dict(PAPER, tol=3e-5, cuda_graph=True)},
    'graph_tol1.5e-5': {'label': 'tol 1.5e-5 / max 200, fp32, CUDA graphs',
                        'solver': dict(PAPER, tol=1.5e-5, cuda_graph=True)},
    # the output from an extrapolated last iterate (MCNetArch's extrapolation: a fraction of (beta + rho) / beta
    # times the residual, one more application of F): what a stop at a loose tolerance misses in slow directions
    **{f'graph_tol{tol}_extrap{t}': {'label': f'tol {tol} / max 200, extrapolation {t}, fp32, CUDA graphs',
                                     'solver': dict(PAPER, tol=float(tol), cuda_graph=True), 'extrapolation': t}
       for tol in ('2e-5', '2.5e-5', '3e-5', '5e-5') for t in (0.25, 0.5, 0.6)},
    # cuDNN autotuning (torch.backends.cudnn.benchmark) for this configuration only: the first DnCNN call on each new
    # image size times cuDNN's algorithms and keeps the fastest for that size. That first call is inside the image's
    # time (every Set5/Set14 image has its own size); the reference keeps cuDNN's heuristics
    'graph_tol2e-5_autotune': {'label': 'tol 2e-5 / max 200, fp32, CUDA graphs, cuDNN autotuning',
                               'solver': dict(PAPER, tol=2e-5, cuda_graph=True), 'cudnn_benchmark': True},
    'graph_tol1e-5_autotune': {'label': 'paper stop: tol 1e-5 / max 200, fp32, CUDA graphs, cuDNN autotuning',
                               'solver': dict(PAPER, cuda_graph=True), 'cudnn_benchmark': True},
    'graph_tol2e-5_autotune_cl': {'label': 'tol 2e-5 / max 200, fp32, CUDA graphs, cuDNN autotuning, channels_last',
                                  'solver': dict(PAPER, tol=2e-5, cuda_graph=True), 'cudnn_benchmark': True,
                                  'channels_last': True},
    'paper_200_autotune': {'label': 'paper: Anderson, 200 it. (forced), fp32, cuDNN autotuning',
                           'solver': dict(PAPER, tol=FORCED_TOL), 'cudnn_benchmark': True},
    'graph5_bf16': {'label': 'tol 1e-5 / max 200, backbone bf16, channels_last, CUDA graphs',
                    'solver': dict(PAPER, cuda_graph=True), 'backbone_dtype': torch.bfloat16, 'channels_last': True},
    # TF32 halves the denoiser's time but its rounding floor (~1e-4 relative) keeps the residual above 1e-5, so
    # these stop at max_iter: 50 covers the ~40-45 iterations fp32 needs at x4 (the cells short of 10x in fp32)
    'graph_tf32_it50': {'label': 'tol 1e-5 / max 50, TF32, CUDA graphs',
                        'solver': dict(PAPER, max_iter=50, cuda_graph=True), 'tf32': True},
    'graph_tf32_cl_it50': {'label': 'tol 1e-5 / max 50, TF32, channels_last, CUDA graphs',
                           'solver': dict(PAPER, max_iter=50, cuda_graph=True), 'tf32': True, 'channels_last': True},
}
# every code path: bf16, TF32, channels_last, the CUDA-graph option (eager on the CPU)
QUICK_CONFIGS = ['paper_200', 'tol1e-4', 'fast_bf16_tf32', 'graph_tol1e-4']
BIG_CONFIGS = ('paper_200', 'tol1e-4', 'fast_bf16', 'fast_bf16_tf32', 'paper_200_graph', 'graph_tol1e-4')


# ---------------------------------------------------------------------------------------------- utilities
class Budget:
    """Wall-clock budget of the whole run: rows that would start after it are recorded as skipped."""

    def __init__(self, seconds):
        self.seconds, self.start = seconds, time.perf_counter()

    def exceeded(self):
        return self.seconds is not None and time.perf_counter() - self.start > self.seconds


def run_row(rows, section, name, budget, fn, **meta):
    """Run ``fn() -> dict`` as one row; a row that would start after the time budget is recorded as skipped."""
    row = dict(section=section, name=name, **meta)
    if budget.exceeded():
        row.update(status='skipped', error=f'time budget of {budget.seconds:.0f} s exceeded')
        LOG.warning('%s %s: skipped (time budget)', section, name)
    else:
        row.update(fn())
        row.setdefault('status', 'ok')
    rows.append(row)
    return row


# ---------------------------------------------------------------------------------------------- data
def load_pairs(data_root, hr_root, name, scale, limit, quick):
    """[(file, hr float32 HxWx3 BGR in [0,1], lq tensor 1x3xhxw RGB)] under the project's protocol: the prepared
    ``<data_root>/<name>``, or, with ``hr_root``, LR made from ``<hr_root>/<name>/HR``."""
    pairs = []
    if hr_root:
        for path in list_images(osp.join(hr_root, name, 'HR'))[:limit]:
            hr = mod_crop(read_hr(path), scale)
            pairs.append((osp.basename(path), hr.astype(np.float32) / 255., bicubic_lr(hr, scale) / np.float32(255.)))
    else:
        hr_dir = osp.join(data_root, name, f'HR_mod{scale}')
        lr_dir = osp.join(data_root, name, 'LR_bicubic', f'X{scale}')
        for path in list_images(hr_dir)[:limit]:
            f = osp.basename(path)
            pairs.append((f, read_rgb(path), read_rgb(osp.join(lr_dir, f))))
    out = []
    for f, hr, lr in pairs:
        if quick:  # aligned top-left crops keep the pipeline, not the numbers
            h = min(lr.shape[0], 48 // scale)
            lr, hr = lr[:h, :h], hr[:h * scale, :h * scale]
        out.append((f, hr, img2tensor(lr.astype(np.float32), bgr2rgb=True, float32=True)[None]))
    return out


def big_input(scale, quick):
    """A real photo at 1024x1024 HR (x2: LR 512x512): skimage's astronaut (512x512) upscaled by
    MATLAB bicubic x2, its LR the MATLAB-bicubic uint8 downscale, as for the test sets."""
    from basicsr.utils.matlab_functions import imresize as np_imresize
    from skimage import data
    photo = data.astronaut()[:, :, ::-1].astype(np.float64) / 255.  # RGB -> BGR
    if quick:
        photo = photo[:32, :32]
    hr = np.clip(np.floor(np_imresize(photo, 2) * 255. + 0.5), 0, 255).astype(np.uint8)
    hr = hr[:hr.shape[0] - hr.shape[0] % scale, :hr.shape[1] - hr.shape[1] % scale]
    lr = bicubic_lr(hr, scale).astype(np.float32) / 255.
    return hr.astype(np.float32) / 255., img2tensor(lr, bgr2rgb=True, float32=True)[None]


def train_patches(pairs, batch, patch, scale, seed=0):
    """``batch`` aligned (LR patch x patch, HR) crops from the pairs, RGB tensors."""
    rng = np.random.default_rng(seed)
    lqs, gts = [], []
    for i in range(batch):
        _, hr, lq = pairs[i % len(pairs)]
        h, w = lq.shape[-2:]
        p = min(patch, h, w)
        top, left = int(rng.integers(0, h - p + 1)), int(rng.integers(0, w - p + 1))
        lqs.append(lq[0, :, top:top + p, left:left + p])
        gt = img2tensor(hr, bgr2rgb=True, float32=True)
        gts.append(gt[:, top * scale:(top + p) * scale, left * scale:(left + p) * scale])
    return torch.stack(lqs), torch.stack(gts)


# ---------------------------------------------------------------------------------------------- networks
_DTYPE_NAMES = {None: None, torch.bfloat16: 'bf16', torch.float16: 'fp16'}  # LayerSettings names the dtypes


class configured:
    """Context: a configuration (solver, backbone dtype, channels_last, TF32, cuDNN autotuning) applied to ``net``."""

    def __init__(self, net, cfg, quick):
        self.net, self.cfg, self.quick = net, cfg, quick

    def __enter__(self):
        solver = dict(self.cfg['solver'])
        if self.quick:
            solver['max_iter'] = min(solver['max_iter'], 4)
        # every configuration says its own extrapolation (default none); the arch scopes TF32 to its own forward
        self.scope = self.net.settings(solver={'forward': solver}, extrapolation=self.cfg.get('extrapolation', 0.0),
                                       backbone_dtype=_DTYPE_NAMES[self.cfg.get('backbone_dtype')],
                                       allow_tf32=self.cfg.get('tf32', False))
        self.scope.__enter__()
        if self.cfg.get('channels_last'):
            self.net.to(memory_format=torch.channels_last)
        self.autotune = cudnn_autotune(self.cfg.get('cudnn_benchmark', False))
        self.autotune.__enter__()
        return self.net

    def __exit__(self, *exc):
        self.autotune.__exit__(*exc)
        if self.cfg.get('channels_last'):
            self.net.to(memory_format=torch.contiguous_format)
        self.scope.__exit__(*exc)


# ---------------------------------------------------------------------------------------------- eval
def evaluate_config(net, cfg, pairs, scale, device, quick, flops_px, peak_tflops):
    op = build_operator({'type': 'bicubic', 'scale': scale})
    with configured(net, cfg, quick):
        lq0 = pairs[0][2].to(device)
        if cfg.get('channels_last'):
            lq0 = lq0.contiguous(memory_format=torch.channels_last)
        with torch.no_grad():  # warm-up: kernels, cuDNN heuristics, spectral-norm estimate
            net(lq0)
        base = reset_peak(device)
        secs, iters, nfes, psnrs, fids, bound, eps, graphed = [], [], [], [], [], [], [], []
        for _, hr, lq in pairs:
            lq = lq.to(device)
            if cfg.get('channels_last'):
                lq = lq.contiguous(memory_format=torch.channels_last)
            sync(device)
            t0 = time.perf_counter()
            with torch.no_grad():
                out, info = net.run(lq)
            sync(device)
            secs.append(time.perf_counter() - t0)
            stats = info['forward']
            iters.append(float(stats.iterations.double().mean()))
            nfes.append(stats.nfe)
            graphed.append(stats.cuda_graph)
            eps.append(float(info['eps']))
            y = rgb_to_ycbcr(out.double())[:, :1]
            fids.append(float(op.residual_norm(y, rgb_to_ycbcr(lq.double())[:, :1])[0]))
            if hr is not None:
                sr_img = tensor2img([out.detach().float().cpu().clone()])
                gt_img = (hr * 255.0).round().astype(np.uint8)
                psnrs.append(calculate_psnr(sr_img, gt_img, crop_border=scale, test_y_channel=True))
            # the solve evaluates the map nfe times (its output is F at the iterate it stops at, which it has
            # evaluated), an extrapolated output once more
            evaluations = stats.nfe + (1 if net.layer_settings.extrapolation else 0)
            bound.append(flops_px * out.shape[-2] * out.shape[-1] * evaluations / (peak_tflops * 1e12))
    graph_used = all(graphed)  # what the solver reports it did
    if cfg['solver'].get('cuda_graph') and not graph_used:
        note = 'CUDA graphs not used: ' + ('map not capturable (eps > 0: host-side multiplier solve)'
                                           if device.type == 'cuda' else 'CPU')
    else:
        note = ''
    row = {'images': len(pairs), 'seconds_per_image': float(np.mean(secs)), 'peak_mem_mb': peak_mb(device),
           'cuda_graph_used': graph_used, 'config_note': note,
           'base_mem_mb': base, 'iterations': float(np.mean(iters)), 'iterations_max': float(np.max(iters)),
           'nfe_mean': float(np.mean(nfes)), 'psnr': float(np.mean(psnrs)) if psnrs else None,
           'fidelity_max': float(np.max(fids)), 'eps_max': float(np.max(eps)),
           'bound_seconds_per_image': float(np.mean(bound))}
    row['bound_fraction'] = row['bound_seconds_per_image'] / row['seconds_per_image']
    return row
