"""Metrics registered into BasicSR's METRIC_REGISTRY (importing this module registers them)."""
from .data_fidelity import calculate_data_fidelity, data_fidelity

__all__ = ['calculate_data_fidelity', 'data_fidelity']
