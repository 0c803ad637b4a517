"""Measurements of a batch whose samples were made by different operators, and consistency per channel.

* :class:`StackedOperator`: one operator per sample of a batch (a training batch that mixes resizers or blur
  kernels), applied sample by sample; it has the operator interface (``scale``, ``forward``, ``adjoint``,
  ``residual_norm``, ``project``), so the layer and the metrics take it like any other.
* :func:`repeat_samples`: the operator of a batch whose samples were each repeated ``k`` times in a row, which is
  how a layer made consistent on every channel solves: an (N, C, H, W) image becomes (N C, 1, H, W), one
  independent problem per channel, each ``||A x_c - b_c|| <= eps``.
* :func:`fold_channels` / :func:`unfold_channels`: that reshaping and its inverse.
"""
import numpy as np
import torch

from .blur import BlurDownsample, pad_kernel

__all__ = ['StackedOperator', 'repeat_samples', 'fold_channels', 'unfold_channels']


class StackedOperator:
    """Sample ``i`` of a batch is measured by ``operators[i]``; all of them downscale by the same factor.

    Args:
        operators (sequence): One operator per sample (objects with the operator interface of
            :class:`~mcnet_basicsr.ops.SeparableDownsample`).
    """

    def __init__(self, operators):
        operators = tuple(operators)
        if not operators:
            raise ValueError('StackedOperator needs at least one operator (one per sample of the batch).')
        scales = sorted({op.scale for op in operators})
        if len(scales) != 1:
            raise ValueError(f'StackedOperator: every operator of a batch must have the same scale, got {scales}.')
        self.operators = operators
        self.scale = scales[0]

    def __len__(self):
        return len(self.operators)

    def _split(self, x, name):
        if not torch.is_tensor(x) or x.dim() != 4 or x.shape[0] != len(self.operators):
            shape = tuple(x.shape) if torch.is_tensor(x) else type(x).__name__
            raise ValueError(f'StackedOperator of {len(self.operators)} operators: {name} must be an NCHW tensor with '
                             f'N = {len(self.operators)}, got {shape}.')
        return x.split(1)

    def forward(self, x):
        return torch.cat([op(xi) for op, xi in zip(self.operators, self._split(x, 'x'))])

    def __call__(self, x):
        return self.forward(x)

    def adjoint(self, y, hr_size=None):
        return torch.cat([op.adjoint(yi, hr_size) for op, yi in zip(self.operators, self._split(y, 'y'))])

    def residual_norm(self, x, b):
        return torch.cat([op.residual_norm(xi, bi)
                          for op, xi, bi in zip(self.operators, self._split(x, 'x'), self._split(b, 'b'))])

    def project(self, x, b, eps=0.0):
        n = len(self.operators)
        if torch.is_tensor(eps) and eps.dim() == 1:
            if eps.shape != (n, ):
                raise ValueError(f'eps must be a scalar or a per-sample tensor of shape ({n},), got {tuple(eps.shape)}')
            radii = eps.split(1)
        else:
            radii = (eps, ) * n
        pieces = zip(self.operators, self._split(x, 'x'), self._split(b, 'b'), radii)
        return torch.cat([op.project(xi, bi, r) for op, xi, bi, r in pieces])

    def repeat_samples(self, repeats):
        return StackedOperator([op for op in self.operators for _ in range(repeats)])

    def circular_blur(self):
        """One :class:`~mcnet_basicsr.ops.BlurDownsample` with a kernel per sample, each sample's operator's
        ``circular_blur`` (equal to it away from the borders), padded to a common size with its origin kept."""
        kernels = []
        for op in self.operators:
            kernel = op.circular_blur().kernel
            kernels += list(kernel) if kernel.ndim == 3 else [kernel]
        size = max(max(k.shape) for k in kernels) | 1  # odd
        return BlurDownsample(self.scale, np.stack([pad_kernel(k, size) for k in kernels]))

    def __repr__(self):
        return f'StackedOperator({list(self.operators)!r})'


def repeat_samples(operator, repeats):
    """The operator of a batch in which every sample of ``operator``'s batch stands ``repeats`` times in a row.

    An operator that measures every sample alike is returned as it is; one that holds per-sample parts (a
    :class:`StackedOperator`, a blur with one kernel per sample) says how through its own ``repeat_samples``.
    """
    if hasattr(operator, 'repeat_samples'):
        return operator.repeat_samples(repeats)
    return operator


def fold_channels(x):
    """(N, C, H, W) -> (N C, 1, H, W): one sample per channel, in the order of :func:`repeat_samples`."""
    return x.reshape(x.shape[0] * x.shape[1], 1, *x.shape[2:])


def unfold_channels(x, channels):
    """The inverse of :func:`fold_channels`: (N C, 1, H, W) -> (N, C, H, W)."""
    return x.reshape(x.shape[0] // channels, channels, *x.shape[2:])
