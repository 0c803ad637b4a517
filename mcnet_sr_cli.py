"""Command line of ``mcnet-sr``: its options and their checks, with nothing heavy imported.

``mcnet-sr --help`` and a bad option answer before torch, basicsr, OpenCV or the models are imported:
this module uses the standard library and PyYAML only (the defaults come from the model cards,
``mcnet_basicsr/zoo/models.yml``) and lives outside the ``mcnet_basicsr`` package on purpose (importing the
package imports torch and basicsr to fill BasicSR's registries). Only once the options are valid does
:func:`main` import :mod:`mcnet_basicsr.cli.inference`, which does the work.
"""
import argparse
import importlib.util
import math
import os.path as osp
import sys
from collections import Counter

import yaml

MIN_TILE = 8  # smallest --tile (LR pixels)
DEFAULT_DEGRADATION = 'matlab-bicubic'


def read_package_yaml(*parts):
    """A data file of the mcnet_basicsr package (e.g. ``zoo/models.yml``), found and read without importing it."""
    spec = importlib.util.find_spec('mcnet_basicsr')  # a top-level package is located, not imported
    if spec is None or not spec.submodule_search_locations:
        raise ImportError('mcnet-sr needs the mcnet_basicsr package; install it (pip install -e .)')
    with open(osp.join(spec.submodule_search_locations[0], *parts), encoding='utf-8') as f:
        return yaml.load(f, Loader=getattr(yaml, 'CSafeLoader', yaml.SafeLoader))  # libyaml's parser where built


def read_model_cards():
    """The shipped models' cards (``mcnet_basicsr/zoo/models.yml``: files, defaults, scores per backbone and scale)."""
    return read_package_yaml('zoo', 'models.yml')


MODELS = read_model_cards()
# the names of mcnet_basicsr.ops.DEGRADATIONS, from the same file
DEGRADATIONS = tuple(read_package_yaml('ops', 'degradations.yml'))
SCALES = tuple(sorted(MODELS['default']))
BACKBONES = tuple(MODELS['backbones'])


def model_card(backbone, scale, family='bicubic'):
    """The card of the shipped model (a dict), or None where none ships (the package then says why); ``family``
    'kernels' / 'resizers': of its layer trained for LR made by blur kernels / by resizers (the cards' sections)."""
    return MODELS['backbones'].get(backbone, {}).get(MODELS['families'][family], {}).get(scale)


def layer_family(backbone, scale, degradation=None, kernel=None):
    """The family of the layer mcnet-sr runs for LR made by ``degradation`` (a resizer name) or a blur ``kernel``:
    'kernels' with a kernel where such a layer ships; for a resizer, the family whose card lists it in
    ``degradations`` (the resizers on which that layer is the best shipped one: docs/degradations.md, Table R), else
    'bicubic'."""
    if kernel is not None and model_card(backbone, scale, 'kernels') is not None:
        return 'kernels'
    for family in ('resizers', 'kernels') if degradation is not None else ():
        if degradation in (model_card(backbone, scale, family) or {}).get('degradations', {}):
            return family
    return 'bicubic'


def default_tol(backbone, scale, family='bicubic'):
    card = model_card(backbone, scale, family)
    return None if card is None else card['tol']


def default_extrapolation(backbone, scale, family='bicubic'):
    card = model_card(backbone, scale, family)
    return None if card is None else card['extrapolation']


def _defaults_text(key, fmt):
    """'X, but Y for b xs, ...': the most common default of the cards and the models that differ from it."""
    cards = [(b, s, c) for b in BACKBONES for s, c in MODELS['backbones'][b]['models'].items()]
    common = Counter(c[key] for _, _, c in cards).most_common(1)[0][0]
    others = sorted((b, s, c[key]) for b, s, c in cards if c[key] != common)
    return f'{fmt(common)}, but ' + ', '.join(f'{fmt(v)} for {b} x{s}' for b, s, v in others)


class UsageError(Exception):
    """A problem with the options or the models: nothing can be processed."""


class _Parser(argparse.ArgumentParser):

    def error(self, message):
        raise UsageError(f'{message} (see {self.prog} --help)')


