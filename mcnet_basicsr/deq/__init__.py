"""Deep-equilibrium utilities (plain torch): batched fixed-point solvers with per-sample stopping and an
implicit-gradient fixed-point layer."""
from .config import PRESETS, SolverConfig, SolverStats
from .contraction import jacobian_vector, spectral_rate
from .implicit import BackwardStatsHolder, implicit_fixed_point
from .solvers import Observer, anderson_solve, fixed_point_residual, fixed_point_solve, release_cuda_graph_memory, solve

__all__ = [
    'PRESETS', 'SolverConfig', 'SolverStats', 'anderson_solve', 'fixed_point_residual', 'fixed_point_solve', 'solve',
    'implicit_fixed_point', 'BackwardStatsHolder', 'release_cuda_graph_memory', 'Observer', 'jacobian_vector',
    'spectral_rate'
]
