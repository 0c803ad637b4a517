"""``mcnet-sr``: super-resolve image files with the shipped MCNet models.

Usage::

    mcnet-sr INPUT... -o OUTDIR --scale {2,3,4} [--backbone {srcnn,rcan_compact,rdn_compact,imdn,pan}]
             [--backbone-weights PATH] [--weights PATH]
             [--degradation NAME | --kernel FILE [--kernel-index I] [--boundary B]] [--noise SIGMA] [--channels {y,rgb}]
             [--eps-rms X] [--iters N] [--tol T] [--extrapolation T] [--device auto|cpu|cuda] [--no-cuda-graph]
             [--threads N] [--tile N] [--compare] [--gt PATH_OR_DIR] [--force | --skip-existing] [-v]
    python -m mcnet_basicsr.cli.inference ...

The options and their checks live in :mod:`.options` (standard library and PyYAML only), so ``--help`` and a bad
option answer before anything heavy is imported; this module does the work once they are valid.

INPUT: files, folders (their PNG/JPEG/BMP/TIFF files, not recursive) or glob patterns. 8- or 16-bit,
gray, gray+alpha, RGB or RGBA. Colour goes through MCNet (the implicit layer on Y, CbCr from the
backbone path, exactly :meth:`MCNetArch.forward`), gray is treated as Y, alpha is upscaled with
MATLAB bicubic and clipped. Each result is written as a PNG ``<stem>_x<s>.png`` with the bit depth
and channel layout of its input. ``summary.csv`` in OUTDIR gets one row per image processed, appended to the rows of
earlier runs, which are kept (column ``run``: when the run started); its ``status`` is ``ok``, ``not converged`` (the
solve stopped at ``--iters`` before ``--tol``; the output is written) or ``error`` (with the ``error``). Inputs
refused because their outputs exist (no ``--force``) and inputs skipped by ``--skip-existing`` add no row. A
``summary.csv`` with other columns is left alone and the rows go to the next free ``summary_<n>.csv``.

Console: a solver progress bar per image on the CPU (stderr; its length and the time left extrapolate
the rate at which the residual falls to --tol), then one line per image (about 120 characters) with the
solver's iterations, ``||Ax-b||`` of the float result and of the saved file, and with ``--compare --gt`` the Y-PSNRs
of MCNet, the backbone and bicubic; a solve stopped at ``--iters`` says so with its residual. ``--verbose`` adds
the residual, the saved file's figures below and the operator.

Consistency: the float result ``x`` satisfies ``||A x - b||_2 <= eps`` (Y in [0, 1], ``A`` = MATLAB
bicubic downscaling, ``b`` = Y of the LR image; eps the layer's: 0 for SRCNN's layers, the uint8 quantisation
level for the others, unless ``--eps-rms``). ``--degradation NAME`` (a name of
:data:`~mcnet_basicsr.ops.DEGRADATIONS`) or ``--kernel FILE`` (circular blur with the kernel, then the upper-left
pixel of each s x s block: :class:`~mcnet_basicsr.ops.BlurDownsample`) give another ``A``; ``--noise SIGMA`` (on
0..255) widens eps to ``sqrt(eps^2 + (SIGMA/255)^2 m)`` (m LR values; on Y the noise of Y,
:meth:`MCNetArch.measured_problem`); ``--channels rgb`` (the default with another ``A``) makes each of R, G and B
consistent, and the reported figures are then the largest of the three. The tool reports that
number (``fidelity``) for the float result and for the written file (``fidelity_saved``): the Y of its
RGB, which is the float result clipped to [0, 1] and rounded to 8/16 bit. To reproduce the LR image
exactly the float result leaves [0, 1] near saturated edges; where it does, the clipping alone
(``fidelity_clipped``) is most of it and a 16-bit file is nearly as far from ``b`` as an 8-bit one. The console
also gives the saved file's figure as an rms per LR pixel in 8-bit levels,
``||A x - b|| / sqrt(#LR pixels) * 255``, and the clipping's alone.

Tiling (``--tile N``, N in LR pixels): the convolutional parts -- the backbone and the layer's
denoiser, which hold all the many-channel feature maps -- run on N x N LR tiles (N*s x N*s in HR,
so tile boundaries are multiples of the scale) with an overlap of at least their receptive field,
which makes every tile's output exactly what the full-image network gives there. The layer's
fixed-point iteration and its projection ``P_S`` run on the whole image (a few image-sized
channels; the final ``P_S`` makes the whole output consistent). Solving the layer tile by tile
instead does not reproduce the untiled result: its fixed point depends on pixels far outside any
practical overlap (docs/benchmarks.md, "Measurements behind implementation choices").

Exit status: 0 when every image succeeded (or, with ``--skip-existing``, had all its outputs already), 1 when
some failed (the others are still written), 2 for a usage/set-up error (bad option, weights, device) before any
image is processed. Nothing is overwritten without ``--force``, and every file is written under a temporary name in
OUTDIR first.
"""
import glob
import os
import os.path as osp
import re
import sys
import threading
import time