def build_parser():
    p = _Parser(
        prog='mcnet-sr',
        description='Measurement-consistent super-resolution (MCNet): the output x satisfies '
        '||A x - b||_2 <= eps exactly (A = the downscaling that made the input: MATLAB bicubic unless --degradation '
        'or --kernel says otherwise; b = Y of the input, or each of R, G, B with --channels rgb).')
    p.add_argument('inputs', nargs='+', metavar='INPUT', help='image files, folders or glob patterns')
    p.add_argument('-o', '--output', required=True, metavar='OUTDIR',
                   help='output folder (created if missing); its summary.csv gets one row per input appended, '
                   'rows of earlier runs are kept (a summary.csv with other columns is left alone: the rows go to '
                   'summary_<n>.csv)')
    p.add_argument('--scale', required=True, type=int, metavar='{2,3,4}', help='upscaling factor')
    p.add_argument('--backbone', default=None, choices=BACKBONES,
                   help='backbone and its shipped layer: our SRCNN (default), our compact RCAN / RDN, or the official '
                   'IMDN / PAN (x3, x4; give their weights with --backbone-weights); all but SRCNN keep ||Ax-b|| '
                   'within the uint8 quantisation level, see --eps-rms. With --kernel, IMDN (x2, x3, x4) and PAN (x4) '
                   'run their layers trained on blur kernels and noise; with --degradation cv2-area, cv2-linear, '
                   'cv2-cubic (or pil-box, torch-bilinear-noaa, torch-bicubic-noaa; PAN x4 also pil-lanczos) at x2, '
                   'x3 and x4, the best shipped layer for that resizer (trained on resizers or on blur kernels: '
                   'the cards\' degradations)')
    p.add_argument('--backbone-weights', metavar='PATH',
                   help='checkpoint of the --backbone architecture (default: the shipped one)')
    p.add_argument('--weights', metavar='PATH',
                   help="MCNet layer checkpoint, BasicSR {'params': ...} file (default: the shipped one; with the "
                   'shipped SRCNN and layer the solve begins at a learned start fitted to them, same result in fewer '
                   'iterations; other weights begin at the standard start)')
    p.add_argument('--eps-rms', type=float, default=None, metavar='X',
                   help='consistency radius per LR pixel, eps = X * sqrt(#LR pixels) (default: what the layer was '
                   'trained with: 0, i.e. exact, for srcnn; 1/255/sqrt(12) for the compact backbones)')
    p.add_argument('--degradation', default=None, choices=DEGRADATIONS, metavar='NAME',
                   help='the downscaling that made the input (A): ' + ', '.join(DEGRADATIONS) + ' (default '
                   f'{DEFAULT_DEGRADATION}: MATLAB imresize; pil-* Pillow Image.resize, cv2-* cv2.resize, torch-* '
                   'F.interpolate, -noaa without antialiasing)')
    p.add_argument('--kernel', metavar='FILE',
                   help='instead of --degradation: the input was made by circular blur with this kernel (.npy, '
                   'grayscale .png normalised to sum 1, or .mat), then keeping the upper-left pixel of each s x s '
                   'block (USRNet\'s protocol); with --backbone imdn, the layer trained for such LR runs')
    p.add_argument('--boundary', default='circular', choices=('circular', 'reflect'),
                   help="with --kernel: how the blur met the image's borders: circular (wrapped around, USRNet's "
                   "protocol; the default) or reflect (a photo: the scene mirrored, scipy.ndimage's 'reflect'); "
                   'reflect solves on the input padded by reflection and reports ||Ax-b|| against that model')
    p.add_argument('--kernel-index', type=int, default=None, metavar='I',
                   help='which kernel of a .mat cell array of kernels, 0-based')
    p.add_argument('--noise', type=float, default=0.0, metavar='SIGMA',
                   help='standard deviation of Gaussian noise in the input on 0..255 (default 0): widens the '
                   'consistency ball to sqrt(eps^2 + (SIGMA/255)^2 * #LR values)')
    p.add_argument('--channels', default=None, choices=('y', 'rgb'),
                   help='what is made consistent: Y (y; Cb, Cr as the backbone path gives them) or each of R, G '
                   'and B (rgb, one solve per channel: about 3x the time); default y with MATLAB bicubic, rgb with '
                   '--kernel or another --degradation (an LR made per RGB channel is matched in every channel)')
    # the CLI's solver: the 'fast' preset, single keys overridden; defaults from the model cards
    p.add_argument('--iters', type=int, default=MODELS['max_iter'], metavar='N',
                   help=f'maximum solver iterations (default {MODELS["max_iter"]})')
    p.add_argument('--tol', type=float, default=None, metavar='T',
                   help='relative fixed-point residual at which the solver stops (default '
                   + _defaults_text('tol', lambda v: f'{v:g}') + ': within 0.01 dB of the converged result on '
                   'Set5/Set14)')
    p.add_argument('--extrapolation', type=float, default=None, metavar='T',
                   help='take the output from z + T (beta + rho) / beta (F(z) - z) at the iterate z the solver stops '
                   'at (one more application of the map; nearer the converged result for layers with a small beta; '
                   'default ' + _defaults_text('extrapolation', lambda v: f'{v:g}') + ')')
    p.add_argument('--device', default='auto', choices=('auto', 'cpu', 'cuda'), help='default: cuda if available')
    p.add_argument('--no-cuda-graph', action='store_true',
                   help='on CUDA, run the solver iterations eagerly instead of replaying them from CUDA graphs '
                        '(same result; graphs are used by default, when eps = 0 and without --tile)')
    p.add_argument('--threads', type=int, default=None, metavar='N',
                   help='CPU threads for torch (default: torch\'s choice; 1 is often fastest on a busy machine)')
    p.add_argument('--tile', type=int, default=None, metavar='N',
                   help=f'run the networks on N x N LR tiles (N >= {MIN_TILE}) to bound memory')
    p.add_argument('--compare', action='store_true',
                   help='also write <stem>_compare.png: bicubic | backbone | MCNet (| ground truth)')
    p.add_argument('--gt', metavar='PATH_OR_DIR',
                   help='ground truth for --compare: a file (one input) or a folder holding the same file names')
    p.add_argument('--force', action='store_true', help='overwrite existing outputs')
    p.add_argument('--skip-existing', action='store_true',
                   help='skip the inputs whose outputs all exist (a re-run after an interruption); the exit status '
                   'is 0 when every input is done now or was done before')
    return p


