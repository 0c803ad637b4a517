"""Reading network weights: the one checkpoint loader of the package.

Every reader (archs, ``mcnet-sr``, scripts, converters) goes through :func:`load_state_dict`, so the
accepted layouts and the error a user sees are the same everywhere:

* a BasicSR checkpoint ``{'params': state_dict}`` (or ``params_ema``, or any key the caller names),
* a bare state dict ``{name: tensor}``,
* with or without the ``module.`` prefix that ``DataParallel``/DDP put on every key.

Files are read with ``torch.load(weights_only=True)``: unpickling arbitrary objects runs code, so only
tensors and plain containers are accepted. Third-party releases that need the full unpickler are read
only where a caller passes ``allow_pickle=True`` (the weight converters, on files the user names).

Paths go through :func:`mcnet_basicsr.utils.paths.resolve_path`: an option file's ``mcnet_basicsr/weights/<file>``
is the installed package's file wherever the command runs.
"""
import os.path as osp
from collections.abc import Mapping

import torch

from .paths import resolve_path


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or does not hold the expected state dict; the message names the file."""


def _one_line(text, limit=160):
    text = ' '.join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + '...'


def read_checkpoint(path, allow_pickle=False):
    """The object stored in ``path`` (on the CPU); ``allow_pickle`` permits the full unpickler for legacy files."""
    path = str(path)
    resolved = resolve_path(path)
    if not osp.isfile(resolved):
        raise CheckpointError(f'checkpoint {path}: no such file.')
    try:
        return torch.load(resolved, map_location='cpu', weights_only=True)
    except Exception as err:  # noqa: BLE001  (pickle, zip and I/O errors: re-raised with the file name)
        if not allow_pickle:
            raise CheckpointError(f'checkpoint {path}: not a readable PyTorch checkpoint of tensors '
                                  f'({_one_line(err)}).') from None
    try:  # only reached for a caller that explicitly trusts this file
        return torch.load(resolved, map_location='cpu', weights_only=False)
    except Exception as err:  # noqa: BLE001
        raise CheckpointError(f'checkpoint {path}: not a readable PyTorch checkpoint ({_one_line(err)}).') from None


def is_state_dict(obj):
    """``obj`` maps names to tensors (and is not empty)."""
    return isinstance(obj, Mapping) and bool(obj) and all(torch.is_tensor(v) for v in obj.values())


def strip_key_prefix(state_dict, prefix='module.'):
    """``state_dict`` with ``prefix`` removed from every key that starts with it (None or '' keeps the keys)."""
    if not prefix:
        return dict(state_dict)
    return {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in state_dict.items()}


def select_state_dict(obj, param_key='params', strip_prefix='module.', source='checkpoint'):
    """The state dict inside a loaded checkpoint object.

    Args:
        obj: What ``torch.load`` returned.
        param_key (str | Sequence[str] | None): Key(s) to look under, first found wins; a bare state dict is
            accepted for any key. None: a bare state dict only.
        strip_prefix (str | None): Prefix removed from the keys. Default: 'module.'.
        source (str): How errors name the checkpoint (its path).
    """
    keys = [param_key] if isinstance(param_key, str) else list(param_key or ())
    if isinstance(obj, Mapping):
        for key in keys:
            if is_state_dict(obj.get(key)):
                return strip_key_prefix(obj[key], strip_prefix)
    if is_state_dict(obj):
        return strip_key_prefix(obj, strip_prefix)
    found = list(obj)[:12] if isinstance(obj, Mapping) else type(obj).__name__
    expected = ' or '.join(repr(k) for k in keys) if keys else 'none (a bare state dict)'
    raise CheckpointError(f'{source}: no state dict of tensors under the key {expected} nor at the top level; '
                          f'found keys: {found}.')


def load_state_dict(path, param_key='params', strip_prefix='module.', allow_pickle=False):
    """The state dict stored in ``path``: see :func:`select_state_dict` for ``param_key``/``strip_prefix`` and
    :func:`read_checkpoint` for ``allow_pickle``. Raises :class:`CheckpointError` naming the file."""
    return select_state_dict(read_checkpoint(path, allow_pickle), param_key, strip_prefix, source=str(path))


def state_dict_mismatch(net, state):
    """'' when ``state`` fits ``net`` exactly (names and shapes), else a one-line account of the first differences."""
    own = net.state_dict()
    # a saved layer without its _extra_state record loads (unchecked), see MCNetArch.set_extra_state; a net may name
    # other entries a checkpoint may lack (MCNetArch.optional_state_keys)
    optional = set(net.optional_state_keys()) if hasattr(net, 'optional_state_keys') else set()
    missing = [k for k in own if k not in state and not k.endswith('_extra_state') and k not in optional]
    unexpected = [k for k in state if k not in own]
    shapes = [f'{k}: {tuple(state[k].shape)} vs {tuple(own[k].shape)}' for k in own
              if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
    parts = [f'{name}: {", ".join(keys[:3])}' + (f' (+{len(keys) - 3} more)' if len(keys) > 3 else '')
             for name, keys in (('missing keys', missing), ('unexpected keys', unexpected),
                                ('shape mismatch (file vs model)', shapes)) if keys]
    return '; '.join(parts)


def encode_record(text, nbytes):
    """``text`` as a fixed-length uint8 tensor for a module's ``get_extra_state`` (not a string: BasicSR moves every
    state-dict entry with ``.cpu()`` when it saves)."""
    return torch.tensor(list(text.encode().ljust(nbytes)[:nbytes]), dtype=torch.uint8)


def saved_record(state_dict, key='_extra_state'):
    """The text :func:`encode_record` saved under ``key`` of ``state_dict`` (an MCNet layer's backbone, scale and
    operator, :func:`split_record`), or None where the state dict has none."""
    record = state_dict.get(key)
    return bytes(record.tolist()).decode(errors='replace').strip() if torch.is_tensor(record) else None


def split_record(record):
    """``(trained_for, operator)`` of an MCNet layer's record ``'<backbone> x<scale> [<operator>]'`` (``'IMDN x4
    bicubic'``); operator None where the record does not name one (layers saved before it did), both None for None."""
    if record is None:
        return None, None
    backbone, _, rest = record.partition(' x')
    scale, _, operator = rest.partition(' ')
    return f'{backbone} x{scale}', operator or None


def load_network(net, path, param_key='params', strict=True):
    """Load ``path`` (see :func:`load_state_dict`) into ``net``; a strict mismatch names the file and the keys."""
    state = load_state_dict(path, param_key)
    mismatch = state_dict_mismatch(net, state) if strict else ''
    if mismatch:
        raise CheckpointError(f'{path}: does not fit {type(net).__name__} ({mismatch}).')
    net.load_state_dict(state, strict=strict)
    return net
