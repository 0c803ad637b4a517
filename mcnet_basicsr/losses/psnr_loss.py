import torch
from basicsr.utils.registry import LOSS_REGISTRY
from torch import nn


@LOSS_REGISTRY.register()
class PSNRLoss(nn.Module):
    """Negative PSNR per sample, averaged over the batch: ``10 log10(mse_i)`` up to a constant.

    The tables average PSNR over images, i.e. the mean of ``-10 log10(mse_i)``; an MSE loss averages
    ``mse_i`` instead and so weighs a patch by its error: training then trades accuracy on
    well-reconstructed (smooth) patches for gains on badly reconstructed (textured) ones, which the
    per-image PSNR average does not reward. This loss weighs every sample's relative improvement
    equally, as the metric does. Images in [0, 1] (peak 1).

    Args:
        loss_weight (float): Loss weight. Default: 1.0.
        eps (float): Added to each sample's MSE, so a perfect sample gives a finite loss. Default: 1e-10.
    """

    def __init__(self, loss_weight=1.0, eps=1e-10):
        super().__init__()
        if not eps > 0:
            raise ValueError(f'PSNRLoss eps must be > 0, got {eps}.')
        self.loss_weight = loss_weight
        self.eps = eps

    def forward(self, pred, target):
        if pred.shape != target.shape:
            raise ValueError(f'PSNRLoss: pred {tuple(pred.shape)} and target {tuple(target.shape)} differ in shape.')
        mse = (pred - target).pow(2).flatten(1).mean(dim=1)
        return self.loss_weight * 10 * torch.log10(mse + self.eps).mean()
