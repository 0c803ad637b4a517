"""How an MCNet layer runs, apart from what it is: one frozen settings object (tiles, precision, extrapolation, the
solvers and an observer of the forward solve), given to the layer at construction (its ``settings`` option), per
call, or for a block (``with net.settings(...)``)."""
import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from mcnet_basicsr.deq import SolverConfig

# the autocast dtypes a backbone may run in (None: float32)
BACKBONE_DTYPES = {None: None, 'fp32': None, 'float32': None, 'bf16': torch.bfloat16, 'bfloat16': torch.bfloat16,
                   'fp16': torch.float16, 'float16': torch.float16}
# what a ``settings`` mapping may name: the fields, with the two solvers under one ``solver: {forward, backward}``
OPTION_KEYS = ('tile', 'allow_tf32', 'backbone_dtype', 'extrapolation', 'solver', 'observer')


def check_backbone_dtype(backbone_dtype):
    """ValueError unless ``backbone_dtype`` names one of :data:`BACKBONE_DTYPES`."""
    if not isinstance(backbone_dtype, (str, type(None))) or backbone_dtype not in BACKBONE_DTYPES:
        raise ValueError(f'backbone_dtype must be one of {sorted(k for k in BACKBONE_DTYPES if k)} or None, '
                         f'got {backbone_dtype!r}.')


def solver_configs(solver):
    """``(forward, backward)`` SolverConfigs of ``solver`` options ``{forward: {...}, backward: {...}}``; backward
    defaults to forward less ``cuda_graph`` (a forward-only speed-up). Bad options: ValueError."""
    solver = dict(solver or {})
    unknown = [k for k in solver if k not in ('forward', 'backward')]
    if unknown:
        raise ValueError(f"solver options take the keys 'forward' and 'backward' only; unknown key(s) {unknown}.")
    try:  # an unknown key is a bad option value here: ValueError, like every other bad option
        fwd = SolverConfig.from_dict(solver.get('forward') or {})
        bwd = SolverConfig.from_dict(solver['backward']) if solver.get('backward') else fwd.for_backward()
    except KeyError as err:
        raise ValueError(f'solver options: {err.args[0]}') from err
    if bwd.cuda_graph:
        raise ValueError('solver options: cuda_graph is for the forward solve only (the backward solve runs autograd '
                         'at every iteration); remove it from solver.backward.')
    return fwd, bwd