import cv2
import numpy as np
import torch
from tqdm import tqdm

from ..archs.layer_settings import LayerSettings
from ..deq import release_cuda_graph_memory
from ..ops import fold_channels, imresize, reflect_pad, repeat_samples
from ..utils.checkpoint import (CheckpointError, read_checkpoint, saved_record, select_state_dict, split_record,
                                state_dict_mismatch)
from ..utils.color import luma, ycbcr_to_rgb
from ..utils.figure import compose_figure, to_u8_bgr
from ..utils.files import append_csv
from ..utils.image_files import (IMAGE_EXTENSIONS, ImageError, encode_png, find_gt, read_gt, read_image, split_image,
                                 to_array, write_atomic)
from ..utils.progress import solver_progress
from ..utils.tiling import global_ops, needs_tiling, tiles
from ..zoo.pretrained import (TRAINED_FOR, backbone_name, build_pretrained_mcnet, check_available, default_eps_rms,
                              describe_layer, layer_file, layer_file_options)
from .measurement import resolve_measurement
from .options import UsageError, one_line, parse_command, print_error

MIN_LR_SIDE = 4  # smallest LR width/height accepted
NOT_CONVERGED = 'not converged'  # summary.csv's status of a solve stopped by --iters before reaching --tol
SUMMARY_FIELDS = ('run', 'input', 'status', 'error', 'output', 'compare', 'in_h', 'in_w', 'out_h', 'out_w', 'channels',
                  'bit_depth', 'scale', 'tiles', 'iterations', 'solver_residual', 'eps', 'fidelity', 'fidelity_clipped',
                  'fidelity_saved', 'psnr_bicubic', 'psnr_backbone', 'psnr_mcnet', 'seconds')


class Refused(ImageError):
    """An input not processed because its outputs would replace files (no --force) or those of another input: an
    error line and exit status 1, no row in summary.csv."""


# ---------------------------------------------------------------------------------------- inputs
def collect_inputs(specs):
    """[(path, error)] in command-line order; folders and globs expanded (sorted), duplicates dropped."""
    found, seen = [], set()

    def add(path):
        key = osp.realpath(path)
        if key not in seen:
            seen.add(key)
            found.append((path, None))

    def is_image_file(path):
        return osp.isfile(path) and path.lower().endswith(IMAGE_EXTENSIONS)

    for spec in specs:
        if osp.isdir(spec):
            files = sorted(f for f in (osp.join(spec, n) for n in os.listdir(spec)) if is_image_file(f))
            if not files:
                found.append((spec, 'folder holds no PNG/JPEG/BMP/TIFF files'))
            for f in files:
                add(f)
        elif osp.lexists(spec):
            add(spec)  # an explicit file is tried whatever its name; reading it decides
        elif glob.has_magic(spec):
            matches = sorted(glob.glob(spec))
            files = [m for m in matches if is_image_file(m)] + [
                f for m in matches if osp.isdir(m) for f in sorted(osp.join(m, n) for n in os.listdir(m))
                if is_image_file(f)
            ]
            if not files:
                found.append((spec, 'no image file matches this pattern'))
            for f in files:
                add(f)
        else:
            found.append((spec, 'no such file or folder'))
    return found


# ---------------------------------------------------------------------------------------- models
_SCALE_IN_NAME = re.compile(r'(?<![a-z0-9])x([1-9])(?![0-9])')


def _scale_from_name(path):
    found = set(_SCALE_IN_NAME.findall(osp.basename(path).lower()))
    return int(found.pop()) if len(found) == 1 else None


