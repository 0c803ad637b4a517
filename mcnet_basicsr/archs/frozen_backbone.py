"""The frozen SR backbone of MCNetArch and TVTV: how its ``backbone`` option is read, how it is fed (LR or upsampled
LR, RGB or Y; a non-blind network also the measurement of the call), its precision, its tiles and the colour
conversion of its estimate."""
from copy import deepcopy
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np
import torch

from mcnet_basicsr.ops import imresize
from mcnet_basicsr.utils.checkpoint import load_network
from mcnet_basicsr.utils.color import rgb_to_ycbcr
from mcnet_basicsr.utils.registration import build_network
from mcnet_basicsr.utils.tiling import apply_tiled, backbone_tile_overlap, needs_tiling
from .backbone_presets_arch import resolve_backbone

# the keys of the ``backbone`` option in its long form
BACKBONE_KEYS = ('net', 'path', 'param_key', 'input', 'channels')


@dataclass(frozen=True)
class BackboneOptions:
    """The ``backbone`` option: the frozen SR network and how it is fed.

    Attributes:
        net (str | dict): The name of a shipped configuration, built at the layer's scale ('srcnn', 'rcan_compact',
            'rdn_compact', 'imdn', 'pan', 'ffdnet_pnp'; see ``backbone_presets_arch.py``), or BasicSR
            ``network_g``-style options of any registered arch (``{type: RCAN, num_feat: 64, ..., upscale: 2}``).
        path (str | None): Its checkpoint. Default: None (random weights).
        param_key (str): The key of the state dict in the checkpoint. Default: 'params'.
        input (str | None): 'lr' (the LR image) or 'upsampled' (MATLAB-bicubic upsampled LR, as SRCNN expects).
            Default: None (the preset's; 'lr' for network options).
        channels (int | None): 3 (RGB in/out) or 1 (Y in/out). Default: None (the preset's; 3 for network
            options).
    """

    net: Union[str, dict]
    path: Optional[str] = None
    param_key: str = 'params'
    input: Optional[str] = None
    channels: Optional[int] = None

    @classmethod
    def from_options(cls, backbone):
        """From the option as written: a preset name or network options (a dict with ``type``) alone, which stand
        for ``{net: that}``, or a dict of :data:`BACKBONE_KEYS`. Unknown keys, or a missing ``net``: ValueError."""
        if isinstance(backbone, BackboneOptions):
            return backbone
        if isinstance(backbone, str) or (isinstance(backbone, dict) and 'type' in backbone):
            return cls(net=backbone)
        if not isinstance(backbone, dict) or 'net' not in backbone:
            raise ValueError(f'backbone must be a preset name, network_g-style options or {{net: ..., path: ...}} '
                             f'(keys {list(BACKBONE_KEYS)}), got {backbone!r}.')
        unknown = [k for k in backbone if k not in BACKBONE_KEYS]
        if unknown:
            raise ValueError(f'Unknown backbone option(s) {unknown}; allowed are {list(BACKBONE_KEYS)}.')
        return cls(**backbone)


def is_non_blind(net):
    """Whether ``net`` is told the measurement, ``forward(lr, kernel, scale, sigma)`` (its class sets
    ``non_blind = True``, as :class:`~mcnet_basicsr.archs.usrnet_arch.USRNet`), or ``forward(lr, operator, sigma)``
    where its class also sets ``takes_operator = True`` (:class:`~mcnet_basicsr.archs.ffdnet_arch.FFDNetPnP`)."""
    return getattr(type(net), 'non_blind', False)


def non_blind_forward(net, lr, operator, noise_sigma=None):
    """A non-blind ``net`` on LR ``lr`` (N, C, h, w) measured by ``operator`` with noise of std ``noise_sigma`` (None:
    none; a float or an (N,) tensor): told the operator itself where it takes one, else the operator's blur kernel
    (an (1 or N, 1, kh, kw) tensor) of its ``circular_blur`` (upper-left decimation: the operator itself for a
    blur with offset 0; for a resizer or a blur with another offset or boundary, the circular blur equal to it away
    from the borders) and its scale; and the noise. A kernel-taking ``net`` and an operator without one: ValueError.
    ``net`` may be wrapped in (Distributed)DataParallel."""
    sigma = 0.0 if noise_sigma is None else noise_sigma
    kind = type(getattr(net, 'module', net))
    if getattr(kind, 'takes_operator', False):
        return net(lr, operator, sigma)
    if not hasattr(operator, 'circular_blur'):
        raise ValueError(f'{kind.__name__} is non-blind (told the blur kernel of upper-left decimation); the '
                         f'operator {operator!r} has no such kernel: give a blur, a resizer or a stack of them.')
    kernel = torch.from_numpy(np.array(operator.circular_blur().kernel, dtype=np.float32)).to(lr.device)
    return net(lr, kernel.reshape(-1, 1, *kernel.shape[-2:]), operator.scale, sigma)


def check_backbone_options(backbone_input, backbone_channels):
    """Validate how a backbone is fed."""
    if backbone_input not in ('lr', 'upsampled'):
        raise ValueError(f"backbone input must be 'lr' or 'upsampled', got {backbone_input!r}.")
    if backbone_channels not in (1, 3):
        raise ValueError(f'backbone channels must be 1 or 3, got {backbone_channels!r}.')


