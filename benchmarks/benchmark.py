"""Benchmark MCNet end to end on one device: speed, memory, iterations and PSNR side by side.

Sections (all in one run, so every number of a row is comparable with the reference row):

* ``periter``: at 512x512 HR (x2, a real photo), one DnCNN6 forward vs one projection vs one full fixed-point
  map vs one Anderson / plain iteration, each as the slope of the time between two call (iteration) counts run
  back to back, so set-up costs and launch latency cancel; overhead % = (Anderson iteration - denoiser) / denoiser.
* ``train``: one training step of the arch (batch of 16 LR 48x48 x2 patches cut from Set5/Set14, MSE on Y,
  Adam, implicit backward) at two forced forward iteration counts (memory independent of the count) and with
  the paper's stopping rule; time per step and peak memory.
* ``eval``: MCNet+SRCNN and MCNet+RCAN on Set5 and Set14 at x2 and x4 under the project's protocol: seconds
  per image (batch 1, CUDA-synchronised, after one warm-up image), peak memory, mean forward iterations, PSNR
  (BasicSR's RGB-uint8 Y-PSNR), max ``||Ax - b||`` and the compute bound ``DnCNN FLOPs x iterations / peak``.
  The reference row is the paper's setting (Anderson m = 5, 200 forward iterations).
* ``big``: a 1024x1024 output (LR 512x512 at x2) made from a real photo: timing, memory, iterations.

Networks: ``options/test_mcnet_srcnn_x<s>.yml`` (``--srcnn official``: the converted official SRCNN it names;
``--srcnn ours``: our shipped SRCNN) and ``options/test_mcnet_rcan_compact_x<s>.yml`` (``--rcan official``:
``test_mcnet_rcan_x<s>.yml``). Missing weights are an error, never a silent substitute. Configurations
(``--configs``): see ``CONFIGS``; the reference ``paper_200`` is always measured first.

    python benchmarks/benchmark.py --device cuda --out-json benchmarks/records/benchmark_h100.json \
        --out-md docs/benchmarks.md

``--quick`` runs every section on CPU with tiny inputs and few iterations (for the tests). Data:
``<data-root>/<Set>/HR_mod<s>`` and ``LR_bicubic/X<s>`` (scripts/prepare_datasets.py), or, with ``--hr-root``,
made on the fly from ``<hr-root>/<Set>/HR``. The markdown section lands between ``<!-- benchmark:begin -->``
and ``<!-- benchmark:end -->`` in ``--out-md``; the rest of the file is kept. ``--budget-s`` records rows that
would start after that many seconds as skipped.
"""
import argparse
import logging
import math
import os.path as osp
import sys
import time

import mcnet_basicsr  # noqa: F401  (first: the torchvision alias basicsr 1.4.2 needs)  # isort: split

import numpy as np
import torch
from basicsr.archs import build_network
from tqdm import tqdm

from benchmarking import (BIG_CONFIGS, CONFIGS, FORCED_TOL, PAPER, PAPER_BACKWARD, QUICK_CONFIGS, REFERENCE, Budget,
                          big_input, evaluate_config, load_pairs, run_row, train_patches)
from mcnet_basicsr.deq import anderson_solve, fixed_point_solve
from mcnet_basicsr.evaluation.evaluate import load_weights, read_option, resolve_device
from mcnet_basicsr.utils.color import rgb_to_ycbcr
from mcnet_basicsr.utils.files import replace_section, write_json, write_text
from mcnet_basicsr.utils.precision import tf32
from mcnet_basicsr.zoo.pretrained import weight_path
from timing import conv_flops_per_pixel, device_name, median_ms, peak_mb, reset_peak, sync

ROOT = osp.abspath(osp.join(osp.dirname(__file__), osp.pardir))
LOG = logging.getLogger('benchmark')
MD_SECTION = 'benchmark'  # <!-- benchmark:begin --> ... <!-- benchmark:end --> in the markdown file
SCHEMA_VERSION = 1
MCNET_OPTIONS = {('srcnn', 'official'): 'test_mcnet_srcnn_x{s}.yml', ('srcnn', 'ours'): 'test_mcnet_srcnn_x{s}.yml',
                 ('srcnn', 'official_start'): 'test_mcnet_start_srcnn_x{s}.yml', ('rcan', 'official'):
                 'test_mcnet_rcan_x{s}.yml', ('rcan', 'compact'): 'test_mcnet_rcan_compact_x{s}.yml'}


