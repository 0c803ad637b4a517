import torch
from basicsr.utils.registry import LOSS_REGISTRY
from torch import nn

from mcnet_basicsr.deq import spectral_rate


@LOSS_REGISTRY.register()
class ContractionLoss(nn.Module):
    """A Jacobian penalty that keeps an implicit layer's fixed-point map contracting where its solve ends:
    ``loss_weight * mean(relu(rate - target)^2)``, ``rate`` per sample the spectral radius estimate of
    :func:`~mcnet_basicsr.deq.spectral_rate` at the fixed point (power iteration on central differences).

    Training a layer end to end can make its map expand along one direction (rate above 1) while the loss improves:
    the solves of training patches still reach their tolerance, and whole images then stop at the iteration cap
    (``benchmarks/layer_jacobian.py``). Below ``target`` the penalty is 0; above it the gradient pulls the map's
    parameters (the prior, beta, its level) back. Used by :class:`~mcnet_basicsr.models.mcnet_model.MCNetModel` as
    ``train.jacobian_opt``, called with the solve's map and fixed point (what ``MCNetArch.run`` returns in its info).

    Args:
        loss_weight (float): Loss weight. Default: 1.0.
        target (float): The rate at and below which nothing is penalised. Default: 0.9.
        steps (int): Power-iteration steps (each two evaluations of the map, without grad). Default: 8.
        delta (float): Central-difference step per value. Default: 1e-3.
    """

    def __init__(self, loss_weight=1.0, target=0.9, steps=8, delta=1e-3):
        super().__init__()
        if not 0 < target:
            raise ValueError(f'ContractionLoss target must be > 0, got {target}.')
        if not (isinstance(steps, int) and steps >= 0) or not delta > 0:
            raise ValueError(f'ContractionLoss needs steps >= 0 (an int) and delta > 0, got {steps!r} and {delta!r}.')
        self.loss_weight, self.target, self.steps, self.delta = loss_weight, target, steps, delta

    def forward(self, fixed_point_map, fixed_point):
        """``(loss, rate)``: the penalty, and each sample's rate (detached, for the log)."""
        rate, _ = spectral_rate(fixed_point_map, fixed_point, self.steps, self.delta)
        return self.loss_weight * torch.relu(rate - self.target).pow(2).mean(), rate.detach()
