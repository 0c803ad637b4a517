import torch
from torch import nn

from mcnet_basicsr.utils.registration import ARCH_REGISTRY


def _contrast(x):
    """Per-channel contrast of the CCA layer: standard deviation plus mean over the spatial positions."""
    mean = x.mean(dim=(2, 3), keepdim=True)
    std = (x - mean).pow(2).mean(dim=(2, 3), keepdim=True).sqrt()
    return std + mean


class _ContrastChannelAttention(nn.Module):
    """Contrast-aware channel attention: a squeeze-excitation gate driven by ``std + mean`` instead of the mean."""

    def __init__(self, num_feat, reduction):
        super().__init__()
        self.conv_du = nn.Sequential(
            nn.Conv2d(num_feat, num_feat // reduction, 1), nn.ReLU(inplace=True),
            nn.Conv2d(num_feat // reduction, num_feat, 1), nn.Sigmoid())

    def forward(self, x):
        return x * self.conv_du(_contrast(x))


class _IMDB(nn.Module):
    """Information multi-distillation block.

    Three 3x3 convolutions each keep a quarter of their output channels (the distilled part) and pass
    the rest on; a fourth convolution maps the remaining channels to one more quarter. The four parts
    are concatenated, gated by contrast-aware channel attention, fused by a 1x1 convolution and added
    to the block's input.
    """

    def __init__(self, num_feat, distill_ratio, reduction, negative_slope):
        super().__init__()
        self.distilled = int(num_feat * distill_ratio)
        self.remaining = num_feat - self.distilled
        self.c1 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.c2 = nn.Conv2d(self.remaining, num_feat, 3, 1, 1)
        self.c3 = nn.Conv2d(self.remaining, num_feat, 3, 1, 1)
        self.c4 = nn.Conv2d(self.remaining, self.distilled, 3, 1, 1)
        self.cca = _ContrastChannelAttention(self.distilled * 4, reduction)
        self.c5 = nn.Conv2d(self.distilled * 4, num_feat, 1)
        self.act = nn.LeakyReLU(negative_slope, inplace=True)

    def forward(self, x):
        parts = []
        out = x
        for conv in (self.c1, self.c2, self.c3):
            distilled, out = torch.split(self.act(conv(out)), (self.distilled, self.remaining), dim=1)
            parts.append(distilled)
        parts.append(self.c4(out))
        return self.c5(self.cca(torch.cat(parts, dim=1))) + x


@ARCH_REGISTRY.register()
class IMDN(nn.Module):
    """IMDN: information multi-distillation network for lightweight super-resolution.

    Paper: Lightweight Image Super-Resolution with Information Multi-distillation Network
    (Hui, Gao, Yang and Wang, ACM MM 2019). RGB in [0, 1] at LR size (no mean shift), RGB out at HR
    size. A 3x3 feature convolution, ``num_block`` information multi-distillation blocks, a 1x1
    fusion of all block outputs (+ LeakyReLU), a 3x3 convolution with a long skip from the features,
    and a 3x3 convolution + pixel shuffle.

    Parameter names follow the authors' release (``fea_conv``, ``IMDB1`` .. ``IMDB6`` with ``c1`` ..
    ``c5`` and ``cca.conv_du``, ``c.0``, ``LR_conv``, ``upsampler.0``), so their DIV2K-trained
    checkpoints load strictly once the ``module.`` prefix of their ``DataParallel`` state dicts is
    removed (``scripts/convert_weights.py --type imdn`` writes them as BasicSR checkpoints).

    Args:
        num_in_ch (int): Channel number of inputs. Default: 3.
        num_out_ch (int): Channel number of outputs. Default: 3.
        num_feat (int): Feature channels. Default: 64.
        num_block (int): Number of distillation blocks. Default: 6.
        upscale (int): Upsampling factor (one pixel-shuffle stage). Default: 4.
        distill_ratio (float): Share of a convolution's output channels kept at each distillation
            step. Default: 0.25.
        reduction (int): Channel reduction of the contrast-aware attention. Default: 16.
        negative_slope (float): Slope of the LeakyReLUs. Default: 0.05.
    """

    def __init__(self,
                 num_in_ch=3,
                 num_out_ch=3,
                 num_feat=64,
                 num_block=6,
                 upscale=4,
                 distill_ratio=0.25,
                 reduction=16,
                 negative_slope=0.05):
        super().__init__()
        if upscale < 1:
            raise ValueError(f'IMDN upscale must be a positive integer, got {upscale}.')
        self.upscale = upscale
        self.num_block = num_block
        self.fea_conv = nn.Conv2d(num_in_ch, num_feat, 3, 1, 1)
        for i in range(1, num_block + 1):  # the release names the blocks IMDB1..IMDBn, not a ModuleList
            self.add_module(f'IMDB{i}', _IMDB(num_feat, distill_ratio, reduction, negative_slope))
        self.c = nn.Sequential(nn.Conv2d(num_feat * num_block, num_feat, 1), nn.LeakyReLU(negative_slope, inplace=True))
        self.LR_conv = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.upsampler = nn.Sequential(nn.Conv2d(num_feat, num_out_ch * upscale**2, 3, 1, 1), nn.PixelShuffle(upscale))

    def forward(self, x):
        fea = self.fea_conv(x)
        outs, out = [], fea
        for i in range(1, self.num_block + 1):
            out = getattr(self, f'IMDB{i}')(out)
            outs.append(out)
        return self.upsampler(self.LR_conv(self.c(torch.cat(outs, dim=1))) + fea)
