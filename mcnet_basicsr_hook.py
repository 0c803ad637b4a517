"""Start-up hook that lets BasicSR's own scripts find mcnet_basicsr's types (opt-in).

BasicSR's registries only scan basicsr's own folders, so ``python basicsr/train.py -opt
options/train_mcnet_srcnn_x2.yml`` from a BasicSR checkout would not know ``MCNetArch``.
``python -m mcnet_basicsr.autoload install`` writes a one-line ``.pth`` file that imports this
module at interpreter start-up and calls :func:`activate`. From then on, the first
``import basicsr`` in any program imports ``mcnet_basicsr``, whose types are registered once basicsr is loaded
(:mod:`mcnet_basicsr.basicsr_import`), and BasicSR's option parser then names each missing input of an option
file in one line (exit status 2) instead of failing later in a data loader.

Cost for programs that never import basicsr: importing this standard-library-only module and one name comparison
per top-level import (the finder declines every name but ``basicsr``). Nothing else (torch, basicsr,
mcnet_basicsr) is imported unless the program imports basicsr itself.
"""
import importlib
import importlib.abc
import sys

_TARGET = 'basicsr'


def _check_inputs():
    check = importlib.import_module('mcnet_basicsr.zoo.assets').exit_if_inputs_missing
    importlib.import_module('mcnet_basicsr.utils.pipeline').check_inputs_when_parsing(check)


def _plugin_waits_for_basicsr():
    """Import the package (light: it waits for basicsr to register) and have it also make BasicSR's option parser
    check the inputs; returns its import watcher."""
    basicsr_import = importlib.import_module('mcnet_basicsr.basicsr_import')
    importlib.import_module('mcnet_basicsr')
    basicsr_import.after_basicsr_import(_check_inputs)
    return basicsr_import


class BasicsrPluginFinder(importlib.abc.MetaPathFinder):
    """Meta-path finder that only reacts to the top-level ``basicsr`` package, once: it hands basicsr's import to the
    package's own finder."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _TARGET:
            return None
        deactivate()  # one-shot
        basicsr_import = _plugin_waits_for_basicsr()
        for finder in sys.meta_path:
            if isinstance(finder, basicsr_import.BasicsrPluginFinder):
                return finder.find_spec(fullname, path, target)
        return None


def activate():
    """Install the finder (idempotent). Called by the ``.pth`` line that autoload writes."""
    if _TARGET in sys.modules:  # basicsr is already there: register right away
        _plugin_waits_for_basicsr()
        return
    if not any(isinstance(f, BasicsrPluginFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, BasicsrPluginFinder())


def deactivate():
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, BasicsrPluginFinder)]
