"""Importing a plugin folder's modules so that their classes register into BasicSR's registries.

BasicSR's own registries only scan basicsr's folders; plugins import their modules themselves (as
Real-ESRGAN and HAT do).
"""
import importlib
from os import path as osp

from basicsr.utils import scandir


def import_modules(package, init_file, suffix):
    """Import every ``*<suffix>.py`` module beside ``init_file`` (a package's ``__init__.py``), sorted by name."""
    folder = osp.dirname(osp.abspath(init_file))
    names = sorted(osp.splitext(osp.basename(v))[0] for v in scandir(folder) if v.endswith(f'{suffix}.py'))
    return [importlib.import_module(f'{package}.{name}') for name in names]
