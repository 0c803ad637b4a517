"""Options of ``mcnet-sr`` and their checks, with nothing heavy imported.

``mcnet-sr --help`` and a bad option answer before torch, basicsr, OpenCV or the models are imported:
this module uses the standard library and PyYAML only (the defaults come from the model cards,
``mcnet_basicsr/zoo/models.yml``); importing the package imports neither torch nor basicsr. Only once the options
are valid does :func:`mcnet_basicsr.cli.main.main` import :mod:`mcnet_basicsr.cli.inference`, which does the work.
"""
import argparse
import math
import os.path as osp
import sys

from ..package_data import read_degradations
from ..zoo.cards import (BACKBONES, BICUBIC, MODELS, SCALES, default_backbone, default_extrapolation, default_tol,
                         layer_family, untrained_layer)

MIN_TILE = 8  # smallest --tile (LR pixels)
DEFAULT_DEGRADATION = BICUBIC


# the names of mcnet_basicsr.ops.DEGRADATIONS, from the same file
DEGRADATIONS = tuple(read_degradations())


class UsageError(Exception):
    """A problem with the options or the models: nothing can be processed."""


FAMILY_LR = {'bicubic': 'MATLAB-bicubic LR', 'kernels': 'blur-kernel LR (--kernel)',
             'resizers': 'resizer LR (--degradation)'}


def shipped_layers_text():
    """Which layers ship, per kind of LR, backbone and scale, which runs without ``--backbone``, and how consistent
    each backbone's layers keep the output: sentences read from the model cards (``--help``, the README and
    docs/Inference.md show them)."""
    sentences = []
    for family, section in MODELS['families'].items():
        by_scales = {}
        for b in BACKBONES:
            scales = tuple(sorted(MODELS['backbones'][b].get(section, {})))
            if scales:
                by_scales.setdefault(scales, []).append(b)
        groups = '; '.join(f'{", ".join(names)} {", ".join(f"x{s}" for s in scales)}'
                           for scales, names in by_scales.items())
        sentences.append(f'For {FAMILY_LR[family]}: {groups}.')
    by_default = {}
    for family, per_scale in MODELS['default'].items():
        for scale, b in per_scale.items():  # a list: the first that routes the resizer, else the last
            name = b if isinstance(b, str) else ' where its card routes the resizer, else '.join(b)
            by_default.setdefault(name, {}).setdefault(family, []).append(scale)
    defaults = '; '.join(f'{b} for ' + ' and '.join(
        FAMILY_LR[f] + ('' if scales == list(SCALES) else f' at {", ".join(f"x{s}" for s in scales)}')
        for f, scales in families.items()) for b, families in by_default.items())
    sentences.append(f'Without --backbone: {defaults}.')
    exact = [b for b in BACKBONES if MODELS['backbones'][b]['eps_rms'] is None]
    ball = [b for b in BACKBONES if MODELS['backbones'][b]['eps_rms'] is not None]
    sentences.append(f'Consistent to float precision (eps = 0): the layers of {", ".join(exact)}; within the uint8 '
                     f'quantisation ball: those of {", ".join(ball)}.')
    return 'Shipped layers (--backbone, scales). ' + ' '.join(sentences)


class _Parser(argparse.ArgumentParser):

    def error(self, message):
        raise UsageError(f'{message} (see {self.prog} --help)')


