"""Small helpers shared across the package (plain torch, no registries)."""
from .color import luma, rgb_to_ycbcr, ycbcr_to_rgb

__all__ = ['luma', 'rgb_to_ycbcr', 'ycbcr_to_rgb']
