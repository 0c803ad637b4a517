"""mcnet_basicsr: measurement-consistent super-resolution (MCNet) as a BasicSR plugin.

Importing this package registers every arch, dataset, model and metric of ours into BasicSR's registries,
so ``build_network`` / ``build_model`` / ``calculate_metric`` find them by name. The torchvision
alias that basicsr 1.4.2 needs is installed before anything imports basicsr.

The one exception is the ``mcnet-sr`` command, which needs none of basicsr for its default models and defers
the registration (:func:`mcnet_basicsr_hook.defer_registration`) to start faster: then :func:`register` runs
when basicsr is first imported, or when called.
"""
import sys

import mcnet_basicsr_hook
from . import deq, ops  # noqa: E402,F401  (plain torch: no registries)
from .version import __version__  # noqa: E402,F401

_registered = False


def register():
    """Register every arch, dataset, loss, metric and model of ours into BasicSR's registries (idempotent).

    Imports basicsr (after installing the torchvision alias it needs). ``import mcnet_basicsr`` calls it, unless
    the ``mcnet-sr`` command deferred it; BasicSR entry points of ours call it too.
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
    mcnet_basicsr_hook.deactivate()  # we import basicsr and register right here
    mcnet_basicsr_hook.install_torchvision_alias()
    import basicsr  # noqa: F401

    from .utils import registration
    registration.go_live()
    from . import archs, data, losses, metrics, models  # noqa: F401  (their modules register on import)


if mcnet_basicsr_hook.registration_deferred() and 'basicsr' not in sys.modules:
    mcnet_basicsr_hook.activate()  # whoever imports basicsr first gets our types registered with it
else:
    register()
