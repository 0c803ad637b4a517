"""Registers every `*_dataset.py` module of this folder into BasicSR (its registries scan only basicsr's folders)."""
from mcnet_basicsr.utils.registration import import_modules

_modules = import_modules(__name__, __file__, '_dataset')
