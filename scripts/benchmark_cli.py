"""Latency of ``mcnet-sr`` on one photo: process start to file written, against ``import torch``, and where it goes.

Each measurement is a fresh process, as a user runs the command (``--repeats`` times, medians reported):

* ``python -c "import torch"``: the floor every torch program pays on this machine;
* ``mcnet-sr <photo> -o <dir> --scale S --force``: process start to the output file written (its mtime) and
  to exit;
* a breakdown, in one process that calls the functions ``mcnet-sr`` runs, in its order: interpreter start-up,
  the heavy imports (torch, basicsr, OpenCV, the package), the model (weights read, spectral norms), the
  projection's set-up for a new image size, then the image itself (read, backbone, solve, write), and the
  same image once more (everything warm: the difference is what a first image of a size pays).

The photo is scikit-image's astronaut (512 x 512, RGB; ``--size`` resizes it), so nothing needs downloading::

    python scripts/benchmark_cli.py --device cuda --scale 2 --json docs/records/cli_latency_h100.json
"""
import argparse
import json
import os
import os.path as osp
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

# what the console script runs (setup.py: mcnet-sr = mcnet_sr_cli:console_main), without needing it installed
CLI = 'import mcnet_sr_cli; mcnet_sr_cli.console_main()'

# The breakdown: mcnet-sr's own functions, timed in its order (mcnet_basicsr.inference.run / process_image).
BREAKDOWN = r'''
import json, os, sys, time
t = {'start': time.time()}
import torch
t['torch'] = time.time()
import mcnet_sr_cli
inference = mcnet_sr_cli.load_inference()
t['package'] = time.time()
args = mcnet_sr_cli.parse_args(sys.argv[1:])
device = inference.resolve_device(args.device)
model = inference.get_model(args.scale, device, args.backbone_weights, args.weights, args.backbone)
model.eps, model.eps_rms = None, inference.default_eps_rms(args.backbone)
model.set_solver(forward={'preset': 'fast', 'tol': args.tol, 'max_iter': args.iters, 'cuda_graph': True})
if device.type == 'cuda':
    torch.cuda.synchronize()
t['model'] = time.time()
img = inference.read_image(args.inputs[0])
h, w = img.shape[:2]
with torch.no_grad():  # the projection's matrices for this size (the solve would build them on its first call)
    hr = torch.zeros(1, 1, h * args.scale, w * args.scale, device=device, dtype=torch.float64)
    model.operator.project(hr, torch.zeros(1, 1, h, w, device=device, dtype=torch.float64), 1e-3)
    model.operator.project(hr.float(), torch.zeros(1, 1, h, w, device=device), 1e-3)
if device.type == 'cuda':
    torch.cuda.synchronize()
t['setup'] = time.time()
os.makedirs(args.output, exist_ok=True)
for key in ('image', 'image_again'):
    row = {'input': args.inputs[0]}
    inference.process_image(row, args, model, device, {}, 1)
    t[key] = time.time()
print(json.dumps({'stamps': t, 'iterations': row['iterations']}), flush=True)
os._exit(0)  # as mcnet_sr_cli.console_main ends
'''


def run(cmd, env):
    start = time.time()
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    end = time.time()
    if proc.returncode != 0:
        raise SystemExit(f'failed ({proc.returncode}): {" ".join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}')
    return start, end, proc.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--scale', type=int, default=2)
    parser.add_argument('--backbone', default='srcnn')
    parser.add_argument('--device', default='auto', choices=('auto', 'cpu', 'cuda'))
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--size', type=int, default=512, help='side of the photo (the astronaut resized; default 512)')
    parser.add_argument('--json', default=None, help='write the record here')
    args = parser.parse_args()

    from skimage import data  # the photo; imported here only (the timed processes are separate)
    import cv2
    tmp = Path(tempfile.mkdtemp(prefix='mcnet_cli_bench_'))
    photo = tmp / 'astronaut.png'
    img = data.astronaut()[:, :, ::-1]
    if args.size != img.shape[0]:
        img = cv2.resize(img, (args.size, args.size), interpolation=cv2.INTER_AREA)
    cv2.imwrite(str(photo), img)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get('PYTHONPATH')])))
    common = [str(photo), '-o', str(tmp / 'out'), '--scale', str(args.scale), '--backbone', args.backbone,
              '--device', args.device, '--force']
    out_file = tmp / 'out' / f'astronaut_x{args.scale}.png'

    torch_s, cli_written, cli_exit, parts = [], [], [], []
    for _ in range(args.repeats):
        start, end, _ = run([sys.executable, '-c', 'import torch'], env)
        torch_s.append(end - start)
        if out_file.exists():
            out_file.unlink()
        start, end, _ = run([sys.executable, '-c', CLI, *common], env)
        cli_written.append(osp.getmtime(out_file) - start)
        cli_exit.append(end - start)
        start, end, stdout = run([sys.executable, '-c', BREAKDOWN, *common], env)
        rec = json.loads(stdout.strip().splitlines()[-1])
        st = rec['stamps']
        order = ['torch', 'package', 'model', 'setup', 'image', 'image_again']
        prev, part = start, {}
        for key, label in zip(['start'] + order, ['interpreter'] + order):
            part[label] = st[key] - prev
            prev = st[key]
        part['exit'] = end - prev
        part['iterations'] = rec['iterations']
        parts.append(part)

    med = statistics.median
    import torch
    device = args.device if args.device != 'auto' else ('cuda' if torch.cuda.is_available() else 'cpu')
    record = {
        'device': torch.cuda.get_device_name() if device == 'cuda' else f'cpu ({os.cpu_count()} cores)',
        'torch': torch.__version__, 'scale': args.scale, 'backbone': args.backbone, 'image': f'astronaut {args.size}x{args.size} RGB',
        'repeats': args.repeats, 'import_torch_s': torch_s, 'cli_to_file_written_s': cli_written,
        'cli_to_exit_s': cli_exit, 'breakdown_s': parts,
        'median': {'import_torch_s': med(torch_s), 'cli_to_file_written_s': med(cli_written),
                   'cli_to_exit_s': med(cli_exit), 'cli_minus_import_torch_s': med(cli_written) - med(torch_s),
                   **{k: med(p[k] for p in parts) for k in parts[0]}},
    }
    m = record['median']
    print(f"{record['device']}, x{args.scale} {args.backbone}, {args.size}x{args.size} photo, medians of {args.repeats}:")
    print(f"  python -c 'import torch'      {m['import_torch_s']:.2f} s")
    print(f"  mcnet-sr, to file written      {m['cli_to_file_written_s']:.2f} s "
          f"(+{m['cli_minus_import_torch_s']:.2f} s over import torch), to exit {m['cli_to_exit_s']:.2f} s")
    print('  breakdown: ' + ', '.join(f'{k} {m[k]:.2f}' for k in ('interpreter', 'torch', 'package', 'model', 'setup',
                                                                  'image', 'image_again', 'exit')) +
          f" s; {m['iterations']:.0f} solver iterations")
    if args.json:
        os.makedirs(osp.dirname(osp.abspath(args.json)), exist_ok=True)
        with open(args.json, 'w') as f:
            json.dump(record, f, indent=1)


if __name__ == '__main__':
    main()
