"""Random blur kernels for training layers that are told the kernel: isotropic and anisotropic Gaussians and
motion blur, the families of the kernel-SR literature's training sets (USRNet, Zhang et al. 2020; IKC, Gu et al.
2019). Plain numpy; every draw takes a ``numpy.random.Generator``, so a seeded generator gives the same kernels.
"""
import math

import numpy as np

__all__ = ['gaussian_kernel', 'motion_kernel', 'KernelFamily']

KINDS = ('isotropic', 'anisotropic', 'motion')


def _grid(size):
    r = (np.arange(size) - (size - 1) / 2.0)
    return np.meshgrid(r, r, indexing='ij')


def gaussian_kernel(size, sigma_major, sigma_minor=None, theta=0.0):
    """A ``size`` x ``size`` Gaussian kernel summing to 1, centred on the grid's centre.

    Args:
        size (int): Side in pixels (odd, so that the centre is a pixel).
        sigma_major (float): Standard deviation along the direction ``theta`` (pixels, > 0).
        sigma_minor (float | None): Standard deviation across it. Default: None (isotropic).
        theta (float): Angle of the major axis in radians (from the column axis). Default: 0.
    """
    if size < 1 or size % 2 == 0:
        raise ValueError(f'kernel size must be a positive odd int, got {size!r}')
    sigma_minor = sigma_major if sigma_minor is None else sigma_minor
    if not (sigma_major > 0 and sigma_minor > 0):
        raise ValueError(f'sigmas must be > 0, got {sigma_major!r}, {sigma_minor!r}')
    rows, cols = _grid(size)
    c, s = math.cos(theta), math.sin(theta)
    along, across = cols * c + rows * s, -cols * s + rows * c
    k = np.exp(-0.5 * ((along / sigma_major)**2 + (across / sigma_minor)**2))
    return k / k.sum()


def motion_kernel(size, rng, length=None, smoothness=0.7, steps=64):
    """A motion-blur kernel: a random smooth camera path splatted onto the grid, summing to 1.

    The path is a random walk whose velocity keeps a fraction ``smoothness`` of its direction at each of ``steps``
    steps (a camera shake), scaled to span ``length`` pixels and centred on its centre of mass; each point adds its
    weight bilinearly to the four pixels around it.

    Args:
        size (int): Side in pixels (odd).
        rng (numpy.random.Generator): Source of randomness.
        length (float | None): Extent of the path in pixels. Default: None (drawn in [size / 5, size / 2]).
        smoothness (float): In [0, 1): how much of its direction the path keeps per step. Default: 0.7.
        steps (int): Points on the path. Default: 64.
    """
    if size < 3 or size % 2 == 0:
        raise ValueError(f'kernel size must be an odd int >= 3, got {size!r}')
    length = rng.uniform(size / 5.0, size / 2.0) if length is None else float(length)
    velocity = rng.standard_normal(2)
    points = np.zeros((steps, 2))
    for i in range(1, steps):
        velocity = smoothness * velocity + (1 - smoothness) * rng.standard_normal(2) * 2.0
        points[i] = points[i - 1] + velocity
    points -= points.mean(0)
    extent = np.abs(points).max()
    points *= (length / 2.0) / max(extent, 1e-12)
    points = np.clip(points + (size - 1) / 2.0, 0, size - 1 - 1e-9)
    k = np.zeros((size, size))
    base = np.floor(points).astype(int)
    frac = points - base
    for (r, c), (fr, fc) in zip(base, frac):
        k[r, c] += (1 - fr) * (1 - fc)
        k[r, c + 1] += (1 - fr) * fc
        k[r + 1, c] += fr * (1 - fc)
        k[r + 1, c + 1] += fr * fc
    return k / k.sum()


class KernelFamily:
    """Draws kernels of the given kinds, each kind equally often.

    Args:
        kinds (sequence of str): Any of 'isotropic', 'anisotropic', 'motion'. Default: all three.
        size (int): Kernel side (odd). Default: 25 (USRNet's kernels are 25 x 25).
        sigma (tuple): Range of the Gaussians' standard deviations in HR pixels. Default: (0.6, 3.0), about the
            span of USRNet's k1-k8 (0.7 to 2.0 isotropic, up to about 2.6 along the major axis).
    """

    def __init__(self, kinds=KINDS, size=25, sigma=(0.6, 3.0)):
        kinds = tuple(kinds)
        unknown = [k for k in kinds if k not in KINDS]
        if not kinds or unknown:
            raise ValueError(f'kernel kinds must be a non-empty subset of {KINDS}, got {list(kinds)}')
        lo, hi = (float(v) for v in sigma)
        if not 0 < lo <= hi:
            raise ValueError(f'sigma range must be 0 < lo <= hi, got {sigma!r}')
        self.kinds, self.size, self.sigma = kinds, int(size), (lo, hi)
        gaussian_kernel(self.size, 1.0)  # checks the size

    def draw(self, rng):
        """``(kernel, kind)``: one kernel (size x size float64, sum 1) and the kind it was drawn from."""
        kind = self.kinds[rng.integers(len(self.kinds))]
        lo, hi = self.sigma
        if kind == 'isotropic':
            return gaussian_kernel(self.size, rng.uniform(lo, hi)), kind
        if kind == 'anisotropic':
            major, minor = sorted(rng.uniform(lo, hi, 2), reverse=True)
            return gaussian_kernel(self.size, major, minor, rng.uniform(0, math.pi)), kind
        return motion_kernel(self.size, rng), kind

    def __repr__(self):
        return f'KernelFamily(kinds={list(self.kinds)}, size={self.size}, sigma={self.sigma})'