def _check_scale(path, what, scale, checkpoint=None):
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get('scale'), int):
        trained, how = checkpoint['scale'], 'its "scale" entry'
    else:
        trained, how = _scale_from_name(path), 'its file name'
    if trained is not None and trained != scale:
        raise UsageError(f'{path}: {what} is for x{trained} (from {how}) but --scale is {scale}')


def read_layer_weights(path):
    """The checkpoint and state dict of an MCNet layer file (a one-line UsageError where it is not one)."""
    try:
        ckpt = read_checkpoint(path)
    except CheckpointError as err:
        raise UsageError(f'layer {err}') from None
    try:
        return ckpt, select_state_dict(ckpt, ('params', 'params_ema'), source=path)
    except CheckpointError:
        raise UsageError(f'{path}: not an MCNet layer checkpoint (expected a BasicSR {{"params": state_dict}} file)') \
            from None


def load_layer_weights(model, path, scale, ckpt, state):
    """Load an MCNet layer checkpoint strictly (``ckpt``, ``state``: :func:`read_layer_weights` of ``path``), with a
    one-line error for anything that does not fit.

    A layer records the backbone and scale it was trained for (``MCNetArch.trained_for``, read by ``saved_record``):
    that record, not the file's name, decides whether it fits the command's model. Only a layer saved without one is
    checked by the checkpoint's ``scale`` entry or its file name.
    """
    trained, _ = split_record(saved_record(state))  # a layer may serve another operator (the CLI says which)
    if trained is None:
        _check_scale(path, 'the layer checkpoint', scale, ckpt)
    elif trained != model.trained_for():
        raise UsageError(f'{path}: this MCNet layer was trained for {trained} (the record saved in it), but '
                         f'--backbone and --scale ask for {model.trained_for()}: give the layer trained for that '
                         'backbone and scale')
    mismatch = state_dict_mismatch(model, state)
    if mismatch:
        raise UsageError(f'{path}: not an MCNet layer checkpoint for this model ({mismatch})')
    try:
        model.load_state_dict(state, strict=True)
    except (RuntimeError, ValueError) as err:  # anything else the model refuses: one line, exit status 2
        raise UsageError(f'{path}: {one_line(err, 200)}') from None


def _file_key(path):
    if path is None:
        return None
    st = os.stat(path)
    return (osp.realpath(path), st.st_size, st.st_mtime_ns)


def _start_cuda_in_background(device):
    """Start CUDA on a daemon thread, so that its start-up (about a second on a GPU host) overlaps the model's CPU
    work (weights, spectral norms); the first CUDA call of the main thread waits for it (torch's lazy
    initialisation holds a lock) and reports any error itself. The thread then loads cuBLAS and cuDNN with one tiny
    product (float32 and float64, as the solve and the final projection use) and one tiny convolution: their
    first use costs some hundreds of milliseconds, which the main thread would otherwise pay on its first image."""
    if device.type != 'cuda' or torch.cuda.is_initialized():
        return

    def init():
        try:
            torch.cuda.init()
            with torch.no_grad():
                for dtype in (torch.float32, torch.float64):
                    ones = torch.ones(8, 8, device=device, dtype=dtype)
                    ones @ ones
                torch.nn.functional.conv2d(torch.ones(1, 1, 8, 8, device=device), torch.ones(1, 1, 3, 3, device=device))
            torch.cuda.synchronize(device)
        except Exception:  # noqa: BLE001 -- the main thread's first CUDA call raises it again, with its context
            pass

    threading.Thread(target=init, name='cuda-init', daemon=True).start()


