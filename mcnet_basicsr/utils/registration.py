"""Our types in BasicSR's registries, registered now or on demand.

BasicSR's own registries only scan basicsr's folders; plugins import their modules themselves (as
Real-ESRGAN and HAT do). Importing ``basicsr.utils.registry`` runs basicsr's whole ``__init__``
(torchvision, scipy, its datasets, ...), seconds that ``mcnet-sr`` does not need. So our arch modules
decorate their classes with :data:`ARCH_REGISTRY` of this module (standard library only), which
records them and passes them on to BasicSR's registry of the same name:

* at once, once registration is live (:func:`mcnet_basicsr.register`, which runs when basicsr is first
  imported: :mod:`mcnet_basicsr.basicsr_import`);
* else when :func:`mcnet_basicsr.register` runs later.

:func:`build_network` builds our own types without basicsr while registration waits, and anything
else (basicsr's RCAN, a user's arch) through BasicSR's ``build_network``.
"""
import importlib
import logging
import os
from copy import deepcopy
from os import path as osp

_live = False


class PluginRegistry:
    """Records the objects of one BasicSR registry (``'ARCH_REGISTRY'``, ...) and registers them there.

    ``register()`` is used as BasicSR's is: ``@ARCH_REGISTRY.register()`` above a class or function.
    """

    def __init__(self, basicsr_name):
        self.basicsr_name = basicsr_name
        self._obj_map = {}
        self._passed_on = set()

    def register(self, obj=None):
        def deco(func_or_class):
            name = func_or_class.__name__
            if self._obj_map.get(name, func_or_class) is not func_or_class:
                raise ValueError(f"An object named '{name}' was already registered in our {self.basicsr_name}.")
            self._obj_map[name] = func_or_class
            if _live:
                self._pass_on()
            return func_or_class

        return deco if obj is None else deco(obj)

    def get(self, name):
        return self._obj_map[name]

    def __contains__(self, name):
        return name in self._obj_map

    def _pass_on(self):
        """Register into BasicSR's registry what has not been registered there yet (imports basicsr)."""
        target = getattr(importlib.import_module('basicsr.utils.registry'), self.basicsr_name)
        for name, obj in self._obj_map.items():
            if name not in self._passed_on:
                target.register(obj)
                self._passed_on.add(name)


ARCH_REGISTRY = PluginRegistry('ARCH_REGISTRY')


def go_live():
    """Register every recorded object into BasicSR and every later one at once (called by ``register()``)."""
    global _live
    _live = True
    ARCH_REGISTRY._pass_on()


def build_network(opt):
    """BasicSR's ``build_network``; while registration waits for basicsr, our own archs are built without basicsr."""
    if not _live and opt.get('type') in ARCH_REGISTRY:
        opt = deepcopy(opt)
        net = ARCH_REGISTRY.get(opt.pop('type'))(**opt)
        logging.getLogger('basicsr').info(f'Network [{net.__class__.__name__}] is created.')
        return net
    # basicsr's (e.g. RCAN) or a user's arch: BasicSR's registry; importing basicsr registers ours there too
    # (mcnet_basicsr.basicsr_import)
    from basicsr.archs import build_network as basicsr_build_network
    return basicsr_build_network(opt)


def import_modules(package, init_file, suffix):
    """Import every ``*<suffix>.py`` module beside ``init_file`` (a package's ``__init__.py``), sorted by name."""
    folder = osp.dirname(osp.abspath(init_file))
    names = sorted(osp.splitext(v)[0] for v in os.listdir(folder) if v.endswith(f'{suffix}.py'))
    return [importlib.import_module(f'{package}.{name}') for name in names]
