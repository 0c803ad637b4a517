"""Benchmark MCNet end to end on one device: speed, memory, iterations and PSNR side by side (issue #8).

Sections (all in one run, so every number of a row is comparable with the reference row):

* ``periter``: at 512x512 HR (x2, a real photo), one DnCNN6 forward vs one projection vs one full
  fixed-point map vs one Anderson / plain iteration, each as the slope of the time between two call
  (iteration) counts run back to back, so set-up costs and launch latency cancel alike (a single
  synchronised denoiser call is reported too, as ``denoiser_call_ms``); overhead % = (Anderson
  iteration - denoiser) / denoiser.
* ``train``: one training step (batch of 16 LR 48x48 x2 patches cut from Set5/Set14, MSE on Y, Adam)
  with the implicit backward (``implicit_fixed_point``) vs autograd unrolled through the same number
  of Anderson iterations; time per step and peak memory; the implicit step at two forced forward
  iteration counts shows memory independent of that count.
* ``eval``: MCNet+SRCNN and MCNet+RCAN on Set5 and Set14 at x2 and x4 under the project's protocol
  (scripts/evaluate.py: mod-crop HR, MATLAB-bicubic uint8 LR, Y-PSNR with basicsr, crop = scale):
  seconds per image (batch 1, CUDA-synchronised, after one warm-up image), peak memory, mean forward
  iterations, PSNR, max ``||Ax - b||``, and the compute bound ``DnCNN FLOPs x iterations / peak``.
  The reference row is the paper's setting (Anderson m = 5, 200 forward iterations).
* ``big``: a 1024x1024 output (LR 512x512 at x2) made from a real photo: timing, memory, iterations.

Solver configurations (``--configs``; the reference is always measured first):

    paper_200      Anderson m=5, lam=1e-4, 200 iterations (forced), float32            [reference]
    paper_tol1e-5  the paper's stopping rule: rel. residual 1e-5 or 200 iterations, float32
    tol1e-6        our test setting of the option files: 1e-6, max 300, float32
    tol1e-4        1e-4, max 100, float32
    fast_bf16      1e-4, max 100, backbone in bf16 autocast, channels_last
    fast_bf16_tf32 as fast_bf16 with TF32 convolutions (denoiser included)
    fast5_bf16     1e-5, max 200, backbone in bf16 autocast, channels_last
    paper_200_graph, graph_tol1e-5, graph_tol1e-4, graph5_bf16
                   as paper_200, paper_tol1e-5, tol1e-4, fast5_bf16 with ``cuda_graph: true`` (the iterations
                   replayed from CUDA graphs; where the map cannot be captured, eps > 0, they run eagerly and
                   the row says so)
    graph_tol2e-5  rel. residual 2e-5, max 200, float32, CUDA graphs
    graph_tol2e-5_autotune, graph_tol1e-5_autotune, paper_200_autotune, graph_tol2e-5_autotune_cl
                   as graph_tol2e-5, graph_tol1e-5, paper_200 with cuDNN autotuning (``cudnn.benchmark``) for that
                   row only; each new image size pays its tuning inside that image's time
    graph_tf32_it50, graph_tf32_cl_it50
                   tol 1e-5 / max 50 with TF32 convolutions (the denoiser twice as fast; its rounding keeps the
                   residual above 1e-5, so they run all 50), CUDA graphs, the second also channels_last

Run on the GPU (about 4 minutes on one H100 with these flags; ``--budget-s`` skips, and records as
skipped, whatever would start after that many seconds):

    python scripts/benchmark.py --device cuda --out-json docs/benchmark_h100.json --out-md docs/benchmarks.md

``--quick`` runs every section on CPU with tiny inputs and few iterations (for the tests). Data:
``<data-root>/<Set>/HR_mod<s>`` and ``LR_bicubic/X<s>`` (scripts/prepare_datasets.py), else made on
the fly from ``<hr-root>/<Set>/HR``. The markdown section lands between
``<!-- benchmark:begin -->`` and ``<!-- benchmark:end -->`` in ``--out-md``; the rest of the file is kept.
A configuration that fails is recorded with its error and the run goes on.
"""
import argparse
import copy
import logging
import math
import os
import os.path as osp
import platform
import statistics
import sys
import time
import traceback

import numpy as np
import torch
import yaml
from tqdm import tqdm

ROOT = osp.abspath(osp.join(osp.dirname(__file__), osp.pardir))
sys.path.insert(0, ROOT)
sys.path.insert(0, osp.join(ROOT, 'scripts'))
import mcnet_basicsr  # noqa: E402,F401
from basicsr.archs import build_network  # noqa: E402
from basicsr.metrics import calculate_psnr  # noqa: E402
from basicsr.utils import img2tensor, tensor2img  # noqa: E402
from atomic_io import write_json, write_text  # noqa: E402
from md_section import replace_section  # noqa: E402
from evaluate import IMG_EXT, load_weights, read_rgb  # noqa: E402

