"""Metrics registered into BasicSR's METRIC_REGISTRY (importing this module registers them), and the project's
primary Y-uint8 PSNR/SSIM protocol (computed on the float output, so not a registry metric) with everything else
the tables measure of an image (``image_metrics``)."""
from .data_fidelity import calculate_data_fidelity, data_fidelity
from .protocol import image_metrics, psnr_float_y
from .y_uint8 import y_uint8_metrics

__all__ = ['calculate_data_fidelity', 'data_fidelity', 'image_metrics', 'psnr_float_y', 'y_uint8_metrics']
