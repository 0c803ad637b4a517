"""mcnet_basicsr: measurement-consistent super-resolution (MCNet) as a BasicSR plugin.

Importing this package registers every arch, dataset, model and metric of ours into BasicSR's registries,
so ``build_network`` / ``build_model`` / ``calculate_metric`` find them by name. The torchvision
alias that basicsr 1.4.2 needs is installed before anything imports basicsr.
"""
import mcnet_basicsr_hook

mcnet_basicsr_hook.install_torchvision_alias()

from .version import __version__  # noqa: E402,F401
from . import ops, deq  # noqa: E402,F401  (plain torch: no registries)
from . import archs, data, losses, metrics, models  # noqa: E402,F401  (register into basicsr)
