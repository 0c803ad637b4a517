"""Solver configuration, named presets and per-sample solver statistics.

``SolverConfig`` is the single documented home of every solver default; the
solver functions in :mod:`mcnet_basicsr.deq.solvers` take their keyword
defaults from it, so changing a default here changes it everywhere. The
settings the project uses by name live in :data:`PRESETS`; option files and
the command line name one (``forward: {preset: tables}``) and may override
single keys (``{preset: tables, cuda_graph: true}``).
"""
from __future__ import annotations
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

import torch

SOLVERS = ('anderson', 'fixed_point')
STOP_MODES = ('rel', 'abs')

# Named settings, as changes to the SolverConfig defaults (Anderson, m 5, lam 1e-4, rel. tol 1e-5, 100 iterations).
PRESETS = {
    # training's forward solve: 1e-5 or tighter, looser solves give wrong implicit gradients
    'train': {},
    # training's backward solve: its tolerance mattered little for the gradient
    'train_backward': {'tol': 1e-4, 'max_iter': 60},
    # the tables (test option files): the output at the converged fixed point, reported with the numbers
    'tables': {'tol': 1e-6, 'max_iter': 300},
    # build_pretrained_mcnet and mcnet-sr (which sets each model's tol from its card, mcnet_basicsr/zoo/models.yml):
    # near 'tables' at a fraction of the iterations
    'fast': {'tol': 1e-4},
    # the paper's setting: rel. residual 1e-5 or 200 iterations
    'paper': {'max_iter': 200},
}


