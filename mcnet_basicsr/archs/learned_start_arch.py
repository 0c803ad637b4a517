"""The learned start of :class:`~mcnet_basicsr.archs.mcnet_arch.MCNetArch` (its ``start`` option, with
the weights at its ``path``)."""
from torch import nn

from mcnet_basicsr.utils.checkpoint import CheckpointError, read_checkpoint, select_state_dict, state_dict_mismatch
from .dncnn_arch import DnCNN


def build_start_network(options):
    """The learned start of :class:`MCNetArch` (option ``start``): a residual DnCNN on Y without spectral norm whose
    last convolution is zero, so that it begins as the identity (the standard start ``P_S(w)``)."""
    options = dict(options)
    unknown = sorted(set(options) - {'depth', 'num_feat'})
    if unknown:
        raise ValueError(f"start options take the keys 'depth' and 'num_feat' only; unknown key(s) {unknown}.")
    net = DnCNN(num_in_ch=1, num_feat=options.get('num_feat', 64), depth=options.get('depth', 8), spectral_norm=False)
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
