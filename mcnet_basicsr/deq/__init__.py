"""Deep-equilibrium utilities (plain torch): batched fixed-point solvers with
per-sample stopping, an implicit-gradient fixed-point layer and a Jacobian penalty."""
from .config import PRESETS, SolverConfig, SolverStats
from .implicit import BackwardStatsHolder, ImplicitFixedPoint, implicit_fixed_point
from .jacobian import jacobian_frobenius_penalty
from .solvers import (IterateKeeper, anderson_solve, fixed_point_residual, fixed_point_solve, release_cuda_graph_memory,
                      solve)

__all__ = [
    'PRESETS', 'SolverConfig', 'SolverStats', 'anderson_solve', 'fixed_point_residual', 'fixed_point_solve', 'solve',
    'implicit_fixed_point', 'ImplicitFixedPoint', 'BackwardStatsHolder', 'jacobian_frobenius_penalty',
    'release_cuda_graph_memory', 'IterateKeeper'
]