@dataclass
class SolverConfig:
    """Settings of one fixed-point solve ``z = f(z)``.

    Attributes:
        solver: ``'anderson'`` (Anderson acceleration, type II) or
            ``'fixed_point'`` (plain iteration ``z <- f(z)``).
        m: Anderson history size (number of past iterates mixed). ``>= 1``;
            ``m = 1`` reduces Anderson to (damped) plain iteration.
        lam: Tikhonov regularisation of the Anderson least-squares problem,
            relative to the problem scale: the Gram matrix ``G G^T`` of the
            residual history ``G`` (per sample) gets
            ``lam * ||G||_F^2 + 1e-30`` added to its diagonal. ``>= 0``.
        mixing: Anderson damping ``beta`` in
            ``z_new = beta * sum_i a_i f(z_i) + (1 - beta) * sum_i a_i z_i``.
            ``0 < mixing <= 1``; ``1.0`` is undamped. Ignored by
            ``'fixed_point'``.
        tol: Per-sample stopping tolerance on the residual (see ``stop``).
            A sample stops (is frozen) once its residual is ``<= tol``. ``> 0``.
        max_iter: Maximum number of iterations (= evaluations of ``f``). ``>= 1``.
        stop: Residual used for stopping, per sample over all non-batch dims:
            ``'rel'``: ``||f(z) - z|| / (||f(z)|| + 1e-12)``;
            ``'abs'``: ``||f(z) - z||``.
        cuda_graph: On CUDA, replay the iterations from CUDA graphs captured
            once per solve (after eager warm-up iterations: ``max(1, m - 1)``
            for Anderson, one for plain iteration),
            which removes the per-iteration Python and kernel-launch overhead;
            the iterates are those of the eager loop up to floating-point
            rounding. Ignored off CUDA and for functions marked
            ``f.capturable = False`` (e.g. MCNet with ``eps > 0``, whose
            projection solves for its multiplier on the host). Forward solves
            only: a backward solve runs autograd, which cannot be captured this way.
            The captures of a device share one memory pool, reserved between
            solves (``release_cuda_graph_memory`` hands it back). In training a
            step gains little: the eager backward solve dominates it.
            Default: False.
    """

    solver: str = 'anderson'
    m: int = 5
    lam: float = 1e-4
    mixing: float = 1.0
    tol: float = 1e-5
    max_iter: int = 100
    stop: str = 'rel'
    cuda_graph: bool = False

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        """Raise ``ValueError`` / ``TypeError`` for an invalid setting."""
        if self.solver not in SOLVERS:
            raise ValueError(f"SolverConfig.solver must be one of {list(SOLVERS)}, got {self.solver!r}")
        if self.stop not in STOP_MODES:
            raise ValueError(f"SolverConfig.stop must be one of {list(STOP_MODES)}, got {self.stop!r}")
        for name in ('m', 'max_iter'):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f'SolverConfig.{name} must be an int, got {v!r} ({type(v).__name__})')
        if not isinstance(self.cuda_graph, bool):
            raise TypeError(f'SolverConfig.cuda_graph must be true or false, got {self.cuda_graph!r}')
        for name in ('lam', 'mixing', 'tol'):
            v = getattr(self, name)
            if isinstance(v, str):  # YAML 1.1 reads `1e-5` (no dot) as a string; accept what float() accepts
                try:
                    v = float(v)
                except ValueError:
                    pass
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f'SolverConfig.{name} must be a number, got {v!r} ({type(v).__name__})')
            setattr(self, name, float(v))
        if self.m < 1:
            raise ValueError(f'SolverConfig.m must be >= 1, got {self.m}')
        if self.max_iter < 1:
            raise ValueError(f'SolverConfig.max_iter must be >= 1, got {self.max_iter}')
        if not self.tol > 0:
            raise ValueError(f'SolverConfig.tol must be > 0, got {self.tol}')
        if not self.lam >= 0:
            raise ValueError(f'SolverConfig.lam must be >= 0, got {self.lam}')
        if not 0 < self.mixing <= 1:
            raise ValueError(f'SolverConfig.mixing must be in (0, 1], got {self.mixing}')

    # ------------------------------------------------------------- (de)serial
    @classmethod
    def allowed_keys(cls) -> List[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> 'SolverConfig':
        """The named setting of :data:`PRESETS`, with single keys overridden."""
        if name not in PRESETS:
            raise KeyError(f'Unknown solver preset {name!r}; presets are {sorted(PRESETS)}')
        return cls.from_dict({**PRESETS[name], **overrides})

    @classmethod
    def from_dict(cls, d: Optional[Mapping[str, Any]]) -> 'SolverConfig':
        """Build from a (YAML) mapping; missing keys take the defaults, or those of ``preset`` when it names one.

        ``None`` gives the default config; a ``SolverConfig`` is returned as a
        copy. Unknown keys raise ``KeyError`` naming the bad key(s) and listing
        the allowed ones, so a typo in an options file is never ignored.
        Values are validated (``ValueError`` / ``TypeError``).
        """
        if d is None:
            return cls()
        if isinstance(d, SolverConfig):
            return dataclasses.replace(d)
        if not isinstance(d, Mapping):
            raise TypeError(f'SolverConfig.from_dict expects a mapping, got {type(d).__name__}')
        d = dict(d)
        name = d.pop('preset', None)
        if name is not None:
            if name not in PRESETS:
                raise KeyError(f'Unknown solver preset {name!r}; presets are {sorted(PRESETS)}')
            d = {**PRESETS[name], **d}
        allowed = cls.allowed_keys()
        unknown = [k for k in d if k not in allowed]
        if unknown:
            raise KeyError(f'Unknown SolverConfig key(s) {unknown}; allowed keys are {allowed + ["preset"]}')
        return cls(**d)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def for_backward(self) -> 'SolverConfig':
        """These settings for a backward solve, which inherits everything but ``cuda_graph`` (a
        backward solve runs autograd at every iteration, which a CUDA-graph capture cannot record)."""
        return dataclasses.replace(self, cuda_graph=False) if self.cuda_graph else self


@dataclass
class SolverStats:
    """Per-sample statistics of one (batched) solve.

    Attributes:
        iterations: ``(N,)`` long; iterations (evaluations of ``f``) each
            sample used until it stopped: the 1-based iteration at which its
            residual first became ``<= tol``, or ``max_iter`` when it did not.
        residual: ``(N,)`` float; residual (per ``stop``) of the returned
            iterate, i.e. the lowest residual seen for that sample.
        converged: ``(N,)`` bool; residual ``<= tol`` was reached.
        trace: one ``(N,)`` tensor per iteration: residual of that iteration's
            iterate (frozen samples repeat their final residual).
        nfe: number of (batched) evaluations of ``f``.
        cuda_graph: the iterations after the warm-up were replayed from CUDA
            graphs (``SolverConfig.cuda_graph`` asked for them, the tensors were
            on CUDA, ``f`` was capturable and there were iterations left).
    """

    iterations: torch.Tensor
    residual: torch.Tensor
    converged: torch.Tensor
    trace: List[torch.Tensor] = field(default_factory=list)
    nfe: int = 0
    cuda_graph: bool = False

    def summary(self) -> Dict[str, float]:
        """Python floats for logging (one device sync)."""
        it = self.iterations.double()
        return {
            'iter_mean': float(it.mean()),
            'iter_max': float(it.max()),
            'residual_max': float(self.residual.double().max()),
            'converged_frac': float(self.converged.double().mean()),
            'nfe': float(self.nfe),
        }
