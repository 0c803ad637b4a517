"""Start-up hook that lets BasicSR's own scripts find mcnet_basicsr's types (opt-in).

BasicSR's registries only scan basicsr's own folders, so ``python basicsr/train.py -opt
options/train_mcnet_srcnn_x2.yml`` from a BasicSR checkout would not know ``MCNetArch``.
``python -m mcnet_basicsr.autoload install`` writes a one-line ``.pth`` file that imports this
module at interpreter start-up and calls :func:`activate`. From then on, the first
``import basicsr`` in any program is followed by our registration (:mod:`mcnet_basicsr.basicsr_import`), and
BasicSR's option parser then names each missing input of an option file in one line (exit status 2) instead of
failing later in a data loader.

Cost for programs that never import basicsr: importing the package's ``__init__`` (standard library only until
basicsr comes) and one dict look-up per top-level import (the finder declines every name but ``basicsr``).
"""
import mcnet_basicsr
from mcnet_basicsr import basicsr_import


def _check_inputs():
    from mcnet_basicsr.utils.pipeline import check_inputs_when_parsing
    from mcnet_basicsr.zoo.assets import exit_if_inputs_missing
    check_inputs_when_parsing(exit_if_inputs_missing)


def activate():
    """Our types into BasicSR's registries and BasicSR's option parser made to name an option file's missing inputs,
    once basicsr is imported (at once where it is). Called by the ``.pth`` line that autoload writes."""
    basicsr_import.after_basicsr_import(mcnet_basicsr.register)  # where the package's own callback ran already
    basicsr_import.after_basicsr_import(_check_inputs)
