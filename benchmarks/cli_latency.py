"""Latency of ``mcnet-sr`` in fresh processes: process start to file written, and where the time goes.

:func:`measure_cli_latency` runs, per repeat, ``python -c "import torch"`` (the floor every torch program pays on
the machine), the real command, and a breakdown in one process that calls the functions ``mcnet-sr`` runs, in its
order: interpreter start-up, ``import torch``, the other imports, the model (weights read, spectral norms), the
projection's set-up for a new image size, the image (read, backbone, solve, write) and the same image once more
(everything warm: the difference is what a first image of a size pays). ``benchmarks/benchmark_cli.py`` is its
command line. It measures the checkout this folder belongs to (the subprocesses put its root first on PYTHONPATH).
"""
import json
import os
import os.path as osp
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]  # the checkout: benchmarks/ sits beside mcnet_basicsr/
STAGES = ('interpreter', 'torch', 'package', 'model', 'setup', 'image', 'image_again')

# what the console script runs (setup.py: mcnet-sr = mcnet_basicsr.cli.main:console_main), without needing it installed
CLI = 'from mcnet_basicsr.cli.main import console_main; console_main()'

# The breakdown: mcnet-sr's own functions, timed in its order (mcnet_basicsr.cli.inference.run / process_image).
BREAKDOWN = r'''
import json, os, sys, time
t = {'start': time.time()}
import torch
t['torch'] = time.time()
from mcnet_basicsr.cli import main as cli_main
from mcnet_basicsr.cli import options as cli_options
inference = cli_main.load_inference()
t['package'] = time.time()
args = cli_options.parse_args(sys.argv[1:])
device = inference.resolve_device(args.device)
measurement = inference.resolve_measurement(args)
model = inference.prepare_model(args, measurement, device)
if device.type == 'cuda':
    torch.cuda.synchronize()
t['model'] = time.time()
img = inference.read_image(args.inputs[0])
h, w = img.shape[:2]
with torch.no_grad():  # the projection's factors for this size and the layer's radius, in the solve's float32 and
    # the final projection's float64 (the solve would build them on its first call)
    b = torch.zeros(1, 1, h, w, device=device, dtype=torch.float64)
    eps = model.consistency_radius(b)
    hr = torch.zeros(1, 1, h * args.scale, w * args.scale, device=device, dtype=torch.float64)
    model.operator.project(hr, b, eps)
    model.operator.project(hr.float(), b.float(), eps)
if device.type == 'cuda':
    torch.cuda.synchronize()
t['setup'] = time.time()
os.makedirs(args.output, exist_ok=True)
for key in ('image', 'image_again'):
    row = {'input': args.inputs[0]}
    inference.process_image(row, args, model, device, {}, 1, measurement)
    t[key] = time.time()
print(json.dumps({'stamps': t, 'iterations': row['iterations']}), flush=True)
os._exit(0)  # as cli_main.console_main ends
'''


def _run(cmd, env):
    start = time.time()
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    end = time.time()
    if proc.returncode != 0:
        raise SystemExit(f'failed ({proc.returncode}): {" ".join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}')
    return start, end, proc.stdout


def measure_cli_latency(photo, out_dir, scale=2, backbone='srcnn', device='auto', repeats=3):
    """Medians and per-repeat seconds of ``mcnet-sr photo -o out_dir --scale S`` (see the module docstring)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get('PYTHONPATH')])))
    common = [str(photo), '-o', str(out_dir), '--scale', str(scale), '--backbone', backbone, '--device', device,
              '--force']
    out_file = Path(out_dir) / f'{Path(photo).stem}_x{scale}.png'
    torch_s, cli_written, cli_exit, parts = [], [], [], []
    for _ in range(repeats):
        start, end, _ = _run([sys.executable, '-c', 'import torch'], env)
        torch_s.append(end - start)
        if out_file.exists():
            out_file.unlink()
        start, end, _ = _run([sys.executable, '-c', CLI, *common], env)
        cli_written.append(osp.getmtime(out_file) - start)
        cli_exit.append(end - start)
        start, end, stdout = _run([sys.executable, '-c', BREAKDOWN, *common], env)
        rec = json.loads(stdout.strip().splitlines()[-1])
        stamps = [start] + [rec['stamps'][k] for k in ('start', ) + STAGES[1:]]
        part = {label: stamps[i + 1] - stamps[i] for i, label in enumerate(STAGES)}
        part.update(exit=end - stamps[-1], iterations=rec['iterations'])
        parts.append(part)
    med = statistics.median
    return {'repeats': repeats, 'import_torch_s': torch_s, 'cli_to_file_written_s': cli_written,
            'cli_to_exit_s': cli_exit, 'breakdown_s': parts,
            'median': {'import_torch_s': med(torch_s), 'cli_to_file_written_s': med(cli_written),
                       'cli_to_exit_s': med(cli_exit), 'cli_minus_import_torch_s': med(cli_written) - med(torch_s),
                       **{k: med(p[k] for p in parts) for k in parts[0]}}}
