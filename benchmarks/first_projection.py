"""The first projection on a new image size in a fresh process, as ``mcnet-sr`` meets it.

``benchmark_ops.py``'s "first project" columns build fresh operators one after the other in one process, whose
allocator hands each set-up the memory the previous one freed. A process that meets its first size has no such
memory: every array of the set-up is memory it touches for the first time, which on some machines (virtual ones
especially) costs more than the arithmetic. Here each measurement runs in its own process: it loads the libraries
with a projection on a small size, then times the first ``project`` of a fresh operator on a 1 x 1 x (s LR) x (8 s)
input (one long axis, whose set-up dominates), and a second call on the same size; with ``--given`` also a first
eps > 0 projection whose eigenpairs were computed before the clock started (the rest of the set-up: what the
projection would cost with a free eigensolver):

    python benchmarks/first_projection.py --types matlab-bicubic pil-bicubic pil-bilinear pil-lanczos torch-bicubic \\
        torch-bilinear cv2-area gaussian --scales 2 4 --processes 4 --threads 2 --given \\
        --out benchmarks/records/first_projection_fresh_cpu.json

Each cell is the median (and range) of ``--processes`` processes; eps > 0 is ``eps_from_rms(QUANTIZATION_EPS_RMS)``.
Such times drift on a shared machine; ``--baseline DIR`` compares with the package of another checkout (a ``git
worktree``) process by process, alternating the two, so that the drift falls on both columns alike (the docs' table,
:func:`table`, shows both).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time


def child(name, scale, lr, eps_positive, threads, given=False):
    """One process's measurement: (first projection, second projection) in ms. ``given``: the host's float64
    eigenpairs of the long axis are computed before the clock starts, so the first projection pays the rest of the
    set-up only (what a free eigensolver would leave)."""
    import torch

    from mcnet_basicsr.ops import DEGRADATIONS, QUANTIZATION_EPS_RMS, build_operator, eps_from_rms
    torch.set_num_threads(threads)
    opt = dict(DEGRADATIONS.get(name, {'type': name}), scale=scale)
    small = torch.rand(1, 1, 16 * scale, 8 * scale, dtype=torch.float64).float()
    warm = build_operator(opt)
    warm.project(small, warm(small), 1e-3 if eps_positive else 0.0)  # libraries loaded, as any first call pays
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(1, 1, lr * scale, 8 * scale, generator=gen, dtype=torch.float64).float()
    b = build_operator(opt)(torch.rand(x.shape, generator=gen, dtype=torch.float64).float())
    eps = eps_from_rms(QUANTIZATION_EPS_RMS, b[0].numel()) if eps_positive else 0.0
    op = build_operator(opt)
    if given:
        op._axis_spectrum(x.shape[-2])
    times = []
    for _ in range(2):
        start = time.perf_counter()
        op.project(x, b, eps)
        times.append(1e3 * (time.perf_counter() - start))
    return times


def measure(name, scale, lr, eps_positive, threads, pythonpath=None, given=False):
    """One fresh process's (first, second) projection times; ``pythonpath``: import the package from there;
    ``given``: see :func:`child`."""
    env = dict(os.environ)
    if pythonpath:
        env['PYTHONPATH'] = os.pathsep.join([pythonpath] + ([env['PYTHONPATH']] if env.get('PYTHONPATH') else []))
    out = subprocess.run([sys.executable, __file__, '--child', name, str(scale), str(lr), str(int(eps_positive)),
                          str(threads), str(int(given))], check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def cell(values):
    return f'{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})'


def table(record):
    """The record as docs/benchmarks_operators.md's table: first projections with eps = 0 and eps > 0, the first
    eps > 0 one with the eigenpairs given (``--given``), a later eps > 0 one, and the baseline's first projections
    (``--baseline``)."""
    columns = [('eps = 0', 'first_eps0_ms'), ('eps > 0', 'first_eps_ms'),
               ('eps > 0, eigenpairs given', 'given_first_eps_ms'), ('a later eps > 0', 'second_eps_ms'),
               ('eps = 0, baseline', 'baseline_first_eps0_ms'), ('eps > 0, baseline', 'baseline_first_eps_ms')]
    columns = [(title, key) for title, key in columns if all(key in row for row in record['rows'])]
    lines = ['| type | scale | ' + ' | '.join(title for title, _ in columns) + ' |',
             '|---|---|' + '---|' * len(columns)]
    for row in record['rows']:
        lines.append(f"| {row['type']} | x{row['scale']} | " + ' | '.join(cell(row[key]) for _, key in columns) + ' |')
    return '\n'.join(lines)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == '--child':
        name, scale, lr, eps_positive, threads, given = sys.argv[2:8]
        return print(json.dumps(child(name, int(scale), int(lr), eps_positive == '1', int(threads), given == '1')))
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--types', nargs='+', default=['matlab-bicubic'], help='DEGRADATIONS names or operator types')
    parser.add_argument('--scales', nargs='+', type=int, default=[2, 4])
    parser.add_argument('--lr', type=int, default=1024, help='LR length of the long axis')
    parser.add_argument('--processes', type=int, default=5)
    parser.add_argument('--threads', type=int, default=2, help='torch CPU threads in each process')
    parser.add_argument('--baseline', default=None, metavar='DIR',
                        help='also time the package found in DIR (a checkout), alternating with this one')
    parser.add_argument('--given', action='store_true',
                        help='also time the first eps > 0 projection with the eigenpairs computed before the clock')
    parser.add_argument('--note', default='', help='free text kept in the record (e.g. the commit measured)')
    parser.add_argument('--out', default=None, help='write the record (JSON) here')
    args = parser.parse_args()
    rows = []
    sides = [('', None)] + ([('baseline_', args.baseline)] if args.baseline else [])
    keys = ['first_eps0_ms', 'first_eps_ms'] + (['given_first_eps_ms'] if args.given else []) + ['second_eps_ms']
    keys += ['baseline_first_eps0_ms', 'baseline_first_eps_ms', 'baseline_second_eps_ms'] if args.baseline else []
    print('| type | scale | LR | ' + ' | '.join(keys) + ' |\n|' + '---|' * (3 + len(keys)), flush=True)
    for name in args.types:
        for scale in args.scales:
            row = {'type': name, 'scale': scale, 'lr': args.lr}
            for eps_positive in (False, True):
                for _ in range(args.processes):
                    runs = [(prefix, path, False) for prefix, path in sides]
                    runs += [('given_', None, True)] if eps_positive and args.given else []
                    for prefix, path, given in runs:  # alternated process by process: drift falls on all alike
                        first, second = measure(name, scale, args.lr, eps_positive, args.threads, path, given)
                        if given:
                            times = {'first_eps_ms': first}
                        elif eps_positive:
                            times = {'first_eps_ms': first, 'second_eps_ms': second}
                        else:
                            times = {'first_eps0_ms': first}
                        for key, ms in times.items():
                            row.setdefault(prefix + key, []).append(ms)
            rows.append(row)
            print(f'| {name} | x{scale} | {args.lr} | ' + ' | '.join(cell(row[key]) for key in keys) + ' |', flush=True)
    if args.out:
        import torch
        record = {'argv': sys.argv, 'note': args.note, 'machine': f'{platform.machine()} {platform.processor()}',
                  'python': platform.python_version(), 'torch': torch.__version__, 'threads': args.threads,
                  'processes': args.processes, 'baseline': args.baseline, 'rows': rows}
        with open(args.out, 'w') as f:
            f.write(json.dumps(record, indent=1) + '\n')
        print(f'wrote {args.out}', file=sys.stderr)


if __name__ == '__main__':
    main()
