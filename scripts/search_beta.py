"""Grid-search MCNet's initial beta with the untrained layer, on Set5 only.

For each scale and each value of ``network_g.beta.init``, the MCNet test option file is evaluated
with ``path.pretrain_network_g`` set to null, so the layer is the *untrained* one: the frozen
backbone, the denoiser loaded from ``network_g.denoiser.path`` and beta = beta.init. Only Set5 is
used (the selection set); Set14 stays a test set and is never read here. The protocol is that of
``scripts/evaluate.py`` (HR mod-crop, MATLAB-bicubic uint8 LR, uint8 outputs, Y-PSNR/SSIM with
crop = scale, fidelity of the float output).

    python scripts/search_beta.py --denoiser-path DNCNN.pth          # default grid, x2/x3/x4, GPU if present
    python scripts/search_beta.py --denoiser-path DNCNN.pth --grid 0.005 0.01 0.02 --scales 2 --tol 1e-4
    python scripts/search_beta.py --denoiser-path DNCNN.pth --out search_beta.json --out-md results.md

Prints a table (beta x scale -> PSNR and mean solver iterations) and the best beta per scale.
``--out`` writes a JSON object {"dataset", "option", "denoiser_path", "tol", "max_iter", "limit",
"grid", "scales", "records", "best"}: each record is an ``evaluate_option`` record plus
``beta_init``; ``best`` maps the scale (a string) to {"beta_init", "psnr", "ssim", "iterations"}.
``--out-md FILE`` writes the table between ``<!-- search_beta:begin -->`` and
``<!-- search_beta:end -->`` in FILE (added at the end when the markers are absent; the rest of
the file is kept).
"""
import argparse
import datetime
import os.path as osp

from tqdm import tqdm

from mcnet_basicsr.evaluation.evaluate import (SELECTION_SET, add_selection_arguments, check_set_items, evaluate_option,
                                               in_directory, load_selection_option, resolve_device)
from mcnet_basicsr.utils.files import replace_section, write_json

REPO_ROOT = osp.abspath(osp.join(osp.dirname(__file__), osp.pardir))
DEFAULT_GRID = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)
DEFAULT_OPTION = 'options/test_mcnet_srcnn_x{scale}.yml'
MD_SECTION = 'search_beta'


def cell_overrides(beta, denoiser_path, tol=None, max_iter=None, extra=()):
    """``--set``-style overrides of one grid cell (recorded with its numbers)."""
    out = ['path.pretrain_network_g=~', f'network_g.denoiser.path={denoiser_path}', f'network_g.beta.init={beta!r}']
    if tol is not None:
        out.append(f'network_g.settings.solver.forward.tol={tol!r}')
    if max_iter is not None:
        out.append(f'network_g.settings.solver.forward.max_iter={int(max_iter)}')
    return out + list(extra)


def best_per_scale(records):
    """{scale: record} with the highest PSNR (the first of the grid on ties)."""
    best = {}
    for r in records:
        if r['scale'] not in best or r['psnr'] > best[r['scale']]['psnr']:
            best[r['scale']] = r
    return best


def search(denoiser_path, option=DEFAULT_OPTION, scales=(2, 3, 4), grid=DEFAULT_GRID, tol=None,
           max_iter=None, limit=None, data_root='datasets', device='cpu', extra=(), log=print):
    """Evaluate every (scale, beta) cell; returns the records (each with ``beta_init``)."""
    device = resolve_device(device)
    cells = [(s, beta) for s in scales for beta in grid]
    records = []
    bar = tqdm(cells, desc='beta search', unit='cell')
    for s, beta in bar:
        bar.set_postfix_str(f'x{s} beta={beta:g}')
        overrides = cell_overrides(beta, denoiser_path, tol, max_iter, extra)
        opt = load_selection_option(option.format(scale=s, s=s), overrides, data_root)
        (rec, ) = evaluate_option(opt, device, overrides, limit)
        rec['beta_init'] = float(beta)
        records.append(rec)
        bar.write(f"x{s} beta_init {beta:<8g} PSNR {rec['psnr']:.3f}  SSIM {rec['ssim']:.4f}  "
                  f"iters {rec['iterations']:.1f}  fid max {rec['fidelity']:.1e}")
    return records