def build_mcnet(backbone, weights, scale, device, quick):
    """(net, note): MCNet of ``options/MCNET_OPTIONS[backbone, weights]``; missing weights raise, naming the file."""
    opt = read_option(osp.join(ROOT, 'options', MCNET_OPTIONS[backbone, weights].format(s=scale)))
    net_opt, note = opt['network_g'], ''
    if backbone == 'srcnn' and weights == 'ours':
        net_opt['backbone']['path'], note = weight_path(f'srcnn_x{scale}.pth'), f'our shipped SRCNN x{scale}'
    if quick and backbone == 'rcan':  # a tiny random RCAN of the same type: the code path, not the numbers
        net_opt['backbone'] = {'net': {'type': 'RCAN', 'num_in_ch': 3, 'num_out_ch': 3, 'num_feat': 8, 'num_group': 1,
                                       'num_block': 1, 'squeeze_factor': 4, 'upscale': scale}}
        note = 'tiny random RCAN (quick run)'
    path_opt = dict(opt.get('path', {}))
    for node, key in ((net_opt['backbone'], 'path'), (net_opt.get('start') or {}, 'path'),
                      (path_opt, 'pretrain_network_g')):
        if node.get(key):
            node[key] = osp.join(ROOT, node[key])
            if not osp.isfile(node[key]):
                raise FileNotFoundError(f'{MCNET_OPTIONS[backbone, weights].format(s=scale)}: {key} {node[key]} '
                                        'is missing (see README: backbone weights)')
    net = build_network(net_opt)
    load_weights(net, path_opt)
    return net.eval().to(device), note


def section_eval(args, device, budget, rows, backbone, weights, configs, flops_cache):
    for scale in args.scales:
        net, note = build_mcnet(backbone, weights, scale, device, args.quick)
        flops_px = flops_cache.setdefault('dncnn', conv_flops_per_pixel(net.denoiser))
        for ds in args.datasets:
            pairs = load_pairs(args.data_root, args.hr_root, ds, scale, args.limit, args.quick)
            for key in tqdm(configs, desc=f'MCNet+{backbone} x{scale} {ds}', unit='cfg', leave=False):
                run_row(rows, 'eval', key, budget,
                        lambda: evaluate_config(net, CONFIGS[key], pairs, scale, device, args.quick, flops_px,
                                                args.peak_tflops),
                        label=CONFIGS[key]['label'], backbone=backbone, scale=scale, dataset=ds, note=note)
        if 'big' in args.sections and scale == 2:
            hr, lq = big_input(2, args.quick)
            for key in [k for k in BIG_CONFIGS if k in configs]:
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
    net, note = build_mcnet('srcnn', args.srcnn, 2, device, args.quick)
    hr, lq = big_input(2, True) if args.quick else big_input(2, False)
    if not args.quick:  # 512x512 HR: the centre of the 1024x1024 photo
        lq = lq[..., 128:384, 128:384]
    lq = lq.to(device)
    with torch.no_grad():
        w, _ = net.run_backbone(lq)
    b = rgb_to_ycbcr(lq)[:, :1]
    f, z0, eps = net.fixed_point_problem(w, b)
    x0 = z0[:, :1]
    flops_px = conv_flops_per_pixel(net.denoiser)
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

    def measure(use_tf32):
        with tf32(use_tf32), torch.no_grad():
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

    for use_tf32 in (False, True):
        run_row(rows, 'periter', 'tf32' if use_tf32 else 'fp32', budget, lambda: measure(use_tf32))