def build_parser():
    import textwrap

    def fill(text):
        return textwrap.fill(text, 79, break_on_hyphens=False)

    p = _Parser(
        prog='mcnet-sr', formatter_class=argparse.RawDescriptionHelpFormatter,
        description=fill('Measurement-consistent super-resolution (MCNet): the output x keeps ||A x - b|| <= eps, '
                         'A the downscaling that made the input, b the input.'),
        epilog=fill(f'Resizers (--degradation NAME): {", ".join(DEGRADATIONS)}.') + '\n\n'
        + fill(shipped_layers_text()) + '\n\nDetails, formulas and defaults: docs/Inference.md.')
    io = p.add_argument_group('input and output')
    io.add_argument('inputs', nargs='+', metavar='INPUT', help='image files, folders or glob patterns')
    io.add_argument('-o', '--output', required=True, metavar='OUTDIR',
                    help='output folder; summary.csv gets a row per image')
    io.add_argument('--force', action='store_true', help='overwrite existing outputs')
    io.add_argument('--skip-existing', action='store_true', help='skip the inputs whose outputs all exist')
    io.add_argument('--compare', action='store_true', help='also write <stem>_compare.png, side by side')
    io.add_argument('--gt', metavar='PATH_OR_DIR', help='ground truth for --compare: a file or folder')
    io.add_argument('-v', '--verbose', action='store_true', help='per image also the residual and fidelity details')
    model = p.add_argument_group('model')
    model.add_argument('--scale', required=True, type=int, metavar='{2,3,4}', help='upscaling factor')
    model.add_argument('--backbone', default=None, choices=BACKBONES,
                       help='network the layer corrects (default: below)')
    model.add_argument('--backbone-weights', metavar='PATH', help='backbone checkpoint (default: the shipped one)')
    model.add_argument('--weights', metavar='PATH', help='MCNet layer checkpoint (default: the shipped one)')
    deg = p.add_argument_group('degradation (what made the input)')
    deg.add_argument('--degradation', default=None, choices=DEGRADATIONS, metavar='NAME',
                     help='resizer that made the input (names below)')
    deg.add_argument('--kernel', metavar='FILE', help='instead: the blur kernel that made it (.npy .png .mat)')
    deg.add_argument('--kernel-index', type=int, default=None, metavar='I', help='kernel of a .mat cell array, 0-based')
    deg.add_argument('--boundary', default='circular', choices=('circular', 'reflect'),
                     help='how that blur met the borders (default circular)')
    deg.add_argument('--noise', type=float, default=0.0, metavar='SIGMA',
                     help='noise std in the input, on 0..255 (default 0)')
    deg.add_argument('--channels', default=None, choices=('y', 'rgb'),
                     help='made consistent: Y or each of R, G, B')
    deg.add_argument('--eps-rms', type=float, default=None, metavar='X',
                     help='consistency radius per LR pixel (default: layer\'s)')
    # the CLI's solver: the 'fast' preset, single keys overridden; defaults from the model cards
    solver = p.add_argument_group('solver')
    solver.add_argument('--iters', type=int, default=MODELS['max_iter'], metavar='N',
                        help=f'iteration cap (default {MODELS["max_iter"]})')
    solver.add_argument('--tol', type=float, default=None, metavar='T',
                        help='residual at which the solve stops (default: card\'s)')
    solver.add_argument('--extrapolation', type=float, default=None, metavar='T',
                        help='extrapolation of the last iterate (default: card\'s)')
    dev = p.add_argument_group('device')
    dev.add_argument('--device', default='auto', choices=('auto', 'cpu', 'cuda'), help='default: cuda if available')
    dev.add_argument('--no-cuda-graph', action='store_true', help='on CUDA, run the iterations eagerly')
    dev.add_argument('--threads', type=int, default=None, metavar='N', help='CPU threads for torch (default: its own)')
    dev.add_argument('--tile', type=int, default=None, metavar='N',
                     help=f'networks on N x N LR tiles (N >= {MIN_TILE}), less memory')
    return p