from mcnet_basicsr.deq import anderson_solve, fixed_point_solve  # noqa: E402
from mcnet_basicsr.ops import build_operator  # noqa: E402
from mcnet_basicsr.pretrained import weight_path  # noqa: E402
from mcnet_basicsr.utils.color import rgb_to_ycbcr, ycbcr_to_rgb  # noqa: E402

LOG = logging.getLogger('benchmark')
MD_SECTION = 'benchmark'  # <!-- benchmark:begin --> ... <!-- benchmark:end --> in the markdown file
SCHEMA_VERSION = 1
# SolverConfig requires tol > 0; no relative residual gets this low, so all max_iter iterations run
FORCED_TOL = 1e-30
PAPER = {'solver': 'anderson', 'm': 5, 'lam': 1e-4, 'tol': 1e-5, 'max_iter': 200}
PAPER_BACKWARD = {'solver': 'anderson', 'm': 5, 'lam': 1e-4, 'tol': 1e-5, 'max_iter': 80}
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
    # layers with a small beta (the run-13 x2 layer) need ~38 iterations to 1e-5 but are within 0.01 dB at 2e-5
    'graph_tol2e-5': {'label': 'tol 2e-5 / max 200, fp32, CUDA graphs',
                      'solver': dict(PAPER, tol=2e-5, cuda_graph=True)},
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
RCAN_DEFAULT = {'type': 'RCAN', 'num_in_ch': 3, 'num_out_ch': 3, 'num_feat': 64, 'num_group': 10, 'num_block': 20,
                'squeeze_factor': 16, 'res_scale': 1, 'img_range': 255., 'rgb_mean': [0.4488, 0.4371, 0.4040]}


# ---------------------------------------------------------------------------------------------- utilities
class Budget:
    """Wall-clock budget of the whole run: rows that would start after it are recorded as skipped."""

    def __init__(self, seconds):
        self.seconds, self.start = seconds, time.perf_counter()

    def exceeded(self):
        return self.seconds is not None and time.perf_counter() - self.start > self.seconds


def sync(device):
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def reset_peak(device):
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device) / 2**20
    return None


def peak_mb(device):
    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == 'cuda' else None


def median_ms(fn, device, repeats, warmup=1):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


class precision:
    """Context: TF32 on/off for cuDNN and CUDA matmuls, restored afterwards."""

    def __init__(self, tf32):
        self.tf32 = bool(tf32)

    def __enter__(self):
        self.saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = self.tf32

    def __exit__(self, *exc):
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = self.saved


def run_row(rows, section, name, budget, fn, **meta):
    """Run ``fn() -> dict`` as one row; errors and budget skips become rows too."""
    row = dict(section=section, name=name, **meta)
    if budget.exceeded():
        row.update(status='skipped', error=f'time budget of {budget.seconds:.0f} s exceeded')
        LOG.warning('%s %s: skipped (time budget)', section, name)
    else:
        try:
            row.update(fn())
            row.setdefault('status', 'ok')
        except Exception as err:  # a failing configuration must not stop the others
            row.update(status='error', error=f'{type(err).__name__}: {err}')
            LOG.error('%s %s failed:\n%s', section, name, traceback.format_exc())
            if isinstance(err, torch.cuda.OutOfMemoryError):
                torch.cuda.empty_cache()
    rows.append(row)
    return row


def dncnn_flops_per_pixel(denoiser):
    """FLOPs (2 x MACs) of one denoiser forward per output pixel, from its convolutions."""
    total = 0
    for mod in denoiser.modules():
        if isinstance(mod, torch.nn.Conv2d):
            kh, kw = mod.kernel_size
            sh, sw = mod.stride
            total += 2 * kh * kw * mod.in_channels * mod.out_channels // mod.groups // (sh * sw)
    return total


def device_name(device):
    return torch.cuda.get_device_name(device) if device.type == 'cuda' else f'cpu ({platform.machine()})'


