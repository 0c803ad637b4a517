"""The learned start of :class:`~mcnet_basicsr.archs.mcnet_arch.MCNetArch` (its ``start`` option, with
the weights at its ``path``)."""
from dataclasses import dataclass
from typing import Optional

from torch import nn

from mcnet_basicsr.utils.checkpoint import CheckpointError, read_checkpoint, select_state_dict, state_dict_mismatch
from .dncnn_arch import DnCNN


@dataclass(frozen=True)
class StartOptions:
    """The ``start`` option of MCNetArch: a residual CNN ``g`` on Y (:class:`DnCNN` without spectral norm) whose guess
    of the fixed point is where a solve begins.

    Attributes:
        depth (int): Its number of convolutions. Default: 8.
        num_feat (int): Its number of features. Default: 64.
        path (str | None): Its weights: a file of the start alone or a whole layer checkpoint whose ``start.*``
            entries are taken (key ``params_ema`` if present, else ``params``). Default: None (``g`` begins as the
            identity: its last convolution is zero).
    """

    depth: int = 8
    num_feat: int = 64
    path: Optional[str] = None

    @classmethod
    def from_options(cls, options):
        """From the option as written (a dict of the attributes) or a StartOptions (returned as it is)."""
        if isinstance(options, StartOptions):
            return options
        if not isinstance(options, dict):
            raise ValueError(f'start must be a dict of options (and path) or None, got {options!r}.')
        unknown = sorted(set(options) - {'depth', 'num_feat', 'path'})
        if unknown:
            raise ValueError(f"start options take the keys 'depth', 'num_feat' and 'path' only; unknown key(s) "
                             f'{unknown}.')
        return cls(**options)


def build_start_network(options):
    """The learned start of :class:`MCNetArch` (option ``start``, :class:`StartOptions`): a residual DnCNN on Y
    without spectral norm whose last convolution is zero, so that it begins as the identity (the standard start
    ``P_S(w)``)."""
    options = StartOptions.from_options(options)
    net = DnCNN(num_in_ch=1, num_feat=options.num_feat, depth=options.depth, spectral_norm=False)
    nn.init.zeros_(net.dncnn[-1].weight)
    return net


def load_start_network(net, path):
    """Load a start's weights (see MCNetArch's ``start: {path}``) strictly into ``net``."""
    obj = read_checkpoint(path)
    state = select_state_dict(obj, ('params_ema', 'params'), source=str(path))
    if any(k.startswith('start.') for k in state):
        state = {k[len('start.'):]: v for k, v in state.items() if k.startswith('start.')}
    mismatch = state_dict_mismatch(net, state)
    if mismatch:
        raise CheckpointError(f'{path}: not the weights of this start network ({mismatch}); a whole layer checkpoint '
                              'must hold start.* entries, and start.depth / num_feat must be those it was fitted with.')
    net.load_state_dict(state)
    return net
