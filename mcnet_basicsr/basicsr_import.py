"""Run our registration when a program first imports basicsr, whoever imports it (standard library only).

BasicSR's registries only scan basicsr's own folders, so a plugin registers its types itself. Importing basicsr
costs seconds (torchvision, scipy, its datasets), which programs that never use BasicSR's registries (the
``mcnet-sr`` command) need not pay; so ``import mcnet_basicsr`` installs :class:`BasicsrPluginFinder`, which
follows the first ``import basicsr`` of the program with the callbacks given to :func:`after_basicsr_import`.
Where one of our modules imports basicsr, the callbacks wait until that module is loaded: registering imports
every module of ours, which a half-imported one would break. Until then each import pays a name comparison.
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


_PLUGIN = __name__.rpartition('.')[0] + '.'  # our submodules: 'mcnet_basicsr.'
_depth = 0  # how many of our submodules are being imported (nested) right now


def _run_callbacks():
    """Run the waiting callbacks, unless one of our modules is half imported: registering imports all of them, and
    one that is half imported (the one whose import brought basicsr in) must finish first; its loader runs them
    then."""
    if _depth or _TARGET not in sys.modules:
        return
    deactivate()
    pending = _callbacks[:]
    _callbacks.clear()
    for callback in pending:
        callback()


class _LoaderThenPlugin(importlib.abc.Loader):
    """Wraps the loader of basicsr (torchvision aliased before it runs) and of our submodules imported while the
    callbacks wait; when the outermost of them is loaded, the callbacks run. Anything else is the wrapped loader's."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):  # get_code (python -m), get_source, is_package, resource readers, ...
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        global _depth
        if module.__name__ == _TARGET:
            install_torchvision_alias()
        _depth += 1
        try:
            self._loader.exec_module(module)
        finally:
            _depth -= 1
        _run_callbacks()


class BasicsrPluginFinder(importlib.abc.MetaPathFinder):
    """Meta-path finder that reacts to the top-level ``basicsr`` package and to our own submodules (their loaders
    wrapped), while callbacks wait."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _TARGET and not fullname.startswith(_PLUGIN):
            return None
        for finder in sys.meta_path:  # the finders after us, as the import system would ask them
            if finder is self:
                continue
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, 'find_spec') else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or isinstance(spec.loader, _LoaderThenPlugin):
            return spec
        spec.loader = _LoaderThenPlugin(spec.loader)
        return spec


def after_basicsr_import(callback):
    """Call ``callback()`` once basicsr is imported: now where it is, else right after the program's first
    ``import basicsr`` or, where one of our modules imported it, right after that module (the finder is installed
    once, however many callbacks wait)."""
    if _TARGET in sys.modules and not _depth:
        callback()
        return
    _callbacks.append(callback)
    if not any(isinstance(f, BasicsrPluginFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, BasicsrPluginFinder())


def deactivate():
    """Remove the finder (its callbacks then wait for :func:`after_basicsr_import` of an imported basicsr)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, BasicsrPluginFinder)]