def parse_args(argv):
    args = build_parser().parse_args(argv)
    if args.scale not in SCALES:
        raise UsageError(f'unsupported scale {args.scale}; models exist for scales {", ".join(map(str, SCALES))}')
    if args.iters < 1:
        raise UsageError(f'--iters must be >= 1, got {args.iters}')
    if args.backbone is None:
        args.backbone = MODELS['default'][args.scale]
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
    if args.channels is None:
        args.channels = 'y' if args.degradation == DEFAULT_DEGRADATION else 'rgb'
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


def print_error(msg):
    print(f'error: {msg}', file=sys.stderr, flush=True)


def main(argv=None, models=None, keep_memory=False):
    """Console entry point; returns the exit status (0 ok, 1 some images failed, 2 usage error).

    ``models``: a dict in which a caller running several commands in one process keeps the built models
    (see :func:`mcnet_basicsr.cli.inference.get_model`); None builds the model afresh. ``keep_memory``: the process
    keeps the memory it frees (:func:`keep_freed_memory`), unless ``--tile`` asks for bounded memory.
    """
    try:
        args = parse_args(sys.argv[1:] if argv is None else list(argv))
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except UsageError as err:
        print_error(err)
        return 2
    if keep_memory and args.tile is None:
        keep_freed_memory()
    return load_inference().execute(args, models)


def load_inference():
    """Import :mod:`mcnet_basicsr.cli.inference`, the heavy part (torch, OpenCV, the models), and return it.

    Where the package is not imported yet, its registration into BasicSR's registries is deferred: the default
    models need none of basicsr (nor the torchvision and scipy.stats it imports), seconds saved. BasicSR's
    registries still get our types as soon as anything imports basicsr (:mod:`mcnet_basicsr_hook`).
    """
    if 'mcnet_basicsr' not in sys.modules:
        import mcnet_basicsr_hook
        mcnet_basicsr_hook.defer_registration()
        try:
            import mcnet_basicsr  # noqa: F401
        finally:
            mcnet_basicsr_hook.defer_registration(False)
    from mcnet_basicsr.cli import inference
    return inference


def keep_freed_memory(min_ram=16 << 30):
    """Have the C library (glibc) keep freed memory for reuse in this process; returns whether it did.

    glibc maps every allocation above 32 MB afresh and unmaps it when it is freed, so the feature maps each iteration
    allocates (1 GB per DnCNN6 layer at 2048 x 2048) fault all their pages in again, every time, a large part of the
    command's time on a few CPU cores (docs/benchmarks.md, "Quality of mcnet-sr's default"). Served from the heap,
    which is never trimmed, they reuse the pages of the last iteration. The heap's holes raise the peak memory and
    the process holds it until it exits: right for a command that does one job
    and leaves (:func:`console_main`), not for a library, and only on a machine with at least ``min_ram`` bytes of
    memory (default 16 GiB), where the larger peak fits more easily. Elsewhere (less memory, not Linux, or a C library
    without ``mallopt``) nothing changes.
    """
    if not sys.platform.startswith('linux'):
        return False
    import os
    try:
        if os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') < min_ram:
            return False
    except (ValueError, OSError):  # the machine's memory is unknown
        return False
    import ctypes
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_max = -1, -4  # glibc's <malloc.h>
    # no mapped blocks at all; a trim threshold of -1 never gives the heap's top back (mallopt(3))
    return bool(mallopt(m_mmap_max, 0)) and bool(mallopt(m_trim_threshold, -1))


def console_main():
    """The ``mcnet-sr`` command: :func:`main`, then the process ends at once.

    Once every output file and summary.csv is written and closed, tearing the interpreter down (CUDA context,
    torch's thread pools, freeing every module) takes a second or more and changes nothing on disk, so the
    command flushes its streams and leaves with ``os._exit``. Callers of :func:`main` in a process of their
    own (tests, scripts) get its status back as usual. The process keeps the memory it frees
    (:func:`keep_freed_memory`) unless ``--tile`` is given.
    """
    status = main(keep_memory=True)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said
            pass
    import os
    os._exit(status)


if __name__ == '__main__':
    console_main()
