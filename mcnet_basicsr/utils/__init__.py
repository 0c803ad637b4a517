"""Small helpers shared across the package (plain torch, no registries)."""
from .color import rgb_to_ycbcr, ycbcr_to_rgb

__all__ = ['rgb_to_ycbcr', 'ycbcr_to_rgb']