def get_model(scale, device, backbone_path=None, weights_path=None, backbone='srcnn', cache=None, eps_rms=None,
              channels=None, family='bicubic'):
    """The shipped MCNet at ``scale`` (eval mode, on ``device``), optionally with other weights, with the
    consistency radius ``eps_rms`` (None: exact) and ``channels`` (MCNetArch's options; None: 'y', or an untrained
    layer's own); ``family`` 'kernels' / 'resizers': the backbone's layer trained on blur kernels / on resizers (an
    untrained layer's cards).

    ``cache``: a dict the caller keeps to reuse models across calls in one process (the first solve of a model
    estimates its spectral norms, seconds); None builds a new model.
    """
    key = (scale, str(device), backbone, _file_key(backbone_path), _file_key(weights_path), eps_rms, channels, family)
    if cache is not None and key in cache:
        return cache[key]
    try:
        check_available(backbone, scale, backbone_path, family)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if backbone_path is not None:
        _check_scale(backbone_path, 'the backbone checkpoint', scale)
        try:  # readable at all? (a clearer message than the arch's)
            read_checkpoint(backbone_path)
        except CheckpointError as err:
            raise UsageError(f'backbone {err}') from None
    # a layer given by file: the model is built for it (a beta per noise level, a hyper-network) and loads it below
    layer_file = read_layer_weights(weights_path) if weights_path is not None else None
    file_options = layer_file_options(layer_file[1]) if layer_file is not None else None
    _start_cuda_in_background(device)
    try:
        # the shipped learned start was fitted to the shipped layer: another layer's solve begins at P_S(w)
        model = build_pretrained_mcnet(scale, device='cpu', backbone_path=backbone_path, backbone=backbone,
                                       start=weights_path is None, eps_rms=eps_rms, channels=channels,
                                       family=family, layer=weights_path is None, file_options=file_options)
    except FileNotFoundError as err:
        raise UsageError(one_line(err)) from None
    except Exception as err:
        if backbone_path is None:
            raise
        raise UsageError(f'{backbone_path}: does not fit the {backbone_name(backbone)} backbone '
                         f'({one_line(err, 200)})') from None
    if weights_path is not None:
        load_layer_weights(model, weights_path, scale, *layer_file)
    model = model.eval()
    with torch.no_grad():
        # a DnCNN prior's spectral norm: exact, from the DFT, on the CPU (the slow part; CUDA starts meanwhile); in
        # eval mode it is kept until the weights or the stored norm change (a move to the GPU keeps it), so a result
        # does not depend on what the model ran before. Other priors keep no such estimate.
        model.refresh_prior()
    model = model.to(device)
    if cache is not None:
        cache[key] = model
    return model


def resolve_device(name):
    if name == 'auto':
        return torch.device('cuda' if torch.cuda.is_available() else 'cpu')
    if name == 'cuda' and not torch.cuda.is_available():
        raise UsageError('--device cuda: no CUDA device is available')
    return torch.device(name)


# ---------------------------------------------------------------------------------------- inference
def model_line(args, measurement):
    """The run's first console line: the model, the layer it runs (its file and what it was trained for, or an
    untrained layer's prior and beta) and ``A``."""
    if args.weights is None:
        layer = f'layer {describe_layer(args.backbone, args.scale, measurement.family)}'
        if layer_file(args.backbone, args.scale, measurement.family):  # an untrained layer says so itself
            layer += f' (trained for {TRAINED_FOR[measurement.family]})'
    else:
        layer = f'layer {args.weights}'
    return f'MCNet + {backbone_name(args.backbone)} x{args.scale}: {layer}, A = {measurement.name}'


def super_resolve(model, colour, tile=None, operator=None, noise_sigma=None):
    """MCNet on one image, as :meth:`MCNetArch.forward`, optionally tiled, under the model's settings in force
    (``with model.settings(...)``; the tile is this call's).

    Args:
        colour (Tensor): (1, 3 or 1, h, w) float64 LR in [0, 1] (RGB or Y) on the model's device.
        tile (int | None): LR tile size.
        operator (DownsampleOperator | None): what made ``colour`` (default: the layer's).
        noise_sigma (float | None): standard deviation of the noise on each LR value, in [0, 1] units.

    Returns:
        dict: ``sr`` (float64 result, RGB or Y), ``y`` (its Y), ``w`` / ``cbcr`` (backbone estimate),
        ``b`` (float64 LR Y), ``eps`` (of the solve), ``stats`` (SolverStats of the solve: one sample per channel
        with 'rgb'), ``tiles`` (number of tiles); over every channel: ``iterations`` and ``residual`` (the largest),
        ``converged`` (every channel reached its tolerance before its iteration cap).
        With the layer's ``channels`` 'rgb' and colour input, R, G and B are each consistent, one solve per channel.
    """
    h, w = colour.shape[-2:]
    if colour.shape[1] == 1 and model.backbone_channels == 3:
        # gray is taken as Y; an RGB network would need colour we do not have
        raise ValueError(f'gray image: the {type(model.backbone).__name__} backbone takes RGB input; '
                         'use --backbone srcnn for gray images')
    lr = colour.float()
    operator = model.measurement_operator(operator)
    n_tiles = len(list(tiles(h, w, tile))) if needs_tiling(lr, tile) else 1

    # the arch's own pieces, as its forward runs them (tiles included)
    with torch.no_grad(), model.settings(tile=tile):
        # a non-blind backbone (FFDNetPnP) is told what made the LR, as the layer is
        w_y, cbcr = model.backbone_estimate(lr, operator=operator, noise_sigma=noise_sigma)
        # on Y (b = Y of the float64 LR) or per channel, as the layer's channels say; float64 out from float64 LR
        w_, b, op, sigma = model.measured_problem(w_y, cbcr, colour.double(), operator, noise_sigma)
        x, info = model.solve(w_.float(), b, op, sigma)
        stats, eps = info['forward'], info['eps']
        # solve() ends with P_S in float64 but returns float32; one more exact P_S on the full image
        # keeps the result in float64, so its consistency is not limited by float32 rounding.
        x = op.project(x.double(), b, eps)
        sr = model.measured_image(x, cbcr, colour.double())
        y = luma(sr) if model.per_channel(cbcr) else x
    return {'sr': sr, 'y': y, 'w': w_y, 'cbcr': cbcr, 'b': luma(colour.double()), 'eps': eps, 'stats': stats,
            'tiles': n_tiles, 'iterations': int(stats.iterations.max()), 'residual': float(stats.residual.max()),
            'converged': bool(stats.converged.all())}