# ---------------------------------------------------------------------------------------------- data
def load_pairs(data_root, shared_root, name, scale, limit, quick):
    """[(file, hr float32 HxWx3 BGR in [0,1], lq tensor 1x3xhxw RGB)] under the project's protocol."""
    hr_dir = osp.join(data_root, name, f'HR_mod{scale}')
    lr_dir = osp.join(data_root, name, 'LR_bicubic', f'X{scale}')
    pairs = []
    if osp.isdir(hr_dir) and osp.isdir(lr_dir):
        files = sorted(f for f in os.listdir(hr_dir) if f.lower().endswith(IMG_EXT))[:limit]
        for f in files:
            pairs.append((f, read_rgb(osp.join(hr_dir, f)), read_rgb(osp.join(lr_dir, f))))
    else:
        from prepare_datasets import bicubic_lr, list_images, mod_crop, read_hr
        src = osp.join(shared_root, name, 'HR')
        LOG.info('%s not prepared under %s; making x%d LR from %s', name, data_root, scale, src)
        for path in list_images(src)[:limit]:
            hr = mod_crop(read_hr(path), scale)
            lr = bicubic_lr(hr, scale)
            pairs.append((osp.basename(path), hr.astype(np.float32) / 255., lr.astype(np.float32) / 255.))
    out = []
    for f, hr, lr in pairs:
        if quick:  # aligned top-left crops keep the pipeline, not the numbers
            h = min(lr.shape[0], 48 // scale)
            lr, hr = lr[:h, :h], hr[:h * scale, :h * scale]
        out.append((f, hr, img2tensor(lr, bgr2rgb=True, float32=True)[None]))
    if not out:
        raise FileNotFoundError(f'no images for {name} x{scale} under {data_root} or {shared_root}')
    return out


def big_input(scale, quick):
    """A real photo at 1024x1024 HR (x2: LR 512x512): skimage's astronaut (512x512) upscaled by
    MATLAB bicubic x2, its LR the MATLAB-bicubic uint8 downscale, as for the test sets."""
    from basicsr.utils.matlab_functions import imresize as np_imresize
    from prepare_datasets import bicubic_lr
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
def read_option(path):
    with open(path) as f:
        return yaml.safe_load(f)


def build_mcnet(backbone, scale, device, quick):
    """(net, note) for 'srcnn' (options/test_mcnet_srcnn_x<s>.yml) or 'rcan' (test_mcnet_rcan_x<s>.yml)."""
    note = []
    if backbone == 'srcnn':
        opt = read_option(osp.join(ROOT, 'options', f'test_mcnet_srcnn_x{scale}.yml'))
        net_opt = copy.deepcopy(opt['network_g'])
        bpath = net_opt.get('backbone_path')
        if bpath and not osp.isfile(osp.join(ROOT, bpath)):
            net_opt['backbone_path'] = weight_path(f'srcnn_x{scale}.pth')
            note.append(f'{bpath} absent: our shipped SRCNN x{scale} instead')
        elif bpath:
            net_opt['backbone_path'] = osp.join(ROOT, bpath)
    else:
        # the official-size RCAN when its weights are here, else our compact RCAN (shipped weights)
        path = osp.join(ROOT, 'options', f'test_mcnet_rcan_x{scale}.yml')
        compact = osp.join(ROOT, 'options', f'test_mcnet_rcan_compact_x{scale}.yml')
        if osp.isfile(path) and osp.isfile(compact):
            official_bb = read_option(path)['network_g'].get('backbone_path') or ''
            compact_bb = read_option(compact)['network_g'].get('backbone_path') or ''
            if not osp.isfile(osp.join(ROOT, official_bb)) and osp.isfile(osp.join(ROOT, compact_bb)):
                path = compact
                note.append('our compact RCAN (the official weights are absent)')
        if osp.isfile(path):
            opt = read_option(path)
            net_opt = copy.deepcopy(opt['network_g'])
        else:
            opt = read_option(osp.join(ROOT, 'options', f'test_mcnet_srcnn_x{scale}.yml'))
            net_opt = copy.deepcopy(opt['network_g'])
            net_opt.update(backbone=dict(RCAN_DEFAULT, upscale=scale), backbone_input='lr', backbone_channels=3)
            net_opt.pop('backbone_path', None)
            note.append(f'{osp.relpath(path, ROOT)} absent: basicsr RCAN (10x20 blocks, 64 ch)')
        bpath = net_opt.get('backbone_path')
        if bpath and osp.isfile(osp.join(ROOT, bpath)):
            net_opt['backbone_path'] = osp.join(ROOT, bpath)
        else:
            net_opt.pop('backbone_path', None)
            note.append('timing only, random weights')
        if quick:  # a tiny random RCAN of the same type: the code path, not the numbers
            net_opt['backbone'].update(num_feat=8, num_group=1, num_block=1, squeeze_factor=4)
            net_opt.pop('backbone_path', None)
    pretrain = opt.get('path', {})
    if pretrain.get('pretrain_network_g') and not osp.isabs(pretrain['pretrain_network_g']):
        pretrain = dict(pretrain, pretrain_network_g=osp.join(ROOT, pretrain['pretrain_network_g']))
    if pretrain.get('pretrain_network_g') and not osp.isfile(pretrain['pretrain_network_g']):
        # the layer (DnCNN6 + beta) does not depend on the backbone: the shipped one times the same
        note.append(f'{osp.relpath(pretrain["pretrain_network_g"], ROOT)} absent: layer of the shipped '
                    f'mcnet_srcnn_x{scale}.pth')
        pretrain = {'pretrain_network_g': weight_path(f'mcnet_srcnn_x{scale}.pth'), 'param_key_g': 'params'}
    allow_tf32 = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    net = build_network(net_opt)
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = allow_tf32  # rows set it
    load_weights(net, pretrain)
    return net.eval().to(device), '; '.join(note)


class configured:
    """Context: a configuration (solver, backbone dtype, channels_last, TF32) applied to ``net``."""

    def __init__(self, net, cfg, quick):
        self.net, self.cfg, self.quick = net, cfg, quick

    def __enter__(self):
        solver = dict(self.cfg['solver'])
        if self.quick:
            solver['max_iter'] = min(solver['max_iter'], 4)
        self.saved = (self.net.forward_solver, self.net.backward_solver, self.net.backbone_dtype)
        self.net.set_solver(forward=solver)
        self.net.backbone_dtype = self.cfg.get('backbone_dtype')
        if self.cfg.get('channels_last'):
            self.net.to(memory_format=torch.channels_last)
        self.prec = precision(self.cfg.get('tf32', False))
        self.prec.__enter__()
        self.saved_cudnn_benchmark = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = bool(self.cfg.get('cudnn_benchmark', False))
        return self.net

    def __exit__(self, *exc):
        torch.backends.cudnn.benchmark = self.saved_cudnn_benchmark
        self.prec.__exit__(*exc)
        if self.cfg.get('channels_last'):
            self.net.to(memory_format=torch.contiguous_format)
        self.net.forward_solver, self.net.backward_solver, self.net.backbone_dtype = self.saved


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
                out = net(lq)
            sync(device)
            secs.append(time.perf_counter() - t0)
            stats = net.last_stats['forward']
            iters.append(float(stats.iterations.double().mean()))
            nfes.append(stats.nfe)
            graphed.append(stats.cuda_graph)
            eps.append(float(net.last_stats['eps']))
            y = rgb_to_ycbcr(out.double())[:, :1]
            fids.append(float(op.residual_norm(y, rgb_to_ycbcr(lq.double())[:, :1])[0]))
            if hr is not None:
                sr_img = tensor2img([out.detach().float().cpu().clone()])
                gt_img = (hr * 255.0).round().astype(np.uint8)
                psnrs.append(calculate_psnr(sr_img, gt_img, crop_border=scale, test_y_channel=True))
            # the solve evaluates the map nfe times, then once more for the output
            bound.append(flops_px * out.shape[-2] * out.shape[-1] * (stats.nfe + 1) / (peak_tflops * 1e12))
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
           'fidelity_max': float(np.max(fids)), 'eps_max': float(np.max(eps)), 'bound_seconds_per_image': float(np.mean(bound))}
    row['bound_fraction'] = row['bound_seconds_per_image'] / row['seconds_per_image']
    return row


