"""Run our registration when a program first imports basicsr, whoever imports it (standard library only).

BasicSR's registries only scan basicsr's own folders, so a plugin registers its types itself. Importing basicsr
costs seconds (torchvision, scipy, its datasets), which programs that never use BasicSR's registries (the
``mcnet-sr`` command) need not pay; so ``import mcnet_basicsr`` installs :class:`BasicsrPluginFinder`, which
follows the first ``import basicsr`` of the program with the callbacks given to :func:`after_basicsr_import`.
Programs that never import basicsr pay one dict look-up per top-level import (the finder declines every name but
``basicsr``).
"""
import importlib.abc
import sys

_TARGET = 'basicsr'
_callbacks = []


def install_torchvision_alias():
    """basicsr 1.4.2 imports ``torchvision.transforms.functional_tensor``, removed in torchvision 0.17.

    The one function basicsr uses from it (``rgb_to_grayscale``) lives on in
    ``torchvision.transforms.functional``, so an alias suffices; ``setdefault`` keeps a real
    module where an older torchvision still has one.
    """
    name = 'torchvision.transforms.functional_tensor'
    if name in sys.modules:
        return
    import importlib.util
    if importlib.util.find_spec('torchvision') is None:
        return  # no torchvision: basicsr will fail on its own import with its own message
    try:
        importlib.import_module(name)
    except ImportError:
        import torchvision.transforms.functional as functional
        sys.modules.setdefault(name, functional)


def _run_callbacks():
    while _callbacks:
        _callbacks.pop(0)()


class _LoaderThenPlugin(importlib.abc.Loader):
    """Wraps basicsr's loader: alias torchvision before basicsr runs, the callbacks after."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        install_torchvision_alias()
        self._loader.exec_module(module)
        _run_callbacks()


class BasicsrPluginFinder(importlib.abc.MetaPathFinder):
    """Meta-path finder that only reacts to the top-level ``basicsr`` package, once."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _TARGET:
            return None
        deactivate()  # one-shot; also keeps the look-up below from finding ourselves
        for finder in sys.meta_path:  # the finders after us, as the import system would ask them
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, 'find_spec') else None
            if spec is not None:
                break
        else:
            return None
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _LoaderThenPlugin(spec.loader)
        return spec


def after_basicsr_import(callback):
    """Call ``callback()`` once basicsr is imported: now where it is, else right after the program's first
    ``import basicsr`` (the finder is installed once, however many callbacks wait)."""
    if _TARGET in sys.modules:
        callback()
        return
    _callbacks.append(callback)
    if not any(isinstance(f, BasicsrPluginFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, BasicsrPluginFinder())


def deactivate():
    """Remove the finder (its callbacks then wait for :func:`after_basicsr_import` of an imported basicsr)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, BasicsrPluginFinder)]
