"""What a saved MCNet layer records of what it was trained for, and which entries its checkpoints may lack."""
import logging

from mcnet_basicsr.ops import OPERATOR_REGISTRY
from mcnet_basicsr.utils.checkpoint import encode_record, saved_record, split_record

RECORD_BYTES = 32  # length of the backbone-and-scale record saved with a layer


class LayerRecordMixin:
    """For a layer with ``backbone``, ``scale`` and ``operator``: saves ``'<backbone> x<scale> <operator>'`` as its
    extra state and checks it on loading (a layer learns the errors of one backbone at one scale)."""

    # entries of state_dict() that checkpoints saved before they existed lack: the record, the noise slope of beta
    OPTIONAL_KEYS = ('_extra_state', 'log_beta_slope')

    def trained_for(self):
        """What a saved layer records of the backbone and scale it belongs to, e.g. 'IMDN x4'."""
        return f'{type(self.backbone).__name__} x{self.scale}'

    def operator_name(self):
        """The registered type of this layer's operator, e.g. 'bicubic' (what a saved layer records it was trained
        for)."""
        return next((name for name in OPERATOR_REGISTRY if OPERATOR_REGISTRY.get(name) is type(self.operator)),
                    type(self.operator).__name__)

    def get_extra_state(self):
        # read back by utils.checkpoint.saved_record and split_record
        return encode_record(f'{self.trained_for()} {self.operator_name()}', RECORD_BYTES)

    def set_extra_state(self, state):
        trained, operator = split_record(saved_record({'_extra_state': state}))
        if trained != self.trained_for():
            raise ValueError(f'This MCNet layer was trained on {trained}; it is being loaded on {self.trained_for()}. '
                             'A layer learns the errors of one backbone at one scale: use the layer trained for '
                             'this backbone and scale.')
        operator = operator or 'bicubic'  # layers saved before the record named the operator were all trained on it
        if operator != self.operator_name():
            # basicsr's log by name: mcnet-sr loads such layers without importing basicsr
            logging.getLogger('basicsr').info(f'This MCNet layer was trained for LR made by {operator!r}; it now '
                                              f'serves the operator {self.operator!r}: the same prior on another '
                                              'measurement model.')

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        # layers saved before the record existed load unchecked; one without a noise slope keeps the option's slope
        for key in self.OPTIONAL_KEYS:
            if prefix + key in missing_keys:
                missing_keys.remove(prefix + key)

    def optional_state_keys(self):
        """Entries of ``state_dict()`` a checkpoint may lack: the saved record, the noise slope of beta (a layer saved
        without one keeps the ``beta`` option's ``slope``, 0 unless set), the start's weights (a layer saved
        without a start keeps the one this arch was built with) and the hyper-network's (a layer saved without one
        starts as itself)."""
        return [k for k in self.state_dict() if k.endswith(self.OPTIONAL_KEYS) or k.startswith(('start.', 'hyper.'))]


def keep_own(name):
    """A load_state_dict post-hook for the submodule ``name`` (``start``, ``hyper``): a layer checkpoint without any of
    its entries loads strictly and leaves it as it is (a learned start from ``start: {path}`` or the identity; a
    hyper-network at its start, the layer without one); one with some of them only is still refused."""

    def hook(layer, incompatible):
        names = [f'{name}.{k}' for k in getattr(layer, name).state_dict()]
        missing = [k for k in incompatible.missing_keys if any(k == n or k.endswith('.' + n) for n in names)]
        if len(missing) == len(names):
            for k in missing:
                incompatible.missing_keys.remove(k)

    return hook