@dataclass(frozen=True)
class LayerSettings:
    """How an :class:`~mcnet_basicsr.archs.mcnet_arch.MCNetArch` runs; none of it changes the model (its weights,
    its fixed point). Build from options with :meth:`from_options`; change with :meth:`replace`.

    Attributes:
        tile (int | None): Run the backbone and the denoiser on ``tile`` x ``tile`` LR tiles (``tile * scale`` in
            HR) overlapping by their receptive field, so each tile's output is exactly the untiled one; the
            fixed-point iteration and its projection run on the whole image. Not exact for backbones with global
            pooling (RCAN). Default: None (whole images).
        allow_tf32 (bool): TF32 for cuDNN convolutions and CUDA matmuls during the layer's forward and its public
            pieces ``backbone_estimate`` and ``solve`` (set for the call and restored after it; training wraps its
            backward likewise, see MCNetModel). TF32 rounds convolution inputs to 10-bit mantissas, a noise floor
            that keeps the fixed-point residual from reaching the 1e-5 a correct implicit gradient needs
            (docs/benchmarks.md). Default: False.
        backbone_dtype (str | None): Autocast dtype of the backbone on CUDA ('bf16'/'fp16'). Default: None
            (float32).
        extrapolation (float): Inference only (no grad): when the forward solve stops at an iterate ``z``, the
            output comes from ``z + t (F(z) - z)``, ``t = extrapolation * (beta + rho) / beta``, instead of from
            ``z``: one more application of F. Where the denoiser leaves the image as it is and the projection does
            not act, the map contracts the error by ``rho / (beta + rho)`` per iteration, so there the remaining
            error is ``(beta + rho) / beta`` times the residual; with a small beta (the SRCNN layers) that is most
            of what a solve stopped at a loose tolerance still misses. A fraction of the full step (0.25-0.5) keeps
            the overshoot in faster directions small. The fixed point is unchanged. Default: 0 (from ``z``).
        forward_solver (SolverConfig): The forward solve (Anderson, ...). Default: ``SolverConfig()``.
        backward_solver (SolverConfig): The implicit backward solve. Default: the forward one without
            ``cuda_graph``.
        observer (callable | None): ``observer(iteration, iterate, residual)`` after every iteration of the
            forward solve (:data:`mcnet_basicsr.deq.Observer`; an observed solve runs without CUDA graphs).
            Default: None.

    As options (BasicSR's ``network_g: {type: MCNetArch, ..., settings: {...}}``) the solvers are one key,
    ``solver: {forward: {...}, backward: {...}}`` of :class:`~mcnet_basicsr.deq.SolverConfig` options (a preset
    name and single keys, e.g. ``{preset: tables, cuda_graph: true}``).
    """

    tile: Optional[int] = None
    allow_tf32: bool = False
    backbone_dtype: Optional[str] = None
    extrapolation: float = 0.0
    forward_solver: SolverConfig = field(default_factory=SolverConfig)
    backward_solver: Optional[SolverConfig] = None
    observer: Optional[Callable] = None

    def __post_init__(self):
        tile, extrapolation = self.tile, self.extrapolation
        if tile is not None and (isinstance(tile, bool) or not isinstance(tile, int) or tile < 1):
            raise ValueError(f'tile must be a positive number of LR pixels or None, got {tile!r}.')
        if not isinstance(self.allow_tf32, bool):
            raise ValueError(f'allow_tf32 must be true or false, got {self.allow_tf32!r}.')
        check_backbone_dtype(self.backbone_dtype)
        if isinstance(extrapolation, bool) or not isinstance(extrapolation, (int, float)) or not extrapolation >= 0:
            raise ValueError(f'extrapolation must be a number >= 0 (a fraction of (beta + rho) / beta), '
                             f'got {extrapolation!r}.')
        object.__setattr__(self, 'extrapolation', float(extrapolation))
        for name in ('forward_solver', 'backward_solver'):
            value = getattr(self, name)
            if value is not None and not isinstance(value, SolverConfig):
                raise ValueError(f'{name} must be a SolverConfig (options: solver: {{forward: ..., backward: ...}}), '
                                 f'got {value!r}.')
        if self.backward_solver is None:
            object.__setattr__(self, 'backward_solver', self.forward_solver.for_backward())
        elif self.backward_solver.cuda_graph:
            raise ValueError('backward_solver: cuda_graph is for the forward solve only (the backward solve runs '
                             'autograd at every iteration); set it false there.')
        if self.observer is not None and not callable(self.observer):
            raise ValueError(f'observer must be callable (iteration, iterate, residual) or None, '
                             f'got {self.observer!r}.')

    @property
    def autocast_dtype(self):
        """The torch dtype of :attr:`backbone_dtype` (None: float32)."""
        return BACKBONE_DTYPES[self.backbone_dtype]

    @classmethod
    def from_options(cls, options=None):
        """Settings from options (a mapping with keys of :data:`OPTION_KEYS`), a LayerSettings (returned as it is)
        or None (the defaults)."""
        if isinstance(options, LayerSettings):
            return options
        return cls().replace(**dict(options or {}))

    def replace(self, **changes):
        """These settings with ``changes`` (keys of :data:`OPTION_KEYS`, or the fields ``forward_solver`` /
        ``backward_solver``); ``solver: {forward, backward}`` sets both solvers (backward from forward when not
        given)."""
        allowed = OPTION_KEYS + ('forward_solver', 'backward_solver')
        unknown = [k for k in changes if k not in allowed]
        if unknown:
            raise ValueError(f'Unknown layer setting(s) {unknown}; allowed are {list(OPTION_KEYS)}.')
        if 'solver' in changes:
            if 'forward_solver' in changes or 'backward_solver' in changes:
                raise ValueError('Give solver options or forward_solver/backward_solver, not both.')
            changes['forward_solver'], changes['backward_solver'] = solver_configs(changes.pop('solver'))
        elif 'forward_solver' in changes and 'backward_solver' not in changes:
            changes['backward_solver'] = None  # follows the new forward solver
        return dataclasses.replace(self, **changes)

    def to_options(self):
        """These settings as options (without the observer, which options cannot hold)."""
        return {'tile': self.tile, 'allow_tf32': self.allow_tf32, 'backbone_dtype': self.backbone_dtype,
                'extrapolation': self.extrapolation,
                'solver': {'forward': self.forward_solver.to_dict(), 'backward': self.backward_solver.to_dict()}}


# names an assignment to a layer must not take: they are settings, in force through ``net.settings``
_SETTING_NAMES = frozenset(f.name for f in dataclasses.fields(LayerSettings)) | {'solver'}


class SettingsMixin:
    """For a layer whose :class:`LayerSettings` in force are ``self._settings`` (set by its constructor): changes them
    for one call or a block, and refuses attributes named like a setting (which every solve would ignore)."""

    def __setattr__(self, name, value):
        if name in _SETTING_NAMES:  # an attribute of that name would be ignored by every solve
            raise AttributeError(f'{name} is a layer setting, not an attribute: run under it with '
                                 f'"with net.settings({name}=...):" or run(..., settings={{{name!r}: ...}}); '
                                 'net.layer_settings holds those in force.')
        super().__setattr__(name, value)

    @property
    def layer_settings(self):
        """The :class:`~mcnet_basicsr.archs.layer_settings.LayerSettings` in force (read-only; change them with
        :meth:`settings`)."""
        return self._settings

    @contextmanager
    def settings(self, settings=None, **changes):
        """A block that runs under other settings, restored on exit (also when the block raises).

        ``with net.settings(tile=256, solver={'forward': {'tol': 1e-4}}):`` changes single keys (those of
        :data:`~mcnet_basicsr.archs.layer_settings.OPTION_KEYS`); ``with net.settings(other):`` puts a whole
        LayerSettings (or options) in force, with ``changes`` on top. Yields the settings in force.
        """
        base = self._settings if settings is None else LayerSettings.from_options(settings)
        new = base.replace(**changes) if changes else base
        saved, self._settings = self._settings, new
        try:
            yield new
        finally:
            self._settings = saved

    def _call_settings(self, settings):
        """The block of one call: :meth:`settings` with a call's ``settings`` (None, changes, or a LayerSettings)."""
        if settings is None or isinstance(settings, LayerSettings):
            return self.settings(settings)
        return self.settings(**settings)

    @property
    def backbone_dtype(self):
        """The autocast dtype of the backbone under the settings in force (None: float32)."""
        return self._settings.autocast_dtype