def crop_result(result, pad, scale):
    """:func:`super_resolve`'s result on an input padded by ``pad`` LR pixels, cut back to the input's part."""
    out = dict(result)
    for key in ('sr', 'y', 'w', 'cbcr'):
        if out.get(key) is not None:
            out[key] = out[key][..., pad * scale:-pad * scale, pad * scale:-pad * scale]
    out['b'] = out['b'][..., pad:-pad, pad:-pad]
    return out


def fidelity(operator, img, lr, channels='y'):
    """||A x - b||_2 in float64, images in [0, 1]: of Y(img) against Y(lr), or with ``channels`` 'rgb' (colour) the
    largest of R, G and B's."""
    img, lr = img.double(), lr.double()
    if channels == 'rgb' and img.shape[1] == 3:
        return float(repeat_samples(operator, 3).residual_norm(fold_channels(img), fold_channels(lr)).max())
    return float(operator.residual_norm(luma(img), luma(lr))[0])


# ---------------------------------------------------------------------------------------- figure
def make_figure(model, colour, result, gt_arr, scale):
    """The comparison figure and the PSNRs {bicubic, backbone, mcnet} (None without GT)."""
    with torch.no_grad():
        bicubic = imresize(colour.double(), scale)
        w, cbcr = result['w'].double(), result['cbcr']
        backbone = w if cbcr is None else ycbcr_to_rgb(torch.cat([w, cbcr.double()], dim=1))
    named = [('Bicubic', bicubic), (type(model.backbone).__name__, backbone), ('MCNet', result['sr'])]
    psnr, panels = {}, []
    for (title, img), key in zip(named, ('bicubic', 'backbone', 'mcnet')):
        bgr, metric_img = to_u8_bgr(img)
        if gt_arr is not None:
            from basicsr.metrics import calculate_psnr  # only here: importing basicsr costs seconds
            psnr[key] = float(calculate_psnr(metric_img, gt_arr, crop_border=scale, test_y_channel=True))
            title = f'{title} {psnr[key]:.2f} dB'
        panels.append((title, bgr))
    if gt_arr is not None:
        gt_bgr = np.repeat(gt_arr[:, :, None], 3, axis=2) if gt_arr.ndim == 2 else gt_arr
        panels.append(('Ground truth', gt_bgr))
    return compose_figure(panels, scale), psnr


# ---------------------------------------------------------------------------------------- main loop
def claim_outputs(row, args, out_names):
    """The output paths of the input ``row['input']`` (image, comparison figure or None), recorded in ``out_names``
    (output -> input) for this run; None where ``--skip-existing`` leaves the input alone (``row['status']``:
    'skipped'). Raises :class:`Refused` where its outputs are in the way."""
    path = row['input']
    stem = osp.splitext(osp.basename(path))[0]
    out_path = osp.join(args.output, f'{stem}_x{args.scale}.png')
    cmp_path = osp.join(args.output, f'{stem}_compare.png') if args.compare else None
    outputs = [p for p in (out_path, cmp_path) if p]
    for p in outputs:
        if p in out_names:
            raise Refused(f'output {p} would also be written for {out_names[p]} in this run (same file stem)')
    if args.skip_existing and all(osp.lexists(p) for p in outputs):
        out_names.update(dict.fromkeys(outputs, path))
        row.update(status='skipped', output=out_path, compare=cmp_path or '')
        return None
    for p in outputs:
        if not args.force and osp.lexists(p):
            raise Refused(f'{p} already exists (use --force to overwrite it, or --skip-existing to skip the inputs '
                          'whose outputs all exist)')
    out_names.update(dict.fromkeys(outputs, path))
    return out_path, cmp_path


