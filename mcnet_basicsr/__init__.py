"""mcnet_basicsr: measurement-consistent super-resolution (MCNet) as a BasicSR plugin.

Importing this package registers every arch, dataset, model and metric of ours into BasicSR's registries, so
``build_network`` / ``build_model`` / ``calculate_metric`` find them by name: at once where basicsr is imported
already, else as soon as the program imports basicsr (:mod:`.basicsr_import`), so that programs that never use
BasicSR's registries (the ``mcnet-sr`` command) do not pay for importing basicsr. The torchvision alias that
basicsr 1.4.2 needs is installed before basicsr runs. :func:`register` does it now.
"""
import importlib

from . import basicsr_import
from .version import __version__  # noqa: F401

_registered = False


def register():
    """Register every arch, dataset, loss, metric and model of ours into BasicSR's registries (idempotent).

    Imports basicsr (after installing the torchvision alias it needs).
    """
    global _registered
    if _registered:
        return
    _registered = True  # also while it runs: importing basicsr below must not start it again
    try:
        _register()
    except BaseException:
        _registered = False
        raise


def _register():
    basicsr_import.install_torchvision_alias()
    import basicsr  # noqa: F401  (through the finder, if it waits: its callbacks run, this one returns at once)

    from .utils import registration
    registration.go_live()
    from . import archs, data, losses, metrics, models  # noqa: F401  (their modules register on import)


def __getattr__(name):
    """Subpackages as attributes (``mcnet_basicsr.ops``) without importing torch with the package."""
    if name.startswith('_'):
        raise AttributeError(name)
    try:
        return importlib.import_module(f'{__name__}.{name}')
    except ModuleNotFoundError as err:
        if err.name != f'{__name__}.{name}':
            raise
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}') from None


basicsr_import.after_basicsr_import(register)
