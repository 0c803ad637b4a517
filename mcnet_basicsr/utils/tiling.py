"""Running convolutional networks on overlapping tiles whose stitched output is exactly the untiled one.

A tile's core is exact when the overlap is at least the network's receptive-field radius; networks with
global pooling (RCAN's channel attention) see a tile's statistics instead of the image's and cannot be tiled
exactly (:func:`global_ops` names those layers).
"""
import math

from torch import nn


def conv_radius(module):
    """Upper bound of the receptive-field radius of a conv net: sum of the convolutions' half-widths."""
    return sum(((k - 1) // 2) * d for m in module.modules() if isinstance(m, nn.Conv2d)
               for k, d in [(max(m.kernel_size), max(m.dilation))])


def global_ops(module):
    """Names of layers that see the whole input (global pooling, e.g. RCAN's channel attention)."""
    return [name for name, m in module.named_modules()
            if isinstance(m, (nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d))]


def tiles(h, w, tile):
    """(y0, x0, y1, x1) of the ``tile`` x ``tile`` cores covering an h x w image."""
    for y0 in range(0, h, tile):
        for x0 in range(0, w, tile):
            yield y0, x0, min(h, y0 + tile), min(w, x0 + tile)


def needs_tiling(x, tile):
    """``tile`` is set and smaller than ``x``'s height or width (last two dims)."""
    return tile is not None and (tile < x.shape[-2] or tile < x.shape[-1])


def apply_tiled(fn, x, tile, overlap, out_scale=1):
    """``fn`` on ``tile`` x ``tile`` tiles of ``x`` (last two dims) with ``overlap``, tile cores stitched.

    ``fn`` returns a tensor or a tuple of tensors/None at ``out_scale`` times its input's size.
    """
    h, w = x.shape[-2:]
    s = out_scale
    outs, is_tuple = None, False
    for y0, x0, y1, x1 in tiles(h, w, tile):
        py0, px0, py1, px1 = max(0, y0 - overlap), max(0, x0 - overlap), min(h, y1 + overlap), min(w, x1 + overlap)
        res = fn(x[..., py0:py1, px0:px1])
        is_tuple = isinstance(res, tuple)
        res = res if is_tuple else (res, )
        if outs is None:
            outs = [None if r is None else r.new_empty(*r.shape[:-2], h * s, w * s) for r in res]
        for out, r in zip(outs, res):
            if out is not None:
                core = r[..., (y0 - py0) * s:(y1 - py0) * s, (x0 - px0) * s:(x1 - px0) * s]
                out[..., y0 * s:y1 * s, x0 * s:x1 * s] = core
    return tuple(outs) if is_tuple else outs[0]


def backbone_tile_overlap(scale, backbone, backbone_input):
    """Overlap in LR pixels that makes every tile's core output of a backbone exact."""
    r_backbone = conv_radius(backbone)
    if backbone_input == 'upsampled':  # MATLAB bicubic upsampling reaches 2-3 LR pixels
        return math.ceil(r_backbone / scale) + 4
    return r_backbone + 2  # convs on LR (HR convs after the upsampler counted as LR: an over-estimate)


def denoiser_tile_overlap(scale, denoiser):
    """Overlap in LR pixels that makes every tile's core output of a denoiser on HR images exact."""
    return math.ceil(conv_radius(denoiser) / scale) + 1