def table(records, grid, scales):
    """Markdown table beta x scale -> 'PSNR (iterations)', the best of each column in bold."""
    cell = {(r['beta_init'], r['scale']): r for r in records}
    best = best_per_scale(records)
    out = '| beta_init | ' + ' | '.join(f'{SELECTION_SET} x{s}' for s in scales) + ' |\n'
    out += '|---|' + '---|' * len(scales) + '\n'
    for beta in grid:
        row = []
        for s in scales:
            r = cell.get((float(beta), s))
            text = f"{r['psnr']:.2f} ({r['iterations']:.0f})" if r else 'n/a'
            row.append(f'**{text}**' if r is not None and r is best.get(s) else text)
        out += f'| {beta:g} | ' + ' | '.join(row) + ' |\n'
    return out


def markdown(records, grid, scales, option, denoiser_path, tol, max_iter, limit):
    best = best_per_scale(records)
    devices = sorted({r['device'] for r in records})
    images = sorted({r['images'] for r in records})
    solver = f'forward tol {tol:g}' if tol is not None else "the option file's forward tol"
    if max_iter is not None:
        solver += f', max_iter {max_iter}'
    md = '## Initial beta of the untrained layer (`scripts/search_beta.py`)\n\n'
    md += (f'Generated {datetime.date.today().isoformat()} on {", ".join(devices) or "-"}. Option `{option}` with '
           f'`path.pretrain_network_g: ~` (untrained layer), denoiser `{denoiser_path}`, {solver}; '
           f'{SELECTION_SET} only ({"/".join(map(str, images))} image(s){", --limit" if limit else ""}), '
           'Y-PSNR (dB) with the mean number of solver iterations in brackets, best per scale in bold.\n\n')
    md += table(records, grid, scales)
    md += '\nBest beta_init: ' + ', '.join(f"x{s} {best[s]['beta_init']:g} ({best[s]['psnr']:.2f} dB)"
                                           for s in scales if s in best) + '.\n'
    return md


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('-opt', '--option', help=f'MCNet test option file, "{{scale}}" filled in. Default: '
                        f'{DEFAULT_OPTION} (in the repository)')
    parser.add_argument('--scales', type=int, nargs='+', default=[2, 3, 4])
    parser.add_argument('--grid', type=float, nargs='+', default=list(DEFAULT_GRID), help='beta_init values')
    parser.add_argument('--denoiser-path', required=True,
                        help="DnCNN checkpoint of the untrained layer (e.g. the authors' DnCNN6 sigma 0.00625-0.0125 "
                        'that the training option files start from)')
    parser.add_argument('--tol', type=float, help="forward solver tolerance (default: the option file's)")
    parser.add_argument('--max-iter', type=int, help="forward solver iteration cap (default: the option file's)")
    add_selection_arguments(parser)
    parser.add_argument('--out-md', help=f'write the table into this markdown file (section "{MD_SECTION}")')
    args = parser.parse_args(argv)
    check_set_items(parser, args.set)
    if any(b <= 0 for b in args.grid):
        parser.error(f'beta_init values must be > 0, got {args.grid}')
    device = resolve_device(args.device)
    # option files name their inputs relative to the repository root: paths given here are
    # relative to the caller's directory, the defaults to the repository
    option = osp.abspath(args.option) if args.option else DEFAULT_OPTION
    denoiser = osp.abspath(args.denoiser_path)
    data_root = osp.abspath(args.data_root)
    out, out_md = (osp.abspath(p) if p else None for p in (args.out, args.out_md))
    with in_directory(REPO_ROOT):
        records = search(denoiser, option, args.scales, args.grid, args.tol, args.max_iter, args.limit, data_root,
                         device, args.set)

    best = best_per_scale(records)
    print()
    print(table(records, args.grid, args.scales))
    for s in args.scales:
        print(f"best x{s}: beta_init = {best[s]['beta_init']:g}  ({best[s]['psnr']:.3f} dB, "
              f"{best[s]['iterations']:.1f} iterations)")
    result = {
        'dataset': SELECTION_SET, 'option': option, 'denoiser_path': denoiser, 'tol': args.tol,
        'max_iter': args.max_iter, 'limit': args.limit, 'grid': [float(b) for b in args.grid], 'scales': args.scales,
        'records': records,
        'best': {str(s): {k: best[s][k] for k in ('beta_init', 'psnr', 'ssim', 'iterations')} for s in best}}
    if out:
        write_json(out, result)
        print(f'wrote {out}')
    if out_md:
        replace_section(out_md, MD_SECTION, markdown(records, args.grid, args.scales, args.option or DEFAULT_OPTION,
                                                     args.denoiser_path, args.tol, args.max_iter,
                                                     args.limit))
        print(f'wrote section "{MD_SECTION}" of {out_md}')
    return result


if __name__ == '__main__':
    main()
