"""Start-up hook that lets BasicSR's own scripts find mcnet_basicsr's types (opt-in).

BasicSR's registries only scan basicsr's own folders, so ``python basicsr/train.py -opt
options/train_mcnet_srcnn_x2.yml`` from a BasicSR checkout would not know ``MCNetArch``.
``python -m mcnet_basicsr.autoload install`` writes a one-line ``.pth`` file that imports this
module at interpreter start-up and calls :func:`activate`. From then on, the first
``import basicsr`` in any program is followed by ``import mcnet_basicsr``, which registers our
archs, models and metrics, and BasicSR's option parser then names each missing input of an option
file in one line (exit status 2) instead of failing later in a data loader.

Cost for programs that never import basicsr: importing this stdlib-only module and one dict
look-up per top-level import (the finder declines every name but ``basicsr``). Nothing heavy
(torch, basicsr, mcnet_basicsr) is imported unless the program imports basicsr itself.

This module lives outside the ``mcnet_basicsr`` package on purpose: importing the package
imports torch and basicsr, which the start-up hook must not do.
"""
import importlib.abc
import sys

_TARGET = 'basicsr'
_deferred = False


def defer_registration(deferred=True):
    """Make the next first ``import mcnet_basicsr`` leave BasicSR's registries alone (the ``mcnet-sr`` command).

    Without basicsr imported, the package then imports neither basicsr nor torchvision nor scipy's statistics;
    it installs this module's finder instead, so the first ``import basicsr`` of the program, whoever makes it,
    is followed by ``mcnet_basicsr.register()``. Once the package is imported this setting has no effect.
    """
    global _deferred
    _deferred = bool(deferred)


def registration_deferred():
    return _deferred


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


def _register():
    """Our types into BasicSR's registries (a no-op where importing the package registered already), and BasicSR's
    option parser made to name an option file's missing inputs in one line each
    (``mcnet_basicsr.utils.pipeline.check_inputs_when_parsing``)."""
    importlib.import_module('mcnet_basicsr').register()
    check = importlib.import_module('mcnet_basicsr.zoo.assets').exit_if_inputs_missing
    importlib.import_module('mcnet_basicsr.utils.pipeline').check_inputs_when_parsing(check)


class _LoaderThenPlugin(importlib.abc.Loader):
    """Wraps basicsr's loader: alias torchvision before basicsr runs, import our plugin after."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        install_torchvision_alias()
        self._loader.exec_module(module)
        _register()


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


def activate():
    """Install the finder (idempotent). Called by the ``.pth`` line that autoload writes."""
    if _TARGET in sys.modules:  # basicsr is already there: register right away
        _register()
        return
    if not any(isinstance(f, BasicsrPluginFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, BasicsrPluginFinder())


def deactivate():
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, BasicsrPluginFinder)]