def read_input(row, args, measurement, n_inputs, with_gt):
    """The input image of ``row`` as ``(colour, alpha, peak)`` (:func:`split_image`) and its ground truth (None
    without ``with_gt``); its sizes go into ``row``. Raises ImageError where it cannot be processed."""
    path = row['input']
    img = read_image(path)
    h, w = img.shape[:2]
    row.update(in_h=h, in_w=w, out_h=h * args.scale, out_w=w * args.scale,
               channels=1 if img.ndim == 2 else img.shape[2], bit_depth=img.dtype.itemsize * 8)
    if min(h, w) < MIN_LR_SIDE:
        raise ImageError(f'image too small ({w}x{h}); at least {MIN_LR_SIDE}x{MIN_LR_SIDE} pixels are needed')
    measurement.check_fits(h, w, args.scale)
    gt_path = find_gt(args.gt, path, n_inputs) if with_gt else None
    colour, alpha, peak = split_image(img)
    gt_arr = read_gt(gt_path, h * args.scale, w * args.scale, args.scale, colour.shape[1]) if gt_path else None
    return (colour, alpha, peak), gt_arr


def solve_image(model, colour, args, measurement, label):
    """:func:`super_resolve` of ``colour`` under the command's settings, with a solver progress bar (``label``) on the
    CPU; with a reflection boundary solved on the padded input and cut back."""
    pad = measurement.padding
    # on CUDA the solve is short, and iterations replayed from a CUDA graph would not tick a Python counter
    with solver_progress(args.iters, f'{label} solve', enabled=colour.device.type == 'cpu',
                         tol=args.tol) as observer, model.settings(command_settings(args), observer=observer):
        result = super_resolve(model, reflect_pad(colour, pad, pad, pad, pad) if pad else colour, args.tile,
                               measurement.operator, measurement.noise_sigma)
    return crop_result(result, pad, args.scale) if pad else result


def measure_result(model, measurement, result, colour, alpha, peak, scale):
    """The output array to write (bit depth and channels of the input) and the summary's figures of the result:
    solve statistics, status, eps and ``||Ax - b||`` of the float result, of it clipped to [0, 1] and of the array."""
    sr = result['sr']
    if not bool(torch.isfinite(sr).all()):
        raise ImageError('the result contains NaN/inf values (check the weights)')
    # measured against the model that made the input
    operator = measurement.measured_by if measurement.measured_by is not None else \
        model.measurement_operator(measurement.operator)
    lr = colour.double()
    if alpha is not None:
        alpha = imresize(alpha.to(colour.device), scale).clamp(0, 1)
    arr = to_array(sr, alpha, peak)
    saved_colour, _, _ = split_image(arr)
    return arr, dict(tiles=result['tiles'], iterations=result['iterations'], solver_residual=result['residual'],
                     status='ok' if result['converged'] else NOT_CONVERGED, eps=float(result['eps']),
                     fidelity=fidelity(operator, sr, lr, model.channels),
                     # what the file's RGB keeps before rounding
                     fidelity_clipped=fidelity(operator, sr.clamp(0, 1), lr, model.channels),
                     fidelity_saved=fidelity(operator, saved_colour.to(colour.device), lr, model.channels))


