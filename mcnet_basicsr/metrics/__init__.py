"""Metrics registered into BasicSR's METRIC_REGISTRY (importing this module registers them), and the project's
primary Y-uint8 PSNR/SSIM protocol (computed on the float output, so not a registry metric)."""
from .data_fidelity import calculate_data_fidelity, data_fidelity
from .y_uint8 import y_uint8_metrics

__all__ = ['calculate_data_fidelity', 'data_fidelity', 'y_uint8_metrics']
