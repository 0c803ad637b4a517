"""Import every `*_dataset.py` module of this folder so its classes register into BasicSR.

BasicSR's own registries only scan basicsr's folders; plugins import their modules themselves
(as Real-ESRGAN and HAT do).
"""
import importlib
from os import path as osp

from basicsr.utils import scandir

_folder = osp.dirname(osp.abspath(__file__))
_module_names = sorted(osp.splitext(osp.basename(v))[0] for v in scandir(_folder) if v.endswith('_dataset.py'))
_modules = [importlib.import_module(f'{__name__}.{name}') for name in _module_names]