def process_image(row, args, model, device, out_names, n_inputs, measurement):
    """Process the input ``row['input']``, made as ``measurement`` says, filling its summary ``row`` (``status`` 'ok',
    or 'not converged' where the solve stopped at --iters before --tol); raises on failure (:class:`Refused` where
    outputs are in the way). With ``--skip-existing`` an input whose outputs all exist is left alone
    (``row['status']``: 'skipped')."""
    outputs = claim_outputs(row, args, out_names)
    if outputs is None:
        return
    out_path, cmp_path = outputs
    (colour, alpha, peak), gt_arr = read_input(row, args, measurement, n_inputs, with_gt=cmp_path is not None)
    colour = colour.to(device)
    result = solve_image(model, colour, args, measurement, osp.basename(row['input']))
    arr, figures = measure_result(model, measurement, result, colour, alpha, peak, args.scale)
    row.update(figures)
    if cmp_path:
        figure, psnr = make_figure(model, colour, result, gt_arr, args.scale)
        row.update({f'psnr_{k}': v for k, v in psnr.items()})
        fig_bytes = encode_png(figure)
    write_atomic(out_path, encode_png(arr), args.force)
    row['output'] = out_path
    if cmp_path:
        write_atomic(cmp_path, fig_bytes, args.force)
        row['compare'] = cmp_path


def command_settings(args):
    """The layer settings the command runs the model under (:class:`~mcnet_basicsr.archs.layer_settings.LayerSettings`):
    the 'fast' solver preset with the command's tolerance and iterations, and its extrapolation."""
    # CUDA graphs (ignored on the CPU and for eps > 0) replay the same iterations without launch overhead;
    # the tiled denoiser is kept eager (its loop over tiles is not part of what the graph tests cover)
    return LayerSettings.from_options({
        'solver': {'forward': {'preset': 'fast', 'tol': args.tol, 'max_iter': args.iters,
                               'cuda_graph': not args.no_cuda_graph and args.tile is None}},
        'extrapolation': args.extrapolation})


def prepare_model(args, measurement, device, models=None):
    """The model the options ask for, on ``device``, with the command's consistency radius, and the family and
    channels of ``measurement`` (its solver settings: :func:`command_settings`)."""
    eps_rms = args.eps_rms if args.eps_rms is not None else default_eps_rms(args.backbone)
    # channels 'rgb': the layer's own per-channel solve (MCNetArch.measured_problem)
    model = get_model(args.scale, device, args.backbone_weights, args.weights, args.backbone, cache=models,
                      eps_rms=eps_rms, channels=measurement.channels, family=measurement.family)
    if args.tile is not None and global_ops(model.backbone):
        # a tile would see its own mean, not the image's: the tiled output would not be the network's
        raise UsageError(f'--tile is not exact for the {args.backbone} backbone: it pools over the whole image '
                         f'({global_ops(model.backbone)[0]}, ...); run without --tile')
    if args.tile is not None and model.frozen.non_blind:
        raise UsageError(f'--tile: the {args.backbone} backbone is told the operator of the whole image and runs '
                         'untiled; run without --tile')
    if device.type == 'cpu':
        # oneDNN's channels-last convolutions run the denoiser, i.e. every iteration, faster on the CPU (float32
        # throughout; the result moves by float32 rounding only). On the GPU float32 channels-last convolutions were
        # slower (docs/benchmarks.md). The denoiser runs once per iteration, the backbone once per
        # image, so only the denoiser is converted, and the learned start (eight convolutions, once per image: about
        # 1.3 iterations' work)
        model.denoiser.to(memory_format=torch.channels_last)
        if model.start is not None:
            model.start.to(memory_format=torch.channels_last)
    return model