def section_eval(args, device, budget, rows, backbones, flops_cache):
    for backbone in backbones:
        for scale in args.scales:
            try:
                net, note = build_mcnet(backbone, scale, device, args.quick)
            except Exception as err:
                for ds in args.datasets:
                    for key in args.configs:
                        rows.append(dict(section='eval', name=key, backbone=backbone, scale=scale, dataset=ds,
                                         status='error', error=f'building the network: {type(err).__name__}: {err}'))
                LOG.error('building MCNet+%s x%d failed:\n%s', backbone, scale, traceback.format_exc())
                continue
            flops_px = flops_cache.setdefault('dncnn', dncnn_flops_per_pixel(net.denoiser))
            for ds in args.datasets:
                try:
                    pairs = load_pairs(args.data_root, args.shared_root, ds, scale, args.limit, args.quick)
                except Exception as err:
                    for key in args.configs:
                        rows.append(dict(section='eval', name=key, backbone=backbone, scale=scale, dataset=ds,
                                         status='error', error=f'loading data: {type(err).__name__}: {err}'))
                    continue
                for key in tqdm(args.configs, desc=f'MCNet+{backbone} x{scale} {ds}', unit='cfg', leave=False):
                    run_row(rows, 'eval', key, budget,
                            lambda: evaluate_config(net, CONFIGS[key], pairs, scale, device, args.quick, flops_px,
                                                    args.peak_tflops),
                            label=CONFIGS[key]['label'], backbone=backbone, scale=scale, dataset=ds, note=note)
            if 'big' in args.sections and scale == 2:
                hr, lq = big_input(2, args.quick)
                for key in [k for k in BIG_CONFIGS if k in args.configs]:
                    run_row(rows, 'big', key, budget,
                            lambda: evaluate_config(net, CONFIGS[key], [('astronaut', None, lq)], 2, device,
                                                    args.quick, flops_px, args.peak_tflops),
                            label=CONFIGS[key]['label'], backbone=backbone, scale=2,
                            dataset=f'astronaut {lq.shape[-1] * 2}x{lq.shape[-2] * 2}', note=note)
            net = None  # free it before the next network is built
            if device.type == 'cuda':
                torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------- per iteration