# ---------------------------------------------------------------------------------------------- training
def section_train(args, device, budget, rows):
    net, note = build_mcnet('srcnn', args.srcnn, 2, device, args.quick)
    batch, patch = (2, 8) if args.quick else (16, 48)
    pairs = []
    for ds in args.datasets:
        pairs += load_pairs(args.data_root, args.hr_root, ds, 2, args.limit, False)
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

    def step_fn(iters, forward):
        def one():
            opt.zero_grad(set_to_none=True)
            out, info = net.run(lq)
            loss = torch.nn.functional.mse_loss(rgb_to_ycbcr(out)[:, :1], gt_y)
            loss.backward()
            opt.step()
            return loss, info

        restore()
        net.train()
        opt = torch.optim.Adam(params, lr=1e-6)
        try:
            # the backward solve runs in loss.backward(), outside the arch's own TF32 scope
            with tf32(False), net.settings(solver={'forward': forward, 'backward': bwd}):
                for _ in range(steps[0]):
                    one()
                base = reset_peak(device)
                times, fwd_it, bwd_it = [], [], []
                for _ in range(steps[1]):
                    sync(device)
                    t0 = time.perf_counter()
                    loss, info = one()
                    sync(device)
                    times.append(time.perf_counter() - t0)
                    fwd_it.append(float(info['forward'].iterations.double().mean()))
                    bs = info['backward'].stats
                    bwd_it.append(float(bs.iterations.double().mean()) if bs is not None else float('nan'))
        finally:
            net.eval()
            restore()
        return {'seconds_per_step': float(np.median(times)), 'peak_mem_mb': peak_mb(device), 'base_mem_mb': base,
                'forward_iterations': float(np.mean(fwd_it)), 'backward_iterations': float(np.mean(bwd_it)),
                'loss': float(loss.detach()),
                'batch': batch, 'lr_patch': patch, 'note': note}

    forced = lambda n: dict(PAPER, tol=FORCED_TOL, max_iter=n)  # noqa: E731
    paper = dict(PAPER, max_iter=4) if args.quick else PAPER
    plan = [(f'implicit_{short}', short, forced(short),
             f'implicit, {short} forward it. (forced), backward tol 1e-5 / max 80'),
            (f'implicit_{long_}', long_, forced(long_),
             f'implicit, {long_} forward it. (forced), backward tol 1e-5 / max 80'),
            ('implicit_paper', None, paper, 'implicit, paper: forward tol 1e-5 / max 200, backward tol 1e-5 / max 80'),
            ('implicit_paper_graph', None, dict(paper, cuda_graph=True),
             'implicit, paper stopping, forward solves replayed from CUDA graphs')]
    for name, iters, forward, label in plan:
        run_row(rows, 'train', name, budget, lambda: step_fn(iters, forward), label=label, mode='implicit')


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
    out = ['## MCNet end to end (`benchmarks/benchmark.py`)', '',
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
    p.add_argument('--hr-root', help='make the LR from HR images <hr-root>/<Set>/HR instead of reading --data-root')
    p.add_argument('--srcnn', default='official', choices=['official', 'ours', 'official_start'], help="SRCNN "
                   "backbone: the converted official one the option file names, our shipped one, or the official one "
                   "with the learned start of test_mcnet_start_srcnn_x<s>.yml")
    p.add_argument('--rcan', default='compact', choices=['official', 'compact'],
                   help='RCAN backbone: the official-size one (converted weights needed) or our shipped compact one')
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
    device = resolve_device(args.device)
    torch.manual_seed(0)
    budget = Budget(args.budget_s)
    rows, flops_cache = [], {}
    t0 = time.perf_counter()
    if 'periter' in args.sections:
        section_periter(args, device, budget, rows)
    if 'train' in args.sections:
        section_train(args, device, budget, rows)
    if 'eval' in args.sections or 'big' in args.sections:
        if 'eval' not in args.sections:
            args.datasets = []
        section_eval(args, device, budget, rows, 'srcnn', args.srcnn, args.configs, flops_cache)
        if args.skip_rcan:
            rows.append(dict(section='eval', name='rcan', backbone='rcan', status='skipped', error='--skip-rcan'))
        else:
            section_eval(args, device, budget, rows, 'rcan', args.rcan, args.rcan_configs, flops_cache)
    add_reference_columns(rows)
    if 'dncnn' not in flops_cache:
        from mcnet_basicsr.archs.dncnn_arch import DnCNN
        flops_cache['dncnn'] = conv_flops_per_pixel(DnCNN())
    meta = {'schema_version': SCHEMA_VERSION, 'device': device_name(device), 'torch': torch.__version__,
            'quick': args.quick,
            'command': 'python benchmarks/benchmark.py ' + ' '.join(sys.argv[1:] if argv is None else argv),
            'peak_tflops': args.peak_tflops,
            'peak_tflops_note': 'given by --peak-tflops; default 67 = H100 SXM FP32 without tensor cores',
            'dncnn_flops_per_pixel': flops_cache['dncnn'], 'reference': REFERENCE,
            'configs': {k: {'label': v['label'], 'solver': v['solver'], 'backbone_dtype': str(v.get('backbone_dtype')),
                            'channels_last': v.get('channels_last', False), 'tf32': v.get('tf32', False)}
                        for k, v in CONFIGS.items()},
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
