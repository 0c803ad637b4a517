"""A tiny name -> class registry for measurement operators.

Kept separate from BasicSR's registries on purpose: ``mcnet_basicsr.ops`` is plain torch and must
import without basicsr. Users plug their own operator in with ``@OPERATOR_REGISTRY.register()``
and build it through :func:`mcnet_basicsr.ops.build_operator` by name.
"""


class UnknownOperatorError(KeyError, ValueError):
    """Raised for a name that is not registered.

    Subclasses both ``KeyError`` (a failed lookup) and ``ValueError`` (a bad option value), so
    callers may catch either. ``str()`` is the plain message, not ``KeyError``'s quoted repr.
    """

    def __str__(self):
        return str(self.args[0]) if self.args else ''


class OperatorRegistry:
    """Maps a type name (the ``type`` key of an operator option dict) to an operator class."""

    def __init__(self, name='operator'):
        self._name = name
        self._classes = {}

    def register(self, name=None):
        """Class decorator: register under ``name`` (default: the class's ``__name__``).

        Registering a second class under a taken name is an error, so two plugins cannot
        silently shadow each other.
        """

        def decorator(cls):
            key = name if name is not None else cls.__name__
            if not isinstance(key, str) or not key:
                raise ValueError(f'{self._name} registry: name must be a non-empty string, got {key!r}')
            if key in self._classes and self._classes[key] is not cls:
                raise ValueError(f"{self._name} registry: name '{key}' is already registered "
                                 f'to {self._classes[key].__qualname__}')
            self._classes[key] = cls
            return cls

        return decorator

    def get(self, name):
        try:
            return self._classes[name]
        except (KeyError, TypeError):
            raise UnknownOperatorError(f"unknown {self._name} type {name!r}; registered types: "
                                       f'{sorted(self._classes)}') from None

    def unregister(self, name):
        """Remove a registration (mainly for tests that register throw-away operators)."""
        self._classes.pop(name, None)

    def keys(self):
        return sorted(self._classes)

    def __contains__(self, name):
        return name in self._classes

    def __iter__(self):
        return iter(self.keys())

    def __len__(self):
        return len(self._classes)

    def __repr__(self):
        return f'OperatorRegistry({self._name!r}, {self.keys()})'


OPERATOR_REGISTRY = OperatorRegistry('operator')