def section_periter(args, device, budget, rows):
    net, note = build_mcnet('srcnn', 2, device, args.quick)
    hr, lq = big_input(2, True) if args.quick else big_input(2, False)
    if not args.quick:  # 512x512 HR: the centre of the 1024x1024 photo
        lq = lq[..., 128:384, 128:384]
    lq = lq.to(device)
    with torch.no_grad():
        w, _ = net.run_backbone(lq)
    b = rgb_to_ycbcr(lq)[:, :1]
    f, z0, eps = net.fixed_point_problem(w, b)
    x0 = z0[:, :1]
    flops_px = dncnn_flops_per_pixel(net.denoiser)
    n1, n2 = (2, 5) if args.quick else (10, 60)
    reps = 2 if args.quick else 10
    size = f'{w.shape[-1]}x{w.shape[-2]}'

    def back_to_back(fn, n):
        def run():
            for _ in range(n):
                fn()
        return run

    def slope_ms(fn):
        # like the solver rows: calls queued back to back, one sync; the slope between two counts is
        # the cost of one call in a pipeline (a single synchronised call adds its launch latency)
        t = [median_ms(back_to_back(fn, n), device, max(1, reps // 3)) for n in (n1, n2)]
        return (t[1] - t[0]) / (n2 - n1)

    def measure(tf32):
        with precision(tf32), torch.no_grad():
            den_call = median_ms(lambda: net.denoiser(x0), device, reps)
            den = slope_ms(lambda: net.denoiser(x0))
            proj = slope_ms(lambda: net.operator.project(x0, b, eps))
            fmap = slope_ms(lambda: f(z0))
            solves = {}
            for name, solver, graph in (('anderson', anderson_solve, False), ('fixed_point', fixed_point_solve, False),
                                        ('anderson_graph', anderson_solve, True)):
                t = [median_ms(lambda: solver(f, z0, tol=FORCED_TOL, max_iter=n, cuda_graph=graph), device,
                               max(1, reps // 3)) for n in (n1, n2)]
                solves[name] = (t[1] - t[0]) / (n2 - n1)
            graph_used = anderson_solve(f, z0, tol=FORCED_TOL, max_iter=n1, cuda_graph=True)[1].cuda_graph
        return {'hr_size': size, 'denoiser_ms': den, 'denoiser_call_ms': den_call, 'project_ms': proj, 'map_ms': fmap,
                'anderson_iter_ms': solves['anderson'], 'fixed_point_iter_ms': solves['fixed_point'],
                'anderson_graph_iter_ms': solves['anderson_graph'],
                'overhead_pct': 100 * (solves['anderson'] - den) / den,
                'overhead_graph_pct': 100 * (solves['anderson_graph'] - den) / den,
                'cuda_graph_used': graph_used,
                'map_overhead_pct': 100 * (fmap - den) / den,
                'denoiser_tflops': flops_px * w.shape[-1] * w.shape[-2] / (den * 1e-3) / 1e12,
                'flops_per_pixel': flops_px, 'note': note}

    for tf32 in (False, True):
        run_row(rows, 'periter', 'tf32' if tf32 else 'fp32', budget, lambda: measure(tf32))


# ---------------------------------------------------------------------------------------------- training
def anderson_unrolled(f, z0, iters, m, lam):
    """Anderson (same update as ``anderson_solve``) with autograd through every iteration.

    Evaluates ``f`` ``iters`` times and returns the last iterate fed to ``f`` (as the solver returns
    an iterate, not its image)."""
    n, shape = z0.shape[0], z0.shape
    x = z0.reshape(n, -1)
    xs, fs = [], []
    for k in range(iters):
        fx = f(x.reshape(shape)).reshape(n, -1)
        if k == iters - 1:
            break
        xs, fs = (xs + [x])[-m:], (fs + [fx])[-m:]
        if len(xs) == 1:
            x = fx
            continue
        X, Fh = torch.stack(xs, 1), torch.stack(fs, 1)
        G = (Fh - X).double()
        h = G.shape[1]
        gram = G @ G.transpose(1, 2) + (lam * G.square().sum(dim=(1, 2)) + 1e-30)[:, None, None] * torch.eye(
            h, dtype=G.dtype, device=G.device)
        a = torch.linalg.solve(gram, torch.ones(n, h, 1, dtype=G.dtype, device=G.device))
        a = (a / a.sum(dim=1, keepdim=True)).transpose(1, 2).to(x.dtype)
        x = (a @ Fh).squeeze(1)
    return x.reshape(shape)


def unrolled_forward(net, lq, iters):
    """MCNetArch.forward with the solve replaced by backprop through ``iters`` Anderson iterations."""
    w, cbcr = net.run_backbone(lq)
    b = rgb_to_ycbcr(lq)[:, :1]
    f, z0, _ = net.fixed_point_problem(w, b)
    z = anderson_unrolled(f, z0, iters, PAPER['m'], PAPER['lam'])
    x = f(z)[:, :1]
    return ycbcr_to_rgb(torch.cat([x, cbcr], dim=1))


def section_train(args, device, budget, rows):
    net, note = build_mcnet('srcnn', 2, device, args.quick)
    batch, patch = (2, 8) if args.quick else (16, 48)
    pairs = []
    for ds in args.datasets:
        pairs += load_pairs(args.data_root, args.shared_root, ds, 2, args.limit, False)
    lq, gt = train_patches(pairs, batch, patch, 2)
    lq, gt = lq.to(device), gt.to(device)
    gt_y = rgb_to_ycbcr(gt)[:, :1]
    # restored in place between rows: load_state_dict would reset the denoiser's power iteration,
    # whose re-convergence (dozens of iterations) would then land in the next row
    params = [p for p in net.parameters() if p.requires_grad]
    saved = [p.detach().clone() for p in params]

    def restore():
        with torch.no_grad():
            for p, s in zip(params, saved):
                p.copy_(s)
    steps = (1, 1) if args.quick else (2, 4)  # (warm-up, timed)
    short, long_ = (2, 4) if args.quick else (20, 100)
    bwd = dict(PAPER_BACKWARD, max_iter=4) if args.quick else PAPER_BACKWARD

    def step_fn(mode, iters, forward):
        def one():
            opt.zero_grad(set_to_none=True)
            out = unrolled_forward(net, lq, iters) if mode == 'unrolled' else net(lq)
            loss = torch.nn.functional.mse_loss(rgb_to_ycbcr(out)[:, :1], gt_y)
            loss.backward()
            opt.step()
            return loss

        restore()
        net.train()
        net.set_solver(forward=forward, backward=bwd)
        opt = torch.optim.Adam(params, lr=1e-6)
        try:
            with precision(False):
                for _ in range(steps[0]):
                    one()
                base = reset_peak(device)
                times, fwd_it, bwd_it = [], [], []
                for _ in range(steps[1]):
                    sync(device)
                    t0 = time.perf_counter()
                    loss = one()
                    sync(device)
                    times.append(time.perf_counter() - t0)
                    if mode == 'implicit':
                        fwd_it.append(float(net.last_stats['forward'].iterations.double().mean()))
                        bs = net.last_stats['backward'].stats
                        bwd_it.append(float(bs.iterations.double().mean()) if bs is not None else float('nan'))
        finally:
            net.eval()
            restore()
        return {'seconds_per_step': statistics.median(times), 'peak_mem_mb': peak_mb(device), 'base_mem_mb': base,
                'forward_iterations': float(np.mean(fwd_it)) if fwd_it else float(iters),
                'backward_iterations': float(np.mean(bwd_it)) if bwd_it else None, 'loss': float(loss),
                'batch': batch, 'lr_patch': patch, 'note': note}

    forced = lambda n: dict(PAPER, tol=FORCED_TOL, max_iter=n)  # noqa: E731
    paper = dict(PAPER, max_iter=4) if args.quick else PAPER
    plan = [(f'implicit_{short}', 'implicit', short, forced(short),
             f'implicit, {short} forward it. (forced), backward tol 1e-5 / max 80'),
            (f'implicit_{long_}', 'implicit', long_, forced(long_),
             f'implicit, {long_} forward it. (forced), backward tol 1e-5 / max 80'),
            ('implicit_paper', 'implicit', None, paper,
             'implicit, paper: forward tol 1e-5 / max 200, backward tol 1e-5 / max 80'),
            ('implicit_paper_graph', 'implicit', None, dict(paper, cuda_graph=True),
             'implicit, paper stopping, forward solves replayed from CUDA graphs'),
            (f'unrolled_{short}', 'unrolled', short, None, f'unrolled autograd through {short} Anderson it.'),
            (f'unrolled_{long_}', 'unrolled', long_, None, f'unrolled autograd through {long_} Anderson it.')]
    for name, mode, iters, forward, label in plan:
        run_row(rows, 'train', name, budget, lambda: step_fn(mode, iters, forward or PAPER), label=label, mode=mode)


# ---------------------------------------------------------------------------------------------- report
def fmt(v, spec='.3g'):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return '-'
    return format(v, spec)


def add_reference_columns(rows):
    """PSNR difference and speed-up of each eval/big row against the reference row of its group."""
    refs = {(r['section'], r.get('backbone'), r.get('scale'), r.get('dataset')): r for r in rows
            if r['name'] == REFERENCE and r.get('status') == 'ok'}
    for r in rows:
        ref = refs.get((r['section'], r.get('backbone'), r.get('scale'), r.get('dataset')))
        if r['section'] in ('eval', 'big') and r.get('status') == 'ok' and ref:
            r['speedup_vs_reference'] = ref['seconds_per_image'] / r['seconds_per_image']
            if r.get('psnr') is not None and ref.get('psnr') is not None:
                r['dpsnr_vs_reference'] = r['psnr'] - ref['psnr']


def status_cell(r):
    return '' if r.get('status') == 'ok' else f"{r.get('status')}: {r.get('error', '')}".replace('|', '/')


def markdown(result):
    meta, rows = result['meta'], result['rows']
    out = ['## MCNet end to end (`scripts/benchmark.py`)', '',
           f"Device: {meta['device']}; torch {meta['torch']}; {meta['command']}. Batch 1 per image, "
           'CUDA-synchronised, after one warm-up image per row; peak memory = `torch.cuda.max_memory_allocated` '
           f"(reset per row). Compute bound = DnCNN FLOPs ({meta['dncnn_flops_per_pixel']} per HR pixel) x HR "
           f"pixels x map evaluations / {meta['peak_tflops']} TFLOP/s ({meta['peak_tflops_note']}). "
           f"Reference row: `{REFERENCE}` (the paper's setting); speed-up and dPSNR are against it, same "
           'backbone, scale and set, same run.' + (' **Quick run (CPU, tiny inputs): numbers are not '
                                                   'meaningful.**' if meta['quick'] else ''), '']
    ev = [r for r in rows if r['section'] in ('eval', 'big')]
    if ev:
        out += ['### Test sets and a 1024x1024 output', '',
                '| backbone | set | scale | configuration | s/image | speed-up | peak MB | iterations (mean / max) '
                '| PSNR | dPSNR | max \\|\\|Ax-b\\|\\| | bound s/image | note |',
                '|---|---|---|---|---|---|---|---|---|---|---|---|---|']
        for r in ev:
            note = '; '.join(x for x in (r.get('note'), r.get('config_note'), status_cell(r)) if x)
            out.append(f"| {r.get('backbone')} | {r.get('dataset')} | x{r.get('scale')} | {r.get('label', r['name'])} "
                       f"| {fmt(r.get('seconds_per_image'), '.4f')} | {fmt(r.get('speedup_vs_reference'), '.1f')} "
                       f"| {fmt(r.get('peak_mem_mb'), '.0f')} | {fmt(r.get('iterations'), '.1f')} / "
                       f"{fmt(r.get('iterations_max'), '.0f')} | {fmt(r.get('psnr'), '.3f')} "
                       f"| {fmt(r.get('dpsnr_vs_reference'), '+.3f')} | {fmt(r.get('fidelity_max'), '.1e')} "
                       f"| {fmt(r.get('bound_seconds_per_image'), '.2g')} | {note} |")
        out.append('')
    pi = [r for r in rows if r['section'] == 'periter']
    if pi:
        out += ['### One iteration at 512x512 HR (x2, batch 1)', '',
                'Every time is a slope between two counts of back-to-back calls (denoiser, projection, map) or '
                'forced iterations (Anderson, plain), so launch latency and set-up cancel alike. '
                'Overhead = (Anderson iteration - denoiser) / denoiser (target <= 25%); the CUDA-graph columns replay '
                'the same Anderson iterations from captured graphs (`cuda_graph: true`; on CPU they run eagerly).', '',
                '| precision | denoiser ms | projection ms | map F ms | Anderson it. ms | plain it. ms | overhead '
                '| Anderson it. ms, CUDA graphs | overhead, CUDA graphs | denoiser TFLOP/s | note |',
                '|---|---|---|---|---|---|---|---|---|---|---|']
        for r in pi:
            out.append(f"| {r['name']} | {fmt(r.get('denoiser_ms'))} | {fmt(r.get('project_ms'))} | "
                       f"{fmt(r.get('map_ms'))} | {fmt(r.get('anderson_iter_ms'))} | "
                       f"{fmt(r.get('fixed_point_iter_ms'))} | {fmt(r.get('overhead_pct'), '.0f')}% | "
                       f"{fmt(r.get('anderson_graph_iter_ms'))} | {fmt(r.get('overhead_graph_pct'), '.0f')}% | "
                       f"{fmt(r.get('denoiser_tflops'))} | {status_cell(r)} |")
        out.append('')
    tr = [r for r in rows if r['section'] == 'train']
    if tr:
        out += ['### Training step (x2, MSE on Y, Adam)', '',
                '| backward | s/step | peak MB | forward it. | backward it. | batch x LR patch | note |',
                '|---|---|---|---|---|---|---|']
        for r in tr:
            out.append(f"| {r.get('label', r['name'])} | {fmt(r.get('seconds_per_step'), '.4f')} | "
                       f"{fmt(r.get('peak_mem_mb'), '.0f')} | {fmt(r.get('forward_iterations'), '.1f')} | "
                       f"{fmt(r.get('backward_iterations'), '.1f')} | {r.get('batch', '-')} x "
                       f"{r.get('lr_patch', '-')}^2 | {status_cell(r)} |")
        out.append('')
    out += [f"Reproduce: `{meta['command']}` ({meta['wall_seconds']:.0f} s). JSON: `{meta.get('out_json') or '-'}`."]
    return '\n'.join(out) + '\n'


def write_markdown(path, body):
    """Replace the benchmark section of ``path`` (or append it; a new file gets a title); other content is kept."""
    if not osp.exists(path):
        write_text(path, '# Benchmarks\n')
    replace_section(path, MD_SECTION, body)


# ---------------------------------------------------------------------------------------------- main
SECTIONS = ('periter', 'train', 'eval', 'big')


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--quick', action='store_true', help='CPU, tiny inputs, few iterations (tests)')
    p.add_argument('--device', default='auto', choices=['auto', 'cpu', 'cuda'])
    p.add_argument('--data-root', default=osp.join(ROOT, 'datasets'))
    p.add_argument('--hr-root', '--shared-root', dest='shared_root', default=osp.join(ROOT, 'datasets'),
                   help='HR images <hr-root>/<Set>/HR (scripts/fetch_assets.py puts them in datasets/), used when '
                   '--data-root lacks a prepared set')
    p.add_argument('--datasets', nargs='+', default=['Set5', 'Set14'])
    p.add_argument('--scales', nargs='+', type=int, default=[2, 4])
    p.add_argument('--configs', nargs='+', default=None, dest='configs_given', choices=list(CONFIGS),
                   help=f'eval configurations ({REFERENCE} is always included, first)')
    p.add_argument('--rcan-configs', nargs='+', default=['paper_200', 'paper_tol1e-5', 'tol1e-4', 'fast_bf16',
                                                         'fast_bf16_tf32'], choices=list(CONFIGS))
    p.add_argument('--sections', nargs='+', default=list(SECTIONS), choices=SECTIONS)
    p.add_argument('--skip-rcan', action='store_true', help='MCNet+SRCNN only')
    p.add_argument('--limit', type=int, default=None, help='first N images per set')
    p.add_argument('--peak-tflops', type=float, default=67.0,
                   help='device peak FLOP/s for the compute bound, in TFLOP/s (default 67: H100 SXM FP32, '
                        'non-tensor-core; H200 is the same)')
    p.add_argument('--budget-s', type=float, default=None,
                   help='skip (and record as skipped) rows that would start after this many seconds')
    p.add_argument('--threads', type=int, default=None, help='torch CPU threads')
    p.add_argument('--out-json', default=None)
    p.add_argument('--out-md', default=None, help='markdown file whose benchmark section is written/replaced')
    args = p.parse_args(argv)
    args.configs = args.configs_given or list(CONFIGS)
    if args.quick and args.configs_given is None:
        args.configs = args.rcan_configs = QUICK_CONFIGS
    args.configs = [REFERENCE] + [c for c in dict.fromkeys(args.configs) if c != REFERENCE]
    args.rcan_configs = [REFERENCE] + [c for c in dict.fromkeys(args.rcan_configs) if c != REFERENCE]
    if args.quick:
        args.device = 'cpu'
        args.limit = 1 if args.limit is None else args.limit
    return args


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(asctime)s %(levelname)s %(message)s')
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device('cuda' if args.device == 'auto' and torch.cuda.is_available() else
                          ('cpu' if args.device == 'auto' else args.device))
    torch.manual_seed(0)
    budget = Budget(args.budget_s)
    rows, flops_cache = [], {}
    t0 = time.perf_counter()
    if 'periter' in args.sections:
        try:
            section_periter(args, device, budget, rows)
        except Exception as err:
            rows.append(dict(section='periter', name='setup', status='error', error=f'{type(err).__name__}: {err}'))
            LOG.error('per-iteration section failed:\n%s', traceback.format_exc())
    if 'train' in args.sections:
        try:
            section_train(args, device, budget, rows)
        except Exception as err:
            rows.append(dict(section='train', name='setup', status='error', error=f'{type(err).__name__}: {err}'))
            LOG.error('training section failed:\n%s', traceback.format_exc())
    if 'eval' in args.sections or 'big' in args.sections:
        if 'eval' not in args.sections:
            args.datasets = []
        section_eval(args, device, budget, rows, ['srcnn'], flops_cache)
        if args.skip_rcan:
            rows.append(dict(section='eval', name='rcan', backbone='rcan', status='skipped', error='--skip-rcan'))
        else:
            srcnn_configs, args.configs = args.configs, args.rcan_configs
            section_eval(args, device, budget, rows, ['rcan'], flops_cache)
            args.configs = srcnn_configs
    add_reference_columns(rows)
    if 'dncnn' not in flops_cache:
        from mcnet_basicsr.archs.dncnn_arch import DnCNN
        flops_cache['dncnn'] = dncnn_flops_per_pixel(DnCNN())
    meta = {'schema_version': SCHEMA_VERSION, 'device': device_name(device), 'torch': torch.__version__,
            'quick': args.quick, 'command': 'python scripts/benchmark.py ' + ' '.join(sys.argv[1:] if argv is None
                                                                                       else argv),
            'peak_tflops': args.peak_tflops,
            'peak_tflops_note': 'given by --peak-tflops; default 67 = H100 SXM FP32 without tensor cores',
            'dncnn_flops_per_pixel': flops_cache['dncnn'], 'reference': REFERENCE,
            'configs': {k: {'label': v['label'], 'solver': v['solver'],
                            'backbone_dtype': str(v.get('backbone_dtype')), 'channels_last': v.get('channels_last', False),
                            'tf32': v.get('tf32', False)} for k, v in CONFIGS.items()},
            'wall_seconds': time.perf_counter() - t0, 'out_json': args.out_json}
    result = {'meta': meta, 'rows': rows}
    if args.out_json:
        write_json(args.out_json, result)
    md = markdown(result)
    if args.out_md:
        write_markdown(args.out_md, md)
    print(md)
    return result


if __name__ == '__main__':
    main()
