"""Speed-up of MCNet training from 1 to N GPUs at a fixed total batch (BasicSR's launcher, DDP).

Runs the same short training once per GPU count through our entry point -- 1 GPU as a plain
process (``CUDA_VISIBLE_DEVICES=0``, ``num_gpu: 1``), N GPUs through
``torchrun --standalone --nproc_per_node=N mcnet_basicsr/train.py --launcher pytorch`` -- with
``batch_size_per_gpu = total_batch / N``, no validation or checkpoint during training and one
validation at the end. From each BasicSR log it takes seconds per iteration (log timestamps between
iteration ``--warmup`` and the last one, so start-up, the first power iterations and cuDNN autotuning
are left out), the mean forward/backward solver iterations and the final validation PSNR/SSIM, and
writes a JSON record and a markdown table:

    python benchmarks/benchmark_ddp.py --json results/benchmark_ddp.json --md results/benchmark_ddp.md
    python benchmarks/benchmark_ddp.py --opt options/train_mcnet_srcnn_x2.yml --iters 60 --total-batch 32 --gpus 1 2

Needs the data and weights the option file names (``datasets/T91`` LMDBs, ``datasets/Set5``,
``experiments/pretrained_models/srcnn_955_imagenet_x2.pth``, ``mcnet_basicsr/weights/dncnn6_sigma_*.pth``;
``scripts/fetch_assets.py`` and ``scripts/prepare_datasets.py`` make the third-party ones).
``--set key:path=value`` passes more BasicSR ``--force_yml`` overrides (e.g. data roots).
"""
import argparse
import json
import os
import os.path as osp
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r'^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO: (.*)$')
ITER = re.compile(r'\[epoch:\s*\d+, iter:\s*([\d,]+), lr:')


def parse_log(text, warmup):
    """Seconds per iteration, mean solver iterations and last validation metrics from a BasicSR log."""
    stamps, logged = {}, {'fwd_iter': [], 'bwd_iter': [], 't_fwd': [], 't_bwd': [], 't_opt': []}
    metrics = {}
    for raw in text.splitlines():
        m = LINE.match(raw)
        msg = m.group(2) if m else raw  # BasicSR's metric lines ("\t # psnr: ...") continue a message
        it = ITER.search(msg) if m else None
        if it:
            when = datetime.strptime(m.group(1), '%Y-%m-%d %H:%M:%S,%f')
            i = int(it.group(1).replace(',', ''))
            stamps[i] = when
            for key in logged:
                found = re.search(rf'\b{key}: ([-+\d.e]+)', msg)
                if found:
                    logged[key].append((i, float(found.group(1))))
            continue
        for key in ('psnr', 'ssim'):
            found = re.match(rf'\s*# {key}: ([\d.]+)', msg)
            if found:
                metrics[key] = float(found.group(1))
        found = re.search(r'fidelity_float .* mean ([-+\d.e]+), max ([-+\d.e]+)', msg)
        if found:
            metrics['fidelity_mean'], metrics['fidelity_max'] = float(found.group(1)), float(found.group(2))
    if not stamps:
        raise ValueError('no iteration lines in the log (print_freq larger than the run?)')
    last = max(stamps)
    first = max((i for i in stamps if i <= warmup), default=min(stamps))
    if last == first:
        raise ValueError(f'need logged iterations after --warmup {warmup}; logged: {sorted(stamps)}')
    sec_per_iter = (stamps[last] - stamps[first]).total_seconds() / (last - first)

    def mean(key):  # over the timed iterations
        values = [v for i, v in logged[key] if i > first]
        return sum(values) / len(values) if values else None

    return {
        'sec_per_iter': sec_per_iter, 'timed_iters': [first, last],
        'fwd_iter_mean': mean('fwd_iter'), 'bwd_iter_mean': mean('bwd_iter'),
        # seconds per step of the forward solve, the loss + implicit backward (+ all-reduce), the optimizer
        # (train.log_step_times; None without it)
        'step_times': {k: mean(k) for k in ('t_fwd', 't_bwd', 't_opt')},
        **metrics
    }