def run(args, models=None):
    cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)  # decoder warnings: we report our own
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    inputs = collect_inputs(args.inputs)
    device = resolve_device(args.device)
    measurement = resolve_measurement(args)
    model = prepare_model(args, measurement, device, models)
    os.makedirs(args.output, exist_ok=True)
    print(model_line(args, measurement), flush=True)

    rows, failed, refused, skipped, capped, out_names = [], 0, 0, 0, 0, {}
    run_started = time.strftime('%Y-%m-%dT%H:%M:%S%z')
    n_images = sum(err is None for _, err in inputs)
    bar = tqdm(inputs, desc='mcnet-sr', unit='img', disable=None, file=sys.stderr)
    for path, err in bar:
        start = time.perf_counter()
        row = {'run': run_started, 'input': path, 'scale': args.scale}
        try:
            if err is not None:
                raise ImageError(err)
            process_image(row, args, model, device, out_names, n_images, measurement)
        except Exception as exc:  # one image's failure (bad file, out of memory, ...) must not stop the run
            failed += 1
            msg = one_line(exc if isinstance(exc, ImageError) else f'{type(exc).__name__}: {exc}')
            tqdm.write(f'error: {path}: {msg}', file=sys.stderr)
            if isinstance(exc, Refused):  # an input refused before any work adds no row
                refused += 1
            else:
                rows.append(row)
                row.update(status='error', error=msg, seconds=time.perf_counter() - start)
            if device.type == 'cuda':  # e.g. out of memory: give the next image the whole device
                release_cuda_graph_memory(device)
                torch.cuda.empty_cache()
            continue
        if row.get('status') == 'skipped':  # done before: no row, its outputs' rows are those of that run
            skipped += 1
            tqdm.write(f'{path}: skipped, {row["output"]} exists')
            continue
        rows.append(row)
        row['seconds'] = time.perf_counter() - start
        capped += row['status'] == NOT_CONVERGED
        tqdm.write(image_line(row, args, model, measurement))
    summary = append_csv(args.output, 'summary', SUMMARY_FIELDS, rows)
    skipped_txt = f', {skipped} skipped (done before: outputs exist)' if args.skip_existing else ''
    refused_txt = f' ({refused} refused: outputs in the way)' if refused else ''
    capped_txt = f', {capped} stopped at --iters {args.iters} before --tol' if capped else ''
    print(f'{len(inputs) - failed - skipped} of {len(inputs)} image(s) done{skipped_txt}, {failed} failed{refused_txt}'
          f'{capped_txt}; summary: {summary}', flush=True)
    return 1 if failed else 0


def image_line(row, args, model, measurement):
    """The console line of a processed image: its size, the solve, ``||Ax-b||`` of the float result and of the saved
    file, Y-PSNRs with --compare --gt, the time; a solve stopped at --iters before --tol says so. With --verbose,
    also the solver's residual, the saved file's rms per LR pixel and the clipping's share, and the operator."""
    verbose = getattr(args, 'verbose', False)
    name = row['input'] if verbose else osp.basename(row['input'])
    solve = f'{row["iterations"]} iters'
    if row['status'] == NOT_CONVERGED:
        solve += f' (stopped at --iters: residual {row["solver_residual"]:.1e} > --tol {args.tol:g})'
    elif verbose:
        solve += f', residual {row["solver_residual"]:.2e}'
    if verbose:
        levels = 255 / (row['in_h'] * row['in_w'])**0.5  # ||Ax-b|| -> rms per LR pixel in 8-bit levels
        measured = 'the largest of R, G, B' if model.channels == 'rgb' and row['channels'] >= 3 else 'on Y'
        fid = (f'||Ax-b|| {row["fidelity"]:.2e} float, {row["fidelity_saved"]:.2e} saved {row["bit_depth"]}-bit '
               f'(rms {row["fidelity_saved"] * levels:.3f}/255 per LR pixel; clipping to [0, 1] alone: '
               f'{row["fidelity_clipped"] * levels:.3f}/255) [A = {measurement.name}, {measured}]')
    else:
        fid = f'||Ax-b|| {row["fidelity"]:.1e} / {row["fidelity_saved"]:.1e} saved'
    psnr = ''
    if row.get('psnr_mcnet') is not None:
        psnr = (f', Y-PSNR {row["psnr_mcnet"]:.2f} dB, {backbone_name(args.backbone)} {row["psnr_backbone"]:.2f}, '
                f'bicubic {row["psnr_bicubic"]:.2f}')
    tiles = f', {row["tiles"]} tiles' if row['tiles'] > 1 else ''
    return (f'{name}: {row["in_w"]}x{row["in_h"]} -> {row["out_w"]}x{row["out_h"]}, {solve}, {fid}{psnr}{tiles}, '
            f'{row["seconds"]:.1f} s')


def execute(args, models=None):
    """Process the images of parsed, checked options (:func:`.options.parse_args`); returns the exit status."""
    try:
        return run(args, models)
    except UsageError as err:
        print_error(err)
        return 2
    except OSError as err:  # e.g. OUTDIR cannot be created or summary.csv cannot be written
        print_error(one_line(err))
        return 2


def main(argv=None, models=None):
    """``python -m mcnet_basicsr.cli.inference``, as :func:`.main.main`: 0 ok, 1 some images failed, 2 usage error."""
    args, status = parse_command(sys.argv[1:] if argv is None else argv)
    return status if args is None else execute(args, models)


if __name__ == '__main__':
    sys.exit(main())