class FrozenBackbone:
    """A frozen SR network (eval, no grad) and how it is fed.

    Not an ``nn.Module``: a layer holding one keeps it out of its ``parameters()`` (the optimizer, DDP and EMA would
    see it) and its ``state_dict()`` (checkpoints store only what the layer learns; the backbone is loaded from its
    own path). :class:`FrozenBackboneMixin` forwards the layer's device/dtype moves to it.

    Args:
        net (nn.Module): The network (frozen here).
        scale (int): Its upscaling factor.
        input (str): 'lr' or 'upsampled' (see :class:`BackboneOptions`).
        channels (int): 3 (RGB) or 1 (Y).
    """

    def __init__(self, net, scale, input, channels):
        check_backbone_options(input, channels)
        net.eval()
        for p in net.parameters():
            p.requires_grad_(False)
        self.net, self.scale, self.input, self.channels = net, scale, input, channels
        self.non_blind = is_non_blind(net)

    @classmethod
    def from_options(cls, backbone, scale, owner):
        """Build the ``backbone`` option (:class:`BackboneOptions`, a preset name at ``scale``) and load its weights;
        ``owner`` names the layer in the warning about a missing path."""
        options = BackboneOptions.from_options(backbone)
        net, backbone_input, channels = resolve_backbone(options.net, scale, options.input, options.channels)
        check_backbone_options(backbone_input, channels)
        net = build_network(deepcopy(net))
        if options.path is not None:
            load_network(net, options.path, options.param_key)
        else:
            from basicsr.utils import get_root_logger  # basicsr's log (importing basicsr registers our types)
            get_root_logger().warning(f'{owner}: no backbone path given; the backbone keeps its initial weights.')
        return cls(net, scale, backbone_input, channels)

    def tile_overlap(self):
        """Overlap in LR pixels of exact tiles."""
        return backbone_tile_overlap(self.scale, self.net, self.input)

    @torch.no_grad()
    def estimate(self, lr, dtype=None, tile=None, operator=None, noise_sigma=None):
        """Estimate at HR size: (Y, CbCr or None) from LR in [0, 1], under autocast to ``dtype`` on CUDA (None:
        float32), on ``tile`` x ``tile`` LR tiles when the image is larger. A non-blind network is told the
        measurement, ``operator`` and ``noise_sigma`` (:func:`non_blind_forward`), on the whole image."""
        if needs_tiling(lr, tile):
            if self.non_blind:
                raise ValueError(f'The non-blind backbone {type(self.net).__name__} inverts circular blur of the '
                                 f'whole image; it runs without tiles (tile {tile}, LR {tuple(lr.shape[-2:])}).')
            return apply_tiled(lambda x: self.estimate(x, dtype), lr, tile, self.tile_overlap(), out_scale=self.scale)
        if self.non_blind and operator is None:
            raise ValueError(f'The non-blind backbone {type(self.net).__name__} needs the measurement operator of '
                             'the call.')
        # the network sees the LR clipped to [0, 1], the range of the images it was trained on (noisy float LR goes
        # beyond it, and some networks, PAN among them, answer values outside it with outputs far outside it); a
        # layer's measurement ``b`` is the LR as given
        lr = lr.clamp(0, 1)
        rgb = lr.shape[1] == 3
        if rgb and self.channels == 1:
            ycbcr_lr = rgb_to_ycbcr(lr)
            net_in = ycbcr_lr[:, :1]
        else:
            net_in = lr
        if self.input == 'upsampled':
            net_in = imresize(net_in, self.scale)
        with torch.autocast(lr.device.type, dtype=dtype or torch.float32,
                            enabled=dtype is not None and lr.device.type == 'cuda'):
            out = non_blind_forward(self.net, net_in, operator, noise_sigma) if self.non_blind else self.net(net_in)
        out = out.to(lr.dtype)
        if not rgb:
            return out, None
        if self.channels == 1:
            return out, imresize(ycbcr_lr[:, 1:], self.scale)
        ycbcr = rgb_to_ycbcr(out)
        return ycbcr[:, :1], ycbcr[:, 1:]


class FrozenBackboneMixin:
    """For ``nn.Module`` layers holding a :class:`FrozenBackbone` in ``self.frozen``: exposes it as ``backbone`` and
    forwards device/dtype moves (``.to``, ``.cuda``, ``.double``) to it, which nn.Module would not do for a module
    outside its tree. ``run_backbone`` is its estimate in the layer's ``backbone_dtype``."""

    @property
    def backbone(self):
        return self.frozen.net

    @property
    def backbone_input(self):
        return self.frozen.input

    @property
    def backbone_channels(self):
        return self.frozen.channels

    def run_backbone(self, lr, operator=None, noise_sigma=None):
        """The backbone's estimate at HR size, (Y, CbCr or None), from LR in [0, 1] (:meth:`FrozenBackbone.estimate`
        on the whole image; a non-blind backbone told ``operator``, default the layer's, and ``noise_sigma``)."""
        return self.frozen.estimate(lr, self.backbone_dtype, None, self.operator if operator is None else operator,
                                    noise_sigma)

    def _apply(self, fn, *args, **kwargs):
        super()._apply(fn, *args, **kwargs)
        self.frozen.net._apply(fn, *args, **kwargs)
        return self