def run_one(args, ngpu, cuda):
    name = f'{args.name}_{ngpu}gpu'
    batch = args.total_batch // ngpu
    force = [f'name={name}', f'train:total_iter={args.iters}', f'datasets:train:batch_size_per_gpu={batch}',
             f'train:scheduler:milestones=[{10 * args.iters}]', f'val:val_freq={10 * args.iters}',
             f'logger:print_freq={args.print_freq}', f'logger:save_checkpoint_freq={10 * args.iters}',
             'logger:use_tb_logger=false', *args.set]
    train_py = str(REPO_ROOT / 'mcnet_basicsr' / 'train.py')
    env = dict(os.environ)
    env.setdefault('OMP_NUM_THREADS', '1')  # what torchrun sets for its workers: the same for every run
    if ngpu == 1:
        env['CUDA_VISIBLE_DEVICES'] = env.get('CUDA_VISIBLE_DEVICES', '0').split(',')[0]
        cmd = [sys.executable, train_py, '-opt', args.opt, '--force_yml', f'num_gpu={int(cuda)}', *force]
    else:
        # torchrun of this interpreter (a `torchrun` on PATH may belong to another environment)
        cmd = [sys.executable, '-m', 'torch.distributed.run', '--standalone', f'--nproc_per_node={ngpu}', train_py,
               '-opt', args.opt, '--launcher', 'pytorch', '--force_yml', *force]
    exp = Path(args.root) / 'experiments' / name
    if exp.exists():  # BasicSR would rename it to *_archived_*; a benchmark starts clean
        shutil.rmtree(exp)
    print('$', ' '.join(cmd), flush=True)
    start = time.time()
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=args.timeout)
    wall = time.time() - start
    if proc.returncode != 0:
        raise SystemExit(f'{ngpu}-GPU run failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}')
    logs = sorted(exp.glob(f'train_{name}_*.log'), key=osp.getmtime)
    if not logs:
        raise SystemExit(f'no log in {exp}:\n{proc.stderr[-4000:]}')
    rec = {'gpus': ngpu, 'batch_per_gpu': batch, 'total_batch': batch * ngpu, 'iters': args.iters,
           'wall_s': round(wall, 1), 'log': str(logs[-1]), **parse_log(logs[-1].read_text(), args.warmup)}
    rec['images_per_s'] = rec['total_batch'] / rec['sec_per_iter']
    print(json.dumps(rec), flush=True)
    return rec


def markdown(records, device, opt):
    base = records[0]['sec_per_iter']
    rows = ['| GPUs | batch/GPU | s/iter | images/s | speed-up | fwd iters | bwd iters | s fwd / bwd / opt | val PSNR '
            '| val SSIM | wall s |', '|---|---|---|---|---|---|---|---|---|---|---|']

    def fmt(v, f):
        return '-' if v is None else format(v, f)

    def steps(r):
        t = r.get('step_times') or {}
        return ' / '.join(fmt(t.get(k), '.3f') for k in ('t_fwd', 't_bwd', 't_opt'))

    for r in records:
        rows.append(f"| {r['gpus']} | {r['batch_per_gpu']} | {r['sec_per_iter']:.3f} | {r['images_per_s']:.0f} | "
                    f"{base / r['sec_per_iter']:.2f}x | {fmt(r['fwd_iter_mean'], '.1f')} | "
                    f"{fmt(r['bwd_iter_mean'], '.1f')} | {steps(r)} | {fmt(r.get('psnr'), '.2f')} | "
                    f"{fmt(r.get('ssim'), '.4f')} | "
                    f"{r['wall_s']:.0f} |")
    r0 = records[0]
    head = (f'MCNet training, `{opt}`, total batch {r0["total_batch"]}, {r0["iters"]} iterations '
            f'(s/iter timed from iteration {r0["timed_iters"][0]} to {r0["timed_iters"][1]}), {device}; '
            f'PSNR/SSIM: validation after the last iteration.\n\n')
    return head + '\n'.join(rows) + '\n'


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--opt', default='options/train_mcnet_srcnn_x2.yml')
    parser.add_argument('--gpus', type=int, nargs='+', default=[1, 2])
    parser.add_argument('--iters', type=int, default=60)
    parser.add_argument('--total-batch', type=int, default=32)
    parser.add_argument('--print-freq', type=int, default=10)
    parser.add_argument('--warmup', type=int, default=20, help='time from this (logged) iteration on')
    parser.add_argument('--name', default='benchmark_ddp')
    parser.add_argument('--set', action='append', default=[], metavar='KEY:PATH=VALUE',
                        help='extra BasicSR --force_yml entry (repeatable)')
    parser.add_argument('--root', default=str(REPO_ROOT), help='where train.py writes experiments/ (repo root)')
    parser.add_argument('--timeout', type=int, default=300, help='seconds per run')
    parser.add_argument('--json', default='results/benchmark_ddp.json')
    parser.add_argument('--md', default='results/benchmark_ddp.md')
    args = parser.parse_args()
    for n in args.gpus:
        if args.total_batch % n:
            parser.error(f'--total-batch {args.total_batch} is not divisible by {n} GPUs')
    if args.print_freq > args.iters:
        parser.error('--print-freq must not exceed --iters')

    import torch
    device = (f'{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}' if torch.cuda.is_available() else
              'CPU (gloo)')
    records = [run_one(args, n, torch.cuda.is_available()) for n in args.gpus]
    base = records[0]['sec_per_iter']
    for r in records:
        r['speedup'] = base / r['sec_per_iter']
    out = {'device': device, 'opt': args.opt, 'torch': torch.__version__, 'records': records}
    for path in (args.json, args.md):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + '\n')
    table = markdown(records, device, args.opt)
    Path(args.md).write_text(table)
    print(table)


if __name__ == '__main__':
    main()