def parse_args(argv):
    args = build_parser().parse_args(argv)
    if args.scale not in SCALES:
        raise UsageError(f'unsupported scale {args.scale}; models exist for scales {", ".join(map(str, SCALES))}')
    if args.iters < 1:
        raise UsageError(f'--iters must be >= 1, got {args.iters}')
    if args.backbone is None:  # the cards' default for the family of the LR
        args.backbone = default_backbone(args.scale, args.degradation, args.kernel)
    # with --kernel or --degradation, the backbone's layer trained for such LR where one ships for it (--weights
    # may replace its file)
    args.layer_family = layer_family(args.backbone, args.scale, args.degradation, args.kernel)
    # the model's defaults; where no model ships for the pair, the command stops with the package's reason
    if args.tol is None:
        args.tol = default_tol(args.backbone, args.scale, args.layer_family)
    if args.tol is not None and not (args.tol > 0 and math.isfinite(args.tol)):
        raise UsageError(f'--tol must be a positive number, got {args.tol}')
    if args.extrapolation is None:
        args.extrapolation = default_extrapolation(args.backbone, args.scale, args.layer_family)
    if args.extrapolation is not None and not (args.extrapolation >= 0 and math.isfinite(args.extrapolation)):
        raise UsageError(f'--extrapolation must be a finite number >= 0, got {args.extrapolation}')
    if args.eps_rms is not None and not (args.eps_rms >= 0 and math.isfinite(args.eps_rms)):
        raise UsageError(f'--eps-rms must be a finite number >= 0, got {args.eps_rms}')
    if args.degradation is not None and args.kernel is not None:
        raise UsageError(f'--degradation {args.degradation} and --kernel {args.kernel} both say how the input was '
                         'made: give one of them')
    if args.boundary != 'circular' and args.kernel is None:
        raise UsageError(f'--boundary {args.boundary} says how a --kernel blur met the borders; give --kernel')
    if args.kernel_index is not None and args.kernel is None:
        raise UsageError('--kernel-index picks a kernel of a --kernel .mat file; give --kernel')
    if args.kernel_index is not None and args.kernel_index < 0:
        raise UsageError(f'--kernel-index is 0-based and must be >= 0, got {args.kernel_index}')
    if args.kernel is not None and not osp.isfile(args.kernel):
        raise UsageError(f'{args.kernel}: --kernel file not found')
    if args.degradation is None and args.kernel is None:
        args.degradation = DEFAULT_DEGRADATION
    layer_channels = (untrained_layer(args.backbone) or {}).get('channels')  # a layer that runs on these only
    if args.channels is None:
        args.channels = layer_channels or ('y' if args.degradation == DEFAULT_DEGRADATION else 'rgb')
    if layer_channels is not None and args.channels != layer_channels:
        raise UsageError(f'--channels {args.channels}: the {args.backbone} layer runs with --channels '
                         f'{layer_channels} only (its prior denoises R, G and B together); leave --channels out')
    if not (args.noise >= 0 and math.isfinite(args.noise)):
        raise UsageError(f'--noise must be a finite number >= 0 (std on 0..255), got {args.noise}')
    if args.threads is not None and args.threads < 1:
        raise UsageError(f'--threads must be >= 1, got {args.threads}')
    if args.tile is not None and args.tile < MIN_TILE:
        raise UsageError(f'--tile must be >= {MIN_TILE} (LR pixels), got {args.tile}')
    if args.force and args.skip_existing:
        raise UsageError('--force overwrites existing outputs, --skip-existing keeps them: give one of them')
    if args.gt is not None and not args.compare:
        raise UsageError('--gt is only used with --compare')
    if args.gt is not None and not osp.exists(args.gt):
        raise UsageError(f'{args.gt}: ground truth not found')
    for opt in ('weights', 'backbone_weights'):
        path = getattr(args, opt)
        if path is not None and not osp.isfile(path):
            raise UsageError(f'{path}: --{opt.replace("_", "-")} file not found')
    if osp.exists(args.output) and not osp.isdir(args.output):
        raise UsageError(f'{args.output}: output path exists and is not a folder')
    return args


def one_line(text, limit=300):
    """``text`` on one line of at most ``limit`` characters (an error message for the console)."""
    text = ' '.join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + '...'


def print_error(msg):
    print(f'error: {msg}', file=sys.stderr, flush=True)


def parse_command(argv):
    """``(args, None)`` for valid options, else ``(None, status)``: 0 after ``--help``, 2 after a usage error (said
    on stderr)."""
    try:
        return parse_args(list(argv)), None
    except SystemExit as exc:  # --help
        return None, int(exc.code or 0)
    except UsageError as err:
        print_error(err)
        return None, 2
